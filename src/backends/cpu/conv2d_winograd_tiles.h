/* The kernels of conv2d_winograd.c (tiles in lanes), written once on conv2d_vec.h and included once per target after
 * CONV_VEC_AVX512 or CONV_VEC_AVX2 is defined: groups of GROUP tiles go through all three steps (input transform,
 * products, output transform), so that a group's transformed inputs and products stay in L1 between them instead of
 * travelling through L2 as whole-sample buffers. */

#include "backends/cpu/conv2d_vec.h"
#include "backends/cpu/conv2d_winograd_transform.h"

/* Tiles per group: VEC_WINOGRAD_VECTORS vectors. */
#define GROUP (VEC_WINOGRAD_VECTORS * VEC_LANES)

/* V[xi] (C, VEC_LANES) = B^T d B for the VEC_LANES tiles from tile u of every channel. */
VEC_TARGET static void VEC(winograd_input)(const direct_geometry *g, const float *planes, int64_t channels, int64_t u,
                                           float *transformed) {
  int64_t offsets[16];
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 4; j++)
      offsets[i * 4 + j] = ((i % 2) * 2 + j % 2) * g->plane + (i / 2) * g->row + j / 2;
  for (int64_t c = 0; c < channels; c++)
    for (int t = 0; t < VEC_WINOGRAD_VECTORS; t++) {
      const float *source = planes + c * g->channel_floats + u + t * VEC_LANES;
      VEC(winograd_input_transform)(source, offsets, transformed + c * GROUP + t * VEC_LANES, channels * GROUP);
    }
}

/* M[xi] (block outputs, GROUP tiles) = U[xi] block . V[xi] for all 16 xi, each reduction over the channels
 * in registers (one accumulator per output channel and vector of tiles). */
VEC_INLINE void VEC(winograd_product)(const int block, const float *weights, int64_t blocks, const float *transformed,
                                      int64_t channels, float *product) {
  for (int64_t xi = 0; xi < 16; xi++) {
    const float *block_weights = weights + xi * blocks * channels * block;
    const float *source = transformed + xi * channels * GROUP;
    vec_t acc[VEC_WINOGRAD_BLOCK][VEC_WINOGRAD_VECTORS];
    for (int m = 0; m < block; m++)
      for (int t = 0; t < VEC_WINOGRAD_VECTORS; t++)
        acc[m][t] = vec_zero();
    for (int64_t c = 0; c < channels; c++) {
      vec_t in[VEC_WINOGRAD_VECTORS];
      for (int t = 0; t < VEC_WINOGRAD_VECTORS; t++)
        in[t] = vec_load(source + c * GROUP + t * VEC_LANES);
      for (int m = 0; m < block; m++) {
        const vec_t weight = vec_set1(block_weights[c * block + m]);
        for (int t = 0; t < VEC_WINOGRAD_VECTORS; t++)
          acc[m][t] = vec_fmadd(weight, in[t], acc[m][t]);
      }
    }
    for (int m = 0; m < block; m++)
      for (int t = 0; t < VEC_WINOGRAD_VECTORS; t++)
        vec_store(product + (xi * block + m) * GROUP + t * VEC_LANES, acc[m][t]);
  }
}

VEC_TARGET static void VEC(winograd_product_full)(const float *weights, int64_t blocks, const float *transformed,
                                                  int64_t channels, float *product) {
  VEC(winograd_product)(VEC_WINOGRAD_BLOCK, weights, blocks, transformed, channels, product);
}

VEC_TARGET static void VEC(winograd_product_half)(const float *weights, int64_t blocks, const float *transformed,
                                                  int64_t channels, float *product) {
  VEC(winograd_product)(VEC_WINOGRAD_BLOCK / 2, weights, blocks, transformed, channels, product);
}

/* out (block planes of H W) (+)= A^T M A (+ bias) for the GROUP tiles from tile u, a vector at a time: tile
 * (ty, tx) gives pixels (2 ty + a, 2 tx + b). */
VEC_TARGET static void VEC(winograd_output)(const direct_geometry *g, const float *product, int64_t block, int64_t u,
                                            const float *bias, bool accumulate, float *out) {
  const int64_t H = g->in_height, W = g->in_width;
  for (int t = 0; t < VEC_WINOGRAD_VECTORS && u + t * VEC_LANES < g->positions; t++) {
    winograd_segment segments[WINOGRAD_SEGMENTS];
    const int count = winograd_segments(g, u + t * VEC_LANES, VEC_LANES, segments);
    for (int64_t o = 0; o < block; o++) {
      float *plane = out + o * H * W;
      vec_t y[2][2];
      const float *tile_product = product + o * GROUP + t * VEC_LANES;
      VEC(winograd_output_transform)(tile_product, block * GROUP, vec_set1(bias ? bias[o] : 0.0f), y);
      for (int k = 0; k < count; k++)
        for (int a = 0; a < segments[k].rows; a++)
          vec_store_interleaved(plane + segments[k].offset + a * W, y[a][0], y[a][1], segments[k].first,
                                segments[k].count, segments[k].pixels, accumulate);
    }
  }
}

/* bpt_cpu_winograd_convolve on this target: each thread packs the weights, then per sample pads its planes and
 * runs the groups of tiles. */
static bpt_status VEC(winograd_convolve)(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                         int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                         const float *bias, bool accumulate, float *out) {
  const direct_geometry g = winograd_geometry(a);
  const int64_t plane_floats = a->in_height * a->in_width;
  const int64_t block = out_channels % VEC_WINOGRAD_BLOCK == 0 ? VEC_WINOGRAD_BLOCK : VEC_WINOGRAD_BLOCK / 2,
                blocks = out_channels / block;
  const size_t packed_floats = (size_t)(16 * in_channels * out_channels);
  /* The last group reads up to GROUP - 1 tiles past the last phase plane: zeros after the slack. */
  const size_t planes_floats = (size_t)(in_channels * g.channel_floats + DIRECT_SLACK + GROUP);
  const size_t transformed_floats = (size_t)(16 * in_channels * GROUP);
  const size_t product_floats = (size_t)(16 * block * GROUP);
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  bpt_status status =
      bpt_cpu_scratch_reserve(backend, threads, packed_floats + planes_floats + transformed_floats + product_floats);
  if (status != BPT_OK) return status;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    float *transformed = planes + planes_floats, *product = transformed + transformed_floats;
    bpt_cpu_winograd_weights(w, transposed ? in_channels : out_channels, transposed ? out_channels : in_channels,
                             transposed, block, packed);
    memset(planes + in_channels * g.channel_floats, 0, (DIRECT_SLACK + GROUP) * sizeof *planes);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_planes(VEC_LOOPS, &g, in_channels, x + n * in_channels * plane_floats, planes);
      const int64_t groups = (g.positions + GROUP - 1) / GROUP, x_floats = in_channels * plane_floats,
                    out_floats = out_channels * plane_floats;
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * x_floats,
                                    last || !accumulate ? NULL : out + (n + 1) * out_floats, x_floats, out_floats};
      for (int64_t u = 0; u < g.positions; u += GROUP) {
        bpt_cpu_direct_prefetch(&next, u / GROUP, groups);
        VEC(winograd_input)(&g, planes, in_channels, u, transformed);
        for (int64_t b = 0; b < blocks; b++) {
          const float *weights = packed + b * in_channels * block;
          if (block == VEC_WINOGRAD_BLOCK)
            VEC(winograd_product_full)(weights, blocks, transformed, in_channels, product);
          else
            VEC(winograd_product_half)(weights, blocks, transformed, in_channels, product);
          const float *block_bias = bias ? bias + b * block : NULL;
          float *block_out = out + (n * out_channels + b * block) * plane_floats;
          VEC(winograd_output)(&g, product, block, u, block_bias, accumulate, block_out);
        }
      }
    }
  }
  return BPT_OK;
}

#undef GROUP

#include "backends/cpu/conv2d_vec_end.h"
