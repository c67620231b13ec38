/* The weight gradient of the direct 3x3 convolutions (conv2d_direct.h): an outer product per output pixel, dy's
 * 16 or 32 channels against 24 or 12 broadcast input values from the padded planes, so the accumulators are
 * weight-gradient entries and need no horizontal sums. Both dy and the padded planes are transposed to
 * pixel-major first. Each thread sums its
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
 * values the pixel's taps in that row read. Both operands are pixel-major, so the 24 broadcasts of a pixel
 * sit at fixed distances from three pointers. */
DIRECT_INLINE void filter_tile(const int OV, const direct_geometry *g, const float *transposed_x, int64_t in_channels,
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
        __m512 gradient[2];
        for (int v = 0; v < OV; v++)
          gradient[v] = _mm512_loadu_ps(d + 16 * v);
        for (int j = 0; j < 3; j++) {
          const float *x = taps[j] + position;
          for (int k = 0; k < channels; k++) {
            const __m512 value = _mm512_set1_ps(x[k]);
            for (int v = 0; v < OV; v++)
              acc[k][j][v] = _mm512_fmadd_ps(value, gradient[v], acc[k][j][v]);
          }
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

DIRECT_TARGET static void filter_tile_1(const direct_geometry *g, const float *transposed_x, int64_t in_channels,
                                        const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                        int64_t c0, int64_t i, float *partial) {
  filter_tile(1, g, transposed_x, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}
DIRECT_TARGET static void filter_tile_2(const direct_geometry *g, const float *transposed_x, int64_t in_channels,
                                        const float *transposed_dy, int64_t out_channels, int64_t samples, int64_t o0,
                                        int64_t c0, int64_t i, float *partial) {
  filter_tile(2, g, transposed_x, in_channels, transposed_dy, out_channels, samples, o0, c0, i, partial);
}

/* The same for 16 input channels (ResNet's first stage), where a vector of output channels would need 24
 * broadcasts per 24 FMAs: here 9 vectors of input channels (one per tap) meet 2 broadcast dy values, 18 FMAs
 * per pixel, and dy is read in place. partial is ((o, tap) rows of 16). Also ~4% faster than the tiles above
 * for 16 -> 32 at stride 2. */
DIRECT_TARGET static void filter_tile_16(const direct_geometry *g, const float *transposed_x, const float *dy,
                                         int64_t out_channels, int64_t samples, int64_t o0, float *partial) {
  enum { CHANNELS = 16, OUTPUTS = 2 };
  __m512 acc[OUTPUTS][DIRECT_TAPS];
  for (int m = 0; m < OUTPUTS; m++)
    for (int tap = 0; tap < DIRECT_TAPS; tap++)
      acc[m][tap] = _mm512_setzero_ps();
  const int64_t H = g->out_height, W = g->out_width, R = g->row, pixels = H * W;
  for (int64_t s = 0; s < samples; s++) {
    const float *dy_sample = dy + (s * out_channels + o0) * pixels;
    const float *x_sample = transposed_x + s * g->channel_floats * CHANNELS;
    for (int64_t oh = 0; oh < H; oh++)
      for (int64_t ow = 0; ow < W; ow++) {
        const float *x = x_sample + (oh * R + ow) * CHANNELS;
        __m512 in[DIRECT_TAPS];
        for (int tap = 0; tap < DIRECT_TAPS; tap++)
          in[tap] = _mm512_loadu_ps(x + g->offsets[tap] * CHANNELS);
        for (int m = 0; m < OUTPUTS; m++) {
          const __m512 gradient = _mm512_set1_ps(dy_sample[m * pixels + oh * W + ow]);
          for (int tap = 0; tap < DIRECT_TAPS; tap++)
            acc[m][tap] = _mm512_fmadd_ps(gradient, in[tap], acc[m][tap]);
        }
      }
  }
  for (int m = 0; m < OUTPUTS; m++)
    for (int tap = 0; tap < DIRECT_TAPS; tap++) {
      float *target = partial + ((o0 + m) * DIRECT_TAPS + tap) * CHANNELS;
      _mm512_storeu_ps(target, _mm512_add_ps(_mm512_loadu_ps(target), acc[m][tap]));
    }
}

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  if (bpt_cpu_winograd_filter_applies(a)) return bpt_cpu_winograd_backward_filter(backend, a, x, dy, dweight);
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
  const int wide = O % 32 == 0; /* 32 output channels per tile, 4 input channels; else 16 and 8 */
  const bool sixteen = C == 16; /* filter_tile_16, partials laid out ((o, tap), c) */
  const int64_t tile_out = wide ? 32 : 16, tile_in = wide ? 4 : 8;
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
        bpt_cpu_direct_pad_planes(BPT_CPU_LOOPS_AVX512, &g, C, x + (first + s) * C * in_floats, planes);
        bpt_cpu_direct_transpose_planes(BPT_CPU_LOOPS_AVX512, C, g.channel_floats, planes,
                                        transposed_x + s * g.channel_floats * C);
        if (!sixteen)
          bpt_cpu_direct_transpose_planes(BPT_CPU_LOOPS_AVX512, O, pixels, dy + (first + s) * O * pixels,
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
              filter_tile_2(&g, transposed_x, C, transposed_dy, O, samples, o0, c0, i, partial);
            else
              filter_tile_1(&g, transposed_x, C, transposed_dy, O, samples, o0, c0, i, partial);
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

#else

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  (void)a, (void)x, (void)dy, (void)dweight;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

#endif
