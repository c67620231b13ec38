/* The weight gradient of the direct 3x3 convolutions (conv2d_direct.h): an outer product per output pixel, dy's
 * 16 or 32 channels (transposed to pixel-major) against 24 or 12 broadcast input values from the padded
 * planes, so the accumulators are weight-gradient entries and need no horizontal sums. Each thread sums its
 * samples into its own partial gradient; the partials are added in a fixed order at the end. */
#include <string.h>

#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

#if DIRECT_KERNELS

/* Weight-gradient chunks hold at least this many pixels, so a tile's accumulators are stored rarely. */
#define DIRECT_FILTER_PIXELS 256

/* partial ((c, tap) rows of O) += the chunk's outer products for output channels [o0, o0 + 16 OV), input
 * channels [c0, c0 + 8 / OV) and kernel row i: for each pixel, dy's channels against the 3 (8 / OV) input
 * values the pixel's taps in that row read. */
DIRECT_INLINE void filter_tile(const int OV, const direct_geometry *g, const float *planes, int64_t in_channels,
                               const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                               int64_t c0, int64_t i, float *partial) {
  enum { MAX_CHANNELS = 8 };
  const int channels = MAX_CHANNELS / OV;
  __m512 acc[MAX_CHANNELS][3][2];
  for (int k = 0; k < channels; k++)
    for (int j = 0; j < 3; j++)
      for (int v = 0; v < OV; v++)
        acc[k][j][v] = _mm512_setzero_ps();
  const int64_t H = g->out_height, W = g->out_width, R = g->row;
  const int64_t *offsets = g->offsets + 3 * i;
  for (int64_t s = 0; s < samples; s++) {
    const float *dy_sample = transposed_dy + s * H * W * out_channels + o0;
    const float *x_sample = planes + (s * in_channels + c0) * g->channel_floats;
    for (int64_t oh = 0; oh < H; oh++)
      for (int64_t ow = 0; ow < W; ow++) {
        const float *d = dy_sample + (oh * W + ow) * out_channels;
        const float *x = x_sample + oh * R + ow;
        __m512 gradient[2];
        for (int v = 0; v < OV; v++)
          gradient[v] = _mm512_loadu_ps(d + 16 * v);
        for (int k = 0; k < channels; k++)
          for (int j = 0; j < 3; j++) {
            const __m512 value = _mm512_set1_ps(x[k * g->channel_floats + offsets[j]]);
            for (int v = 0; v < OV; v++)
              acc[k][j][v] = _mm512_fmadd_ps(value, gradient[v], acc[k][j][v]);
          }
      }
  }
  for (int k = 0; k < channels; k++)
    for (int j = 0; j < 3; j++)
      for (int v = 0; v < OV; v++) {
        float *target = partial + ((c0 + k) * DIRECT_TAPS + i * 3 + j) * out_channels + o0 + 16 * v;
        _mm512_storeu_ps(target, _mm512_add_ps(_mm512_loadu_ps(target), acc[k][j][v]));
      }
}

DIRECT_TARGET static void filter_tile_1(const direct_geometry *g, const float *planes, int64_t in_channels,
                                        const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                        int64_t c0, int64_t i, float *partial) {
  filter_tile(1, g, planes, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}
DIRECT_TARGET static void filter_tile_2(const direct_geometry *g, const float *planes, int64_t in_channels,
                                        const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                        int64_t c0, int64_t i, float *partial) {
  filter_tile(2, g, planes, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}

/* transposed (pixels, channels) = one sample's dy (channels, pixels), in blocks of 16 pixels so that reads
 * stay sequential and the block's writes stay in L1. */
DIRECT_TARGET static void transpose_planes(int64_t channels, int64_t pixels, const float *dy, float *transposed) {
  for (int64_t p0 = 0; p0 < pixels; p0 += 16) {
    const int64_t count = pixels - p0 < 16 ? pixels - p0 : 16;
    for (int64_t o = 0; o < channels; o++) {
      const float *in = dy + o * pixels + p0;
      float *out = transposed + p0 * channels + o;
      for (int64_t p = 0; p < count; p++)
        out[p * channels] = in[p];
    }
  }
}

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  const direct_geometry g = bpt_cpu_direct_geometry(a);
  const int64_t C = a->in_channels, O = a->out_channels, pixels = g.out_height * g.out_width;
  const int64_t in_floats = g.in_height * g.in_width;
  const int64_t weight_count = O * C * DIRECT_TAPS;
  int64_t chunk = (DIRECT_FILTER_PIXELS + pixels - 1) / pixels;
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  const int64_t per_thread = (a->batch + threads - 1) / threads;
  if (chunk > per_thread) chunk = per_thread;
  const size_t planes_floats = (size_t)(chunk * C * g.channel_floats + DIRECT_SLACK);
  bpt_status status =
      bpt_cpu_scratch_reserve(backend, threads, (size_t)weight_count + planes_floats + (size_t)(chunk * pixels * O));
  if (status != BPT_OK) return status;
  const int wide = O % 32 == 0; /* 32 output channels per tile, 4 input channels; else 16 and 8 */
  const int64_t tile_out = wide ? 32 : 16, tile_in = wide ? 4 : 8;
  const int64_t chunks = (a->batch + chunk - 1) / chunk;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *partial = bpt_cpu_scratch(backend, omp_get_thread_num());
    float *planes = partial + weight_count, *transposed_dy = planes + planes_floats;
    memset(partial, 0, (size_t)weight_count * sizeof *partial);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; k++) {
      const int64_t first = k * chunk, samples = first + chunk <= a->batch ? chunk : a->batch - first;
      for (int64_t s = 0; s < samples; s++) {
        bpt_cpu_direct_pad_planes(&g, C, x + (first + s) * C * in_floats, planes + s * C * g.channel_floats);
        transpose_planes(O, pixels, dy + (first + s) * O * pixels, transposed_dy + s * pixels * O);
      }
      memset(planes + samples * C * g.channel_floats, 0, DIRECT_SLACK * sizeof *planes);
      for (int64_t o0 = 0; o0 < O; o0 += tile_out)
        for (int64_t c0 = 0; c0 < C; c0 += tile_in)
          for (int64_t i = 0; i < 3; i++) {
            if (wide)
              filter_tile_2(&g, planes, C, transposed_dy, O, samples, o0, c0, i, partial);
            else
              filter_tile_1(&g, planes, C, transposed_dy, O, samples, o0, c0, i, partial);
          }
    }
    /* Each thread sums one slice of dweight (o, c, tap) over every thread's partial ((c, tap), o). */
#pragma omp barrier
    const int count = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t slice = (weight_count + count - 1) / count;
    const int64_t begin = thread * slice, end = begin + slice < weight_count ? begin + slice : weight_count;
    for (int64_t index = begin; index < end; index++) {
      const int64_t o = index / (C * DIRECT_TAPS), row = index % (C * DIRECT_TAPS);
      float sum = 0.0f;
      for (int t = 0; t < count; t++)
        sum += bpt_cpu_scratch(backend, t)[row * O + o];
      dweight[index] += sum;
    }
  }
  return BPT_OK;
}

#else

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  (void)a, (void)x, (void)dy, (void)dweight;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

#endif
