/* The CPU's GELU kernels (exact erf form, see src/core/ops/gelu.c): y = 0.5 x (1 + erf(x / sqrt 2)), and
 * dx = beta dx + dy (Phi(x) + x phi(x)); flat loops, OpenMP-parallel above the usual threshold. */
#include <math.h>

#include "backends/cpu/cpu.h"

static bpt_status gelu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->output.count;
  const float *x = node->inputs[0].value; /* (count) */
  float *y = node->output.value;          /* (count) */
  const float inverse_sqrt_2 = 0.70710678118654752f;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * inverse_sqrt_2));
  return BPT_OK;
}

static bpt_status gelu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->output.count;
  const float *x = node->inputs[0].value, *dy = node->output.grad;
  float *dx = node->inputs[0].grad;
  const float beta = node->inputs[0].beta, inverse_sqrt_2 = 0.70710678118654752f,
              inverse_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * inverse_sqrt_2));
    const float pdf = inverse_sqrt_2pi * expf(-0.5f * x[i] * x[i]);
    const float gradient = dy[i] * (cdf + x[i] * pdf);
    dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, GELU, gelu_forward, gelu_backward, NULL);
