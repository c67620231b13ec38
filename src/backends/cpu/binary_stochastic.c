/* Binary stochastic neuron kernels on the CPU. Uniforms come from counter-based random bits, (seed, element
 * index), so the result does not depend on the thread count and matches other backends bit for bit. */
#include <math.h>

#include "backends/cpu/cpu.h"
#include "base/number_format.h"
#include "bptrain/precision.h"

/* binary_stochastic: a = 1 with probability sigmoid(z) (z > 0 when deterministic), else 0. */
static bpt_status binary_stochastic_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->output.count;
  const float *z = node->inputs[0].value;
  float *a = node->output.value;
  const uint64_t seed = node->seed;
  if (node->deterministic) {
    /* sigmoid(z) > 0.5 exactly when z > 0. */
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++) a[i] = z[i] > 0.0f ? 1.0f : 0.0f;
    return BPT_OK;
  }
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float u = (float)(bpt_number_format_random_bits(seed, (uint64_t)i) >> 8) * 0x1p-24f;
    float probability = 1.0f / (1.0f + expf(-z[i]));
    a[i] = u < probability ? 1.0f : 0.0f;
  }
  return BPT_OK;
}

/* The straight-through estimator named by int attribute 0 (bpt_straight_through): dz += da, times
 * sigmoid'(z) for BPT_STRAIGHT_THROUGH_SIGMOID. */
static bpt_status binary_stochastic_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->output.count;
  const bool sigmoid_adjusted = node->int_attributes[0] == BPT_STRAIGHT_THROUGH_SIGMOID;
  const float *z = node->inputs[0].value, *da = node->output.grad;
  float *dz = node->inputs[0].grad;
  if (!sigmoid_adjusted) {
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++) dz[i] += da[i];
    return BPT_OK;
  }
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float s = 1.0f / (1.0f + expf(-z[i]));
    dz[i] += da[i] * s * (1.0f - s);
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, BINARY_STOCHASTIC, binary_stochastic_forward, binary_stochastic_backward, NULL);
