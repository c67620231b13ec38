/* The kernels of conv2d_winograd_channels.c (channels in lanes: the weight gradient, and forward and data
 * gradient on small planes), written once on conv2d_vec.h and
 * included once per target after CONV_VEC_AVX512 or CONV_VEC_AVX2 is defined, after the target's split_dy. */

#include "backends/cpu/conv2d_vec.h"
#include "backends/cpu/conv2d_winograd_transform.h"

/* D[xi] (O, GROUP_TILES) = A dY A^T for `count` tiles from tile t0 (the rest zero). */
VEC_TARGET static void VEC(transform_dy)(const float *phases, int64_t out_channels, int64_t tiles, int64_t t0,
                                         int64_t count, float *transformed) {
  for (int64_t o = 0; o < out_channels; o++)
    for (int64_t k0 = 0; k0 < GROUP_TILES; k0 += VEC_LANES) {
      const int64_t lanes = count - k0 < 0 ? 0 : count - k0 < VEC_LANES ? count - k0 : VEC_LANES;
      const float *source = phases + o * 4 * tiles + t0 + k0;
      vec_t y[2][2], t[4][2];
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
          y[a][b] = vec_load_first(source + (a * 2 + b) * tiles, lanes);
      /* A = [[1, 0], [1, 1], [1, -1], [0, -1]]: rows, then columns. */
      for (int b = 0; b < 2; b++) {
        t[0][b] = y[0][b];
        t[1][b] = vec_add(y[0][b], y[1][b]);
        t[2][b] = vec_sub(y[0][b], y[1][b]);
        t[3][b] = y[1][b];
      }
      for (int i = 0; i < 4; i++) {
        float *out = transformed + (i * 4 * out_channels + o) * GROUP_TILES + k0;
        const int64_t next = out_channels * GROUP_TILES;
        /* Row 3 of A is (0, -1): negate column 3 and row 3 (twice for xi = 15). */
        const vec_t first = i == 3 ? vec_sub(vec_zero(), t[i][0]) : t[i][0];
        const vec_t second = i == 3 ? vec_sub(vec_zero(), t[i][1]) : t[i][1];
        vec_store(out, first);
        vec_store(out + next, vec_add(first, second));
        vec_store(out + 2 * next, vec_sub(first, second));
        vec_store(out + 3 * next, vec_sub(vec_zero(), second));
      }
    }
}

/* V[xi] (GROUP_TILES, C) = B^T d B for `count` tiles from tile t0, d read from the pixel-major padded input
 * (positions of C channels, rows of R). */
VEC_TARGET static void VEC(transform_input)(const float *transposed_x, int64_t channels, int64_t R, int64_t TW,
                                            int64_t t0, int64_t count, float *transformed) {
  int64_t offsets[16];
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 4; j++)
      offsets[i * 4 + j] = (i * R + j) * channels;
  for (int64_t k = 0; k < count; k++) {
    const int64_t ty = (t0 + k) / TW, tx = (t0 + k) % TW;
    const float *corner = transposed_x + (2 * ty * R + 2 * tx) * channels;
    for (int64_t c0 = 0; c0 < channels; c0 += VEC_LANES)
      VEC(winograd_input_transform)(corner + c0, offsets, transformed + k * channels + c0, GROUP_TILES * channels);
  }
}

/* acc[m][v] += the sum over steps k of rows[k row_step + m row_stride] times vector v at vectors + k
 * vector_step: the register tiles of both channels-in-lanes products (one broadcast per row, one load per
 * vector). */
#define OUTER_ROWS 16
#define OUTER_VECTORS 4
VEC_INLINE void VEC(outer_products)(const int M, const int V, int64_t steps, const float *rows, int64_t row_step,
                                    int64_t row_stride, const float *vectors, int64_t vector_step,
                                    vec_t acc[OUTER_ROWS][OUTER_VECTORS]) {
  for (int64_t k = 0; k < steps; k++) {
    vec_t in[OUTER_VECTORS];
    for (int v = 0; v < V; v++)
      in[v] = vec_load(vectors + k * vector_step + v * VEC_LANES);
    for (int m = 0; m < M; m++) {
      const vec_t row = vec_set1(rows[k * row_step + m * row_stride]);
      for (int v = 0; v < V; v++)
        acc[m][v] = vec_fmadd(row, in[v], acc[m][v]);
    }
  }
}

/* sums (16 xi of (O, C)) += D[xi] V[xi] over the group's `count` tiles: for each xi, block of VEC_FILTER_OUTPUTS
 * output channels and VEC_FILTER_VECTORS vectors of input channels, one accumulator each. */
VEC_TARGET static void VEC(group_product)(const float *dy_transformed, const float *x_transformed, int64_t out_channels,
                                          int64_t channels, int64_t count, float *sums) {
  enum { OUTPUTS = VEC_FILTER_OUTPUTS, VECTORS = VEC_FILTER_VECTORS };
  for (int64_t xi = 0; xi < 16; xi++)
    for (int64_t o0 = 0; o0 < out_channels; o0 += OUTPUTS)
      for (int64_t c0 = 0; c0 < channels; c0 += VECTORS * VEC_LANES) {
        float *target = sums + (xi * out_channels + o0) * channels + c0;
        const float *dys = dy_transformed + (xi * out_channels + o0) * GROUP_TILES;
        const float *xs = x_transformed + xi * GROUP_TILES * channels + c0;
        vec_t acc[OUTER_ROWS][OUTER_VECTORS];
        for (int m = 0; m < OUTPUTS; m++)
          for (int v = 0; v < VECTORS; v++)
            acc[m][v] = vec_load(target + m * channels + v * VEC_LANES);
        VEC(outer_products)(OUTPUTS, VECTORS, count, dys, 1, GROUP_TILES, xs, channels, acc);
        for (int m = 0; m < OUTPUTS; m++)
          for (int v = 0; v < VECTORS; v++)
            vec_store(target + m * channels + v * VEC_LANES, acc[m][v]);
      }
}

/* bpt_cpu_winograd_backward_filter on this target. */
static bpt_status VEC(winograd_backward_filter)(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                                const float *dy, float *dweight) {
  const direct_geometry g = bpt_cpu_direct_geometry(a);
  const int64_t C = a->in_channels, O = a->out_channels, H = a->in_height, W = a->in_width;
  const int64_t TW = (W + 1) / 2, tiles = (H + 1) / 2 * TW, pixels = H * W, sums_floats = 16 * O * C;
  /* An odd plane's last tiles read up to row H + 2 and column 1 of the row after: positions past the padded
   * plane, zero like its border. */
  const int64_t positions = g.channel_floats + 2 * g.row;
  const size_t transposed_floats = (size_t)(C * positions), phases_floats = (size_t)(O * 4 * tiles);
  const size_t dy_group_floats = (size_t)(16 * O * GROUP_TILES), x_group_floats = (size_t)(16 * GROUP_TILES * C);
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  bpt_status status = bpt_cpu_scratch_reserve(
      backend, threads, (size_t)sums_floats + transposed_floats + phases_floats + dy_group_floats + x_group_floats);
  if (status != BPT_OK) return status;
  for (int t = 0; t < threads; t++)
    memset(bpt_cpu_scratch(backend, t), 0, (size_t)sums_floats * sizeof(float));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *sums = bpt_cpu_scratch(backend, omp_get_thread_num()), *transposed_x = sums + sums_floats;
    float *phases = transposed_x + transposed_floats;
    float *dy_group = phases + phases_floats, *x_group = dy_group + dy_group_floats;
    memset(transposed_x, 0, transposed_floats * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_transposed(VEC_LOOPS, &g, C, x + n * C * pixels, transposed_x);
      VEC(split_dy)(dy + n * O * pixels, O, H, W, phases);
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * C * pixels, last ? NULL : dy + (n + 1) * O * pixels,
                                    C * pixels, O * pixels};
      const int64_t groups = (tiles + GROUP_TILES - 1) / GROUP_TILES;
      for (int64_t group = 0; group < groups; group++) {
        const int64_t t0 = group * GROUP_TILES, count = tiles - t0 < GROUP_TILES ? tiles - t0 : GROUP_TILES;
        bpt_cpu_direct_prefetch(&next, group, groups);
        VEC(transform_dy)(phases, O, tiles, t0, count, dy_group);
        VEC(transform_input)(transposed_x, C, g.row, TW, t0, count, x_group);
        VEC(group_product)(dy_group, x_group, O, C, count, sums);
      }
    }
  }
  /* The threads' sums, added in a fixed order into the first, then transformed once. */
  float *total = bpt_cpu_scratch(backend, 0);
  for (int t = 1; t < threads; t++) {
    const float *partial = bpt_cpu_scratch(backend, t);
    for (int64_t k = 0; k < sums_floats; k++)
      total[k] += partial[k];
  }
  add_weight_gradient(total, O, C, dweight);
  return BPT_OK;
}

/* ---- Forward and data gradient on small planes ----
 * Under 14x14 the tiles-in-lanes layout of conv2d_winograd.c spends too many lanes on garbage tiles, so here
 * (like the direct kernels' pixel-major tiles) each tile's V[xi] is a vector of 16 input channels again, and
 * M[xi] (tiles, O) = V[xi] (tiles, C) U[xi] (C, O) broadcasts V's entries against VEC_SMALL_VECTORS vectors of
 * output channels (SMALL_CHANNELS): up to 6 tiles by 4 vectors with AVX-512 (24 accumulators, 4 loads and 6
 * broadcasts per 24 FMAs), by 2 with AVX2 (12 accumulators of 16 ymm registers). */
#define SMALL_TILES 6
#define SMALL_CHANNELS (VEC_SMALL_VECTORS * VEC_LANES)

/* product (16 xi of (P tiles, SMALL_CHANNELS)) = V[xi] (P, C) U[xi] (C, o0 .. o0 + SMALL_CHANNELS). */
VEC_INLINE void VEC(small_product)(const int P, const float *x_transformed, int64_t channels, const float *packed,
                                   int64_t out_channels, int64_t o0, float *product) {
  for (int64_t xi = 0; xi < 16; xi++) {
    const float *weights = packed + xi * channels * out_channels + o0;
    const float *values = x_transformed + xi * GROUP_TILES * channels;
    vec_t acc[OUTER_ROWS][OUTER_VECTORS];
    for (int k = 0; k < P; k++)
      for (int v = 0; v < VEC_SMALL_VECTORS; v++)
        acc[k][v] = vec_zero();
    VEC(outer_products)(P, VEC_SMALL_VECTORS, channels, values, 1, channels, weights, out_channels, acc);
    for (int k = 0; k < P; k++)
      for (int v = 0; v < VEC_SMALL_VECTORS; v++)
        vec_store(product + (xi * SMALL_TILES + k) * SMALL_CHANNELS + VEC_LANES * v, acc[k][v]);
  }
}

/* One function per tile size, so that each keeps its accumulators in registers. */
#define SMALL_PRODUCT(P)                                                                                               \
  VEC_TARGET static void VEC(small_product_##P)(const float *x_transformed, int64_t channels, const float *packed,     \
                                                int64_t out_channels, int64_t o0, float *product) {                    \
    VEC(small_product)(P, x_transformed, channels, packed, out_channels, o0, product);                                 \
  }
SMALL_PRODUCT(1)
SMALL_PRODUCT(2)
SMALL_PRODUCT(3)
SMALL_PRODUCT(4)
SMALL_PRODUCT(5)
SMALL_PRODUCT(6)
#undef SMALL_PRODUCT
static const small_product_function VEC(small_products)[SMALL_TILES + 1] = {NULL,
                                                                            VEC(small_product_1),
                                                                            VEC(small_product_2),
                                                                            VEC(small_product_3),
                                                                            VEC(small_product_4),
                                                                            VEC(small_product_5),
                                                                            VEC(small_product_6)};

/* pixels (H W pixels of O, from o0) = A^T M A for `count` tiles from tile t0, the pixels inside the plane. */
VEC_TARGET static void VEC(small_output)(const float *product, int64_t count, int64_t t0, int64_t TW, int64_t H,
                                         int64_t W, int64_t out_channels, int64_t o0, float *pixels) {
  for (int64_t k = 0; k < count; k++) {
    const int64_t ty = (t0 + k) / TW, tx = (t0 + k) % TW;
    for (int v = 0; v < VEC_SMALL_VECTORS; v++) {
      vec_t y[2][2];
      const float *tile = product + k * SMALL_CHANNELS + VEC_LANES * v;
      VEC(winograd_output_transform)(tile, SMALL_TILES * SMALL_CHANNELS, vec_zero(), y);
      for (int a = 0; a < 2 && 2 * ty + a < H; a++) {
        float *row = pixels + ((2 * ty + a) * W + 2 * tx) * out_channels + o0 + VEC_LANES * v;
        vec_store(row, y[a][0]);
        if (2 * tx + 1 < W) vec_store(row + out_channels, y[a][1]);
      }
    }
  }
}

/* out (O planes of H W) (+)= pixels (H W pixels of O) transposed (+ bias). */
VEC_TARGET static void VEC(small_store)(const float *pixels, int64_t count, int64_t out_channels, const float *bias,
                                        bool accumulate, float *transposed, float *out) {
  bpt_cpu_direct_transpose_planes(VEC_LOOPS, count, out_channels, pixels, transposed);
  for (int64_t o = 0; o < out_channels; o++) {
    const vec_t shift = vec_set1(bias ? bias[o] : 0.0f);
    for (int64_t p = 0; p < count; p += VEC_LANES) {
      const int64_t lanes = count - p < VEC_LANES ? count - p : VEC_LANES;
      float *target = out + o * count + p;
      vec_t values = vec_add(vec_load_first(transposed + o * count + p, lanes), shift);
      if (accumulate) values = vec_add(values, vec_load_first(target, lanes));
      vec_store_first(target, values, lanes);
    }
  }
}

/* bpt_cpu_winograd_small_convolve on this target. */
static bpt_status VEC(winograd_small_convolve)(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               int64_t in_channels, const float *w, int64_t out_channels,
                                               bool transposed, const float *bias, bool accumulate, float *out) {
  const direct_geometry g = bpt_cpu_direct_geometry(a);
  const int64_t C = in_channels, O = out_channels, H = a->in_height, W = a->in_width, pixels = H * W;
  const int64_t TW = (W + 1) / 2, tiles = (H + 1) / 2 * TW, positions = g.channel_floats + 2 * g.row;
  const size_t packed_floats = (size_t)(16 * C * O);
  const size_t transposed_floats = (size_t)(C * positions), x_group_floats = (size_t)(16 * GROUP_TILES * C);
  const size_t product_floats = (size_t)(16 * SMALL_TILES * SMALL_CHANNELS), pixel_floats = (size_t)(pixels * O);
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  bpt_status status = bpt_cpu_scratch_reserve(
      backend, threads, packed_floats + transposed_floats + x_group_floats + product_floats + 2 * pixel_floats);
  if (status != BPT_OK) return status;
  const int64_t groups = (tiles + SMALL_TILES - 1) / SMALL_TILES;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *transposed_x = packed + packed_floats;
    float *x_group = transposed_x + transposed_floats;
    float *product = x_group + x_group_floats, *pixel_out = product + product_floats;
    float *plane_out = pixel_out + pixel_floats;
    bpt_cpu_winograd_weights(w, transposed ? C : O, transposed ? O : C, transposed, O, packed);
    memset(transposed_x, 0, transposed_floats * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_transposed(VEC_LOOPS, &g, C, x + n * C * pixels, transposed_x);
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * C * pixels,
                                    last || !accumulate ? NULL : out + (n + 1) * O * pixels, C * pixels, O * pixels};
      for (int64_t group = 0, t0 = 0; group < groups; group++) {
        const int64_t count = direct_tile_vectors(tiles - t0, group, groups);
        bpt_cpu_direct_prefetch(&next, group, groups);
        VEC(transform_input)(transposed_x, C, g.row, TW, t0, count, x_group);
        for (int64_t o0 = 0; o0 < O; o0 += SMALL_CHANNELS) {
          VEC(small_products)[count](x_group, C, packed, O, o0, product);
          VEC(small_output)(product, count, t0, TW, H, W, O, o0, pixel_out);
        }
        t0 += count;
      }
      VEC(small_store)(pixel_out, pixels, O, bias, accumulate, plane_out, out + n * O * pixels);
    }
  }
  return BPT_OK;
}

#undef OUTER_ROWS
#undef OUTER_VECTORS
#undef SMALL_TILES
#undef SMALL_CHANNELS

#include "backends/cpu/conv2d_vec_end.h"
