/* The CBLAS subset that cblas_shim.c provides; see there. */
#ifndef BPT_CBLAS_SHIM_H
#define BPT_CBLAS_SHIM_H

typedef int blasint;
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
typedef enum CBLAS_ORDER CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;

void openblas_set_num_threads(int threads);
int openblas_get_num_threads(void);
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose_a, enum CBLAS_TRANSPOSE transpose_b,
                 blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b,
                 blasint ldb, float beta, float *c, blasint ldc);
void cblas_sgemv(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose, blasint m, blasint n, float alpha,
                 const float *a, blasint lda, const float *x, blasint incx, float beta, float *y, blasint incy);
void cblas_saxpy(blasint n, float alpha, const float *x, blasint incx, float *y, blasint incy);
void cblas_sscal(blasint n, float alpha, float *x, blasint incx);
float cblas_sdot(blasint n, const float *x, blasint incx, const float *y, blasint incy);

#endif
