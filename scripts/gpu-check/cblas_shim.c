/* A plain CBLAS for scripts/gpu-check.sh on machines without OpenBLAS (the GPU image has no Debian
 * packages). The CPU backend is only the reference there, so correctness matters, not speed: loops in
 * double, parallel over rows with OpenMP. Built as libopenblas.so with the cblas.h beside it. */
#include <stddef.h>

#include <omp.h>

#include "cblas.h"

void openblas_set_num_threads(int threads) { omp_set_num_threads(threads); }
int openblas_get_num_threads(void) { return omp_get_max_threads(); }

static float element(const float *x, blasint ld, int transposed, blasint row, blasint col) {
  return transposed ? x[(size_t)col * ld + row] : x[(size_t)row * ld + col];
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose_a, enum CBLAS_TRANSPOSE transpose_b,
                 blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b,
                 blasint ldb, float beta, float *c, blasint ldc) {
  /* Column-major is the row-major product of the transposes with the operands swapped. */
  if (order == CblasColMajor) {
    cblas_sgemm(CblasRowMajor, transpose_b, transpose_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
    return;
  }
  int ta = transpose_a != CblasNoTrans, tb = transpose_b != CblasNoTrans;
#pragma omp parallel for
  for (blasint i = 0; i < m; i++)
    for (blasint j = 0; j < n; j++) {
      double sum = 0.0;
      for (blasint p = 0; p < k; p++) sum += (double)element(a, lda, ta, i, p) * element(b, ldb, tb, p, j);
      float *out = &c[(size_t)i * ldc + j];
      *out = (float)(alpha * sum + (beta == 0.0f ? 0.0 : (double)beta * *out));
    }
}

void cblas_sgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose, blasint m, blasint n, float alpha,
                 const float *a, blasint lda, const float *x, blasint incx, float beta, float *y, blasint incy) {
  int t = (order == CblasRowMajor) == (transpose != CblasNoTrans);
  blasint rows = transpose != CblasNoTrans ? n : m, cols = transpose != CblasNoTrans ? m : n;
  for (blasint i = 0; i < rows; i++) {
    double sum = 0.0;
    for (blasint j = 0; j < cols; j++)
      sum += (double)(t ? a[(size_t)j * lda + i] : a[(size_t)i * lda + j]) * x[(size_t)j * incx];
    float *out = &y[(size_t)i * incy];
    *out = (float)(alpha * sum + (beta == 0.0f ? 0.0 : (double)beta * *out));
  }
}

void cblas_saxpy(blasint n, float alpha, const float *x, blasint incx, float *y, blasint incy) {
  for (blasint i = 0; i < n; i++) y[(size_t)i * incy] += alpha * x[(size_t)i * incx];
}

void cblas_sscal(blasint n, float alpha, float *x, blasint incx) {
  for (blasint i = 0; i < n; i++) x[(size_t)i * incx] *= alpha;
}

float cblas_sdot(blasint n, const float *x, blasint incx, const float *y, blasint incy) {
  double sum = 0.0;
  for (blasint i = 0; i < n; i++) sum += (double)x[(size_t)i * incx] * y[(size_t)i * incy];
  return (float)sum;
}
