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

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_direct_filter.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_direct_filter.h"

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  if (bpt_cpu_winograd_filter_applies(a)) return bpt_cpu_winograd_backward_filter(backend, a, x, dy, dweight);
  return (bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512
              ? direct_backward_filter_avx512
              : direct_backward_filter_avx2)(backend, a, x, dy, dweight);
}

#else

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  (void)a, (void)x, (void)dy, (void)dweight;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

#endif
