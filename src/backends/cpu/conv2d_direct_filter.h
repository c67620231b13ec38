/* The direct weight gradient's register tiles and its driver (see conv2d_direct_filter.c), written once on
 * conv2d_vec.h and included once per target (after CONV_VEC_AVX512 or CONV_VEC_AVX2 is defined). */

#include "backends/cpu/conv2d_vec.h"

/* partial ((c, tap) rows of O) += the chunk's outer products for output channels [o0, o0 + VEC_LANES OV), input
 * channels [c0, c0 + VEC_FILTER_CHANNELS / OV) and kernel row i: for each pixel, dy's channels against the 3 (8 / OV)
 * input values the pixel's taps in that row read. Both operands are pixel-major, so the broadcasts of a pixel sit at
 * fixed distances from three pointers. */
VEC_INLINE void VEC(filter_tile)(const int OV, const direct_geometry *g, const float *transposed_x, int64_t in_channels,
                                 const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                 int64_t c0, int64_t i, float *partial) {
  enum { MAX_CHANNELS = VEC_FILTER_CHANNELS };
  const int channels = MAX_CHANNELS / OV;
  vec_t acc[MAX_CHANNELS][3][2];
  for (int k = 0; k < channels; k++)
    for (int j = 0; j < 3; j++)
      for (int v = 0; v < OV; v++)
        acc[k][j][v] = vec_zero();
  const int64_t H = g->out_height, W = g->out_width, R = g->row;
  for (int64_t s = 0; s < samples; s++) {
    const float *dy_sample = transposed_dy + s * H * W * out_channels + o0;
    const float *x_sample = transposed_x + s * g->channel_floats * in_channels + c0;
    const float *taps[3];
    for (int j = 0; j < 3; j++)
      taps[j] = x_sample + g->offsets[3 * i + j] * in_channels;
    for (int64_t oh = 0; oh < H; oh++)
      for (int64_t ow = 0; ow < W; ow++) {
        const float *d = dy_sample + (oh * W + ow) * out_channels;
        const int64_t position = (oh * R + ow) * in_channels;
        vec_t gradient[2];
        for (int v = 0; v < OV; v++)
          gradient[v] = vec_load(d + VEC_LANES * v);
        for (int j = 0; j < 3; j++) {
          const float *x = taps[j] + position;
          for (int k = 0; k < channels; k++) {
            const vec_t value = vec_set1(x[k]);
            for (int v = 0; v < OV; v++)
              acc[k][j][v] = vec_fmadd(value, gradient[v], acc[k][j][v]);
          }
        }
      }
  }
  for (int k = 0; k < channels; k++)
    for (int j = 0; j < 3; j++)
      for (int v = 0; v < OV; v++) {
        float *target = partial + ((c0 + k) * DIRECT_TAPS + i * 3 + j) * out_channels + o0 + VEC_LANES * v;
        vec_store(target, vec_add(vec_load(target), acc[k][j][v]));
      }
}

VEC_TARGET static void VEC(filter_tile_1)(const direct_geometry *g, const float *transposed_x, int64_t in_channels,
                                          const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                          int64_t c0, int64_t i, float *partial) {
  VEC(filter_tile)(1, g, transposed_x, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}
VEC_TARGET static void VEC(filter_tile_2)(const direct_geometry *g, const float *transposed_x, int64_t in_channels,
                                          const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                          int64_t c0, int64_t i, float *partial) {
  VEC(filter_tile)(2, g, transposed_x, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}

/* bpt_cpu_conv_direct_backward_filter on this target, where Winograd does not apply. */
static bpt_status VEC(direct_backward_filter)(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                              const float *dy, float *dweight) {
  const direct_geometry g = bpt_cpu_direct_geometry(a);
  const int64_t C = a->in_channels, O = a->out_channels, pixels = g.out_height * g.out_width;
  const int64_t in_floats = g.in_height * g.in_width;
  const int64_t weight_count = O * C * DIRECT_TAPS;
  int64_t chunk = (DIRECT_FILTER_PIXELS + pixels - 1) / pixels;
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  const int64_t per_thread = (a->batch + threads - 1) / threads;
  if (chunk > per_thread) chunk = per_thread;
  const size_t planes_floats = (size_t)(C * g.channel_floats + DIRECT_SLACK);
  const size_t transposed_x_floats = (size_t)(chunk * C * g.channel_floats);
  bpt_status status = bpt_cpu_scratch_reserve(
      backend, threads, (size_t)weight_count + planes_floats + transposed_x_floats + (size_t)(chunk * pixels * O));
  if (status != BPT_OK) return status;
  /* 2 vectors of output channels per tile by VEC_FILTER_CHANNELS / 2 input channels; else 1 and all. */
  const int wide = O % (2 * VEC_LANES) == 0;
  /* filter_tile_16 (AVX-512 only), partials laid out ((o, tap), c) */
  const bool sixteen = VEC_LOOPS == BPT_CPU_LOOPS_AVX512 && C == 16;
  const int64_t tile_out = wide ? 2 * VEC_LANES : VEC_LANES,
                tile_in = wide ? VEC_FILTER_CHANNELS / 2 : VEC_FILTER_CHANNELS;
  const int64_t chunks = (a->batch + chunk - 1) / chunk;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *partial = bpt_cpu_scratch(backend, omp_get_thread_num());
    float *planes = partial + weight_count, *transposed_x = planes + planes_floats;
    float *transposed_dy = transposed_x + transposed_x_floats;
    memset(partial, 0, (size_t)weight_count * sizeof *partial);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; k++) {
      const int64_t first = k * chunk, samples = first + chunk <= a->batch ? chunk : a->batch - first;
      for (int64_t s = 0; s < samples; s++) {
        bpt_cpu_direct_pad_planes(VEC_LOOPS, &g, C, x + (first + s) * C * in_floats, planes);
        bpt_cpu_direct_transpose_planes(VEC_LOOPS, C, g.channel_floats, planes,
                                        transposed_x + s * g.channel_floats * C);
        if (!sixteen)
          bpt_cpu_direct_transpose_planes(VEC_LOOPS, O, pixels, dy + (first + s) * O * pixels,
                                          transposed_dy + s * pixels * O);
      }
      /* The next chunk's x and dy, a part before each tile. */
      const int64_t after = first + samples, next_samples = after + chunk <= a->batch ? chunk : a->batch - after;
      const direct_prefetch next = {after < a->batch ? x + after * C * in_floats : NULL,
                                    after < a->batch ? dy + after * O * pixels : NULL, next_samples * C * in_floats,
                                    next_samples * O * pixels};
      if (sixteen) {
        for (int64_t o0 = 0; o0 < O; o0 += 2) {
          bpt_cpu_direct_prefetch(&next, o0 / 2, O / 2);
          filter_tile_16(&g, transposed_x, dy + first * O * pixels, O, samples, o0, partial);
        }
        continue;
      }
      const int64_t parts = O / tile_out * (C / tile_in) * 3;
      for (int64_t o0 = 0; o0 < O; o0 += tile_out)
        for (int64_t c0 = 0; c0 < C; c0 += tile_in)
          for (int64_t i = 0; i < 3; i++) {
            bpt_cpu_direct_prefetch(&next, (o0 / tile_out * (C / tile_in) + c0 / tile_in) * 3 + i, parts);
            if (wide)
              VEC(filter_tile_2)(&g, transposed_x, C, transposed_dy, O, samples, o0, c0, i, partial);
            else
              VEC(filter_tile_1)(&g, transposed_x, C, transposed_dy, O, samples, o0, c0, i, partial);
          }
    }
    /* Each thread sums one slice of dweight (o, c, tap) over every thread's partial. */
#pragma omp barrier
    const int count = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t slice = (weight_count + count - 1) / count;
    const int64_t begin = thread * slice, end = begin + slice < weight_count ? begin + slice : weight_count;
    for (int64_t index = begin; index < end; index++) {
      const int64_t o = index / (C * DIRECT_TAPS), row = index % (C * DIRECT_TAPS);
      float sum = 0.0f;
      const int64_t c = row / DIRECT_TAPS, tap = row % DIRECT_TAPS;
      const int64_t source = sixteen ? (o * DIRECT_TAPS + tap) * C + c : row * O + o;
      for (int t = 0; t < count; t++)
        sum += bpt_cpu_scratch(backend, t)[source];
      dweight[index] += sum;
    }
  }
  return BPT_OK;
}

#include "backends/cpu/conv2d_vec_end.h"
