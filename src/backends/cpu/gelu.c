/* The CPU's GELU kernels (exact erf form, see src/core/ops/gelu.c): y = 0.5 x (1 + erf(x / sqrt 2)), and
 * dx = beta dx + dy (Phi(x) + x phi(x)), on f32 chunks that unary_rows.c's loops hand them (a strided x's rows,
 * bf16 storage staged). */
#include <math.h>

#include "backends/cpu/strided_rows.h"
#include "backends/cpu/unary_rows.h"

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

static void gelu_chunk(const void *context, int64_t n, const float *x, float *y) {
  (void)context;
  gelu_run(n, x, y);
}

static void gelu_gradient_chunk(const void *context, int64_t n, const float *x, const float *y, const float *dy,
                                float beta, float *dx) {
  (void)context, (void)y;
  gelu_gradient_run(n, x, dy, beta, dx);
}

static bpt_status gelu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  bpt_cpu_unary_rows_forward(node, gelu_chunk, NULL);
  return BPT_OK;
}

static bpt_status gelu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  bpt_cpu_unary_rows_backward(node, true, false, gelu_gradient_chunk, NULL);
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, GELU, gelu_forward, gelu_backward, bpt_cpu_supports_rows_of_x);
