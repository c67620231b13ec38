/* Dropout on the CPU. The mask comes from a counter-based hash of (seed, index) rather than a sequential
 * generator, so any thread (or any backend) can draw element i without drawing the ones before it. */
#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* splitmix64's finaliser (Steele, Lea and Flood, 2014): a bijective mix with full avalanche. */
static inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* dropout in training mode (the op copies values itself in evaluation mode): probability in float attribute 0,
 * the mask (0 or 1 / (1 - probability) per element) in saved. */
static bpt_status dropout_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->output.count;
  const float probability = node->float_attributes[0], *x = node->inputs[0].value;
  const uint64_t seed = node->seed;
  float *y = node->output.value, *mask = node->saved;
  if (!(probability >= 0.0f && probability < 1.0f))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "dropout: probability %g is outside [0, 1)",
                            (double)probability);
  const float keep_scale = 1.0f / (1.0f - probability);
  /* Compare 24-bit integers so the decision is exact and identical everywhere. */
  const uint32_t threshold = (uint32_t)((double)probability * 16777216.0);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    const uint32_t draw = (uint32_t)(mix(seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL) >> 40);
    mask[i] = draw < threshold ? 0.0f : keep_scale;
    y[i] = x[i] * mask[i];
  }
  return BPT_OK;
}

/* dx += dy * mask. */
static bpt_status dropout_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->output.count;
  const float *mask = node->saved, *dy = node->output.grad;
  float *dx = node->inputs[0].grad;
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    dx[i] += dy[i] * mask[i];
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, DROPOUT, dropout_forward, dropout_backward, NULL);
