/* conv2d_small.c's loops (convolutions with few channels) on LeNet-5's two convolutions: each pass (forward,
 * data gradient, weight gradient) at every level of vector loops the CPU has, alternately in the same run, the
 * fastest of several rounds each, at batch 128 (a training step) and batch 1 (speculative backprop's per-sample
 * backward). Prints microseconds, GFLOP/s of the direct arithmetic and each level's speed-up over AVX2. Calls
 * the backend's conv2d kernels directly.
 *
 *   conv_small_bench [--threads 1] [--rounds 9]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "core/context.h"

#include "conv_pass.h"

typedef struct layer {
  const char *name;
  int64_t channels, size, outputs, padding;
  bool data_gradient; /* LeNet's conv1 reads the images, which need none */
} layer;

enum { PASSES = 3, LEVELS = 3 };

int main(int argc, char **argv) {
  int threads = 1, rounds = 9;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: conv_small_bench [--threads N] [--rounds N]\n");
      return 2;
    }
  }
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) return 1;
  bpt_backend *backend = &context->backend;
  bpt_cpu_state *state = backend->state;
  /* The library's own choice (bpt_cpu_loops_supported) is not exported; the compiler's CPUID reading agrees. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bpt_cpu_loops widest = __builtin_cpu_supports("avx512f")                                    ? BPT_CPU_LOOPS_AVX512
                               : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? BPT_CPU_LOOPS_AVX2
                                                                                                  : BPT_CPU_LOOPS_PORTABLE;
#else
  const bpt_cpu_loops widest = BPT_CPU_LOOPS_PORTABLE;
#endif
  if (widest < BPT_CPU_LOOPS_AVX2) {
    printf("conv_small_bench: this CPU runs the portable loops only; nothing to compare\n");
    bpt_context_destroy(context);
    return 0;
  }
  const layer layers[] = {{"conv1 1->6 5x5 pad 2, 28x28", 1, 28, 6, 2, false},
                          {"conv2 6->16 5x5, 14x14", 6, 14, 16, 0, true}};
  const char *pass_names[PASSES] = {"forward", "data", "filter"};
  const char *level_names[LEVELS + 1] = {"", "portable", "AVX2", "AVX-512"};
  printf("conv2d_small.c on LeNet-5, %d thread(s), fastest of %d alternating rounds, by loop level\n", threads,
         rounds);
  const int64_t batches[] = {128, 1};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
      const layer *p = &layers[l];
      const int64_t out = p->size + 2 * p->padding - 4;
      bpt_conv2d_args a = {.batch = batches[b],
                           .in_channels = p->channels,
                           .in_height = p->size,
                           .in_width = p->size,
                           .out_channels = p->outputs,
                           .out_height = out,
                           .out_width = out,
                           .kernel_height = 5,
                           .kernel_width = 5,
                           .stride_height = 1,
                           .stride_width = 1,
                           .padding_height = p->padding,
                           .padding_width = p->padding,
                           .dilation_height = 1,
                           .dilation_width = 1,
                           .groups = 1};
      const size_t x_count = (size_t)(a.batch * a.in_channels * p->size * p->size);
      const size_t y_count = (size_t)(a.batch * a.out_channels * out * out);
      const size_t w_count = (size_t)(a.out_channels * a.in_channels * 25);
      float *x = malloc(x_count * sizeof *x), *dx = calloc(x_count, sizeof *dx), *y = malloc(y_count * sizeof *y);
      float *w = malloc(w_count * sizeof *w), *dw = calloc(w_count, sizeof *dw);
      if (!x || !dx || !y || !w || !dw) return 1;
      for (size_t i = 0; i < x_count; i++)
        x[i] = (float)(i % 13) * 0.1f - 0.6f;
      for (size_t i = 0; i < w_count; i++)
        w[i] = (float)(i % 7) * 0.01f - 0.03f;
      for (size_t i = 0; i < y_count; i++)
        y[i] = (float)(i % 5) * 0.1f - 0.2f;
      const double flops = 2.0 * (double)y_count * (double)(a.in_channels * 25);
      const int repeat = a.batch == 1 ? 200 : 2;
      printf("%s, batch %lld:\n", p->name, (long long)a.batch);
      for (int pass = 0; pass < PASSES; pass++) {
        if (pass == 1 && !p->data_gradient) continue;
        double best[LEVELS + 1] = {0.0, 1e30, 1e30, 1e30};
        for (int round = 0; round < rounds; round++)
          for (bpt_cpu_loops level = BPT_CPU_LOOPS_AVX2; level <= widest; level++) {
            state->loop_limit = level;
            const double t = conv_pass(backend, pass, &a, false, repeat, x, w, y, dx, dw);
            if (t < best[level]) best[level] = t;
          }
        printf("  %-8s", pass_names[pass]);
        for (bpt_cpu_loops level = BPT_CPU_LOOPS_AVX2; level <= widest; level++)
          printf("   %-7s %9.2f us %6.1f GFLOP/s (%.2fx)", level_names[level], 1e6 * best[level],
                 flops / best[level] / 1e9, best[BPT_CPU_LOOPS_AVX2] / best[level]);
        printf("\n");
      }
      free(x), free(dx), free(y), free(w), free(dw);
    }
  state->loop_limit = BPT_CPU_LOOPS_AVX512;
  bpt_context_destroy(context);
  return 0;
}
