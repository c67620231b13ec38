/* The per-channel loops of batch norm fused with ReLU (batch_norm.c calls them for args->relu_mask): the
 * normalising pass clamps and records one bit per value, and the gradient passes read dy through those bits,
 * so the ReLU costs no pass of its own. A channel's rows each own (S + 7) / 8 mask bytes (the layout in
 * bpt_batch_norm_args), so threads working on different channels never write the same byte.
 *
 * On CPUs with AVX-512 a row's bits load as the lane mask of 16 values at a time, which zeroes the masked-out
 * dy lanes for free; elsewhere (valgrind among them) plain loops do the same arithmetic. The expressions match
 * batch_norm.c's unfused ones, without FMA contraction, so fused and unfused values agree. */
#include "backends/cpu/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RELU_AVX512 1
#include <immintrin.h>
#define RELU_AVX512_TARGET __attribute__((target("avx512f")))
#else
#define RELU_AVX512 0
#endif

bool bpt_cpu_relu_loops_avx512(bpt_backend *backend) {
#if RELU_AVX512
  return __builtin_cpu_supports("avx512f") && !((bpt_cpu_state *)backend->state)->portable_relu_loops;
#else
  (void)backend;
  return false;
#endif
}

/* Whether bit i of a row's mask bytes is set. */
static inline bool bit_set(const uint8_t *row_bits, int64_t i) { return row_bits[i / 8] >> (i % 8) & 1; }

static void normalise_relu_plain(const float *x, int64_t N, int64_t row_stride, int64_t S, float mean, float scale,
                                 float shift, float *y, uint8_t *bits, int64_t bits_stride) {
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride;
    float *out = y + n * row_stride;
    uint8_t *row_bits = bits + n * bits_stride;
    for (int64_t i = 0; i < S; i += 8) {
      unsigned byte = 0;
      for (int64_t j = i; j < i + 8 && j < S; j++) {
        const float value = (in[j] - mean) * scale + shift;
        const bool positive = value > 0.0f;
        out[j] = positive ? value : 0.0f;
        byte |= (unsigned)positive << (j - i);
      }
      row_bits[i / 8] = (uint8_t)byte;
    }
  }
}

static void gradient_sums_relu_plain(const float *x, const float *dy, int64_t N, int64_t row_stride, int64_t S,
                                     float mean, const uint8_t *bits, int64_t bits_stride, double *sum_dy,
                                     double *sum_dy_centred) {
  double total = 0.0, centred_total = 0.0;
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride, *d = dy + n * row_stride;
    const uint8_t *row_bits = bits + n * bits_stride;
    float row_dy = 0.0f, row_dy_centred = 0.0f;
    for (int64_t i = 0; i < S; i++) {
      const float gradient = bit_set(row_bits, i) ? d[i] : 0.0f;
      row_dy += gradient;
      row_dy_centred += gradient * (in[i] - mean);
    }
    total += row_dy;
    centred_total += row_dy_centred;
  }
  *sum_dy = total;
  *sum_dy_centred = centred_total;
}

static void input_gradient_relu_plain(const float *x, const float *dy, int64_t N, int64_t row_stride, int64_t S,
                                      float mean, float scale, float mean_dy, float xhat_coefficient,
                                      const uint8_t *bits, int64_t bits_stride, bool assign, float *dx) {
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride, *d = dy + n * row_stride;
    const uint8_t *row_bits = bits + n * bits_stride;
    float *out = dx + n * row_stride;
    for (int64_t i = 0; i < S; i++) {
      const float gradient = bit_set(row_bits, i) ? d[i] : 0.0f;
      const float value = scale * (gradient - mean_dy - (in[i] - mean) * xhat_coefficient);
      out[i] = assign ? value : out[i] + value;
    }
  }
}

#if RELU_AVX512

/* The lanes of the 16 values from i in a row of S, and their mask bits (a 16-value step covers two bytes). */
static inline __mmask16 row_lanes(int64_t i, int64_t S) {
  return S - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (S - i)) - 1u);
}
static inline __mmask16 row_mask_bits(const uint8_t *row_bits, int64_t i, int64_t S) {
  unsigned value = row_bits[i / 8];
  if (S - i > 8) value |= (unsigned)row_bits[i / 8 + 1] << 8;
  return (__mmask16)value;
}

RELU_AVX512_TARGET static void normalise_relu_avx512(const float *x, int64_t N, int64_t row_stride, int64_t S,
                                                     float mean, float scale, float shift, float *y, uint8_t *bits,
                                                     int64_t bits_stride) {
  const __m512 means = _mm512_set1_ps(mean), scales = _mm512_set1_ps(scale), shifts = _mm512_set1_ps(shift);
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride;
    float *out = y + n * row_stride;
    uint8_t *row_bits = bits + n * bits_stride;
    for (int64_t i = 0; i < S; i += 16) {
      const __mmask16 lanes = row_lanes(i, S);
      const __m512 value =
          _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, in + i), means), scales), shifts);
      const __mmask16 positive = _mm512_mask_cmp_ps_mask(lanes, value, _mm512_setzero_ps(), _CMP_GT_OQ);
      _mm512_mask_storeu_ps(out + i, lanes, _mm512_maskz_mov_ps(positive, value));
      row_bits[i / 8] = (uint8_t)positive;
      if (S - i > 8) row_bits[i / 8 + 1] = (uint8_t)(positive >> 8);
    }
  }
}

/* Four rows at a time, each with its own accumulators (as batch_norm.c's sums): one row's loads and adds alone
 * leave the core waiting on memory. Each row still sums alone, in float, before joining the double totals. */
RELU_AVX512_TARGET static void gradient_sums_relu_avx512(const float *x, const float *dy, int64_t N, int64_t row_stride,
                                                         int64_t S, float mean, const uint8_t *bits,
                                                         int64_t bits_stride, double *sum_dy, double *sum_dy_centred) {
  enum { ROWS = 4 };
  const __m512 means = _mm512_set1_ps(mean);
  double total = 0.0, centred_total = 0.0;
  for (int64_t n = 0; n < N; n += ROWS) {
    const int rows = N - n < ROWS ? (int)(N - n) : ROWS;
    __m512 row_dy[ROWS], row_dy_centred[ROWS];
    for (int r = 0; r < ROWS; r++)
      row_dy[r] = row_dy_centred[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < S; i += 16) {
      const __mmask16 lanes = row_lanes(i, S);
      for (int r = 0; r < rows; r++) {
        const int64_t row = (n + r) * row_stride;
        const __mmask16 kept = lanes & row_mask_bits(bits + (n + r) * bits_stride, i, S);
        const __m512 gradient = _mm512_maskz_loadu_ps(kept, dy + row + i);
        const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + row + i), means);
        row_dy[r] = _mm512_add_ps(row_dy[r], gradient);
        row_dy_centred[r] = _mm512_add_ps(row_dy_centred[r], _mm512_mul_ps(gradient, centred));
      }
    }
    for (int r = 0; r < rows; r++) {
      total += _mm512_reduce_add_ps(row_dy[r]);
      centred_total += _mm512_reduce_add_ps(row_dy_centred[r]);
    }
  }
  *sum_dy = total;
  *sum_dy_centred = centred_total;
}

RELU_AVX512_TARGET static void input_gradient_relu_avx512(const float *x, const float *dy, int64_t N,
                                                          int64_t row_stride, int64_t S, float mean, float scale,
                                                          float mean_dy, float xhat_coefficient, const uint8_t *bits,
                                                          int64_t bits_stride, bool assign, float *dx) {
  const __m512 means = _mm512_set1_ps(mean), scales = _mm512_set1_ps(scale), mean_dys = _mm512_set1_ps(mean_dy),
               coefficients = _mm512_set1_ps(xhat_coefficient);
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride, *d = dy + n * row_stride;
    const uint8_t *row_bits = bits + n * bits_stride;
    float *out = dx + n * row_stride;
    for (int64_t i = 0; i < S; i += 16) {
      const __mmask16 lanes = row_lanes(i, S);
      const __m512 gradient = _mm512_maskz_loadu_ps(lanes & row_mask_bits(row_bits, i, S), d + i);
      const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, in + i), means);
      __m512 value =
          _mm512_mul_ps(scales, _mm512_sub_ps(_mm512_sub_ps(gradient, mean_dys), _mm512_mul_ps(centred, coefficients)));
      if (!assign) value = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, out + i), value);
      _mm512_mask_storeu_ps(out + i, lanes, value);
    }
  }
}

#endif

void bpt_cpu_normalise_relu(bool avx512, const float *x, int64_t N, int64_t row_stride, int64_t S, float mean,
                            float scale, float shift, float *y, uint8_t *bits, int64_t bits_stride) {
#if RELU_AVX512
  if (avx512) {
    normalise_relu_avx512(x, N, row_stride, S, mean, scale, shift, y, bits, bits_stride);
    return;
  }
#else
  (void)avx512;
#endif
  normalise_relu_plain(x, N, row_stride, S, mean, scale, shift, y, bits, bits_stride);
}

void bpt_cpu_gradient_sums_relu(bool avx512, const float *x, const float *dy, int64_t N, int64_t row_stride, int64_t S,
                                float mean, const uint8_t *bits, int64_t bits_stride, double *sum_dy,
                                double *sum_dy_centred) {
#if RELU_AVX512
  if (avx512) {
    gradient_sums_relu_avx512(x, dy, N, row_stride, S, mean, bits, bits_stride, sum_dy, sum_dy_centred);
    return;
  }
#else
  (void)avx512;
#endif
  gradient_sums_relu_plain(x, dy, N, row_stride, S, mean, bits, bits_stride, sum_dy, sum_dy_centred);
}

void bpt_cpu_input_gradient_relu(bool avx512, const float *x, const float *dy, int64_t N, int64_t row_stride, int64_t S,
                                 float mean, float scale, float mean_dy, float xhat_coefficient, const uint8_t *bits,
                                 int64_t bits_stride, bool assign, float *dx) {
#if RELU_AVX512
  if (avx512) {
    input_gradient_relu_avx512(x, dy, N, row_stride, S, mean, scale, mean_dy, xhat_coefficient, bits, bits_stride,
                               assign, dx);
    return;
  }
#else
  (void)avx512;
#endif
  input_gradient_relu_plain(x, dy, N, row_stride, S, mean, scale, mean_dy, xhat_coefficient, bits, bits_stride, assign,
                            dx);
}
