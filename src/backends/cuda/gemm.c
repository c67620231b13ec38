/* Matrix products on the GPU: every one is a cublasGemmEx call. The library is row-major and cuBLAS is
 * column-major, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: the operands swap places and the
 * row-major buffers are read as their column-major transposes, with no copy. f16 and bf16 operands run on
 * the tensor cores with f32 accumulation; f32 operands stay exact f32 unless BPT_CUDA_TF32 allows tf32. */
#include "backends/cuda/cuda.h"

static bool cuda_data_type(bpt_dtype dtype, cudaDataType_t *out) {
  switch (dtype) {
  case BPT_DTYPE_F32: *out = CUDA_R_32F; return true;
  case BPT_DTYPE_F16: *out = CUDA_R_16F; return true;
  case BPT_DTYPE_BF16: *out = CUDA_R_16BF; return true;
  default: return false;
  }
}

bpt_status bpt_cuda_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX ||
      args->lda > INT32_MAX || args->ldb > INT32_MAX || args->ldc > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm dimensions %lld x %lld x %lld are out of range",
                            (long long)args->m, (long long)args->n, (long long)args->k);
  cudaDataType_t a_type, b_type, c_type;
  /* cublasGemmEx takes both operands in one type, and a 16-bit C only with operands of the same type. */
  if (!cuda_data_type(args->a_dtype, &a_type) || !cuda_data_type(args->b_dtype, &b_type) ||
      !cuda_data_type(args->c_dtype, &c_type) || a_type != b_type || (c_type != CUDA_R_32F && c_type != a_type))
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED, "gemm with operands %s x %s into %s is not supported",
                            bpt_dtype_name(args->a_dtype), bpt_dtype_name(args->b_dtype), bpt_dtype_name(args->c_dtype));
  if (args->m == 0 || args->n == 0) return BPT_OK;
  bpt_cuda_state *state = bpt_cuda(backend);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (a_type == CUDA_R_32F && state->tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  cublasStatus_t status = cublasGemmEx(
      state->cublas, args->transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, args->transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      (int)args->n, (int)args->m, (int)args->k, &args->alpha, args->b, b_type, (int)args->ldb, args->a, a_type,
      (int)args->lda, &args->beta, args->c, c_type, (int)args->ldc, compute, CUBLAS_GEMM_DEFAULT);
  return bpt_cuda_check_cublas(backend, status, "gemm");
}
