/* The CPU's convolution routes on ResNet-8's 3x3 layers (batch 128): each pass (forward, data gradient, weight
 * gradient) through the direct and Winograd kernels and through the SGEMM lowerings, f32 and with the bf16 policy's
 * products, alternately in the same run, the fastest of several rounds each. Prints milliseconds, GFLOP/s (of the
 * direct 3x3 arithmetic) and the speed-up per pass. Calls the backend's conv2d kernels directly.
 *
 *   conv_kernels_bench [--threads 1] [--rounds 7]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "bptrain/compute_info.h"
#include "core/context.h"

#include "conv_pass.h"

typedef struct layer {
  const char *name;
  int64_t channels, size, outputs, stride;
} layer;

/* Routes: the direct (or Winograd) kernels; the SGEMM lowering; the same lowering with the bf16 policy's
 * bf16_products (vdpbf16ps where the CPU has AVX512_BF16, else the SGEMM again). */
enum { PASSES = 3, ROUTES = 3 };

int main(int argc, char **argv) {
  int threads = 1, rounds = 7;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: conv_kernels_bench [--threads N] [--rounds N]\n");
      return 2;
    }
  }
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) return 1;
  bpt_backend *backend = &context->backend;
  bpt_cpu_state *state = backend->state;
  bpt_compute_info info = {.size = sizeof info};
  if (bpt_cpu_compute_info(&info) != BPT_OK) return 1;
  const layer layers[] = {{"s0b0.conv1/2 16->16 28x28", 16, 28, 16, 1},
                          {"s1b0.conv1 16->32 28x28 s2", 16, 28, 32, 2},
                          {"s1b0.conv2 32->32 14x14", 32, 14, 32, 1},
                          {"s2b0.conv1 32->64 14x14 s2", 32, 14, 64, 2},
                          {"s2b0.conv2 64->64 7x7", 64, 7, 64, 1}};
  const char *pass_names[PASSES] = {"forward", "data", "filter"};
  printf("conv kernels, batch 128, %d thread(s), fastest of %d alternating rounds: direct (or Winograd) vs SGEMM "
         "lowering vs the bf16 policy's lowering (%s)\n",
         threads, rounds, info.bf16_gemm);
  double totals[ROUTES] = {0.0, 0.0, 0.0};
  for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
    const layer *p = &layers[l];
    const int64_t out = (p->size - 1) / p->stride + 1;
    bpt_conv2d_args a = {.batch = 128,
                         .in_channels = p->channels,
                         .in_height = p->size,
                         .in_width = p->size,
                         .out_channels = p->outputs,
                         .out_height = out,
                         .out_width = out,
                         .kernel_height = 3,
                         .kernel_width = 3,
                         .stride_height = p->stride,
                         .stride_width = p->stride,
                         .padding_height = 1,
                         .padding_width = 1,
                         .dilation_height = 1,
                         .dilation_width = 1,
                         .groups = 1};
    const size_t x_count = (size_t)(a.batch * a.in_channels * p->size * p->size);
    const size_t y_count = (size_t)(a.batch * a.out_channels * out * out);
    const size_t w_count = (size_t)(a.out_channels * a.in_channels * 9);
    float *x = malloc(x_count * sizeof *x), *dx = calloc(x_count, sizeof *dx), *y = malloc(y_count * sizeof *y);
    float *w = malloc(w_count * sizeof *w), *dw = calloc(w_count, sizeof *dw);
    if (!x || !dx || !y || !w || !dw) return 1;
    for (size_t i = 0; i < x_count; i++)
      x[i] = (float)(i % 13) * 0.1f - 0.6f;
    for (size_t i = 0; i < w_count; i++)
      w[i] = (float)(i % 7) * 0.01f - 0.03f;
    for (size_t i = 0; i < y_count; i++)
      y[i] = (float)(i % 5) * 0.1f - 0.2f;
    const double flops = 2.0 * (double)y_count * (double)(a.in_channels * 9);
    printf("%s:\n", p->name);
    for (int pass = 0; pass < PASSES; pass++) {
      double best[ROUTES] = {1e30, 1e30, 1e30};
      for (int round = 0; round < rounds; round++)
        for (int route = 0; route < ROUTES; route++) {
          state->gemm_convolutions_only = route >= 1;
          const double t = conv_pass(backend, pass, &a, route == 2, 1, x, w, y, dx, dw);
          if (t < best[route]) best[route] = t;
        }
      printf("  %-8s direct %6.2f ms %5.1f GFLOP/s   SGEMM %6.2f ms %5.1f GFLOP/s (%.2fx)   bf16 GEMM %6.2f ms %5.1f "
             "GFLOP/s (%.2fx)\n",
             pass_names[pass], 1e3 * best[0], flops / best[0] / 1e9, 1e3 * best[1], flops / best[1] / 1e9,
             best[1] / best[0], 1e3 * best[2], flops / best[2] / 1e9, best[2] / best[0]);
      /* s0b0's line stands for both of its convolutions. */
      for (int route = 0; route < ROUTES; route++)
        totals[route] += (l == 0 ? 2.0 : 1.0) * best[route];
    }
    free(x), free(dx), free(y), free(w), free(dw);
  }
  state->gemm_convolutions_only = false;
  printf("all six 3x3 convolutions, three passes: direct %.1f ms, SGEMM %.1f ms (%.2fx), bf16 GEMM %.1f ms (%.2fx)\n",
         1e3 * totals[0], 1e3 * totals[1], totals[1] / totals[0], 1e3 * totals[2], totals[2] / totals[0]);
  bpt_context_destroy(context);
  return 0;
}
