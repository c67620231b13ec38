/* The direct kernels' register tiles for the forward and data-gradient passes (see conv2d_direct.c), written once
 * on conv2d_vec.h and included once per target (after CONV_VEC_AVX512 or CONV_VEC_AVX2 is defined). */

#include "backends/cpu/conv2d_vec.h"

/* out (DIRECT_BLOCK planes of OH OW) (+)= the block's outputs at positions [t0, t0 + VEC_LANES V), summed over every
 * input channel and tap; then each row's valid lanes are stored. */
VEC_INLINE void VEC(forward_tile)(const int V, const direct_geometry *g, const float *planes, int64_t in_channels,
                                  const float *packed, const float *bias, bool accumulate, int64_t t0, float *out) {
  vec_t acc[DIRECT_BLOCK][VEC_DIRECT_VECTORS];
  for (int m = 0; m < DIRECT_BLOCK; m++)
    for (int v = 0; v < V; v++)
      acc[m][v] = bias ? vec_set1(bias[m]) : vec_zero();
  const int64_t R = g->row;
  for (int64_t c = 0; c < in_channels; c++) {
    const float *source = planes + c * g->channel_floats + t0;
    const float *weights = packed + c * g->taps * DIRECT_BLOCK;
    for (int64_t tap = 0; tap < g->taps; tap++) {
      vec_t in[VEC_DIRECT_VECTORS];
      for (int v = 0; v < V; v++)
        in[v] = vec_load(source + g->offsets[tap] + VEC_LANES * v);
      for (int m = 0; m < DIRECT_BLOCK; m++) {
        const vec_t weight = vec_set1(weights[tap * DIRECT_BLOCK + m]);
        for (int v = 0; v < V; v++)
          acc[m][v] = vec_fmadd(weight, in[v], acc[m][v]);
      }
    }
  }
  const int64_t W = g->out_width, plane_floats = g->out_height * W;
  for (int v = 0; v < V; v++) {
    const int64_t t = t0 + VEC_LANES * v, end = t + VEC_LANES < g->positions ? t + VEC_LANES : g->positions;
    for (int64_t oh = t / R; oh * R < end; oh++) {
      const int64_t low = oh * R > t ? oh * R : t, high = oh * R + W < end ? oh * R + W : end;
      if (low >= high) continue;
      float *target = out + oh * W + (low - oh * R);
      for (int m = 0; m < DIRECT_BLOCK; m++)
        vec_store_lanes(target + m * plane_floats, acc[m][v], low - t, high - low, accumulate);
    }
  }
}

/* One function per tile width, so that each keeps its accumulators in registers. */
#define FORWARD_TILE_FUNCTION(V)                                                                                       \
  VEC_TARGET static void VEC(forward_tile_##V)(const direct_geometry *g, const float *planes, int64_t in_channels,     \
                                               const float *packed, const float *bias, bool accumulate, int64_t t0,    \
                                               float *out) {                                                           \
    VEC(forward_tile)(V, g, planes, in_channels, packed, bias, accumulate, t0, out);                                   \
  }
FORWARD_TILE_FUNCTION(1)
FORWARD_TILE_FUNCTION(2)
FORWARD_TILE_FUNCTION(3)
#if VEC_DIRECT_VECTORS == 6
FORWARD_TILE_FUNCTION(4)
FORWARD_TILE_FUNCTION(5)
FORWARD_TILE_FUNCTION(6)
static const forward_tile_function VEC(forward_tiles)[VEC_DIRECT_VECTORS + 1] = {NULL,
                                                                                 VEC(forward_tile_1),
                                                                                 VEC(forward_tile_2),
                                                                                 VEC(forward_tile_3),
                                                                                 VEC(forward_tile_4),
                                                                                 VEC(forward_tile_5),
                                                                                 VEC(forward_tile_6)};
#else
static const forward_tile_function VEC(forward_tiles)[VEC_DIRECT_VECTORS + 1] = {
    NULL, VEC(forward_tile_1), VEC(forward_tile_2), VEC(forward_tile_3)};
#endif
#undef FORWARD_TILE_FUNCTION

/* out (out_channels planes of one sample) (+)= the convolution of one sample's planes with packed weights
 * (out_channels / DIRECT_BLOCK blocks of (in_channels, g->taps, DIRECT_BLOCK)); parts [first_part, first_part +
 * blocks) of `parts` of next are prefetched between the blocks. */
VEC_TARGET static void VEC(convolve_sample)(const direct_geometry *g, const float *planes, int64_t in_channels,
                                            const float *packed, int64_t out_channels, const float *bias,
                                            bool accumulate, const direct_prefetch *next, int64_t first_part,
                                            int64_t parts, float *out) {
  const int64_t vectors = (g->positions + VEC_LANES - 1) / VEC_LANES, out_floats = g->out_height * g->out_width;
  for (int64_t b = 0; b < out_channels / DIRECT_BLOCK; b++) {
    bpt_cpu_direct_prefetch(next, first_part + b, parts);
    const float *block_weights = packed + b * in_channels * g->taps * DIRECT_BLOCK;
    const float *block_bias = bias ? bias + b * DIRECT_BLOCK : NULL;
    float *block_out = out + b * DIRECT_BLOCK * out_floats;
    const int64_t tiles = (vectors + VEC_DIRECT_VECTORS - 1) / VEC_DIRECT_VECTORS;
    for (int64_t tile = 0, v = 0; tile < tiles; tile++) {
      const int64_t count = direct_tile_vectors(vectors - v, tile, tiles);
      VEC(forward_tiles)
      [count](g, planes, in_channels, block_weights, block_bias, accumulate, VEC_LANES * v, block_out);
      v += count;
    }
  }
}

/* ---- Small output planes (64 pixels or fewer: 7x7 in ResNet) ----
 * Tiles of consecutive positions would spend a quarter of their lanes on the garbage column there, so these
 * planes take tiles of up to 6 output pixels by PIXEL_CHANNELS output channels instead: each input value is
 * broadcast against VEC_SMALL_VECTORS vectors of weights (AVX-512: 64 channels, 24 accumulators, 4 loads and 6
 * broadcasts per 24 FMAs; AVX2: 16 channels, 12 accumulators). Tiles are written pixel-major into a buffer,
 * which is copied into the sample's channel planes at the end. */
#define PIXEL_TILE 6
#define PIXEL_CHANNELS (VEC_SMALL_VECTORS * VEC_LANES)

static bool VEC(pixel_major)(const direct_geometry *g, int64_t out_channels) {
  return out_channels % PIXEL_CHANNELS == 0 && g->out_height * g->out_width <= 64 && g->taps == DIRECT_TAPS;
}

/* buffer (P pixels of PIXEL_CHANNELS) = the tile's outputs for the first PIXEL_CHANNELS of packed's columns. */
VEC_INLINE void VEC(pixel_tile)(const int P, const direct_geometry *g, const float *planes, int64_t in_channels,
                                const float *packed, int64_t out_channels, const int64_t *positions, float *buffer) {
  vec_t acc[PIXEL_TILE][VEC_SMALL_VECTORS];
  for (int k = 0; k < P; k++)
    for (int v = 0; v < VEC_SMALL_VECTORS; v++)
      acc[k][v] = vec_zero();
  for (int64_t c = 0; c < in_channels; c++) {
    const float *plane = planes + c * g->channel_floats;
    for (int64_t tap = 0; tap < DIRECT_TAPS; tap++) {
      const float *weights = packed + (c * DIRECT_TAPS + tap) * out_channels, *source = plane + g->offsets[tap];
      vec_t weight[VEC_SMALL_VECTORS];
      for (int v = 0; v < VEC_SMALL_VECTORS; v++)
        weight[v] = vec_load(weights + VEC_LANES * v);
      for (int k = 0; k < P; k++) {
        const vec_t value = vec_set1(source[positions[k]]);
        for (int v = 0; v < VEC_SMALL_VECTORS; v++)
          acc[k][v] = vec_fmadd(value, weight[v], acc[k][v]);
      }
    }
  }
  for (int k = 0; k < P; k++)
    for (int v = 0; v < VEC_SMALL_VECTORS; v++)
      vec_store(buffer + k * PIXEL_CHANNELS + VEC_LANES * v, acc[k][v]);
}

#define PIXEL_TILE_FUNCTION(P)                                                                                         \
  VEC_TARGET static void VEC(pixel_tile_##P)(const direct_geometry *g, const float *planes, int64_t in_channels,       \
                                             const float *packed, int64_t out_channels, const int64_t *positions,      \
                                             float *buffer) {                                                          \
    VEC(pixel_tile)(P, g, planes, in_channels, packed, out_channels, positions, buffer);                               \
  }
PIXEL_TILE_FUNCTION(1)
PIXEL_TILE_FUNCTION(2)
PIXEL_TILE_FUNCTION(3)
PIXEL_TILE_FUNCTION(4)
PIXEL_TILE_FUNCTION(5)
PIXEL_TILE_FUNCTION(6)
#undef PIXEL_TILE_FUNCTION
static const pixel_tile_function VEC(pixel_tiles)[PIXEL_TILE + 1] = {NULL,
                                                                     VEC(pixel_tile_1),
                                                                     VEC(pixel_tile_2),
                                                                     VEC(pixel_tile_3),
                                                                     VEC(pixel_tile_4),
                                                                     VEC(pixel_tile_5),
                                                                     VEC(pixel_tile_6)};

/* out (out_channels planes of one sample) (+)= the convolution of one sample's planes, pixel-major tiles. */
static void VEC(convolve_sample_by_pixel)(const direct_geometry *g, const float *planes, int64_t in_channels,
                                          const float *packed, int64_t out_channels, const float *bias, bool accumulate,
                                          float *buffer, float *out) {
  const int64_t pixels = g->out_height * g->out_width, tiles = (pixels + PIXEL_TILE - 1) / PIXEL_TILE;
  for (int64_t o0 = 0; o0 < out_channels; o0 += PIXEL_CHANNELS) {
    for (int64_t tile = 0, p = 0; tile < tiles; tile++) {
      const int64_t count = direct_tile_vectors(pixels - p, tile, tiles);
      int64_t positions[PIXEL_TILE];
      for (int64_t k = 0; k < count; k++)
        positions[k] = (p + k) / g->out_width * g->row + (p + k) % g->out_width;
      VEC(pixel_tiles)
      [count](g, planes, in_channels, packed + o0, out_channels, positions, buffer + p * PIXEL_CHANNELS);
      p += count;
    }
    for (int64_t o = 0; o < PIXEL_CHANNELS; o++) {
      float *plane = out + (o0 + o) * pixels;
      const float shift = bias ? bias[o0 + o] : 0.0f;
      for (int64_t p = 0; p < pixels; p++)
        plane[p] = (accumulate ? plane[p] : shift) + buffer[p * PIXEL_CHANNELS + o];
    }
  }
}

/* convolve (conv2d_direct.c) on this target, for the convolutions Winograd does not take. */
static bpt_status VEC(convolve_direct)(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                       const float *bias, bool accumulate, float *out) {
  const direct_geometry g = bpt_cpu_direct_geometry(a);
  const bool by_pixel = VEC(pixel_major)(&g, out_channels);
  const int64_t in_floats = g.in_height * g.in_width, out_floats = g.out_height * g.out_width;
  const size_t packed_floats = (size_t)(in_channels * out_channels * DIRECT_TAPS);
  const size_t planes_floats = (size_t)(in_channels * g.channel_floats) + DIRECT_SLACK;
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  bpt_status status = bpt_cpu_scratch_reserve(
      backend, threads, packed_floats + planes_floats + (by_pixel ? (size_t)(out_floats * PIXEL_CHANNELS) : 0));
  if (status != BPT_OK) return status;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    float *buffer = planes + planes_floats;
    const int64_t outputs = transposed ? in_channels : out_channels, inputs = transposed ? out_channels : in_channels;
    if (by_pixel)
      pack_pixel_weights(w, outputs, inputs, transposed, packed);
    else
      pack_weights(w, outputs, inputs, transposed, packed);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_planes(VEC_LOOPS, &g, in_channels, x + n * in_channels * in_floats, planes);
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * in_channels * in_floats,
                                    last || !accumulate ? NULL : out + (n + 1) * out_channels * out_floats,
                                    in_channels * in_floats, out_channels * out_floats};
      float *sample = out + n * out_channels * out_floats;
      const int64_t parts = out_channels / DIRECT_BLOCK;
      if (by_pixel) {
        bpt_cpu_direct_prefetch(&next, 0, 1);
        VEC(convolve_sample_by_pixel)(&g, planes, in_channels, packed, out_channels, bias, accumulate, buffer, sample);
      } else
        VEC(convolve_sample)(&g, planes, in_channels, packed, out_channels, bias, accumulate, &next, 0, parts, sample);
    }
  }
  return BPT_OK;
}

/* dx (C, H, W) (+)= the phase planes interleaved: dx (c, 2 a + ph, 2 b + pw) from phase ph * 2 + pw,
 * (C, Ha, Wa) with Ha = ceil((H - ph) / 2), Wa = ceil((W - pw) / 2); 2 VEC_LANES pixels of a row at a time. */
VEC_TARGET static void VEC(interleave_phases)(int64_t C, int64_t H, int64_t W, const float *phases,
                                              int64_t phase_stride, bool assign, float *dx) {
  const int64_t even_width = (W + 1) / 2, odd_width = W / 2;
  for (int64_t c = 0; c < C; c++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t ph = h % 2, rows = (H - ph + 1) / 2;
      const float *even = phases + 2 * ph * phase_stride + (c * rows + h / 2) * even_width;
      const float *odd = phases + (2 * ph + 1) * phase_stride + (c * rows + h / 2) * odd_width;
      float *target = dx + (c * H + h) * W;
      for (int64_t w = 0; w < W; w += 2 * VEC_LANES) {
        const int64_t pixels = W - w < 2 * VEC_LANES ? W - w : 2 * VEC_LANES;
        const vec_t evens = vec_load_first(even + w / 2, (pixels + 1) / 2);
        const vec_t odds = vec_load_first(odd + w / 2, pixels / 2);
        vec_store_interleaved(target + w, evens, odds, 0, VEC_LANES, pixels, !assign);
      }
    }
}

#undef PIXEL_TILE
#undef PIXEL_CHANNELS

#include "backends/cpu/conv2d_vec_end.h"
