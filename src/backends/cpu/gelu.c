/* The CPU's GELU kernels (exact erf form, see src/core/ops/gelu.c): y = 0.5 x (1 + erf(x / sqrt 2)), and
 * dx = beta dx + dy (Phi(x) + x phi(x)); flat loops, OpenMP-parallel above the usual threshold. x may be a
 * strided view whose rows are contiguous (a slice): its rows, and its gradient's, are found through its strides. */
#include <math.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

static void gelu_run(int64_t n, const float *x, float *y) {
  const float inverse_sqrt_2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; i++)
    y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * inverse_sqrt_2));
}

static void gelu_gradient_run(int64_t n, const float *x, const float *dy, float beta, float *dx) {
  const float inverse_sqrt_2 = 0.70710678118654752f, inverse_sqrt_2pi = 0.3989422804014327f;
  for (int64_t i = 0; i < n; i++) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * inverse_sqrt_2));
    const float pdf = inverse_sqrt_2pi * expf(-0.5f * x[i] * x[i]);
    const float gradient = dy[i] * (cdf + x[i] * pdf);
    dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
  }
}

/* Rows of the last axis when x is strided, else the whole tensor as blocks of this many values. */
#define GELU_BLOCK 4096

static bpt_status gelu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? GELU_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const float *x = in->value;    /* (count), or a strided view's rows */
  float *y = node->output.value; /* (count) */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    gelu_run(n, x + (contiguous ? r * length : bpt_cpu_tensor_row(in, false, r)), y + r * length);
  }
  return BPT_OK;
}

static bpt_status gelu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? GELU_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const float *x = in->value, *dy = node->output.grad;
  float *dx = in->grad; /* x's layout */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    const int64_t at = contiguous ? r * length : bpt_cpu_tensor_row(in, false, r);
    gelu_gradient_run(n, x + at, dy + r * length, in->beta, dx + at);
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED(cpu, GELU, gelu_forward, gelu_backward, bpt_cpu_supports_rows_of_x);
