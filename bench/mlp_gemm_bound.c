/* The GEMM bound of the MLP benchmark: times only the eight matrix products one training step of the
 * 784-512-256-10 MLP performs (three forward, three weight gradients, two input gradients), through
 * the CPU backend's gemm (bpt_cpu_sgemm: the OpenBLAS core libbptrain chose) after a CPU context set the
 * threads. samples/s here is what a step with free element-wise work,
 * losses and updates would reach. Prints "gemm_bound batch=B samples_per_second=S gflops=G".
 *
 *   mlp_gemm_bound_bench --batch 128 [--threads 2] [--steps 300]
 */
#include <stdio.h>
#include <stdlib.h>

#include <bptrain.h>

#include "backends/backend.h"
#include "core/context.h"
#include "example_util.h"

/* One product through the CPU backend's shared gemm primitive: bpt_cpu_gemm, then bpt_cpu_sgemm. */
static void backend_gemm(bpt_backend *backend, bool transpose_a, bool transpose_b, int m, int n, int k, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc) {
  const bpt_gemm_args args = {.transpose_a = transpose_a, .transpose_b = transpose_b, .m = m, .n = n, .k = k,
                              .alpha = 1.0f, .a = a, .lda = lda, .b = b, .ldb = ldb, .beta = beta, .c = c, .ldc = ldc};
  backend->vtable->gemm(backend, &args);
}

typedef struct product {
  int transpose_a, transpose_b, m, n, k;
} product;

int main(int argc, char **argv) {
  static const char *const valued[] = {"--batch", "--threads", "--steps", NULL};
  example_check_arguments(argc, argv, valued, NULL, "usage: mlp_gemm_bound_bench --batch N [--threads N] [--steps N]\n");
  const int batch = (int)example_option_long(argc, argv, "--batch", 128);
  const int threads = (int)example_option_long(argc, argv, "--threads", 2);
  const long steps = example_option_long(argc, argv, "--steps", 300);
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    fprintf(stderr, "mlp_gemm_bound_bench: %s\n", bpt_context_last_error(NULL));
    return 1;
  }
  const product products[] = {
      {0, 1, batch, 512, 784}, {0, 1, batch, 256, 512}, {0, 1, batch, 10, 256},  /* forward: x W^T */
      {1, 0, 512, 784, batch}, {1, 0, 256, 512, batch}, {1, 0, 10, 256, batch}, /* dW += dy^T x */
      {0, 0, batch, 512, 256}, {0, 0, batch, 256, 10},                          /* dx += dy W */
  };
  const int count = (int)(sizeof products / sizeof products[0]);
  float *a[8], *b[8], *c[8];
  double flops = 0.0;
  for (int p = 0; p < count; p++) {
    const product *q = &products[p];
    a[p] = malloc(sizeof(float) * (size_t)q->m * (size_t)q->k);
    b[p] = malloc(sizeof(float) * (size_t)q->k * (size_t)q->n);
    c[p] = calloc((size_t)q->m * (size_t)q->n, sizeof(float));
    if (!a[p] || !b[p] || !c[p]) return 1;
    for (long i = 0; i < (long)q->m * q->k; i++) a[p][i] = (float)(i % 13) * 0.01f - 0.06f;
    for (long i = 0; i < (long)q->k * q->n; i++) b[p][i] = (float)(i % 7) * 0.01f - 0.03f;
    flops += 2.0 * q->m * q->n * q->k;
  }
  double start = 0.0;
  for (long step = 0; step < steps + 20; step++) {
    if (step == 20) start = example_seconds();
    for (int p = 0; p < count; p++) {
      const product *q = &products[p];
      backend_gemm(&context->backend, q->transpose_a, q->transpose_b, q->m, q->n, q->k, a[p], q->transpose_a ? q->m : q->k,
                   b[p], q->transpose_b ? q->k : q->n, p < 3 ? 0.0f : 1.0f, c[p], q->n);
    }
  }
  double seconds = (example_seconds() - start) / (double)steps;
  printf("gemm_bound batch=%d samples_per_second=%.0f gflops=%.1f\n", batch, batch / seconds, flops / seconds / 1e9);
  for (int p = 0; p < count; p++) {
    free(a[p]);
    free(b[p]);
    free(c[p]);
  }
  bpt_context_destroy(context);
  return 0;
}
