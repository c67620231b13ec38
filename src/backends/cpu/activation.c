/* The CPU's leaky_relu, sigmoid and tanh kernels (relu has its own file, relu_mask.c; the gelus and silu theirs):
 * y = f(x), dx = beta dx + dy f'(x) (leaky_relu, from x) or f'(y) (sigmoid, tanh, from the saved output). x may be
 * a strided view whose rows are contiguous (a slice): its rows, and its gradient's, are found through its
 * strides; bf16-stored values and gradients are staged through f32 chunks (bf16_storage.h), so none of them is
 * widened whole around the kernel. The arithmetic per element is the f32 loops' of before, so f32 results keep
 * their bits. */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"
#include "backends/kernel_args.h"

static void activation_run(bpt_activation kind, float slope, int64_t n, const float *x, float *y) {
  switch (kind) {
  case BPT_ACTIVATION_LEAKY_RELU: /* a select, not a branch: ReLU-like inputs mispredict half the time */
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
    break;
  case BPT_ACTIVATION_SIGMOID:
    for (int64_t i = 0; i < n; i++)
      y[i] = 1.0f / (1.0f + expf(-x[i]));
    break;
  case BPT_ACTIVATION_TANH:
    for (int64_t i = 0; i < n; i++)
      y[i] = tanhf(x[i]);
    break;
  case BPT_ACTIVATION_RELU: break; /* relu_mask.c's */
  }
}

/* dx (+)= dy f': from x for leaky_relu, from y for the others. */
static void activation_gradient_run(bpt_activation kind, float slope, int64_t n, const float *x, const float *y,
                                    const float *dy, float beta, float *dx) {
  switch (kind) {
  case BPT_ACTIVATION_LEAKY_RELU:
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      const float gradient = (x[i] > 0.0f ? 1.0f : slope) * dy[i];
      dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
    }
    break;
  case BPT_ACTIVATION_SIGMOID:
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      const float gradient = dy[i] * y[i] * (1.0f - y[i]);
      dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
    }
    break;
  case BPT_ACTIVATION_TANH:
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
      const float gradient = dy[i] * (1.0f - y[i] * y[i]);
      dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
    }
    break;
  case BPT_ACTIVATION_RELU: break;
  }
}

/* Rows of the last axis when x is strided, else the whole tensor as blocks of this many values. */
#define ACTIVATION_BLOCK 4096

static bpt_status activation_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bpt_activation kind = bpt_activation_of(node->op);
  const float slope = node->float_attributes[BPT_LEAKY_RELU_SLOPE];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? ACTIVATION_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length; /* f32: each block in one call */
  const void *x = in->value;                                    /* (count), or a strided view's rows */
  void *y = node->output.value;                                 /* (count) */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    const int64_t at = contiguous ? r * length : bpt_cpu_tensor_row(in, false, r);
    float x_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      float *ys = bpt_storage_write_row(y, y16, r * length + o, m, false, y_stage);
      activation_run(kind, slope, m, bpt_storage_read_row(x, x16, at + o, m, x_stage), ys);
      bpt_storage_commit_row(y, y16, r * length + o, m, ys);
    }
  }
  return BPT_OK;
}

static bpt_status activation_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bpt_activation kind = bpt_activation_of(node->op);
  const float slope = node->float_attributes[BPT_LEAKY_RELU_SLOPE];
  const bool from_x = kind == BPT_ACTIVATION_LEAKY_RELU; /* the others' derivative is a function of y */
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? ACTIVATION_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length;
  const void *x = in->value, *y = node->output.value, *dy = node->output.grad;
  void *dx = in->grad; /* x's layout and storage */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    const int64_t at = contiguous ? r * length : bpt_cpu_tensor_row(in, false, r);
    float value_stage[BPT_STORAGE_STAGE], dy_stage[BPT_STORAGE_STAGE], dx_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      const float *xs = from_x ? bpt_storage_read_row(x, x16, at + o, m, value_stage) : NULL;
      const float *ys = from_x ? NULL : bpt_storage_read_row(y, y16, r * length + o, m, value_stage);
      float *dxs = bpt_storage_write_row(dx, x16, at + o, m, in->beta != 0.0f, dx_stage);
      activation_gradient_run(kind, slope, m, xs, ys, bpt_storage_read_row(dy, y16, r * length + o, m, dy_stage),
                              in->beta, dxs);
      bpt_storage_commit_row(dx, x16, at + o, m, dxs);
    }
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, LEAKY_RELU, activation_forward, activation_backward,
                                   bpt_cpu_supports_rows_of_x);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, SIGMOID, activation_forward, activation_backward, bpt_cpu_supports_rows_of_x);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, TANH, activation_forward, activation_backward, bpt_cpu_supports_rows_of_x);
