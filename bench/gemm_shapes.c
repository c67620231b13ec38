/* f32 GEMM GFLOP/s on the training shapes, through the CPU backend's gemm (bpt_cpu_sgemm: the OpenBLAS core
 * libbptrain chose, or its plain GEMM after a failed self-check), after a CPU context set the threads as a
 * user's would. bench/gemm.sh puts torch.mm beside it. Prints the compute-info line, then one line per shape:
 * "gemm shape=MxNxK transpose=TT gflops=G".
 *
 *   gemm_shapes_bench [--threads 2] [--seconds 0.5] [--info]   (--info: only the compute-info line)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct shape {
  int transpose_a, transpose_b, m, n, k;
} shape;

/* The MLP 784-512-256-10 at batch 128 and 512 (forward x W^T, weight gradient dy^T x, input gradient dy W)
 * and the two first-layer shapes. */
static const shape shapes[] = {
    {0, 0, 128, 512, 784}, {0, 0, 784, 512, 128}, {0, 1, 128, 512, 784}, {1, 0, 512, 784, 128},
    {0, 0, 128, 784, 512}, {0, 1, 128, 256, 512}, {1, 0, 256, 512, 128}, {0, 1, 512, 512, 784},
    {1, 0, 512, 784, 512}, {0, 0, 512, 784, 512},
};

int main(int argc, char **argv) {
  static const char *const valued[] = {"--threads", "--seconds", NULL};
  static const char *const flags[] = {"--info", NULL};
  example_check_arguments(argc, argv, valued, flags,
                          "usage: gemm_shapes_bench [--threads N] [--seconds S] [--info]\n");
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = (int)example_option_long(argc, argv, "--threads", 2);
  const double seconds = example_option_double(argc, argv, "--seconds", 0.5);
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    fprintf(stderr, "gemm_shapes_bench: %s\n", bpt_context_last_error(NULL));
    return 1;
  }
  bpt_compute_info info = {.size = sizeof info};
  bpt_cpu_compute_info(&info);
  printf("libbptrain BLAS: %s\n", info.summary);
  if (example_flag(argc, argv, "--info")) {
    bpt_context_destroy(context);
    return 0;
  }
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const shape *q = &shapes[s];
    float *a = malloc(sizeof(float) * (size_t)q->m * q->k), *b = malloc(sizeof(float) * (size_t)q->k * q->n);
    float *c = calloc((size_t)q->m * q->n, sizeof(float));
    if (!a || !b || !c) return 1;
    for (long i = 0; i < (long)q->m * q->k; i++) a[i] = (float)(i % 13) * 0.01f - 0.06f;
    for (long i = 0; i < (long)q->k * q->n; i++) b[i] = (float)(i % 7) * 0.01f - 0.03f;
    const int lda = q->transpose_a ? q->m : q->k, ldb = q->transpose_b ? q->k : q->n;
    for (int warm = 0; warm < 5; warm++)
      backend_gemm(&context->backend, q->transpose_a, q->transpose_b, q->m, q->n, q->k, a, lda, b, ldb, 0.0f, c, q->n);
    /* Best of five timed blocks: interference on a shared machine only ever slows a block down. */
    double best = 0.0;
    for (int block = 0; block < 5; block++) {
      long calls = 0;
      const double start = example_seconds();
      double elapsed = 0.0;
      do {
        backend_gemm(&context->backend, q->transpose_a, q->transpose_b, q->m, q->n, q->k, a, lda, b, ldb, 0.0f, c, q->n);
        calls++;
        elapsed = example_seconds() - start;
      } while (elapsed < seconds / 5);
      const double gflops = 2.0 * q->m * q->n * q->k * calls / elapsed / 1e9;
      if (gflops > best) best = gflops;
    }
    printf("gemm shape=%dx%dx%d transpose=%c%c gflops=%.1f\n", q->m, q->n, q->k, q->transpose_a ? 'T' : 'N',
           q->transpose_b ? 'T' : 'N', best);
    free(a);
    free(b);
    free(c);
  }
  bpt_context_destroy(context);
  return 0;
}
