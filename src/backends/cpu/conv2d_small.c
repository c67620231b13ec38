/* Convolutions with few channels (C/g < 16, O/g <= 16, C/g kh kw <= CONV_SMALL_MAX_ROWS: LeNet's two, ResNet's
 * one-channel stem): the forward pass, the weight gradient and (unit strides) the data gradient as direct
 * loops over the padded planes of conv2d.c's padded-width lowering, with no column matrix. Tap (c, i, j)'s
 * receptive fields are the run of the padded planes starting at its offset, so the products read the planes
 * in place.
 *
 * Why: with so few channels the GEMM spends its time packing and on edge tiles (LeNet's conv1, 1 -> 6
 * channels 5x5 on 28x28, batch 128: 1.5 ms forward and 2.7 ms weight gradient through im2col and OpenBLAS,
 * about 20 GFLOP/s), and im2col writes K columns per output; the loops below keep a tile of outputs in
 * registers and read each sample's planes from cache. Measurements: bpt_cpu_conv_plan. The vector loops
 * (conv2d_small_tiles.h, AVX-512 and AVX2 with FMA) run the same tiles at each width; the portable ones are
 * plain C for other CPUs. */
#include "backends/cpu/conv2d_plan.h"
#include "backends/cpu/cpu.h"

#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SMALL_VECTOR 1
#include "backends/cpu/conv2d_direct.h" /* direct_lanes, for conv2d_vec.h's masks */
#else
#define SMALL_VECTOR 0
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

/* ---- vector loops ---- */

#if SMALL_VECTOR
/* Result rows per input row of a 5-wide kernel's taps in the weight gradient's tiles. */
enum { GRADIENT_INPUTS = 5 };

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_small_tiles.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_small_tiles.h"
#endif

/* ---- launchers ---- */

static void run_product(bpt_cpu_loops loops, const rows_product *m, bool accumulate) {
#if SMALL_VECTOR
  if (loops == BPT_CPU_LOOPS_AVX512) {
    (accumulate ? product_add_avx512 : product_set_avx512)(m);
    return;
  }
  if (loops == BPT_CPU_LOOPS_AVX2) {
    (accumulate ? product_add_avx2 : product_set_avx2)(m);
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
#if SMALL_VECTOR
  if (loops == BPT_CPU_LOOPS_AVX512) {
    weight_gradient_avx512(p, offsets, dy, ld, samples, padded, dw);
    return;
  }
  if (loops == BPT_CPU_LOOPS_AVX2) {
    weight_gradient_avx2(p, offsets, dy, ld, samples, padded, dw);
    return;
  }
#endif
  (void)loops;
  weight_gradient_portable(p, offsets, dy, ld, samples, padded, dw);
}
