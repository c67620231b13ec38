/* Binary stochastic neuron kernels on the CPU. Uniforms come from counter-based random bits, (seed, element
 * index), so the result does not depend on the thread count and matches other backends bit for bit. */
#include <math.h>

#include "backends/cpu/cpu.h"
#include "base/number_format.h"
#include "bptrain/precision.h"

bpt_status bpt_cpu_binary_stochastic_forward(bpt_backend *backend, int64_t count, const float *z, float *a,
                                             uint64_t seed, bool deterministic) {
  (void)backend;
  if (deterministic) {
    /* sigmoid(z) > 0.5 exactly when z > 0. */
#pragma omp parallel for simd if (count > BPT_CPU_PARALLEL_THRESHOLD)
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

bpt_status bpt_cpu_binary_stochastic_backward(bpt_backend *backend, int64_t count, bool sigmoid_adjusted,
                                              const float *z, const float *da, float *dz) {
  (void)backend;
  if (!sigmoid_adjusted) {
#pragma omp parallel for simd if (count > BPT_CPU_PARALLEL_THRESHOLD)
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

/* binary_stochastic: int attribute 0 is the straight-through estimator (bpt_straight_through). */
static bpt_status binary_stochastic_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  return bpt_cpu_binary_stochastic_forward(backend, node->output.count, node->inputs[0].value, node->output.value,
                                           node->seed, node->deterministic);
}

static bpt_status binary_stochastic_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bool sigmoid_adjusted = node->int_attributes[0] == BPT_STRAIGHT_THROUGH_SIGMOID;
  return bpt_cpu_binary_stochastic_backward(backend, node->output.count, sigmoid_adjusted,
                                            sigmoid_adjusted ? node->inputs[0].value : NULL, node->output.grad,
                                            node->inputs[0].grad);
}

BPT_REGISTER_KERNELS(cpu, BINARY_STOCHASTIC, binary_stochastic_forward, binary_stochastic_backward, NULL);
