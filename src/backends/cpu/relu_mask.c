/* ReLU with a 1-bit mask on the CPU: the forward records x > 0 as one bit per element, so backward needs
 * neither x nor y (32x less memory held between the passes). Bit j of mask byte b belongs to element
 * 8b + j. Threads work on whole mask bytes, so no two threads ever write the same byte. On x86-64 the
 * bits are packed and unpacked with SSE2 compares (movemask), which the compiler cannot find by itself;
 * elsewhere a plain loop does the same. */
#include "backends/cpu/cpu.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static uint8_t forward_byte_scalar(const float *x, float *y, int64_t count) {
  uint8_t bits = 0;
  for (int64_t i = 0; i < count; i++) {
    float value = x[i];
    bool positive = value > 0.0f;
    y[i] = positive ? value : 0.0f;
    bits |= (uint8_t)(positive << i);
  }
  return bits;
}

bpt_status bpt_cpu_relu_mask_forward(bpt_backend *backend, int64_t count, const float *x, float *y, uint8_t *mask) {
  (void)backend;
  const int64_t full_bytes = count / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t byte = 0; byte < full_bytes; byte++) {
    const float *in = x + byte * 8;
    float *out = y + byte * 8;
#if defined(__SSE2__)
    const __m128 zero = _mm_setzero_ps();
    __m128 low = _mm_loadu_ps(in), high = _mm_loadu_ps(in + 4);
    __m128 low_positive = _mm_cmpgt_ps(low, zero), high_positive = _mm_cmpgt_ps(high, zero);
    /* and with the compare mask rather than max: NaN becomes 0 exactly as in the scalar loop. */
    _mm_storeu_ps(out, _mm_and_ps(low, low_positive));
    _mm_storeu_ps(out + 4, _mm_and_ps(high, high_positive));
    mask[byte] = (uint8_t)(_mm_movemask_ps(low_positive) | _mm_movemask_ps(high_positive) << 4);
#else
    mask[byte] = forward_byte_scalar(in, out, 8);
#endif
  }
  if (count % 8) mask[full_bytes] = forward_byte_scalar(x + full_bytes * 8, y + full_bytes * 8, count % 8);
  return BPT_OK;
}

static uint8_t add_forward_byte_scalar(const float *a, const float *b, float *y, int64_t count) {
  uint8_t bits = 0;
  for (int64_t i = 0; i < count; i++) {
    float value = a[i] + b[i];
    bool positive = value > 0.0f;
    y[i] = positive ? value : 0.0f;
    bits |= (uint8_t)(positive << i);
  }
  return bits;
}

/* The join of a residual block and its ReLU in one pass: read a and b, write y and the bits. */
bpt_status bpt_cpu_add_relu_mask_forward(bpt_backend *backend, int64_t count, const float *a, const float *b, float *y,
                                         uint8_t *mask) {
  (void)backend;
  const int64_t full_bytes = count / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t byte = 0; byte < full_bytes; byte++) {
    const int64_t first = byte * 8;
#if defined(__SSE2__)
    const __m128 zero = _mm_setzero_ps();
    const __m128 low = _mm_add_ps(_mm_loadu_ps(a + first), _mm_loadu_ps(b + first));
    const __m128 high = _mm_add_ps(_mm_loadu_ps(a + first + 4), _mm_loadu_ps(b + first + 4));
    const __m128 low_positive = _mm_cmpgt_ps(low, zero), high_positive = _mm_cmpgt_ps(high, zero);
    _mm_storeu_ps(y + first, _mm_and_ps(low, low_positive));
    _mm_storeu_ps(y + first + 4, _mm_and_ps(high, high_positive));
    mask[byte] = (uint8_t)(_mm_movemask_ps(low_positive) | _mm_movemask_ps(high_positive) << 4);
#else
    mask[byte] = add_forward_byte_scalar(a + first, b + first, y + first, 8);
#endif
  }
  if (count % 8)
    mask[full_bytes] =
        add_forward_byte_scalar(a + full_bytes * 8, b + full_bytes * 8, y + full_bytes * 8, count % 8);
  return BPT_OK;
}

static void backward_byte_scalar(uint8_t bits, const float *dy, float *dx, int64_t count, bool assign) {
  for (int64_t i = 0; i < count; i++) {
    const float gradient = (bits >> i & 1) ? dy[i] : 0.0f;
    dx[i] = assign ? gradient : dx[i] + gradient;
  }
}

bpt_status bpt_cpu_relu_mask_backward(bpt_backend *backend, int64_t count, const uint8_t *mask, const float *dy,
                                      float *dx, bool assign) {
  (void)backend;
  const int64_t full_bytes = count / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t byte = 0; byte < full_bytes; byte++) {
    const float *in = dy + byte * 8;
    float *out = dx + byte * 8;
#if defined(__SSE2__)
    /* Spread the byte over lanes: lane j keeps bit j (low half) or bit j + 4 (high half). */
    const __m128i lane_bits = _mm_set_epi32(8, 4, 2, 1);
    __m128i low_bits = _mm_and_si128(_mm_set1_epi32(mask[byte] & 15), lane_bits);
    __m128i high_bits = _mm_and_si128(_mm_set1_epi32(mask[byte] >> 4), lane_bits);
    __m128 low_keep = _mm_castsi128_ps(_mm_cmpeq_epi32(low_bits, lane_bits));
    __m128 high_keep = _mm_castsi128_ps(_mm_cmpeq_epi32(high_bits, lane_bits));
    const __m128 low = _mm_and_ps(_mm_loadu_ps(in), low_keep), high = _mm_and_ps(_mm_loadu_ps(in + 4), high_keep);
    _mm_storeu_ps(out, assign ? low : _mm_add_ps(_mm_loadu_ps(out), low));
    _mm_storeu_ps(out + 4, assign ? high : _mm_add_ps(_mm_loadu_ps(out + 4), high));
#else
    backward_byte_scalar(mask[byte], in, out, 8, assign);
#endif
  }
  if (count % 8) backward_byte_scalar(mask[full_bytes], dy + full_bytes * 8, dx + full_bytes * 8, count % 8, assign);
  return BPT_OK;
}
