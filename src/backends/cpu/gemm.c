/* Matrix products on the CPU: every f32 one goes to bpt_cpu_sgemm (row-major), OpenBLAS's cblas_sgemm unless
 * blas_library.c replaced it; the bf16 policy's go to oneDNN's matmul where it loads (onednn.c), else to the
 * vdpbf16ps kernels of gemm_bf16*.c, where the CPU's bf16 unit outruns its f32 FMAs (bf16_unit.h). A
 * strided-batched call is a loop of single products: each is large enough for OpenBLAS's own threads
 * (attention's products are the fused op's business, not this loop's). */
#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/blas_library.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn.h"

static bpt_status gemm_one(bpt_backend *backend, const bpt_gemm_args *args) {
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm dimensions %lld x %lld x %lld are out of range",
                            (long long)args->m, (long long)args->n, (long long)args->k);
  if (args->m == 0 || args->n == 0) return BPT_OK;
  /* The bf16 policy where a bf16 unit outruns the f32 ones (bf16_unit.h): oneDNN's matmul where it loads
   * (issue 26.1, the faster by measurement), else the own vdpbf16ps kernel; elsewhere f32 arithmetic below. */
  if (args->bf16_products && bpt_cpu_bf16_products_native()) {
    bool handled = false;
    bpt_status status = bpt_cpu_onednn_gemm(backend, args, &handled);
    if (handled || status != BPT_OK) return status;
    if (bpt_cpu_bf16_dot_pays()) { /* not where only oneDNN's AMX tiles made the products native */
      status = bpt_cpu_gemm_bf16(backend, args, &handled);
      if (handled || status != BPT_OK) return status;
    }
  }
  /* Narrow operands (issue 4): widened to f32 scratch in gemm_mixed.c. */
  if (args->a_dtype != BPT_DTYPE_F32 || args->b_dtype != BPT_DTYPE_F32 || args->c_dtype != BPT_DTYPE_F32)
    return bpt_cpu_gemm_mixed(backend, args);
  bpt_cpu_sgemm(args->transpose_a, args->transpose_b, args->m, args->n, args->k, args->alpha, args->a, args->lda,
                args->b, args->ldb, args->beta, args->c, args->ldc);
  return BPT_OK;
}

bpt_status bpt_cpu_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  const int64_t count = bpt_gemm_batch_count(args);
  if (count == 1) return gemm_one(backend, args);
  if (!bpt_gemm_batch_valid(args))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                            "gemm batch of %lld with strides %lld, %lld, %lld: C products would overlap",
                            (long long)args->batch_count, (long long)args->stride_a, (long long)args->stride_b,
                            (long long)args->stride_c);
  const size_t a_size = bpt_dtype_size(args->a_dtype), b_size = bpt_dtype_size(args->b_dtype),
               c_size = bpt_dtype_size(args->c_dtype);
  for (int64_t i = 0; i < count; i++) {
    bpt_gemm_args one = bpt_gemm_batch_item(args, i, a_size, b_size, c_size);
    bpt_status status = gemm_one(backend, &one);
    if (status != BPT_OK) return status;
  }
  return BPT_OK;
}
