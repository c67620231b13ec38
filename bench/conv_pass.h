/* One conv2d pass through the CPU backend's registered kernels, timed: shared by the convolution benchmarks
 * (conv_kernels.c, conv_small.c), which call the kernels directly rather than through a graph. Include after
 * defining _POSIX_C_SOURCE (clock_gettime). */
#ifndef BPT_BENCH_CONV_PASS_H
#define BPT_BENCH_CONV_PASS_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/kernel_args.h"

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static bpt_kernel_tensor conv_tensor(int64_t n, int64_t c, int64_t h, int64_t w, const float *value, float *grad) {
  bpt_kernel_tensor t = {.dtype = BPT_DTYPE_F32,
                         .rank = 4,
                         .dims = {n, c, h, w},
                         .count = n * c * h * w,
                         .value = (float *)value,
                         .grad = grad,
                         .beta = 1.0f};
  for (int i = 3, step = 1; i >= 0; step *= (int)t.dims[i], i--)
    t.strides[i] = step;
  return t;
}

/* Seconds per run, over `repeat` runs, of pass 0 (forward), 1 (data gradient into dx) or 2 (weight gradient into
 * dw) of the convolution a describes, with the bf16 policy's products when bf16. Exits on a kernel failure. */
static double conv_pass(bpt_backend *backend, int pass, const bpt_conv2d_args *a, bool bf16, int repeat,
                        const float *x, const float *w, float *y, float *dx, float *dw) {
  bpt_kernel_node node = {.op = BPT_OP_CONV2D,
                          .name = "bench",
                          .input_count = 2,
                          .bf16_products = bf16,
                          .int_attributes = {a->stride_height, a->stride_width, a->padding_height, a->padding_width,
                                             a->dilation_height, a->dilation_width, a->groups}};
  node.inputs[0] = conv_tensor(a->batch, a->in_channels, a->in_height, a->in_width, x, pass == 1 ? dx : NULL);
  node.inputs[0].beta = a->assign_input_gradient ? 0.0f : 1.0f;
  node.inputs[1] = conv_tensor(a->out_channels, a->in_channels / a->groups, a->kernel_height, a->kernel_width, w,
                               pass == 2 ? dw : NULL);
  node.output = conv_tensor(a->batch, a->out_channels, a->out_height, a->out_width, y, y);
  const bpt_op_kernels *kernels = backend->vtable->kernels(backend, BPT_OP_CONV2D);
  const double start = seconds();
  for (int r = 0; r < repeat; r++) {
    bpt_status status = pass == 0 ? kernels->forward(backend, &node) : kernels->backward(backend, &node);
    if (status != BPT_OK) {
      fprintf(stderr, "conv2d pass %d failed: %s\n", pass, backend->error_message);
      exit(1);
    }
  }
  return (seconds() - start) / repeat;
}

#endif
