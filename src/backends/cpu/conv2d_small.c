/* Convolutions with few channels (C/g < 16, O/g <= 16, C/g kh kw <= CONV_SMALL_MAX_ROWS: LeNet's two, ResNet's
 * one-channel stem): the forward pass, the weight gradient and (unit strides) the data gradient as direct
 * loops over the padded planes of conv2d.c's padded-width lowering, with no column matrix. Tap (c, i, j)'s
 * receptive fields are the run of the padded planes starting at its offset, so the products read the planes
 * in place.
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

#include "backends/cpu/avx2_lanes.h"
#define SMALL_AVX2_TARGET __attribute__((target("avx2,fma")))
/* The tiles' helpers, inlined so that their row and vector counts are constants in each use. */
#define SMALL_AVX2_INLINE static inline __attribute__((target("avx2,fma"), always_inline))
#else
#define SMALL_AVX2 0
#endif

/* The offset of each row (c, i, j) of the would-be column matrix within one sample's padded planes. */
static void row_offsets(const bpt_conv2d_args *a, const conv_plan *p, int64_t *offsets) {
  for (int64_t i = 0; i < a->kernel_height; i++)
    for (int64_t j = 0; j < a->kernel_width; j++)
      offsets[i * a->kernel_width + j] = bpt_cpu_conv_tap_offset(a, p, i, j);
  for (int64_t c = 1; c < p->group_in; c++)
    for (int64_t t = 0; t < p->kernel_area; t++)
      offsets[c * p->kernel_area + t] = c * p->padded_plane + offsets[t];
}

/* The forward pass and the data gradient are both a small matrix product over one sample's L columns
 * whose operand rows and result rows sit at offsets: result row q (at target + target_offsets[q]) = or +=
 * the sum over reductions r of weight (q, r) times operand row r (at source + source_offsets[r]). Forward:
 * operand rows are the taps' runs of the padded planes, results y's rows. Data gradient: operand rows are
 * dy's, results are added into the padded planes at the taps' offsets. Weights are packed by blocks of
 * PRODUCT_ROWS result rows, weight (q, r) at packed[((q / PRODUCT_ROWS) reductions + r) PRODUCT_ROWS + q %
 * PRODUCT_ROWS], so a tile reads one run of them. */
enum { PRODUCT_ROWS = 6 };
typedef struct rows_product {
  const float *source;
  const int64_t *source_offsets;
  int64_t reductions;
  float *packed;
  float *target;
  const int64_t *target_offsets;
  int64_t rows, columns;
} rows_product;

/* Room for any plan's packed weights: result rows rounded up to a whole block, times reductions (the forward
 * pass has at most CONV_SMALL_MAX_OUTPUTS rows and CONV_SMALL_MAX_ROWS reductions, the data gradient the reverse). */
#define PACKED_WEIGHTS ((CONV_SMALL_MAX_OUTPUTS + PRODUCT_ROWS) * (CONV_SMALL_MAX_ROWS + PRODUCT_ROWS))

static inline float *packed_weight(const rows_product *m, int64_t q, int64_t r) {
  return m->packed + ((q / PRODUCT_ROWS) * m->reductions + r) * PRODUCT_ROWS + q % PRODUCT_ROWS;
}

/* ---- portable loops ---- */

static void rows_product_portable(const rows_product *m, bool accumulate) {
  for (int64_t q = 0; q < m->rows; q++) {
    float *out = m->target + m->target_offsets[q];
    if (!accumulate)
      for (int64_t t = 0; t < m->columns; t++)
        out[t] = 0.0f;
    for (int64_t r = 0; r < m->reductions; r++) {
      const float weight = *packed_weight(m, q, r);
      const float *source = m->source + m->source_offsets[r];
#pragma omp simd
      for (int64_t t = 0; t < m->columns; t++)
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
/* Up to 6 result rows by 16 columns: 12 accumulators, and per reduction 2 loads and 6 broadcasts for 12
 * FMAs. */
enum { PRODUCT_VECTORS = 2 };

/* Result rows [q, q + rows), columns [t, t + 8 vectors); with masked, one vector of which only the mask's
 * lanes are read and written. */
SMALL_AVX2_INLINE void product_tile_avx2(const rows_product *m, int64_t q, int64_t t, int rows, int vectors,
                                         bool masked, __m256i mask, bool accumulate) {
  __m256 sums[PRODUCT_ROWS][PRODUCT_VECTORS];
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++)
      sums[r][v] = _mm256_setzero_ps();
  const float *weights = packed_weight(m, q, 0), *source_base = m->source + t;
  const int64_t *source_offsets = m->source_offsets, reductions = m->reductions;
  for (int64_t k = 0; k < reductions; k++, weights += PRODUCT_ROWS) {
    const float *source = source_base + source_offsets[k];
    __m256 x[PRODUCT_VECTORS];
    for (int v = 0; v < vectors; v++)
      x[v] = masked ? _mm256_maskload_ps(source, mask) : _mm256_loadu_ps(source + 8 * v);
    for (int r = 0; r < rows; r++) {
      const __m256 weight = _mm256_broadcast_ss(weights + r);
      for (int v = 0; v < vectors; v++)
        sums[r][v] = _mm256_fmadd_ps(weight, x[v], sums[r][v]);
    }
  }
  float *target = m->target + t;
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++) {
      float *out = target + m->target_offsets[q + r] + 8 * v;
      __m256 value = sums[r][v];
      if (accumulate) value = _mm256_add_ps(value, masked ? _mm256_maskload_ps(out, mask) : _mm256_loadu_ps(out));
      if (masked)
        _mm256_maskstore_ps(out, mask, value);
      else
        _mm256_storeu_ps(out, value);
    }
}

/* One block of rows over all columns: 16 at a time, then 8, then the last few under a mask. */
SMALL_AVX2_INLINE void product_rows_avx2(const rows_product *m, int64_t q, int rows, bool accumulate) {
  const int64_t L = m->columns;
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t t = 0;
  for (; t + 16 <= L; t += 16)
    product_tile_avx2(m, q, t, rows, 2, false, all, accumulate);
  if (t + 8 <= L) {
    product_tile_avx2(m, q, t, rows, 1, false, all, accumulate);
    t += 8;
  }
  if (t < L) product_tile_avx2(m, q, t, rows, 1, true, bpt_avx2_first_lanes(L - t), accumulate);
}

/* All rows, the tile's row count a constant in each call. */
SMALL_AVX2_INLINE void product_avx2(const rows_product *m, bool accumulate) {
  int64_t q = 0;
  for (; q + PRODUCT_ROWS <= m->rows; q += PRODUCT_ROWS)
    product_rows_avx2(m, q, PRODUCT_ROWS, accumulate);
  switch (m->rows - q) {
  case 5: product_rows_avx2(m, q, 5, accumulate); break;
  case 4: product_rows_avx2(m, q, 4, accumulate); break;
  case 3: product_rows_avx2(m, q, 3, accumulate); break;
  case 2: product_rows_avx2(m, q, 2, accumulate); break;
  case 1: product_rows_avx2(m, q, 1, accumulate); break;
  default: break;
  }
}

SMALL_AVX2_TARGET static void product_set_avx2(const rows_product *m) { product_avx2(m, false); }
SMALL_AVX2_TARGET static void product_add_avx2(const rows_product *m) { product_avx2(m, true); }

/* Up to 2 output channels by 5 input rows (a 5-wide kernel's row of taps): 10 vector accumulators over the
 * columns, enough to cover the FMAs' latency, fed by 2 + 5 loads. */
enum { GRADIENT_OUTPUTS = 2, GRADIENT_INPUTS = 5 };

/* dw rows [o, o + outputs), columns [k, k + inputs) += the dot products of dy's rows with the input rows. */
SMALL_AVX2_INLINE void gradient_tile_avx2(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                          int64_t samples, const float *padded, float *dw, int64_t o, int64_t k,
                                          int outputs, int inputs) {
  const int64_t L = p->sample_columns, K = p->column_rows, planes = p->group_in * p->padded_plane;
  __m256 sums[GRADIENT_OUTPUTS][GRADIENT_INPUTS];
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      sums[r][q] = _mm256_setzero_ps();
  /* Whole vectors of columns, then the last few under a mask (masked-off lanes load as zero). */
  const __m256i tail = bpt_avx2_first_lanes(L % 8);
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
      dw[(o + r) * K + k + q] += bpt_avx2_sum_lanes(sums[r][q]);
}

SMALL_AVX2_INLINE void gradient_rows_avx2(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                          int64_t samples, const float *padded, float *dw, int64_t o, int outputs) {
  int64_t k = 0;
  for (; k + GRADIENT_INPUTS <= p->column_rows; k += GRADIENT_INPUTS)
    gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, GRADIENT_INPUTS);
  switch (p->column_rows - k) {
  case 4: gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 4); break;
  case 3: gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 3); break;
  case 2: gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 2); break;
  case 1: gradient_tile_avx2(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 1); break;
  default: break;
  }
}

SMALL_AVX2_TARGET static void weight_gradient_avx2(const conv_plan *p, const int64_t *offsets, const float *dy,
                                                   int64_t ld, int64_t samples, const float *padded, float *dw) {
  int64_t o = 0;
  for (; o + GRADIENT_OUTPUTS <= p->group_out; o += GRADIENT_OUTPUTS)
    gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, GRADIENT_OUTPUTS);
  if (o < p->group_out) gradient_rows_avx2(p, offsets, dy, ld, samples, padded, dw, o, 1);
}
#endif

/* ---- launchers ---- */

static void run_product(bpt_cpu_loops loops, const rows_product *m, bool accumulate) {
#if SMALL_AVX2
  if (loops >= BPT_CPU_LOOPS_AVX2) {
    if (accumulate)
      product_add_avx2(m);
    else
      product_set_avx2(m);
    return;
  }
#endif
  (void)loops;
  rows_product_portable(m, accumulate);
}

void bpt_cpu_conv_small_forward(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                int64_t samples, const float *padded, float *product, int64_t ld) {
  int64_t offsets[CONV_SMALL_MAX_ROWS], outputs[CONV_SMALL_MAX_OUTPUTS];
  float packed[PACKED_WEIGHTS];
  row_offsets(a, p, offsets);
  rows_product m = {.source_offsets = offsets,
                    .reductions = p->column_rows,
                    .packed = packed,
                    .target_offsets = outputs,
                    .rows = p->group_out,
                    .columns = p->sample_columns};
  for (int64_t o = 0; o < p->group_out; o++) {
    outputs[o] = o * ld;
    for (int64_t k = 0; k < p->column_rows; k++)
      *packed_weight(&m, o, k) = w[o * p->column_rows + k];
  }
  for (int64_t s = 0; s < samples; s++) {
    m.source = padded + s * p->group_in * p->padded_plane;
    m.target = product + s * p->sample_columns;
    run_product(loops, &m, false);
  }
}

void bpt_cpu_conv_small_data_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                      int64_t samples, const float *dy, int64_t ld, float *planes) {
  int64_t offsets[CONV_SMALL_MAX_ROWS], targets[CONV_SMALL_MAX_ROWS], outputs[CONV_SMALL_MAX_OUTPUTS];
  float packed[PACKED_WEIGHTS];
  row_offsets(a, p, offsets);
  rows_product m = {.source = dy,
                    .source_offsets = outputs,
                    .reductions = p->group_out,
                    .packed = packed,
                    .target = planes,
                    .target_offsets = targets,
                    .rows = p->column_rows,
                    .columns = p->sample_columns};
  for (int64_t o = 0; o < p->group_out; o++)
    outputs[o] = o * ld;
  /* Result rows tap by tap, channel by channel within a tap: a tile's rows then land in different planes,
   * not one column apart in the same one, where each row's load would wait on the previous row's
   * overlapping store (LeNet's conv2 data gradient, batch 128: 2.52 ms in (c, i, j) order, 1.66 ms so). */
  for (int64_t tap = 0; tap < p->kernel_area; tap++)
    for (int64_t c = 0; c < p->group_in; c++) {
      const int64_t q = tap * p->group_in + c, k = c * p->kernel_area + tap;
      targets[q] = offsets[k];
      for (int64_t o = 0; o < p->group_out; o++)
        *packed_weight(&m, q, o) = w[o * p->column_rows + k];
    }
  for (int64_t s = 0; s < samples; s++) {
    m.source = dy + s * p->sample_columns;
    m.target = planes + s * p->group_in * p->padded_plane;
    run_product(loops, &m, true);
  }
}

void bpt_cpu_conv_small_weight_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p,
                                        const float *dy, int64_t ld, int64_t samples, const float *padded, float *dw) {
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
