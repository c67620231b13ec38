/* Convolutions with few input values per output (C/g kh kw <= CONV_SMALL_MAX_ROWS, such as LeNet's and
 * ResNet's one-channel stems): the forward pass and the weight gradient as direct loops over the padded
 * planes of conv2d.c's padded-width lowering, with no column matrix. Tap (c, i, j)'s receptive fields are
 * the run of the padded planes starting at its offset, so the products read the planes in place.
 *
 * Why: with K = C/g kh kw this small the GEMM spends its time packing and on edge tiles (LeNet's conv1,
 * 1 -> 6 channels 5x5 on 28x28, batch 128: 1.5 ms forward and 2.7 ms weight gradient through im2col and
 * OpenBLAS, about 20 GFLOP/s), while the loops below keep a tile of outputs in registers. The AVX2 loops
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
                                     const float *padded, float *dw) {
  const int64_t L = p->sample_columns, K = p->column_rows;
  for (int64_t o = 0; o < p->group_out; o++)
    for (int64_t k = 0; k < K; k++) {
      const float *d = dy + o * ld, *source = padded + offsets[k];
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < L; t++)
        sum += d[t] * source[t];
      dw[o * K + k] += sum;
    }
}

/* ---- AVX2 loops ---- */

#if SMALL_AVX2
/* Up to 6 output channels (the block's rows) by 16 columns: 12 accumulators, and per input row 2 loads and
 * 6 broadcasts for 12 FMAs. */
enum { FORWARD_ROWS = 6, FORWARD_VECTORS = 2 };

/* product rows [o, o + rows), columns [t, t + 8 vectors) = the block's sums over the K input rows. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void forward_tile_avx2(
    const conv_plan *p, const int64_t *offsets, const float *w, const float *padded, float *product, int64_t ld,
    int64_t o, int64_t t, int rows, int vectors) {
  const int64_t K = p->column_rows;
  __m256 sums[FORWARD_ROWS][FORWARD_VECTORS];
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++)
      sums[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    const float *source = padded + offsets[k] + t;
    __m256 x[FORWARD_VECTORS];
    for (int v = 0; v < vectors; v++)
      x[v] = _mm256_loadu_ps(source + 8 * v);
    for (int r = 0; r < rows; r++) {
      const __m256 weight = _mm256_broadcast_ss(w + (o + r) * K + k);
      for (int v = 0; v < vectors; v++)
        sums[r][v] = _mm256_fmadd_ps(weight, x[v], sums[r][v]);
    }
  }
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++)
      _mm256_storeu_ps(product + (o + r) * ld + t + 8 * v, sums[r][v]);
}

/* One block of rows over all columns: 16 at a time, then 8, then the last few one by one. */
SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void forward_rows_avx2(
    const conv_plan *p, const int64_t *offsets, const float *w, const float *padded, float *product, int64_t ld,
    int64_t o, int rows) {
  const int64_t L = p->sample_columns, K = p->column_rows;
  int64_t t = 0;
  for (; t + 16 <= L; t += 16)
    forward_tile_avx2(p, offsets, w, padded, product, ld, o, t, rows, 2);
  if (t + 8 <= L) {
    forward_tile_avx2(p, offsets, w, padded, product, ld, o, t, rows, 1);
    t += 8;
  }
  for (int r = 0; r < rows; r++)
    for (int64_t u = t; u < L; u++) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; k++)
        sum += w[(o + r) * K + k] * padded[offsets[k] + u];
      product[(o + r) * ld + u] = sum;
    }
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
    const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld, const float *padded, float *dw,
    int64_t o, int64_t k, int outputs, int inputs) {
  const int64_t L = p->sample_columns, K = p->column_rows;
  __m256 sums[GRADIENT_OUTPUTS][GRADIENT_INPUTS];
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      sums[r][q] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= L; t += 8) {
    __m256 d[GRADIENT_OUTPUTS];
    for (int r = 0; r < outputs; r++)
      d[r] = _mm256_loadu_ps(dy + (o + r) * ld + t);
    for (int q = 0; q < inputs; q++) {
      const __m256 x = _mm256_loadu_ps(padded + offsets[k + q] + t);
      for (int r = 0; r < outputs; r++)
        sums[r][q] = _mm256_fmadd_ps(d[r], x, sums[r][q]);
    }
  }
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++) {
      float sum = horizontal_sum(sums[r][q]);
      for (int64_t u = t; u < L; u++)
        sum += dy[(o + r) * ld + u] * padded[offsets[k + q] + u];
      dw[(o + r) * K + k + q] += sum;
    }
}

SMALL_AVX2_TARGET static inline __attribute__((always_inline)) void gradient_rows_avx2(
    const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld, const float *padded, float *dw,
    int64_t o, int outputs) {
  int64_t k = 0;
  for (; k + GRADIENT_INPUTS <= p->column_rows; k += GRADIENT_INPUTS)
    gradient_tile_avx2(p, offsets, dy, ld, padded, dw, o, k, outputs, GRADIENT_INPUTS);
  if (k < p->column_rows) gradient_tile_avx2(p, offsets, dy, ld, padded, dw, o, k, outputs, 1);
}

SMALL_AVX2_TARGET static void weight_gradient_avx2(const conv_plan *p, const int64_t *offsets, const float *dy,
                                                   int64_t ld, const float *padded, float *dw) {
  int64_t o = 0;
  for (; o + GRADIENT_OUTPUTS <= p->group_out; o += GRADIENT_OUTPUTS)
    gradient_rows_avx2(p, offsets, dy, ld, padded, dw, o, GRADIENT_OUTPUTS);
  switch (p->group_out - o) {
  case 3: gradient_rows_avx2(p, offsets, dy, ld, padded, dw, o, 3); break;
  case 2: gradient_rows_avx2(p, offsets, dy, ld, padded, dw, o, 2); break;
  case 1: gradient_rows_avx2(p, offsets, dy, ld, padded, dw, o, 1); break;
  default: break;
  }
}
#endif

/* ---- launchers ---- */

void bpt_cpu_conv_small_forward(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                const float *padded, float *product, int64_t ld) {
  int64_t offsets[CONV_SMALL_MAX_ROWS];
  row_offsets(a, p, offsets);
#if SMALL_AVX2
  if (loops >= BPT_CPU_LOOPS_AVX2) {
    forward_avx2(p, offsets, w, padded, product, ld);
    return;
  }
#endif
  (void)loops;
  forward_portable(p, offsets, w, padded, product, ld);
}

void bpt_cpu_conv_small_weight_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p,
                                        const float *dy, int64_t ld, const float *padded, float *dw) {
  int64_t offsets[CONV_SMALL_MAX_ROWS];
  row_offsets(a, p, offsets);
#if SMALL_AVX2
  if (loops >= BPT_CPU_LOOPS_AVX2) {
    weight_gradient_avx2(p, offsets, dy, ld, padded, dw);
    return;
  }
#endif
  (void)loops;
  weight_gradient_portable(p, offsets, dy, ld, padded, dw);
}
