/* The CPU's leaky_relu, sigmoid and tanh kernels (relu has its own file, relu_mask.c; the gelus and silu theirs):
 * y = f(x), dx = beta dx + dy f'(x) (leaky_relu, from x) or f'(y) (sigmoid, tanh, from the saved output), on f32
 * chunks that unary_rows.c's loops hand them: a strided x's rows read in place, bf16 storage staged, so none of
 * them is widened whole around the kernel. The arithmetic per element is the f32 loops' of before, so f32 results
 * keep their bits. */
#include <math.h>

#include "backends/cpu/strided_rows.h"
#include "backends/cpu/unary_rows.h"
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

/* The op and leaky_relu's slope, for the chunk loops. */
typedef struct activation {
  bpt_activation kind;
  float slope;
} activation;

static activation activation_of(const bpt_kernel_node *node) {
  return (activation){bpt_activation_of(node->op), node->float_attributes[BPT_LEAKY_RELU_SLOPE]};
}

static void activation_chunk(const void *context, int64_t n, const float *x, float *y) {
  const activation *a = context;
  activation_run(a->kind, a->slope, n, x, y);
}

static void activation_gradient_chunk(const void *context, int64_t n, const float *x, const float *y,
                                      const float *dy, float beta, float *dx) {
  const activation *a = context;
  activation_gradient_run(a->kind, a->slope, n, x, y, dy, beta, dx);
}

static bpt_status activation_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const activation a = activation_of(node);
  bpt_cpu_unary_rows_forward(node, activation_chunk, &a);
  return BPT_OK;
}

static bpt_status activation_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const activation a = activation_of(node);
  const bool from_x = a.kind == BPT_ACTIVATION_LEAKY_RELU; /* the others' derivative is a function of y */
  bpt_cpu_unary_rows_backward(node, from_x, !from_x, activation_gradient_chunk, &a);
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, LEAKY_RELU, activation_forward, activation_backward,
                                   bpt_cpu_supports_rows_of_x);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, SIGMOID, activation_forward, activation_backward, bpt_cpu_supports_rows_of_x);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, TANH, activation_forward, activation_backward, bpt_cpu_supports_rows_of_x);
