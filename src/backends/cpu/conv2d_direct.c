/* Direct AVX-512 kernels for ResNet's workhorse convolution: 3x3, stride 1, padding 1, no dilation, one group,
 * input channels a multiple of 8 and output channels of 16. The GEMM lowerings of conv2d.c spend about a third
 * of such a layer's time around OpenBLAS: each tap's GEMM re-reads and re-writes the whole output, and the
 * products are padded and copied out. Here a tile of outputs stays in registers for its whole reduction and
 * is written once, straight into the NCHW tensor.
 *
 * Layout: each input plane is copied into a zero-bordered plane whose rows share one border column (row width
 * R = W + 1), so output position t = oh R + ow reads tap (i, j) at t + i R + j, one contiguous run per tap
 * (as in conv2d.c's padded lowering). The last position of each row (ow = W) is garbage and never stored.
 *
 * - Forward: 8 output channels by 16-48 consecutive positions per tile, broadcasting each weight against
 *   the shifted input vectors.
 * - Data gradient: the same kernel on zero-bordered dy with the weights transposed and the taps flipped
 *   (the adjoint of a "same" 3x3 convolution is one), adding into dx.
 * - Weight gradient: an outer product per output pixel, dy's 16 or 32 channels (transposed to pixel-major)
 *   against 24 or 12 broadcast input values, so the accumulators are weight-gradient entries and need no
 *   horizontal sums.
 *
 * The library is built for baseline x86-64: the kernels carry their own target attribute and run only where
 * the CPU reports AVX-512F (valgrind, for one, does not). */
#include <stdbool.h>
#include <string.h>

#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DIRECT_KERNELS 1
#include <immintrin.h>
#else
#define DIRECT_KERNELS 0
#endif

/* Output channels per forward tile, and input channel multiple the data gradient needs for its tiles. */
#define DIRECT_BLOCK 8
/* Zeros after the last padded plane: the last tile of positions reads up to 15 floats past it. */
#define DIRECT_SLACK 16
/* Weight-gradient chunks hold at least this many pixels, so a tile's accumulators are stored rarely. */
#define DIRECT_FILTER_PIXELS 256
#define DIRECT_TAPS 9

bool bpt_cpu_conv_direct_applies(const bpt_conv2d_args *a) {
#if DIRECT_KERNELS
  static int has_avx512 = -1;
  if (has_avx512 < 0) {
    __builtin_cpu_init();
    has_avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return has_avx512 && a->kernel_height == 3 && a->kernel_width == 3 && a->stride_height == 1 &&
         a->stride_width == 1 && a->padding_height == 1 && a->padding_width == 1 && a->dilation_height == 1 &&
         a->dilation_width == 1 && a->groups == 1 && a->in_channels % DIRECT_BLOCK == 0 &&
         a->out_channels % 16 == 0 && a->out_height == a->in_height && a->out_width == a->in_width;
#else
  (void)a;
  return false;
#endif
}

#if DIRECT_KERNELS

typedef struct direct_geometry {
  int64_t height, width; /* of input and output alike */
  int64_t row;           /* R = W + 1: a row and the border column it shares with the next */
  int64_t plane;         /* floats per padded plane: (H + 2) R + 2, rounded up to 16 */
  int64_t positions;     /* H R output positions, the last of each row garbage */
} direct_geometry;

static direct_geometry geometry(const bpt_conv2d_args *a) {
  direct_geometry g = {.height = a->in_height, .width = a->in_width, .row = a->in_width + 1};
  g.plane = ((a->in_height + 2) * g.row + 2 + 15) / 16 * 16;
  g.positions = g.height * g.row;
  return g;
}

static int direct_threads(bpt_backend *backend, int64_t units) {
  int threads = backend->num_threads > 0 ? backend->num_threads : 1;
  return units < threads ? (int)units : threads;
}

/* planes (channels padded planes, then DIRECT_SLACK zeros) = x's channel planes inside a zero border. */
static void pad_planes(const direct_geometry *g, int64_t channels, const float *x, float *planes) {
  const int64_t H = g->height, W = g->width, R = g->row;
  for (int64_t c = 0; c < channels; c++) {
    float *plane = planes + c * g->plane;
    const float *source = x + c * H * W;
    memset(plane, 0, (size_t)(R + 1) * sizeof *plane);
    for (int64_t h = 0; h < H; h++) {
      memcpy(plane + (h + 1) * R + 1, source + h * W, (size_t)W * sizeof *plane);
      plane[(h + 2) * R] = 0.0f;
    }
    memset(plane + (H + 1) * R + 1, 0, (size_t)(g->plane - (H + 1) * R - 1) * sizeof *plane);
  }
  memset(planes + channels * g->plane, 0, DIRECT_SLACK * sizeof *planes);
}

/* packed (out / 8 blocks of (in, tap, 8)) from w (out, in, 3, 3); transposed: the data gradient's weights,
 * w'(c, o, tap) = w(o, c, 8 - tap), with c as the output channel. */
static void pack_weights(const float *w, int64_t out, int64_t in, bool transposed, float *packed) {
  const int64_t blocks = (transposed ? in : out) / DIRECT_BLOCK, inner = transposed ? out : in;
  for (int64_t b = 0; b < blocks; b++)
    for (int64_t k = 0; k < inner; k++)
      for (int64_t tap = 0; tap < DIRECT_TAPS; tap++)
        for (int64_t m = 0; m < DIRECT_BLOCK; m++) {
          const int64_t channel = b * DIRECT_BLOCK + m;
          const float value = transposed ? w[(k * in + channel) * DIRECT_TAPS + DIRECT_TAPS - 1 - tap]
                                         : w[(channel * in + k) * DIRECT_TAPS + tap];
          packed[((b * inner + k) * DIRECT_TAPS + tap) * DIRECT_BLOCK + m] = value;
        }
}

#define DIRECT_TARGET __attribute__((target("avx512f")))
#define DIRECT_INLINE static inline __attribute__((always_inline)) DIRECT_TARGET

/* out (8 planes of H W, plane_floats apart) (+)= the block's outputs at positions [t0, t0 + 16 V), summed
 * over every input channel and tap; then each row's valid lanes are compressed out and stored. */
DIRECT_INLINE void forward_tile(const int V, const direct_geometry *g, const float *planes, int64_t in_channels,
                                const float *packed, const float *bias, bool accumulate, int64_t t0, float *out) {
  __m512 acc[DIRECT_BLOCK][3];
  for (int m = 0; m < DIRECT_BLOCK; m++)
    for (int v = 0; v < V; v++)
      acc[m][v] = bias ? _mm512_set1_ps(bias[m]) : _mm512_setzero_ps();
  const int64_t R = g->row;
  const int64_t offsets[DIRECT_TAPS] = {0, 1, 2, R, R + 1, R + 2, 2 * R, 2 * R + 1, 2 * R + 2};
  for (int64_t c = 0; c < in_channels; c++) {
    const float *source = planes + c * g->plane + t0;
    const float *weights = packed + c * DIRECT_TAPS * DIRECT_BLOCK;
    for (int tap = 0; tap < DIRECT_TAPS; tap++) {
      __m512 in[3];
      for (int v = 0; v < V; v++)
        in[v] = _mm512_loadu_ps(source + offsets[tap] + 16 * v);
      for (int m = 0; m < DIRECT_BLOCK; m++) {
        const __m512 weight = _mm512_set1_ps(weights[tap * DIRECT_BLOCK + m]);
        for (int v = 0; v < V; v++)
          acc[m][v] = _mm512_fmadd_ps(weight, in[v], acc[m][v]);
      }
    }
  }
  const int64_t W = g->width, plane_floats = g->height * W;
  for (int v = 0; v < V; v++) {
    const int64_t t = t0 + 16 * v, end = t + 16 < g->positions ? t + 16 : g->positions;
    for (int64_t oh = t / R; oh * R < end; oh++) {
      const int64_t low = oh * R > t ? oh * R : t, high = oh * R + W < end ? oh * R + W : end;
      if (low >= high) continue;
      const __mmask16 lanes = (__mmask16)((((1u << (high - t)) - 1u) >> (low - t)) << (low - t));
      const __mmask16 first = (__mmask16)((1u << (high - low)) - 1u);
      float *target = out + oh * W + (low - oh * R);
      for (int m = 0; m < DIRECT_BLOCK; m++) {
        __m512 values = _mm512_maskz_compress_ps(lanes, acc[m][v]);
        if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(first, target + m * plane_floats));
        _mm512_mask_storeu_ps(target + m * plane_floats, first, values);
      }
    }
  }
}

DIRECT_TARGET static void forward_tile_1(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(1, g, planes, in_channels, packed, bias, accumulate, t0, out);
}
DIRECT_TARGET static void forward_tile_2(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(2, g, planes, in_channels, packed, bias, accumulate, t0, out);
}
DIRECT_TARGET static void forward_tile_3(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(3, g, planes, in_channels, packed, bias, accumulate, t0, out);
}

/* out (+)= the convolution of every sample of x (in_channels planes) with packed weights: the forward pass,
 * or with transposed weights and accumulate the data gradient. */
static bpt_status convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x, int64_t in_channels,
                           const float *w, int64_t out_channels, bool transposed, const float *bias, bool accumulate,
                           float *out) {
  const direct_geometry g = geometry(a);
  const size_t packed_floats = (size_t)(in_channels * out_channels * DIRECT_TAPS);
  const int threads = direct_threads(backend, a->batch);
  bpt_status status =
      bpt_cpu_scratch_reserve(backend, threads, packed_floats + (size_t)(in_channels * g.plane) + DIRECT_SLACK);
  if (status != BPT_OK) return status;
  const int64_t vectors = (g.positions + 15) / 16, plane_floats = g.height * g.width;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    pack_weights(w, transposed ? in_channels : out_channels, transposed ? out_channels : in_channels, transposed,
                 packed);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      pad_planes(&g, in_channels, x + n * in_channels * plane_floats, planes);
      for (int64_t b = 0; b < out_channels / DIRECT_BLOCK; b++) {
        const float *block_weights = packed + b * in_channels * DIRECT_TAPS * DIRECT_BLOCK;
        const float *block_bias = bias ? bias + b * DIRECT_BLOCK : NULL;
        float *block_out = out + (n * out_channels + b * DIRECT_BLOCK) * plane_floats;
        int64_t v = 0;
        for (; v + 3 <= vectors; v += 3)
          forward_tile_3(&g, planes, in_channels, block_weights, block_bias, accumulate, 16 * v, block_out);
        if (vectors - v == 2)
          forward_tile_2(&g, planes, in_channels, block_weights, block_bias, accumulate, 16 * v, block_out);
        else if (vectors - v == 1)
          forward_tile_1(&g, planes, in_channels, block_weights, block_bias, accumulate, 16 * v, block_out);
      }
    }
  }
  return BPT_OK;
}

bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y) {
  return convolve(backend, a, x, a->in_channels, weight, a->out_channels, false, bias, false, y);
}

bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx) {
  return convolve(backend, a, dy, a->out_channels, weight, a->in_channels, true, NULL, true, dx);
}

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
  const int64_t H = g->height, W = g->width, R = g->row;
  for (int64_t s = 0; s < samples; s++) {
    const float *dy_sample = transposed_dy + s * H * W * out_channels + o0;
    const float *x_sample = planes + (s * in_channels + c0) * g->plane + i * R;
    for (int64_t oh = 0; oh < H; oh++)
      for (int64_t ow = 0; ow < W; ow++) {
        const float *d = dy_sample + (oh * W + ow) * out_channels;
        const float *x = x_sample + oh * R + ow;
        __m512 gradient[2];
        for (int v = 0; v < OV; v++)
          gradient[v] = _mm512_loadu_ps(d + 16 * v);
        for (int k = 0; k < channels; k++)
          for (int j = 0; j < 3; j++) {
            const __m512 value = _mm512_set1_ps(x[k * g->plane + j]);
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

/* transposed (pixels, channels) = one sample's dy (channels, pixels). */
static void transpose_planes(int64_t channels, int64_t pixels, const float *dy, float *transposed) {
  for (int64_t p = 0; p < pixels; p++)
    for (int64_t o = 0; o < channels; o++)
      transposed[p * channels + o] = dy[o * pixels + p];
}

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  const direct_geometry g = geometry(a);
  const int64_t C = a->in_channels, O = a->out_channels, pixels = g.height * g.width;
  const int64_t weight_count = O * C * DIRECT_TAPS;
  int64_t chunk = (DIRECT_FILTER_PIXELS + pixels - 1) / pixels;
  const int threads = direct_threads(backend, a->batch);
  const int64_t per_thread = (a->batch + threads - 1) / threads;
  if (chunk > per_thread) chunk = per_thread;
  const size_t planes_floats = (size_t)(chunk * C * g.plane + DIRECT_SLACK);
  bpt_status status = bpt_cpu_scratch_reserve(backend, threads,
                                              (size_t)weight_count + planes_floats + (size_t)(chunk * pixels * O));
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
        pad_planes(&g, C, x + (first + s) * C * pixels, planes + s * C * g.plane);
        transpose_planes(O, pixels, dy + (first + s) * O * pixels, transposed_dy + s * pixels * O);
      }
      memset(planes + samples * C * g.plane, 0, DIRECT_SLACK * sizeof *planes);
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

bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y) {
  (void)a, (void)x, (void)weight, (void)bias, (void)y;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx) {
  (void)a, (void)dy, (void)weight, (void)dx;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight) {
  (void)a, (void)x, (void)dy, (void)dweight;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

#endif
