/* ReLU with a 1-bit mask on the CPU: the forward records x > 0 as one bit per element, so backward needs
 * neither x nor y (32x less memory held between the passes). Threads work on whole mask bytes, so no two
 * threads ever write the same byte. */
#include "backends/cpu/cpu.h"

bpt_status bpt_cpu_relu_mask_forward(bpt_backend *backend, int64_t count, const float *x, float *y, uint8_t *mask) {
  (void)backend;
  int64_t bytes = (count + 7) / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t byte = 0; byte < bytes; byte++) {
    int64_t first = byte * 8, last = first + 8 < count ? first + 8 : count;
    uint8_t bits = 0;
    for (int64_t i = first; i < last; i++) {
      bool positive = x[i] > 0.0f;
      y[i] = positive ? x[i] : 0.0f;
      bits |= (uint8_t)(positive << (i - first));
    }
    mask[byte] = bits;
  }
  return BPT_OK;
}

bpt_status bpt_cpu_relu_mask_backward(bpt_backend *backend, int64_t count, const uint8_t *mask, const float *dy,
                                      float *dx) {
  (void)backend;
  int64_t bytes = (count + 7) / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t byte = 0; byte < bytes; byte++) {
    uint8_t bits = mask[byte];
    if (!bits) continue; /* eight masked-out elements: nothing to add */
    int64_t first = byte * 8, last = first + 8 < count ? first + 8 : count;
    for (int64_t i = first; i < last; i++)
      if (bits >> (i - first) & 1) dx[i] += dy[i];
  }
  return BPT_OK;
}
