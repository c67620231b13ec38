/* Times libbptrain's CUDA gemm member on square and MLP-layer shapes, f32 and bf16, and prints one line
 * per case: "gemm <dtype> <m>x<n>x<k> <TFLOP/s>". scripts/gpu-check.sh builds it against the static
 * library and puts it beside torch_bench.py's cuBLAS numbers for the same shapes. Random inputs (never
 * zeros), warm-up first, median of timed repetitions, each timed block ended by a synchronisation. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "core/context.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int fail(bpt_backend *backend, const char *what) {
  fprintf(stderr, "gemm_bench: %s: %s\n", what, backend->error_message);
  return 1;
}

int main(void) {
  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    fprintf(stderr, "gemm_bench: %s\n", bpt_context_last_error(NULL));
    return 77;
  }
  bpt_backend *backend = &context->backend;
  const long long shapes[][3] = {{8192, 8192, 8192}, {4096, 4096, 4096}, {128, 512, 784}, {1024, 512, 784},
                                 {8192, 512, 784}};
  const bpt_dtype dtypes[] = {BPT_DTYPE_F32, BPT_DTYPE_BF16};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t d = 0; d < 2; d++) {
      long long m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      size_t element = dtypes[d] == BPT_DTYPE_F32 ? 4 : 2;
      size_t a_bytes = (size_t)(m * k) * 4, b_bytes = (size_t)(k * n) * 4;
      float *host = malloc(a_bytes > b_bytes ? a_bytes : b_bytes);
      void *a32, *b32, *a, *b, *c;
      if (backend->vtable->alloc(backend, a_bytes, &a32) || backend->vtable->alloc(backend, b_bytes, &b32) ||
          backend->vtable->alloc(backend, (size_t)(m * k) * element, &a) ||
          backend->vtable->alloc(backend, (size_t)(k * n) * element, &b) ||
          backend->vtable->alloc(backend, (size_t)(m * n) * 4, &c))
        return fail(backend, "alloc");
      srand(1);
      for (long long i = 0; i < m * k; i++) host[i] = (float)rand() / (float)RAND_MAX - 0.5f;
      backend->vtable->upload(backend, a32, host, a_bytes);
      for (long long i = 0; i < k * n; i++) host[i] = (float)rand() / (float)RAND_MAX - 0.5f;
      backend->vtable->upload(backend, b32, host, b_bytes);
      if (backend->vtable->cast(backend, m * k, BPT_DTYPE_F32, a32, dtypes[d], a, 1.0f) ||
          backend->vtable->cast(backend, k * n, BPT_DTYPE_F32, b32, dtypes[d], b, 1.0f))
        return fail(backend, "cast");
      bpt_gemm_args args = {.a_dtype = dtypes[d], .b_dtype = dtypes[d], .c_dtype = BPT_DTYPE_F32, .m = m, .n = n,
                            .k = k, .alpha = 1.0f, .a = a, .lda = k, .b = b, .ldb = n, .beta = 0.0f, .c = c, .ldc = n};
      /* Enough products per timed block that launch gaps do not dominate small shapes. */
      double flops = 2.0 * (double)m * (double)n * (double)k;
      int per_block = flops > 1e11 ? 5 : flops > 1e9 ? 50 : 500;
      for (int i = 0; i < per_block; i++)
        if (backend->vtable->gemm(backend, &args)) return fail(backend, "gemm");
      backend->vtable->synchronize(backend);
      double seconds[9];
      for (int r = 0; r < 9; r++) {
        double start = now();
        for (int i = 0; i < per_block; i++) backend->vtable->gemm(backend, &args);
        if (backend->vtable->synchronize(backend)) return fail(backend, "synchronize");
        seconds[r] = (now() - start) / per_block;
      }
      qsort(seconds, 9, sizeof seconds[0], compare_doubles);
      printf("gemm %s %lldx%lldx%lld %.1f\n", bpt_dtype_name(dtypes[d]), m, n, k, flops / seconds[4] / 1e12);
      fflush(stdout);
      backend->vtable->free(backend, a32);
      backend->vtable->free(backend, b32);
      backend->vtable->free(backend, a);
      backend->vtable->free(backend, b);
      backend->vtable->free(backend, c);
      free(host);
    }
  bpt_context_destroy(context);
  return 0;
}
