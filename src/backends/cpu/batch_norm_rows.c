/* Batch norm's loops over one row: the S values of one sample's channel (batch_norm.c walks the rows in
 * memory order). Each has an AVX-512 version, whose masked loads handle a row's tail and, with fused ReLU,
 * read dy through the row's mask bits at no cost; an AVX2 version, 8 values (one mask byte) at a time; and a
 * portable one for other CPUs. The portable ReLU loops go value by value, which left ResNet-8 on an AVX2 CPU
 * spending 29% of its step here (perf, AMD EPYC Zen 2). All compute the same expressions without FMA
 * contraction, so they agree to float rounding of the sums.
 *
 * ReLU mask bits: bit i % 8 of byte i / 8 of the row's (S + 7) / 8 bytes is set where y_i > 0 (NULL: no ReLU). */
#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ROWS_AVX512 1
#include "backends/cpu/avx512_target.h"

#include "backends/cpu/avx2_lanes.h"
#define ROWS_AVX512_TARGET BPT_AVX512_TARGET
/* No FMA: the products and sums round as in the other versions. */
#define ROWS_AVX2_TARGET __attribute__((target("avx2")))
#else
#define ROWS_AVX512 0
#endif

/* ---- portable loops ---- */

static inline bool bit_set(const uint8_t *bits, int64_t i) { return bits[i / 8] >> (i % 8) & 1; }

static void row_sums_portable(const float *x, int64_t S, float shift, float *sum, float *squares) {
  float total = 0.0f, total_squares = 0.0f;
#pragma omp simd reduction(+ : total, total_squares)
  for (int64_t i = 0; i < S; i++) {
    const float centred = x[i] - shift;
    total += centred;
    total_squares += centred * centred;
  }
  *sum = total;
  *squares = total_squares;
}

static void normalise_row_portable(const float *x, int64_t S, float mean, float scale, float shift, float *y,
                                   uint8_t *bits) {
  if (!bits) {
#pragma omp simd
    for (int64_t i = 0; i < S; i++)
      y[i] = (x[i] - mean) * scale + shift;
    return;
  }
  for (int64_t i = 0; i < S; i += 8) {
    unsigned byte = 0;
    for (int64_t j = i; j < i + 8 && j < S; j++) {
      const float value = (x[j] - mean) * scale + shift;
      const bool positive = value > 0.0f;
      y[j] = positive ? value : 0.0f;
      byte |= (unsigned)positive << (j - i);
    }
    bits[i / 8] = (uint8_t)byte;
  }
}

static void gradient_row_sums_portable(const float *x, const float *dy, int64_t S, float mean, const uint8_t *bits,
                                       float *sum_dy, float *sum_dy_centred) {
  float total = 0.0f, centred_total = 0.0f;
  if (!bits) {
#pragma omp simd reduction(+ : total, centred_total)
    for (int64_t i = 0; i < S; i++) {
      total += dy[i];
      centred_total += dy[i] * (x[i] - mean);
    }
  } else {
    for (int64_t i = 0; i < S; i++) {
      const float gradient = bit_set(bits, i) ? dy[i] : 0.0f;
      total += gradient;
      centred_total += gradient * (x[i] - mean);
    }
  }
  *sum_dy = total;
  *sum_dy_centred = centred_total;
}

static void input_gradient_row_portable(const float *x, const float *dy, int64_t S, float mean, float scale,
                                        float mean_dy, float coefficient, const uint8_t *bits, bool assign, float *dx) {
  if (!bits && assign) {
#pragma omp simd
    for (int64_t i = 0; i < S; i++)
      dx[i] = scale * (dy[i] - mean_dy - (x[i] - mean) * coefficient);
    return;
  }
  if (!bits) {
#pragma omp simd
    for (int64_t i = 0; i < S; i++)
      dx[i] += scale * (dy[i] - mean_dy - (x[i] - mean) * coefficient);
    return;
  }
  for (int64_t i = 0; i < S; i++) {
    const float gradient = bit_set(bits, i) ? dy[i] : 0.0f;
    const float value = scale * (gradient - mean_dy - (x[i] - mean) * coefficient);
    dx[i] = assign ? value : dx[i] + value;
  }
}

/* ---- AVX-512 and AVX2 loops ---- */

#if ROWS_AVX512

/* The lanes of the 16 values from i in a row of S, and their mask bits (16 values cover two bytes). */
static inline __mmask16 row_lanes(int64_t i, int64_t S) {
  return S - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (S - i)) - 1u);
}
static inline __mmask16 mask_bits(const uint8_t *bits, int64_t i, int64_t S) {
  unsigned value = bits[i / 8];
  if (S - i > 8) value |= (unsigned)bits[i / 8 + 1] << 8;
  return (__mmask16)value;
}

/* Two accumulators per sum: a row is short, and one chain of dependent adds would set its pace. */
ROWS_AVX512_TARGET static void row_sums_avx512(const float *x, int64_t S, float shift, float *sum, float *squares) {
  const __m512 shifts = _mm512_set1_ps(shift);
  __m512 total[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, total_squares[2] = {total[0], total[0]};
  for (int64_t i = 0, k = 0; i < S; i += 16, k ^= 1) {
    const __mmask16 lanes = row_lanes(i, S);
    const __m512 centred = _mm512_maskz_sub_ps(lanes, _mm512_maskz_loadu_ps(lanes, x + i), shifts);
    total[k] = _mm512_add_ps(total[k], centred);
    total_squares[k] = _mm512_add_ps(total_squares[k], _mm512_mul_ps(centred, centred));
  }
  *sum = _mm512_reduce_add_ps(_mm512_add_ps(total[0], total[1]));
  *squares = _mm512_reduce_add_ps(_mm512_add_ps(total_squares[0], total_squares[1]));
}

ROWS_AVX512_TARGET static void normalise_row_avx512(const float *x, int64_t S, float mean, float scale, float shift,
                                                    float *y, uint8_t *bits) {
  const __m512 means = _mm512_set1_ps(mean), scales = _mm512_set1_ps(scale), shifts = _mm512_set1_ps(shift);
  for (int64_t i = 0; i < S; i += 16) {
    const __mmask16 lanes = row_lanes(i, S);
    const __m512 value =
        _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + i), means), scales), shifts);
    if (!bits) {
      _mm512_mask_storeu_ps(y + i, lanes, value);
      continue;
    }
    const __mmask16 positive = _mm512_mask_cmp_ps_mask(lanes, value, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_mask_storeu_ps(y + i, lanes, _mm512_maskz_mov_ps(positive, value));
    bits[i / 8] = (uint8_t)positive;
    if (S - i > 8) bits[i / 8 + 1] = (uint8_t)(positive >> 8);
  }
}

ROWS_AVX512_TARGET static void gradient_row_sums_avx512(const float *x, const float *dy, int64_t S, float mean,
                                                        const uint8_t *bits, float *sum_dy, float *sum_dy_centred) {
  const __m512 means = _mm512_set1_ps(mean);
  __m512 total[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, centred_total[2] = {total[0], total[0]};
  for (int64_t i = 0, k = 0; i < S; i += 16, k ^= 1) {
    const __mmask16 lanes = row_lanes(i, S);
    const __m512 gradient = _mm512_maskz_loadu_ps(bits ? lanes & mask_bits(bits, i, S) : lanes, dy + i);
    const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + i), means);
    total[k] = _mm512_add_ps(total[k], gradient);
    centred_total[k] = _mm512_add_ps(centred_total[k], _mm512_mul_ps(gradient, centred));
  }
  *sum_dy = _mm512_reduce_add_ps(_mm512_add_ps(total[0], total[1]));
  *sum_dy_centred = _mm512_reduce_add_ps(_mm512_add_ps(centred_total[0], centred_total[1]));
}

ROWS_AVX512_TARGET static void input_gradient_row_avx512(const float *x, const float *dy, int64_t S, float mean,
                                                         float scale, float mean_dy, float coefficient,
                                                         const uint8_t *bits, bool assign, float *dx) {
  const __m512 means = _mm512_set1_ps(mean), scales = _mm512_set1_ps(scale), mean_dys = _mm512_set1_ps(mean_dy),
               coefficients = _mm512_set1_ps(coefficient);
  for (int64_t i = 0; i < S; i += 16) {
    const __mmask16 lanes = row_lanes(i, S);
    const __m512 gradient = _mm512_maskz_loadu_ps(bits ? lanes & mask_bits(bits, i, S) : lanes, dy + i);
    const __m512 centred = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + i), means);
    __m512 value =
        _mm512_mul_ps(scales, _mm512_sub_ps(_mm512_sub_ps(gradient, mean_dys), _mm512_mul_ps(centred, coefficients)));
    if (!assign) value = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, dx + i), value);
    _mm512_mask_storeu_ps(dx + i, lanes, value);
  }
}

/* AVX2: */

/* Lane masks: the first min(S - i, 8) lanes; the lanes whose bit is set in a byte of ReLU bits. */
ROWS_AVX2_TARGET static inline __m256i row_lanes_avx2(int64_t i, int64_t S) {
  return bpt_avx2_first_lanes(S - i < 8 ? S - i : 8);
}
ROWS_AVX2_TARGET static inline __m256i byte_lanes_avx2(uint8_t bits) {
  const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits), lane_bits), lane_bits);
}
/* The 8 values from i, zero past the row's end (masked loads read nothing there). */
ROWS_AVX2_TARGET static inline __m256 load_row_avx2(const float *p, int64_t i, int64_t S) {
  return S - i >= 8 ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, row_lanes_avx2(i, S));
}
ROWS_AVX2_TARGET static inline void store_row_avx2(float *p, int64_t i, int64_t S, __m256 v) {
  if (S - i >= 8)
    _mm256_storeu_ps(p + i, v);
  else
    _mm256_maskstore_ps(p + i, row_lanes_avx2(i, S), v);
}

ROWS_AVX2_TARGET static void row_sums_avx2(const float *x, int64_t S, float shift, float *sum, float *squares) {
  const __m256 shifts = _mm256_set1_ps(shift);
  __m256 total[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, total_squares[2] = {total[0], total[0]};
  for (int64_t i = 0, k = 0; i < S; i += 8, k ^= 1) {
    __m256 centred = _mm256_sub_ps(load_row_avx2(x, i, S), shifts);
    if (S - i < 8) centred = _mm256_and_ps(centred, _mm256_castsi256_ps(row_lanes_avx2(i, S)));
    total[k] = _mm256_add_ps(total[k], centred);
    total_squares[k] = _mm256_add_ps(total_squares[k], _mm256_mul_ps(centred, centred));
  }
  *sum = bpt_avx2_sum_lanes(_mm256_add_ps(total[0], total[1]));
  *squares = bpt_avx2_sum_lanes(_mm256_add_ps(total_squares[0], total_squares[1]));
}

ROWS_AVX2_TARGET static void normalise_row_avx2(const float *x, int64_t S, float mean, float scale, float shift,
                                                float *y, uint8_t *bits) {
  const __m256 means = _mm256_set1_ps(mean), scales = _mm256_set1_ps(scale), shifts = _mm256_set1_ps(shift);
  for (int64_t i = 0; i < S; i += 8) {
    __m256 value = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(load_row_avx2(x, i, S), means), scales), shifts);
    if (bits) {
      const __m256 positive = _mm256_cmp_ps(value, _mm256_setzero_ps(), _CMP_GT_OQ);
      value = _mm256_and_ps(value, positive);
      /* Lanes past the row's end compare on zero loads plus shift: keep their bits clear. */
      const unsigned tail = S - i >= 8 ? 0xFFu : (1u << (S - i)) - 1u;
      bits[i / 8] = (uint8_t)((unsigned)_mm256_movemask_ps(positive) & tail);
    }
    store_row_avx2(y, i, S, value);
  }
}

ROWS_AVX2_TARGET static void gradient_row_sums_avx2(const float *x, const float *dy, int64_t S, float mean,
                                                    const uint8_t *bits, float *sum_dy, float *sum_dy_centred) {
  const __m256 means = _mm256_set1_ps(mean);
  __m256 total[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, centred_total[2] = {total[0], total[0]};
  for (int64_t i = 0, k = 0; i < S; i += 8, k ^= 1) {
    /* dy is zero past the row's end, so those lanes add nothing whatever x - mean is there. */
    __m256 gradient = load_row_avx2(dy, i, S);
    if (bits) gradient = _mm256_and_ps(gradient, _mm256_castsi256_ps(byte_lanes_avx2(bits[i / 8])));
    const __m256 centred = _mm256_sub_ps(load_row_avx2(x, i, S), means);
    total[k] = _mm256_add_ps(total[k], gradient);
    centred_total[k] = _mm256_add_ps(centred_total[k], _mm256_mul_ps(gradient, centred));
  }
  *sum_dy = bpt_avx2_sum_lanes(_mm256_add_ps(total[0], total[1]));
  *sum_dy_centred = bpt_avx2_sum_lanes(_mm256_add_ps(centred_total[0], centred_total[1]));
}

ROWS_AVX2_TARGET static void input_gradient_row_avx2(const float *x, const float *dy, int64_t S, float mean,
                                                     float scale, float mean_dy, float coefficient, const uint8_t *bits,
                                                     bool assign, float *dx) {
  const __m256 means = _mm256_set1_ps(mean), scales = _mm256_set1_ps(scale), mean_dys = _mm256_set1_ps(mean_dy),
               coefficients = _mm256_set1_ps(coefficient);
  for (int64_t i = 0; i < S; i += 8) {
    __m256 gradient = load_row_avx2(dy, i, S);
    if (bits) gradient = _mm256_and_ps(gradient, _mm256_castsi256_ps(byte_lanes_avx2(bits[i / 8])));
    const __m256 centred = _mm256_sub_ps(load_row_avx2(x, i, S), means);
    __m256 value =
        _mm256_mul_ps(scales, _mm256_sub_ps(_mm256_sub_ps(gradient, mean_dys), _mm256_mul_ps(centred, coefficients)));
    if (!assign) value = _mm256_add_ps(load_row_avx2(dx, i, S), value);
    store_row_avx2(dx, i, S, value);
  }
}

#define ROWS_DISPATCH(loops, call_avx512, call_avx2, call_portable)                                                    \
  do {                                                                                                                 \
    if ((loops) == BPT_CPU_LOOPS_AVX512)                                                                               \
      call_avx512;                                                                                                     \
    else if ((loops) == BPT_CPU_LOOPS_AVX2)                                                                            \
      call_avx2;                                                                                                       \
    else                                                                                                               \
      call_portable;                                                                                                   \
  } while (0)
#else
#define ROWS_DISPATCH(loops, call_avx512, call_avx2, call_portable)                                                    \
  do {                                                                                                                 \
    (void)(loops);                                                                                                     \
    call_portable;                                                                                                     \
  } while (0)
#endif

void bpt_cpu_batch_norm_row_sums(bpt_cpu_loops loops, const float *x, int64_t S, float shift, float *sum,
                                 float *squares) {
  ROWS_DISPATCH(loops, row_sums_avx512(x, S, shift, sum, squares), row_sums_avx2(x, S, shift, sum, squares),
                row_sums_portable(x, S, shift, sum, squares));
}

void bpt_cpu_batch_norm_normalise_row(bpt_cpu_loops loops, const float *x, int64_t S, float mean, float scale,
                                      float shift, float *y, uint8_t *bits) {
  ROWS_DISPATCH(loops, normalise_row_avx512(x, S, mean, scale, shift, y, bits),
                normalise_row_avx2(x, S, mean, scale, shift, y, bits),
                normalise_row_portable(x, S, mean, scale, shift, y, bits));
}

void bpt_cpu_batch_norm_gradient_row_sums(bpt_cpu_loops loops, const float *x, const float *dy, int64_t S, float mean,
                                          const uint8_t *bits, float *sum_dy, float *sum_dy_centred) {
  ROWS_DISPATCH(loops, gradient_row_sums_avx512(x, dy, S, mean, bits, sum_dy, sum_dy_centred),
                gradient_row_sums_avx2(x, dy, S, mean, bits, sum_dy, sum_dy_centred),
                gradient_row_sums_portable(x, dy, S, mean, bits, sum_dy, sum_dy_centred));
}

void bpt_cpu_batch_norm_input_gradient_row(bpt_cpu_loops loops, const float *x, const float *dy, int64_t S, float mean,
                                           float scale, float mean_dy, float coefficient, const uint8_t *bits,
                                           bool assign, float *dx) {
  ROWS_DISPATCH(loops, input_gradient_row_avx512(x, dy, S, mean, scale, mean_dy, coefficient, bits, assign, dx),
                input_gradient_row_avx2(x, dy, S, mean, scale, mean_dy, coefficient, bits, assign, dx),
                input_gradient_row_portable(x, dy, S, mean, scale, mean_dy, coefficient, bits, assign, dx));
}
