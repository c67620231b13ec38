/* Matrix products with f16, bf16 or FP8 operands on the CPU: emulation. Operands are widened to f32 scratch
 * (exact), multiplied by bpt_cpu_sgemm with f32 accumulation, and a narrow C is rounded back to nearest even,
 * which is what a tensor-core GEMM with f32 accumulation produces up to summation order. */
#include <stdlib.h>

#include "backends/cpu/cpu.h"

/* Widens a rows x cols block with leading dimension ld into packed f32 (leading dimension cols). */
static bpt_status widen(bpt_backend *backend, bpt_dtype dtype, const void *source, int64_t rows, int64_t cols,
                        int64_t ld, float **out) {
  *out = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof(float));
  if (!*out) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "gemm: no memory for %lld x %lld scratch",
                                     (long long)rows, (long long)cols);
  size_t element = bpt_dtype_size(dtype);
  bpt_status status = BPT_OK;
  for (int64_t r = 0; status == BPT_OK && r < rows; r++)
    status = bpt_cpu_cast(backend, cols, dtype, (const char *)source + (size_t)(r * ld) * element, BPT_DTYPE_F32,
                          *out + r * cols, 1.0f);
  return status;
}

bpt_status bpt_cpu_gemm_mixed(bpt_backend *backend, const bpt_gemm_args *args) {
  /* Stored shapes: A is (m, k) or, transposed, (k, m); B is (k, n) or (n, k); C is (m, n). */
  int64_t a_rows = args->transpose_a ? args->k : args->m, a_cols = args->transpose_a ? args->m : args->k;
  int64_t b_rows = args->transpose_b ? args->n : args->k, b_cols = args->transpose_b ? args->k : args->n;
  float *a = NULL, *b = NULL, *c = NULL;
  bpt_status status = widen(backend, args->a_dtype, args->a, a_rows, a_cols, args->lda, &a);
  if (status == BPT_OK) status = widen(backend, args->b_dtype, args->b, b_rows, b_cols, args->ldb, &b);
  if (status == BPT_OK) status = widen(backend, args->c_dtype, args->c, args->m, args->n, args->ldc, &c);
  if (status == BPT_OK) {
    bpt_gemm_args wide = *args;
    wide.a_dtype = wide.b_dtype = wide.c_dtype = BPT_DTYPE_F32;
    wide.a = a;
    wide.lda = a_cols;
    wide.b = b;
    wide.ldb = b_cols;
    wide.c = c;
    wide.ldc = args->n;
    status = bpt_cpu_gemm(backend, &wide);
  }
  size_t element = bpt_dtype_size(args->c_dtype);
  for (int64_t r = 0; status == BPT_OK && r < args->m; r++)
    status = bpt_cpu_cast(backend, args->n, BPT_DTYPE_F32, c + r * args->n, args->c_dtype,
                          (char *)args->c + (size_t)(r * args->ldc) * element, 1.0f);
  free(a);
  free(b);
  free(c);
  return status;
}
