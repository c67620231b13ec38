/* The CPU's GELU kernels (exact erf form, see src/core/ops/gelu.c): y = 0.5 x (1 + erf(x / sqrt 2)), and
 * dx = beta dx + dy (Phi(x) + x phi(x)); flat loops, OpenMP-parallel above the usual threshold. x may be a
 * strided view whose rows are contiguous (a slice): its rows, and its gradient's, are found through its strides;
 * bf16-stored values and gradients are staged through f32 chunks (bf16_storage.h). */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
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
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length; /* f32: each block in one call */
  const void *x = in->value;    /* (count), or a strided view's rows */
  void *y = node->output.value; /* (count) */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    const int64_t at = contiguous ? r * length : bpt_cpu_tensor_row(in, false, r);
    float x_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      float *ys = bpt_storage_write_row(y, y16, r * length + o, m, false, y_stage);
      gelu_run(m, bpt_storage_read_row(x, x16, at + o, m, x_stage), ys);
      bpt_storage_commit_row(y, y16, r * length + o, m, ys);
    }
  }
  return BPT_OK;
}

static bpt_status gelu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? GELU_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length;
  const void *x = in->value, *dy = node->output.grad;
  void *dx = in->grad; /* x's layout and storage */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t n = count - r * length < length ? count - r * length : length;
    const int64_t at = contiguous ? r * length : bpt_cpu_tensor_row(in, false, r);
    float x_stage[BPT_STORAGE_STAGE], dy_stage[BPT_STORAGE_STAGE], dx_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      float *dxs = bpt_storage_write_row(dx, x16, at + o, m, in->beta != 0.0f, dx_stage);
      gelu_gradient_run(m, bpt_storage_read_row(x, x16, at + o, m, x_stage),
                        bpt_storage_read_row(dy, y16, r * length + o, m, dy_stage), in->beta, dxs);
      bpt_storage_commit_row(dx, x16, at + o, m, dxs);
    }
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, GELU, gelu_forward, gelu_backward, bpt_cpu_supports_rows_of_x);
