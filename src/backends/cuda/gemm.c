/* Matrix products on the GPU: every one is a cublasGemmEx call. The library is row-major and cuBLAS is
 * column-major, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: the operands swap places and the
 * row-major buffers are read as their column-major transposes, with no copy. f16 and bf16 operands run on
 * the tensor cores with f32 accumulation; f32 operands stay exact f32 unless BPT_CUDA_TF32 allows tf32.
 * Mixed operand types and FP8 operands are widened to f32 first (see widen_operands). A strided-batched call
 * is one cublasGemmStridedBatchedEx, or a loop of single products when its operands need widening. */
#include "backends/cuda/cuda.h"

static bool cuda_data_type(bpt_dtype dtype, cudaDataType_t *out) {
  switch (dtype) {
  case BPT_DTYPE_F32: *out = CUDA_R_32F; return true;
  case BPT_DTYPE_F16: *out = CUDA_R_16F; return true;
  case BPT_DTYPE_BF16: *out = CUDA_R_16BF; return true;
  default: return false;
  }
}

static bool narrow_float(bpt_dtype dtype) {
  return dtype == BPT_DTYPE_F16 || dtype == BPT_DTYPE_BF16 || dtype == BPT_DTYPE_FP8_E4M3 ||
         dtype == BPT_DTYPE_FP8_E5M2;
}

/* Elements a strided rows x cols operand spans: the last row stops at its last column. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0; }

/* cublasGemmEx multiplies operands of one type. A mixed pair (an f32 operand with a 16-bit or FP8 one, as the
 * precision policy's weight gradient from a compressed saved input) or FP8 operands are widened to f32 in
 * scratch first: exact, and the same product the CPU backend computes. */
static bpt_status widen_operands(bpt_backend *backend, bpt_gemm_args *args) {
  int64_t a_count = args->transpose_a ? span(args->k, args->m, args->lda) : span(args->m, args->k, args->lda);
  int64_t b_count = args->transpose_b ? span(args->n, args->k, args->ldb) : span(args->k, args->n, args->ldb);
  size_t a_bytes = args->a_dtype == BPT_DTYPE_F32 ? 0 : ((size_t)a_count * sizeof(float) + 255) / 256 * 256;
  size_t b_bytes = args->b_dtype == BPT_DTYPE_F32 ? 0 : (size_t)b_count * sizeof(float);
  float *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, a_bytes + b_bytes, (void **)&scratch));
  if (a_bytes) {
    BPT_CUDA_TRY(bpt_cuda_cast(backend, a_count, args->a_dtype, args->a, BPT_DTYPE_F32, scratch, 1.0f));
    args->a = scratch;
    args->a_dtype = BPT_DTYPE_F32;
  }
  if (b_bytes) {
    float *b = (float *)((char *)scratch + a_bytes);
    BPT_CUDA_TRY(bpt_cuda_cast(backend, b_count, args->b_dtype, args->b, BPT_DTYPE_F32, b, 1.0f));
    args->b = b;
    args->b_dtype = BPT_DTYPE_F32;
  }
  return BPT_OK;
}

static bool needs_widening(const bpt_gemm_args *args) {
  return args->a_dtype != args->b_dtype || args->a_dtype == BPT_DTYPE_FP8_E4M3 || args->a_dtype == BPT_DTYPE_FP8_E5M2;
}

static bpt_status gemm_one(bpt_backend *backend, const bpt_gemm_args *requested) {
  bpt_gemm_args copy = *requested, *args = &copy;
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX ||
      args->lda > INT32_MAX || args->ldb > INT32_MAX || args->ldc > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm dimensions %lld x %lld x %lld are out of range",
                            (long long)args->m, (long long)args->n, (long long)args->k);
  const bool a_known = args->a_dtype == BPT_DTYPE_F32 || narrow_float(args->a_dtype);
  const bool b_known = args->b_dtype == BPT_DTYPE_F32 || narrow_float(args->b_dtype);
  if (a_known && b_known && args->c_dtype == BPT_DTYPE_F32 &&
      needs_widening(args)) {
    if (args->m == 0 || args->n == 0) return BPT_OK;
    BPT_CUDA_TRY(widen_operands(backend, args));
  }
  cudaDataType_t a_type, b_type, c_type;
  /* One operand type, and a 16-bit C only with operands of the same type. */
  if (!cuda_data_type(args->a_dtype, &a_type) || !cuda_data_type(args->b_dtype, &b_type) ||
      !cuda_data_type(args->c_dtype, &c_type) || a_type != b_type || (c_type != CUDA_R_32F && c_type != a_type))
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED, "gemm with operands %s x %s into %s is not supported",
                            bpt_dtype_name(requested->a_dtype), bpt_dtype_name(requested->b_dtype),
                            bpt_dtype_name(requested->c_dtype));
  if (args->m == 0 || args->n == 0) return BPT_OK;
  bpt_cuda_state *state = bpt_cuda(backend);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (a_type == CUDA_R_32F && state->tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const int64_t batch = bpt_gemm_batch_count(args);
  if (batch > 1) {
    if (batch > INT32_MAX)
      return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm batch of %lld is out of range", (long long)batch);
    /* Row-major C = A B is column-major C^T = B^T A^T: the operands and their strides swap places. */
    cublasStatus_t status = state->blas->gemm_strided_batched_ex(
        state->cublas, args->transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, args->transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)args->n, (int)args->m, (int)args->k, &args->alpha, args->b, b_type, (int)args->ldb,
        (long long)args->stride_b, args->a, a_type, (int)args->lda, (long long)args->stride_a, &args->beta, args->c,
        c_type, (int)args->ldc, (long long)args->stride_c, (int)batch, compute, CUBLAS_GEMM_DEFAULT);
    return bpt_cuda_check_cublas(backend, status, "gemm_strided_batched");
  }
  cublasStatus_t status = state->blas->gemm_ex(
      state->cublas, args->transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, args->transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      (int)args->n, (int)args->m, (int)args->k, &args->alpha, args->b, b_type, (int)args->ldb, args->a, a_type,
      (int)args->lda, &args->beta, args->c, c_type, (int)args->ldc, compute, CUBLAS_GEMM_DEFAULT);
  return bpt_cuda_check_cublas(backend, status, "gemm");
}

bpt_status bpt_cuda_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  const int64_t batch = bpt_gemm_batch_count(args);
  if (batch > 1 && !bpt_gemm_batch_valid(args))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                            "gemm batch of %lld with strides %lld, %lld, %lld: C products would overlap",
                            (long long)args->batch_count, (long long)args->stride_a, (long long)args->stride_b,
                            (long long)args->stride_c);
  if (batch == 1 || !needs_widening(args)) return gemm_one(backend, args);
  /* Widening scratch holds one product's operands: one product at a time, in stream order. */
  for (int64_t i = 0; i < batch; i++) {
    bpt_gemm_args one = bpt_gemm_batch_item(args, i, bpt_dtype_size(args->a_dtype), bpt_dtype_size(args->b_dtype),
                                            bpt_dtype_size(args->c_dtype));
    BPT_CUDA_TRY(gemm_one(backend, &one));
  }
  return BPT_OK;
}
