/* exp(x) in a form compilers vectorise: no call, no branch, so a loop of it runs in vector registers (libm's
 * expf is a call per element, as costly as attention's products at head width 64). Cephes' expf method:
 * x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), a degree-6 polynomial for e^r
 * (about 1 ulp), times 2^(n - 1) built in the exponent bits and 2. Below -86.6 the result is 0 (the true
 * value is under 2.6e-38, at f32's smallest normal numbers), so a masked -inf gives exactly 0; above 88.72
 * (past FLT_MAX) it is inf; NaN stays NaN. */
#ifndef BPT_CPU_FAST_EXP_H
#define BPT_CPU_FAST_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bpt_cpu_exp(float x) {
  const float clamped = x > 88.72f ? 88.72f : (x < -86.6f ? -86.6f : x);
  /* Round to nearest by the 1.5 2^23 shift (exact under the default rounding mode, and vectorisable). */
  const float shifted = clamped * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* n is in [-125, 128]: 2^(n - 1) is a normal number, so no denormal or infinite scale is built. */
  const int32_t bits = ((int32_t)n + 126) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  const float result = p * scale * 2.0f;
  return x != x ? x : (x < -86.6f ? 0.0f : (x > 88.72f ? HUGE_VALF : result));
}

#endif
