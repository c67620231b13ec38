/* conv2d_small.c's register tiles (see there), written once on conv2d_vec.h and included once per target (after
 * CONV_VEC_AVX512 or CONV_VEC_AVX2 is defined). The forward product sums each output over its reductions in
 * order, so both targets give the same bits. The data gradient adds a tile's rows into the planes one after
 * another, and where a block of rows holds taps of one channel a column apart (C/g not a multiple of 6) their
 * order at a tile's edge depends on the tile's width; the weight gradient's dot products are split over the
 * lanes. Those two round their sums each target its own way. */

#include "backends/cpu/conv2d_vec.h"

/* Result rows [q, q + rows), columns [t, t + VEC_LANES vectors); with masked, one vector of which only the
 * mask's lanes are read and written. */
VEC_INLINE void VEC(product_tile)(const rows_product *m, int64_t q, int64_t t, int rows, int vectors, bool masked,
                                  vec_mask_t mask, bool accumulate) {
  vec_t sums[PRODUCT_ROWS][VEC_CONV_SMALL_VECTORS];
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++)
      sums[r][v] = vec_zero();
  const float *weights = packed_weight(m, q, 0), *source_base = m->source + t;
  const int64_t *source_offsets = m->source_offsets, reductions = m->reductions;
  for (int64_t k = 0; k < reductions; k++, weights += PRODUCT_ROWS) {
    const float *source = source_base + source_offsets[k];
    vec_t x[VEC_CONV_SMALL_VECTORS];
    for (int v = 0; v < vectors; v++)
      x[v] = masked ? vec_maskload(source, mask) : vec_load(source + VEC_LANES * v);
    for (int r = 0; r < rows; r++) {
      const vec_t weight = vec_set1(weights[r]);
      for (int v = 0; v < vectors; v++)
        sums[r][v] = vec_fmadd(weight, x[v], sums[r][v]);
    }
  }
  float *target = m->target + t;
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < vectors; v++) {
      float *out = target + m->target_offsets[q + r] + VEC_LANES * v;
      vec_t value = sums[r][v];
      if (accumulate) value = vec_add(value, masked ? vec_maskload(out, mask) : vec_load(out));
      if (masked)
        vec_maskstore(out, mask, value);
      else
        vec_store(out, value);
    }
}

/* One block of rows over all columns: whole tiles, then single vectors, then the last few under a mask. */
VEC_INLINE void VEC(product_rows)(const rows_product *m, int64_t q, int rows, bool accumulate) {
  const int64_t L = m->columns, tile = VEC_LANES * VEC_CONV_SMALL_VECTORS;
  const vec_mask_t all = vec_first_mask(VEC_LANES);
  int64_t t = 0;
  for (; t + tile <= L; t += tile)
    VEC(product_tile)(m, q, t, rows, VEC_CONV_SMALL_VECTORS, false, all, accumulate);
  for (; t + VEC_LANES <= L; t += VEC_LANES)
    VEC(product_tile)(m, q, t, rows, 1, false, all, accumulate);
  if (t < L) VEC(product_tile)(m, q, t, rows, 1, true, vec_first_mask(L - t), accumulate);
}

/* All rows, the tile's row count a constant in each call. */
VEC_INLINE void VEC(product)(const rows_product *m, bool accumulate) {
  int64_t q = 0;
  for (; q + PRODUCT_ROWS <= m->rows; q += PRODUCT_ROWS)
    VEC(product_rows)(m, q, PRODUCT_ROWS, accumulate);
  switch (m->rows - q) {
  case 5: VEC(product_rows)(m, q, 5, accumulate); break;
  case 4: VEC(product_rows)(m, q, 4, accumulate); break;
  case 3: VEC(product_rows)(m, q, 3, accumulate); break;
  case 2: VEC(product_rows)(m, q, 2, accumulate); break;
  case 1: VEC(product_rows)(m, q, 1, accumulate); break;
  default: break;
  }
}

VEC_TARGET static void VEC(product_set)(const rows_product *m) { VEC(product)(m, false); }
VEC_TARGET static void VEC(product_add)(const rows_product *m) { VEC(product)(m, true); }

/* dw rows [o, o + outputs), columns [k, k + inputs) += the dot products of dy's rows with the input rows: up to
 * VEC_CONV_SMALL_OUTPUTS output channels by GRADIENT_INPUTS input rows (a 5-wide kernel's row of taps) of vector
 * accumulators over the columns. */
VEC_INLINE void VEC(gradient_tile)(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                   int64_t samples, const float *padded, float *dw, int64_t o, int64_t k,
                                   int outputs, int inputs) {
  const int64_t L = p->sample_columns, K = p->column_rows, planes = p->group_in * p->padded_plane;
  vec_t sums[VEC_CONV_SMALL_OUTPUTS][GRADIENT_INPUTS];
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      sums[r][q] = vec_zero();
  /* Whole vectors of columns, then the last few under a mask (masked-off lanes load as zero). */
  const vec_mask_t tail = vec_first_mask(L % VEC_LANES);
  for (int64_t s = 0; s < samples; s++) {
    const float *d_sample = dy + s * L, *x_sample = padded + s * planes;
    for (int64_t t = 0; t < L; t += VEC_LANES) {
      const bool last = t + VEC_LANES > L;
      vec_t d[VEC_CONV_SMALL_OUTPUTS];
      for (int r = 0; r < outputs; r++) {
        const float *row = d_sample + (o + r) * ld + t;
        d[r] = last ? vec_maskload(row, tail) : vec_load(row);
      }
      for (int q = 0; q < inputs; q++) {
        const float *source = x_sample + offsets[k + q] + t;
        const vec_t x = last ? vec_maskload(source, tail) : vec_load(source);
        for (int r = 0; r < outputs; r++)
          sums[r][q] = vec_fmadd(d[r], x, sums[r][q]);
      }
    }
  }
  for (int r = 0; r < outputs; r++)
    for (int q = 0; q < inputs; q++)
      dw[(o + r) * K + k + q] += vec_sum_lanes(sums[r][q]);
}

VEC_INLINE void VEC(gradient_rows)(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                   int64_t samples, const float *padded, float *dw, int64_t o, int outputs) {
  int64_t k = 0;
  for (; k + GRADIENT_INPUTS <= p->column_rows; k += GRADIENT_INPUTS)
    VEC(gradient_tile)(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, GRADIENT_INPUTS);
  switch (p->column_rows - k) {
  case 4: VEC(gradient_tile)(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 4); break;
  case 3: VEC(gradient_tile)(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 3); break;
  case 2: VEC(gradient_tile)(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 2); break;
  case 1: VEC(gradient_tile)(p, offsets, dy, ld, samples, padded, dw, o, k, outputs, 1); break;
  default: break;
  }
}

VEC_TARGET static void VEC(weight_gradient)(const conv_plan *p, const int64_t *offsets, const float *dy, int64_t ld,
                                            int64_t samples, const float *padded, float *dw) {
  int64_t o = 0;
  for (; o + VEC_CONV_SMALL_OUTPUTS <= p->group_out; o += VEC_CONV_SMALL_OUTPUTS)
    VEC(gradient_rows)(p, offsets, dy, ld, samples, padded, dw, o, VEC_CONV_SMALL_OUTPUTS);
  /* The last few channels, their count a constant in each call (at most VEC_CONV_SMALL_OUTPUTS - 1). */
  switch (p->group_out - o) {
  case 3:
    if (VEC_CONV_SMALL_OUTPUTS > 3) VEC(gradient_rows)(p, offsets, dy, ld, samples, padded, dw, o, 3);
    break;
  case 2:
    if (VEC_CONV_SMALL_OUTPUTS > 2) VEC(gradient_rows)(p, offsets, dy, ld, samples, padded, dw, o, 2);
    break;
  case 1: VEC(gradient_rows)(p, offsets, dy, ld, samples, padded, dw, o, 1); break;
  default: break;
  }
}

#include "backends/cpu/conv2d_vec_end.h"
