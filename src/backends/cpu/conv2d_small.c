/* Convolutions with few channels (C/g < 16, O/g <= 16, C/g kh kw <= CONV_SMALL_MAX_ROWS: LeNet's two, ResNet's
 * one-channel stem): the forward pass and the weight gradient as direct loops over the padded
 * planes of conv2d.c's padded-width lowering, with no column matrix. Tap (c, i, j)'s receptive fields are
 * the run of the padded planes starting at its offset, so the products read the planes in place.
 *
 * Why: with so few channels the GEMM spends its time packing and on edge tiles (LeNet's conv1, 1 -> 6
 * channels 5x5 on 28x28, batch 128: 1.5 ms forward and 2.7 ms weight gradient through im2col and OpenBLAS,
 * about 20 GFLOP/s), and im2col writes K columns per output; the loops below keep a tile of outputs in
 * registers and read each sample's planes from cache. Measurements: bpt_cpu_conv_plan. The AVX2 loops
 * (which the AVX-512 level runs too) use FMA; the portable ones are plain C for other CPUs. */
#include "backends/cpu/conv2d_plan.h"
#include "backends/cpu/cpu.h"

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SMALL_AVX2 1
#include <immintrin.h>
#define SMALL_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define SMALL_AVX2 0
#endif

/* The offset of each row (c, i, j) of the would-be column matrix within one sample's padded planes. */
static void row_offsets(const bpt_conv2d_args *a, const conv_plan *p, int64_t *offsets) {
  for (int64_t c = 0; c < p->group_in; c++)
    for (int64_t i = 0; i < a->kernel_height; i++)
      for (int64_t j = 0; j < a->kernel_width; j++)
        offsets[(c * a->kernel_height + i) * a->kernel_width + j] =
            c * p->padded_plane + bpt_cpu_conv_tap_offset(a, p, i, j);
}

/* ---- portable loops ---- */

static void forward_portable(const conv_plan *p, const int64_t *offsets, const float *w, const float *padded,
                             float *product, int64_t ld) {
  /* One sample: padded and product point at its planes and columns. */
  const int64_t L = p->sample_columns, K = p->column_rows;
  for (int64_t o = 0; o < p->group_out; o++) {
    float *out = product + o * ld;
    for (int64_t t = 0; t < L; t++)
      out[t] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      const float weight = w[o * K + k], *source = padded + offsets[k];
#pragma omp simd
      for (int64_t t = 0; t < L; t++)
        out[t] += weight * source[t];
    }
  }
}

static void weight_gradient_portable(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                     int64_t samples, const float *padded, float *dw) {
  const int64_t L = p->sample_columns, K = p->column_rows, planes = p->group_in * p->padded_plane;
  for (int64_t o = 0; o < p->group_out; o++)
    for (int64_t k = 0; k < K; k++) {
      float sum = 0.0f;
      for (int64_t s = 0; s < samples; s++) {
        const float *d = dy + o * ld + s * L, *source = padded + s * planes + offsets[k];
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < L; t++)
          sum += d[t] * source[t];
      }
      dw[o * K + k] += sum;
    }
}

/* ---- AVX2 loops ---- */

#if SMALL_AVX2
/* Up to 6 output channels (the block's rows) by 16 columns: 12 accumulators, and per input row 2 loads and
 * 6 broadcasts for 12 FMAs. */
enum { FORWARD_ROWS = 6, FORWARD_VECTORS = 2 };

/* Lanes [0, n) of a vector set, for the last, partial vector of a row of columns. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) __m256i first_lanes(int64_t n) {
  static const int32_t table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(table + 8 - n));
}

/* product rows [o, o + rows), columns [t, t + 8 vectors) = the block's sums over the K input rows; with
 * masked, one vector of which only the mask's lanes are read and written. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void forward_tile_avx2(
    const conv_plan *p, const int64_t *offsets, const float *w, const float *padded, float *product, int64_t ld,
    int64_t o, int64_t t, int rows, int vectors, bool masked, __m256i mask) {
  const int64_t K = p->column_rows;
  __m256 sums[FORWARD_ROWS][FORWARD_VECTORS];
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++)
      sums[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const float *source = padded + offsets[k] + t;
    __m256 x[FORWARD_VECTORS];
    for (int v = 0; v < vectors; v++)
      x[v] = masked ? _mm256_maskload_ps(source, mask) : _mm256_loadu_ps(source + 8 * v);
    for (int r = 0; r < rows; r++) {
      const __m256 weight = _mm256_broadcast_ss(w + (o + r) * K + k);
      for (int v = 0; v < vectors; v++)
        sums[r][v] = _mm256_fmadd_ps(weight, x[v], sums[r][v]);
    }
  }
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++) {
      float *out = product + (o + r) * ld + t + 8 * v;
      if (masked)
        _mm256_maskstore_ps(out, mask, sums[r][v]);
      else
        _mm256_storeu_ps(out, sums[r][v]);
    }
}

/* One block of rows over all columns: 16 at a time, then 8, then the last few under a mask. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void forward_rows_avx2(
    const conv_plan *p, const int64_t *offsets, const float *w, const float *padded, float *product, int64_t ld,
    int64_t o, int rows) {
  const int64_t L = p->sample_columns;
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t t = 0;
  for (; t + 16 <= L; t += 16)
    forward_tile_avx2(p, offsets, w, padded, product, ld, o, t, rows, 2, false, all);
  if (t + 8 <= L) {
    forward_tile_avx2(p, offsets, w, padded, product, ld, o, t, rows, 1, false, all);
    t += 8;
  }
  if (t < L) forward_tile_avx2(p, offsets, w, padded, product, ld, o, t, rows, 1, true, first_lanes(L - t));
}

SMALL_AVX2_TARGET static void forward_avx2(const conv_plan *p, const int64_t *offsets, const float *w,
                                           const float *padded, float *product, int64_t ld) {
  int64_t o = 0;
  for (; o + FORWARD_ROWS <= p->group_out; o += FORWARD_ROWS)
    forward_rows_avx2(p, offsets, w, padded, product, ld, o, FORWARD_ROWS);
  /* The rows left over, with the tile's row count a constant in each call. */
  switch (p->group_out - o) {
  case 5: forward_rows_avx2(p, offsets, w, padded, product, ld, o, 5); break;
  case 4: forward_rows_avx2(p, offsets, w, padded, product, ld, o, 4); break;
  case 3: forward_rows_avx2(p, offsets, w, padded, product, ld, o, 3); break;
  case 2: forward_rows_avx2(p, offsets, w, padded, product, ld, o, 2); break;
  case 1: forward_rows_avx2(p, offsets, w, padded, product, ld, o, 1); break;
  default: break;
  }
}

/* Up to 4 output channels by 2 input rows: 8 vector accumulators over the columns, fed by 4 + 2 loads. */
enum { GRADIENT_OUTPUTS = 4, GRADIENT_INPUTS = 2 };

static inline float horizontal_sum(__m256 v) __attribute__((target("avx2,fma"), always_inline));
static inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* dw rows [o, o + outputs), columns [k, k + inputs) += the dot products of dy's rows with the input rows. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void gradient_tile_avx2(
    const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld, int64_t samples, const float *padded,
    float *dw, int64_t o, int64_t k, int outputs, int inputs) {
  const int64_t L = p->sample_columns, K = p->column_rows, planes = p->group_in * p->padded_plane;
  __m256 sums[GRADIENT_OUTPUTS][GRADIENT_INPUTS];
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      sums[r][q] = _mm256_setzero_ps();
  /* Whole vectors of columns, then the last few under a mask (masked-off lanes load as zero). */
  const __m256i tail = first_lanes(L % 8);
  for (int64_t s = 0; s < samples; s++) {
    const float *d_sample = dy + s * L, *x_sample = padded + s * planes;
    for (int64_t t = 0; t < L; t += 8) {
      const bool last = t + 8 > L;
      __m256 d[GRADIENT_OUTPUTS];
      for (int r = 0; r < outputs; r++) {
        const float *row = d_sample + (o + r) * ld + t;
        d[r] = last ? _mm256_maskload_ps(row, tail) : _mm256_loadu_ps(row);
      }
      for (int q = 0; q < inputs; q++) {
        const float *source = x_sample + offsets[k + q] + t;
        const __m256 x = last ? _mm256_maskload_ps(source, tail) : _mm256_loadu_ps(source);
        for (int r = 0; r < outputs; r++)
          sums[r][q] = _mm256_fmadd_ps(d[r], x, sums[r][q]);
      }
    }
  }
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      dw[(o + r) * K + k + q] += horizontal_sum(sums[r][q]);
}

SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void gradient_rows_avx2(
    const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld, int64_t samples, const float *padded,
    float *dw, int64_t o, int outputs) {
  int64_t k = 0;
  for (; k + GRADIENT_INPUTS <= p->column_rows; k += GRADIENT_INPUTS)
    gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, GRADIENT_INPUTS);
  if (k < p->column_rows) gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 1);
}

SMALL_AVX2_TARGET static void weight_gradient_avx2(const conv_plan *p, const int64_t *offsets, const float *dy,
                                                   int64_t ld, int64_t samples, const float *padded, float *dw) {
  int64_t o = 0;
  for (; o + GRADIENT_OUTPUTS <= p->group_out; o += GRADIENT_OUTPUTS)
    gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, GRADIENT_OUTPUTS);
  switch (p->group_out - o) {
  case 3: gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, 3); break;
  case 2: gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, 2); break;
  case 1: gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, 1); break;
  default: break;
  }
}
#endif

/* ---- launchers ---- */

void bpt_cpu_conv_small_forward(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                int64_t samples, const float *padded, float *product, int64_t ld) {
  int64_t offsets[CONV_SMALL_MAX_ROWS];
  row_offsets(a, p, offsets);
  for (int64_t s = 0; s < samples; s++) {
    const float *planes = padded + s * p->group_in * p->padded_plane;
    float *columns = product + s * p->sample_columns;
#if SMALL_AVX2
    if (loops >= BPT_CPU_LOOPS_AVX2) {
      forward_avx2(p, offsets, w, planes, columns, ld);
      continue;
    }
#endif
    forward_portable(p, offsets, w, planes, columns, ld);
  }
}

void bpt_cpu_conv_small_weight_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p,
                                        const float *dy, int64_t ld, int64_t samples, const float *padded,
                                        float *dw) {
  int64_t offsets[CONV_SMALL_MAX_ROWS];
  row_offsets(a, p, offsets);
#if SMALL_AVX2
  if (loops >= BPT_CPU_LOOPS_AVX2) {
    weight_gradient_avx2(p, offsets, dy, ld, samples, padded, dw);
    return;
  }
#endif
  (void)loops;
  weight_gradient_portable(p, offsets, dy, ld, samples, padded, dw);
}
