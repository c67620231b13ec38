/* Matrix products on the CPU: every one goes to bpt_cpu_sgemm (row-major), OpenBLAS's cblas_sgemm unless
 * blas_library.c replaced it. */
#include "backends/cpu/blas_library.h"
#include "backends/cpu/cpu.h"

bpt_status bpt_cpu_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  if (args->m < 0 || args->n < 0 || args->k < 0 || args->m > INT32_MAX || args->n > INT32_MAX || args->k > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm dimensions %lld x %lld x %lld are out of range",
                            (long long)args->m, (long long)args->n, (long long)args->k);
  if (args->m == 0 || args->n == 0) return BPT_OK;
  /* Narrow operands (issue 4): widened to f32 scratch in gemm_mixed.c. */
  if (args->a_dtype != BPT_DTYPE_F32 || args->b_dtype != BPT_DTYPE_F32 || args->c_dtype != BPT_DTYPE_F32)
    return bpt_cpu_gemm_mixed(backend, args);
  bpt_cpu_sgemm(args->transpose_a, args->transpose_b, args->m, args->n, args->k, args->alpha, args->a, args->lda,
                args->b, args->ldb, args->beta, args->c, args->ldc);
  return BPT_OK;
}
