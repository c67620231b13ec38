/* libbptrain's own f32 GEMM: what the CPU backend multiplies with when OpenBLAS cannot be loaded or failed
 * the start-up self-check (blas_library.c). Correct first, then as fast as plain C allows: rows of C in
 * parallel, each accumulated along contiguous rows of B, or as dot products with rows of B when B is
 * transposed. About 5-10x slower than OpenBLAS; it is there so that a wrong kernel never trains a model. */
#include "backends/cpu/blas_library.h"

#include <stddef.h>

static void row_times_b(const float *a_row, int64_t a_step, const float *b, int64_t ldb, int64_t n, int64_t k,
                        float alpha, float *c_row) {
  for (int64_t p = 0; p < k; p++) {
    const float scaled = alpha * a_row[p * a_step];
    const float *b_row = b + p * ldb;
    for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j];
  }
}

static void row_times_b_transposed(const float *a_row, int64_t a_step, const float *b, int64_t ldb, int64_t n,
                                   int64_t k, float alpha, float *c_row) {
  for (int64_t j = 0; j < n; j++) {
    const float *b_column = b + j * ldb;
    float sum = 0.0f;
    for (int64_t p = 0; p < k; p++) sum += a_row[p * a_step] * b_column[p];
    c_row[j] += alpha * sum;
  }
}

void bpt_cpu_sgemm_plain(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  /* Rows of op(A): row i starts at a + i*lda with unit steps, or at a + i with steps of lda. */
  const int64_t a_row_step = transpose_a ? 1 : lda, a_step = transpose_a ? lda : 1;
#pragma omp parallel for schedule(static) if (m * n * k > 65536 && m > 1)
  for (int64_t i = 0; i < m; i++) {
    float *c_row = c + i * ldc;
    /* BLAS semantics: beta 0 overwrites C, whatever it held (NaN included). */
    for (int64_t j = 0; j < n; j++) c_row[j] = beta == 0.0f ? 0.0f : beta * c_row[j];
    if (alpha == 0.0f || k == 0) continue;
    const float *a_row = a + i * a_row_step;
    if (transpose_b)
      row_times_b_transposed(a_row, a_step, b, ldb, n, k, alpha, c_row);
    else
      row_times_b(a_row, a_step, b, ldb, n, k, alpha, c_row);
  }
}
