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
#define DIRECT_BLOCK 4
#define DIRECT_VECTORS 6
/* Zeros after the last padded plane: the last tile of positions reads up to 15 floats past it. */
#define DIRECT_SLACK 16
/* Weight-gradient chunks hold at least this many pixels, so a tile's accumulators are stored rarely. */
#define DIRECT_FILTER_PIXELS 256
#define DIRECT_TAPS 9

bool bpt_cpu_conv_direct_applies(bpt_backend *backend, const bpt_conv2d_args *a) {
#if DIRECT_KERNELS
  static int has_avx512 = -1;
  if (has_avx512 < 0) {
    __builtin_cpu_init();
    has_avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  const int64_t stride = a->stride_height;
  return has_avx512 && !((bpt_cpu_state *)backend->state)->gemm_convolutions_only && a->kernel_height == 3 && a->kernel_width == 3 && a->stride_width == stride &&
         (stride == 1 || stride == 2) && a->padding_height == 1 && a->padding_width == 1 &&
         a->dilation_height == 1 && a->dilation_width == 1 && a->groups == 1 && a->in_channels % DIRECT_BLOCK == 0 &&
         a->out_channels % 16 == 0 && a->out_height == (a->in_height - 1) / stride + 1 &&
         a->out_width == (a->in_width - 1) / stride + 1;
#else
  (void)backend, (void)a;
  return false;
#endif
}

#if DIRECT_KERNELS

typedef struct direct_geometry {
  int64_t in_height, in_width, out_height, out_width, stride;
  int64_t row;            /* R: output positions per row, the last one garbage */
  int64_t plane;          /* floats per padded plane (per phase plane when strided) */
  int64_t channel_floats; /* floats per input channel: stride^2 planes */
  int64_t positions;      /* OH R */
  int64_t taps;                 /* 9, or fewer for one phase of a strided data gradient */
  int64_t offsets[DIRECT_TAPS]; /* where each tap reads for position 0, within a channel's planes */
} direct_geometry;

/* Stride 1: one padded plane per channel, rows sharing a border column, R = W + 1, tap (i, j) at i R + j.
 * Stride 2: the padded plane split into 4 phase planes, phase (r, q) row a column b holding padded pixel
 * (2 a + r, 2 b + q), OH + 1 rows of R = OW + 1; tap (i, j) reads phase (i % 2, j % 2) at
 * (i / 2) R + j / 2. Either way a tap's inputs for consecutive positions are consecutive floats. */
#define DIRECT_TARGET __attribute__((target("avx512f")))
#define DIRECT_INLINE static inline __attribute__((always_inline)) DIRECT_TARGET

static direct_geometry geometry(const bpt_conv2d_args *a) {
  direct_geometry g = {.in_height = a->in_height,
                       .in_width = a->in_width,
                       .out_height = a->out_height,
                       .out_width = a->out_width,
                       .stride = a->stride_height};
  if (g.stride == 1) {
    g.row = a->in_width + 1;
    g.plane = ((a->in_height + 2) * g.row + 2 + 15) / 16 * 16;
    g.channel_floats = g.plane;
  } else {
    g.row = a->out_width + 1;
    g.plane = ((a->out_height + 1) * g.row + 1 + 15) / 16 * 16;
    g.channel_floats = 4 * g.plane;
  }
  g.positions = g.out_height * g.row;
  g.taps = DIRECT_TAPS;
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 3; j++)
      g.offsets[i * 3 + j] = g.stride == 1 ? i * g.row + j
                                           : ((i % 2) * 2 + j % 2) * g.plane + (i / 2) * g.row + j / 2;
  return g;
}

static int direct_threads(bpt_backend *backend, int64_t units) {
  int threads = backend->num_threads > 0 ? backend->num_threads : 1;
  return units < threads ? (int)units : threads;
}

/* Asks for count floats from x to be brought into L2 while the current sample is convolved: the padding
 * copy of the next one then does not wait on memory. */
static void prefetch(const float *x, int64_t count) {
  for (int64_t k = 0; k < count; k += 16)
    __builtin_prefetch(x + k, 0, 2);
}

/* The first count (at most 16) lanes. */
static __mmask16 lanes(int64_t count) { return (__mmask16)((1u << count) - 1u); }

DIRECT_TARGET static void zero_floats(float *out, int64_t count) {
  for (int64_t k = 0; k < count; k += 16)
    _mm512_mask_storeu_ps(out + k, lanes(count - k < 16 ? count - k : 16), _mm512_setzero_ps());
}

/* planes (channels of channel_floats, then DIRECT_SLACK zeros) = x's channel planes inside a zero border, in
 * the geometry's layout. */
DIRECT_TARGET static void pad_planes(const direct_geometry *g, int64_t channels, const float *x, float *planes) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  for (int64_t c = 0; c < channels; c++) {
    const float *source = x + c * H * W;
    float *plane = planes + c * g->channel_floats;
    if (g->stride == 1) {
      /* Rows are short (W floats): masked vector copies, each writing the row and the zero border after it,
       * beat a memcpy call per row. */
      zero_floats(plane, R + 1);
      for (int64_t h = 0; h < H; h++) {
        const float *in = source + h * W;
        float *out = plane + (h + 1) * R + 1;
        for (int64_t k = 0; k <= W; k += 16) {
          const int64_t stored = W + 1 - k < 16 ? W + 1 - k : 16, loaded = W - k < stored ? W - k : stored;
          _mm512_mask_storeu_ps(out + k, lanes(stored), _mm512_maskz_loadu_ps(lanes(loaded), in + k));
        }
      }
      zero_floats(plane + (H + 1) * R + 1, g->plane - (H + 1) * R - 1);
      continue;
    }
    if (W <= 32) {
      /* Image row h is padded row h + 1 (phase row r = (h + 1) % 2, a = (h + 1) / 2); its even columns are
       * phase q = 1 from b = 0, its odd columns phase q = 0 from b = 1: two permutes split the row. */
      zero_floats(plane, 4 * g->plane);
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      const __mmask16 first = lanes(W < 16 ? W : 16), second = lanes(W > 16 ? W - 16 : 0);
      const __mmask16 evens = lanes((W + 1) / 2), odds = lanes(W / 2);
      for (int64_t h = 0; h < H; h++) {
        const __m512 low = _mm512_maskz_loadu_ps(first, source + h * W);
        const __m512 high = _mm512_maskz_loadu_ps(second, source + h * W + 16);
        float *row = plane + (h + 1) % 2 * 2 * g->plane + (h + 1) / 2 * R;
        _mm512_mask_storeu_ps(row + g->plane, evens, _mm512_permutex2var_ps(low, even, high));
        _mm512_mask_storeu_ps(row + 1, odds, _mm512_permutex2var_ps(low, odd, high));
      }
      continue;
    }
    for (int64_t phase = 0; phase < 4; phase++, plane += g->plane) {
      const int64_t r = phase / 2, q = phase % 2;
      /* Columns b whose pixel 2 b + q - 1 lies inside the image: [low, high). */
      const int64_t low = q == 0 ? 1 : 0, high = (W - q) / 2 + 1 < R ? (W - q) / 2 + 1 : R;
      for (int64_t row = 0; row <= g->out_height; row++) {
        float *out = plane + row * R;
        const int64_t h = 2 * row + r - 1;
        if (h < 0 || h >= H) {
          memset(out, 0, (size_t)R * sizeof *out);
          continue;
        }
        const float *in = source + h * W;
        for (int64_t b = 0; b < low; b++)
          out[b] = 0.0f;
#pragma omp simd
        for (int64_t b = low; b < high; b++)
          out[b] = in[2 * b + q - 1];
        for (int64_t b = high; b < R; b++)
          out[b] = 0.0f;
      }
      memset(plane + (g->out_height + 1) * R, 0, (size_t)(g->plane - (g->out_height + 1) * R) * sizeof *plane);
    }
  }
  memset(planes + channels * g->channel_floats, 0, DIRECT_SLACK * sizeof *planes);
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

/* out (8 planes of OH OW) (+)= the block's outputs at positions [t0, t0 + 16 V), summed over every input
 * channel and tap; then each row's valid lanes are compressed out and stored. */
DIRECT_INLINE void forward_tile(const int V, const direct_geometry *g, const float *planes, int64_t in_channels,
                                const float *packed, const float *bias, bool accumulate, int64_t t0, float *out) {
  __m512 acc[DIRECT_BLOCK][DIRECT_VECTORS];
  for (int m = 0; m < DIRECT_BLOCK; m++)
    for (int v = 0; v < V; v++)
      acc[m][v] = bias ? _mm512_set1_ps(bias[m]) : _mm512_setzero_ps();
  const int64_t R = g->row;
  for (int64_t c = 0; c < in_channels; c++) {
    const float *source = planes + c * g->channel_floats + t0;
    const float *weights = packed + c * g->taps * DIRECT_BLOCK;
    for (int64_t tap = 0; tap < g->taps; tap++) {
      __m512 in[DIRECT_VECTORS];
      for (int v = 0; v < V; v++)
        in[v] = _mm512_loadu_ps(source + g->offsets[tap] + 16 * v);
      for (int m = 0; m < DIRECT_BLOCK; m++) {
        const __m512 weight = _mm512_set1_ps(weights[tap * DIRECT_BLOCK + m]);
        for (int v = 0; v < V; v++)
          acc[m][v] = _mm512_fmadd_ps(weight, in[v], acc[m][v]);
      }
    }
  }
  const int64_t W = g->out_width, plane_floats = g->out_height * W;
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
DIRECT_TARGET static void forward_tile_4(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(4, g, planes, in_channels, packed, bias, accumulate, t0, out);
}
DIRECT_TARGET static void forward_tile_5(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(5, g, planes, in_channels, packed, bias, accumulate, t0, out);
}
DIRECT_TARGET static void forward_tile_6(const direct_geometry *g, const float *planes, int64_t in_channels,
                                         const float *packed, const float *bias, bool accumulate, int64_t t0,
                                         float *out) {
  forward_tile(6, g, planes, in_channels, packed, bias, accumulate, t0, out);
}
typedef void (*forward_tile_function)(const direct_geometry *, const float *, int64_t, const float *, const float *,
                                      bool, int64_t, float *);
static const forward_tile_function forward_tiles[DIRECT_VECTORS + 1] = {
    NULL, forward_tile_1, forward_tile_2, forward_tile_3, forward_tile_4, forward_tile_5, forward_tile_6};

/* out (out_channels planes of one sample) (+)= the convolution of one sample's padded planes. */
static void convolve_sample(const direct_geometry *g, const float *planes, int64_t in_channels, const float *packed,
                            int64_t out_channels, const float *bias, bool accumulate, float *out) {
  const int64_t vectors = (g->positions + 15) / 16, out_floats = g->out_height * g->out_width;
  for (int64_t b = 0; b < out_channels / DIRECT_BLOCK; b++) {
    const float *block_weights = packed + b * in_channels * g->taps * DIRECT_BLOCK;
    const float *block_bias = bias ? bias + b * DIRECT_BLOCK : NULL;
    float *block_out = out + b * DIRECT_BLOCK * out_floats;
    /* Tiles as even as they can be: a short last tile holds fewer accumulators than the FMA latency needs. */
    const int64_t tiles = (vectors + DIRECT_VECTORS - 1) / DIRECT_VECTORS;
    for (int64_t tile = 0, v = 0; tile < tiles; tile++) {
      const int64_t count = (vectors - v) / (tiles - tile) + ((vectors - v) % (tiles - tile) != 0);
      forward_tiles[count](g, planes, in_channels, block_weights, block_bias, accumulate, 16 * v, block_out);
      v += count;
    }
  }
}

static bool winograd_applies(const bpt_conv2d_args *a);
static bpt_status winograd_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                    int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                    const float *bias, bool accumulate, float *out);

/* out (+)= the convolution of every sample of x (in_channels planes) with packed weights: the forward pass,
 * or with transposed weights and accumulate the data gradient. */
static bpt_status convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x, int64_t in_channels,
                           const float *w, int64_t out_channels, bool transposed, const float *bias, bool accumulate,
                           float *out) {
  if (a->stride_height == 1 && winograd_applies(a))
    return winograd_convolve(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
  const direct_geometry g = geometry(a);
  const size_t packed_floats = (size_t)(in_channels * out_channels * DIRECT_TAPS);
  const int threads = direct_threads(backend, a->batch);
  bpt_status status =
      bpt_cpu_scratch_reserve(backend, threads, packed_floats + (size_t)(in_channels * g.channel_floats) + DIRECT_SLACK);
  if (status != BPT_OK) return status;
  const int64_t in_floats = g.in_height * g.in_width, out_floats = g.out_height * g.out_width;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    pack_weights(w, transposed ? in_channels : out_channels, transposed ? out_channels : in_channels, transposed,
                 packed);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      pad_planes(&g, in_channels, x + n * in_channels * in_floats, planes);
      if (n + 1 < a->batch) {
        prefetch(x + (n + 1) * in_channels * in_floats, in_channels * in_floats);
        if (accumulate) prefetch(out + (n + 1) * out_channels * out_floats, out_channels * out_floats);
      }
      convolve_sample(&g, planes, in_channels, packed, out_channels, bias, accumulate,
                      out + n * out_channels * out_floats);
    }
  }
  return BPT_OK;
}

/* ---- Winograd F(2x2, 3x3) for the stride-1 passes on planes of 14 pixels or more ----
 *
 * Each 2x2 block of outputs (a tile) comes from a 4x4 block of the padded input d: Y = A^T [U . V] A with
 * V = B^T d B and U = G g G^T, 16 multiplications per input channel instead of 36. The 16 products are
 * 16 independent GEMMs over the channels, M[xi] (O, tiles) = U[xi] (O, C) . V[xi] (C, tiles). The padded
 * input is split into the stride-2 phase planes (tile (ty, tx) is position u = ty R + tx of every phase,
 * R = TW + 1, the last of each row a garbage tile), so each of the 16 values of d is one contiguous run.
 * The transforms' coefficients are 0, +-1 and 1/2, so the results match the direct sums to float rounding. */

/* U[xi] (O / 4 blocks of (C, 4)) = G w G^T per (o, c), for w (O, C, 3, 3) or, transposed, w'(c, o) flipped. */
static void winograd_weights(const float *w, int64_t out, int64_t in, bool transposed, float *packed) {
  const int64_t outputs = transposed ? in : out, inputs = transposed ? out : in;
  for (int64_t o = 0; o < outputs; o++)
    for (int64_t c = 0; c < inputs; c++) {
      float g[3][3], half[4][3];
      for (int64_t tap = 0; tap < DIRECT_TAPS; tap++)
        g[tap / 3][tap % 3] = transposed ? w[(c * in + o) * DIRECT_TAPS + DIRECT_TAPS - 1 - tap]
                                         : w[(o * in + c) * DIRECT_TAPS + tap];
      for (int j = 0; j < 3; j++) {
        half[0][j] = g[0][j];
        half[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
        half[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
        half[3][j] = g[2][j];
      }
      for (int i = 0; i < 4; i++) {
        const float u[4] = {half[i][0], 0.5f * (half[i][0] + half[i][1] + half[i][2]),
                            0.5f * (half[i][0] - half[i][1] + half[i][2]), half[i][2]};
        for (int j = 0; j < 4; j++)
          packed[(((i * 4 + j) * (outputs / DIRECT_BLOCK) + o / DIRECT_BLOCK) * inputs + c) * DIRECT_BLOCK +
                 o % DIRECT_BLOCK] = u[j];
      }
    }
}

/* V[xi] (C, stride floats) = B^T d B for every tile vector of every channel. */
DIRECT_TARGET static void winograd_input(const direct_geometry *g, const float *planes, int64_t channels,
                                         int64_t stride, float *transformed) {
  int64_t offsets[16];
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 4; j++)
      offsets[i * 4 + j] = ((i % 2) * 2 + j % 2) * g->plane + (i / 2) * g->row + j / 2;
  for (int64_t c = 0; c < channels; c++)
    for (int64_t u = 0; u < stride; u += 16) {
      const float *source = planes + c * g->channel_floats + u;
      __m512 d[4][4], t[4][4];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
          d[i][j] = _mm512_loadu_ps(source + offsets[i * 4 + j]);
      for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        t[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        t[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        t[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; i++) {
        float *out = transformed + (i * 4 * channels + c) * stride + u;
        const int64_t next = channels * stride;
        _mm512_storeu_ps(out, _mm512_sub_ps(t[i][0], t[i][2]));
        _mm512_storeu_ps(out + next, _mm512_add_ps(t[i][1], t[i][2]));
        _mm512_storeu_ps(out + 2 * next, _mm512_sub_ps(t[i][2], t[i][1]));
        _mm512_storeu_ps(out + 3 * next, _mm512_sub_ps(t[i][1], t[i][3]));
      }
    }
}

/* M[xi] (4 outputs, 16 V tiles from u) = U[xi] block . V[xi], the reduction over channels in registers. */
DIRECT_INLINE void winograd_product(const int V, const float *weights, const float *transformed, int64_t channels,
                                    int64_t stride, int64_t u, float *product) {
  __m512 acc[DIRECT_BLOCK][DIRECT_VECTORS];
  for (int m = 0; m < DIRECT_BLOCK; m++)
    for (int v = 0; v < V; v++)
      acc[m][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < channels; c++) {
    __m512 in[DIRECT_VECTORS];
    for (int v = 0; v < V; v++)
      in[v] = _mm512_loadu_ps(transformed + c * stride + u + 16 * v);
    for (int m = 0; m < DIRECT_BLOCK; m++) {
      const __m512 weight = _mm512_set1_ps(weights[c * DIRECT_BLOCK + m]);
      for (int v = 0; v < V; v++)
        acc[m][v] = _mm512_fmadd_ps(weight, in[v], acc[m][v]);
    }
  }
  for (int m = 0; m < DIRECT_BLOCK; m++)
    for (int v = 0; v < V; v++)
      _mm512_storeu_ps(product + m * stride + u + 16 * v, acc[m][v]);
}

#define WINOGRAD_PRODUCT(V)                                                                                            \
  DIRECT_TARGET static void winograd_product_##V(const float *weights, const float *transformed, int64_t channels,    \
                                                 int64_t stride, int64_t u, float *product) {                         \
    winograd_product(V, weights, transformed, channels, stride, u, product);                                           \
  }
WINOGRAD_PRODUCT(1)
WINOGRAD_PRODUCT(2)
WINOGRAD_PRODUCT(3)
WINOGRAD_PRODUCT(4)
WINOGRAD_PRODUCT(5)
WINOGRAD_PRODUCT(6)
typedef void (*winograd_product_function)(const float *, const float *, int64_t, int64_t, int64_t, float *);
static const winograd_product_function winograd_products[DIRECT_VECTORS + 1] = {
    NULL, winograd_product_1, winograd_product_2, winograd_product_3,
    winograd_product_4, winograd_product_5, winograd_product_6};

/* out (O planes of H W) (+)= A^T M A (+ bias): tile (ty, tx) gives pixels (2 ty + a, 2 tx + b). */
DIRECT_TARGET static void winograd_output(const direct_geometry *g, const float *product, int64_t out_channels,
                                          int64_t stride, const float *bias, bool accumulate, float *out) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row, tiles = g->positions;
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t o = 0; o < out_channels; o++) {
    float *plane = out + o * H * W;
    const __m512 shift = _mm512_set1_ps(bias ? bias[o] : 0.0f);
    for (int64_t u = 0; u < tiles; u += 16) {
      __m512 m[4][4], t[2][4], y[2][2];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
          m[i][j] = _mm512_loadu_ps(product + ((i * 4 + j) * out_channels + o) * stride + u);
      for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
        t[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
      }
      for (int a = 0; a < 2; a++) {
        y[a][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(t[a][0], t[a][1]), t[a][2]), shift);
        y[a][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(t[a][1], t[a][2]), t[a][3]), shift);
      }
      /* Lanes of tile row ty: compressed, their two columns interleaved, stored on rows 2 ty and 2 ty + 1. */
      const int64_t end = u + 16 < tiles ? u + 16 : tiles;
      for (int64_t ty = u / R; ty * R < end; ty++) {
        const int64_t first = ty * R > u ? ty * R : u, last = ty * R + (W + 1) / 2 < end ? ty * R + (W + 1) / 2 : end;
        if (first >= last) continue;
        const __mmask16 row_lanes = (__mmask16)((((1u << (last - u)) - 1u) >> (first - u)) << (first - u));
        const int64_t column = 2 * (first - ty * R), count = 2 * (last - first) < W - column ? 2 * (last - first)
                                                                                              : W - column;
        for (int a = 0; a < 2 && 2 * ty + a < H; a++) {
          const __m512 evens = _mm512_maskz_compress_ps(row_lanes, y[a][0]);
          const __m512 odds = _mm512_maskz_compress_ps(row_lanes, y[a][1]);
          float *target = plane + (2 * ty + a) * W + column;
          const __mmask16 first_half = lanes(count < 16 ? count : 16), second_half = lanes(count > 16 ? count - 16 : 0);
          __m512 values = _mm512_permutex2var_ps(evens, low, odds);
          if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(first_half, target));
          _mm512_mask_storeu_ps(target, first_half, values);
          values = _mm512_permutex2var_ps(evens, high, odds);
          if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(second_half, target + 16));
          _mm512_mask_storeu_ps(target + 16, second_half, values);
        }
      }
    }
  }
}

/* Whether the Winograd path takes a stride-1 pass: planes wide and tall enough that few tiles are garbage. */
static bool winograd_applies(const bpt_conv2d_args *a) { return a->in_height >= 14 && a->in_width >= 14; }

/* The tile geometry: the stride-2 phase planes of the padded input, OH x OW = TH x TW tiles. */
static direct_geometry winograd_geometry(const bpt_conv2d_args *a) {
  bpt_conv2d_args tiles = *a;
  tiles.stride_height = tiles.stride_width = 2;
  tiles.out_height = (a->in_height + 1) / 2;
  tiles.out_width = (a->in_width + 1) / 2;
  return geometry(&tiles);
}

static bpt_status winograd_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                    int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                    const float *bias, bool accumulate, float *out) {
  const direct_geometry g = winograd_geometry(a);
  const int64_t stride = (g.positions + 15) / 16 * 16, plane_floats = a->in_height * a->in_width;
  const size_t packed_floats = (size_t)(16 * in_channels * out_channels);
  const size_t planes_floats = (size_t)(in_channels * g.channel_floats + DIRECT_SLACK);
  const size_t transformed_floats = (size_t)(16 * in_channels * stride), product_floats = (size_t)(16 * out_channels * stride);
  const int threads = direct_threads(backend, a->batch);
  bpt_status status = bpt_cpu_scratch_reserve(backend, threads,
                                              packed_floats + planes_floats + transformed_floats + product_floats);
  if (status != BPT_OK) return status;
  const int64_t vectors = stride / 16, tiles = (vectors + DIRECT_VECTORS - 1) / DIRECT_VECTORS;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    float *transformed = planes + planes_floats, *product = transformed + transformed_floats;
    winograd_weights(w, transposed ? in_channels : out_channels, transposed ? out_channels : in_channels, transposed,
                     packed);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      pad_planes(&g, in_channels, x + n * in_channels * plane_floats, planes);
      if (n + 1 < a->batch) {
        prefetch(x + (n + 1) * in_channels * plane_floats, in_channels * plane_floats);
        prefetch(out + (n + 1) * out_channels * plane_floats, out_channels * plane_floats);
      }
      winograd_input(&g, planes, in_channels, stride, transformed);
      for (int64_t xi = 0; xi < 16; xi++)
        for (int64_t b = 0; b < out_channels / DIRECT_BLOCK; b++) {
          const float *weights = packed + (xi * (out_channels / DIRECT_BLOCK) + b) * in_channels * DIRECT_BLOCK;
          const float *source = transformed + xi * in_channels * stride;
          float *target = product + (xi * out_channels + b * DIRECT_BLOCK) * stride;
          for (int64_t tile = 0, v = 0; tile < tiles; tile++) {
            const int64_t count = (vectors - v) / (tiles - tile) + ((vectors - v) % (tiles - tile) != 0);
            winograd_products[count](weights, source, in_channels, stride, 16 * v, target);
            v += count;
          }
        }
      winograd_output(&g, product, out_channels, stride, bias, accumulate, out + n * out_channels * plane_floats);
    }
  }
  return BPT_OK;
}

bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y) {
  return convolve(backend, a, x, a->in_channels, weight, a->out_channels, false, bias, false, y);
}

/* The data gradient of a stride-2 convolution, one phase (ph, pw) of dx at a time. Pixel (2 a + ph, 2 b + pw)
 * of dx receives tap (i, j) only where i = ph + 1 and j = pw + 1 (mod 2), from dy (a + dr, b + dc) with
 * dr = (ph + 1 - i) / 2, dc = (pw + 1 - j) / 2: a stride-1 convolution of zero-bordered dy with 1, 2 or 4
 * taps, whose outputs are then interleaved into dx. */
static direct_geometry strided_phase(const direct_geometry *dy_planes, int64_t ph, int64_t pw, int64_t in_height,
                                     int64_t in_width, int64_t taps[4][2]) {
  direct_geometry g = *dy_planes;
  g.out_height = (in_height - ph + 1) / 2;
  g.out_width = (in_width - pw + 1) / 2;
  g.positions = g.out_height * g.row;
  g.taps = 0;
  for (int64_t i = ph == 0 ? 1 : 0; i < 3; i += 2)
    for (int64_t j = pw == 0 ? 1 : 0; j < 3; j += 2) {
      taps[g.taps][0] = i;
      taps[g.taps][1] = j;
      g.offsets[g.taps++] = ((ph + 1 - i) / 2 + 1) * g.row + 1 + (pw + 1 - j) / 2;
    }
  return g;
}

/* dx (C, H, W) += the phase planes interleaved: dx (c, 2 a + ph, 2 b + pw) from phase ph * 2 + pw, (C, Ha, Wa)
 * with Ha = ceil((H - ph) / 2), Wa = ceil((W - pw) / 2). */
DIRECT_TARGET static void interleave_phases(int64_t C, int64_t H, int64_t W, const float *phases, int64_t phase_stride,
                                            float *dx) {
  const int64_t even_width = (W + 1) / 2, odd_width = W / 2;
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t c = 0; c < C; c++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t ph = h % 2, rows = (H - ph + 1) / 2;
      const float *even = phases + 2 * ph * phase_stride + (c * rows + h / 2) * even_width;
      const float *odd = phases + (2 * ph + 1) * phase_stride + (c * rows + h / 2) * odd_width;
      float *target = dx + (c * H + h) * W;
      if (W > 32) {
        for (int64_t b = 0; b < odd_width; b++) {
          target[2 * b] += even[b];
          target[2 * b + 1] += odd[b];
        }
        if (even_width > odd_width) target[W - 1] += even[even_width - 1];
        continue;
      }
      const __m512 evens = _mm512_maskz_loadu_ps(lanes(even_width), even);
      const __m512 odds = _mm512_maskz_loadu_ps(lanes(odd_width), odd);
      const __mmask16 first = lanes(W < 16 ? W : 16), second = lanes(W > 16 ? W - 16 : 0);
      _mm512_mask_storeu_ps(target, first,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(first, target), _mm512_permutex2var_ps(evens, low, odds)));
      _mm512_mask_storeu_ps(target + 16, second, _mm512_add_ps(_mm512_maskz_loadu_ps(second, target + 16),
                                                                _mm512_permutex2var_ps(evens, high, odds)));
    }
}

static bpt_status strided_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                        const float *w, float *dx) {
  const int64_t C = a->in_channels, O = a->out_channels, H = a->in_height, W = a->in_width;
  bpt_conv2d_args dy_shape = *a;
  dy_shape.in_height = a->out_height;
  dy_shape.in_width = a->out_width;
  dy_shape.stride_height = dy_shape.stride_width = 1;
  const direct_geometry dy_planes = geometry(&dy_shape);
  const size_t packed_floats = (size_t)(C * O * DIRECT_TAPS), planes_floats = (size_t)(O * dy_planes.plane);
  const int64_t phase_floats = ((H + 1) / 2) * ((W + 1) / 2), dy_floats = a->out_height * a->out_width;
  const int threads = direct_threads(backend, a->batch);
  bpt_status status = bpt_cpu_scratch_reserve(backend, threads,
                                              packed_floats + planes_floats + DIRECT_SLACK + (size_t)(4 * C * phase_floats));
  if (status != BPT_OK) return status;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    float *phase_out = planes + planes_floats + DIRECT_SLACK; /* 4 phases of (C, Ha, Wa), C phase_floats apart */
    /* Each phase's weights, (C / 8 blocks of (O, taps, 8)), one after the other. */
    direct_geometry phases[4];
    float *phase_weights[4];
    float *next = packed;
    for (int64_t phase = 0; phase < 4; phase++) {
      int64_t taps[4][2];
      phases[phase] = strided_phase(&dy_planes, phase / 2, phase % 2, H, W, taps);
      phase_weights[phase] = next;
      for (int64_t b = 0; b < C / DIRECT_BLOCK; b++)
        for (int64_t o = 0; o < O; o++)
          for (int64_t k = 0; k < phases[phase].taps; k++)
            for (int64_t m = 0; m < DIRECT_BLOCK; m++)
              *next++ = w[((o * C + b * DIRECT_BLOCK + m) * 3 + taps[k][0]) * 3 + taps[k][1]];
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      pad_planes(&dy_planes, O, dy + n * O * dy_floats, planes);
      if (n + 1 < a->batch) {
        prefetch(dy + (n + 1) * O * dy_floats, O * dy_floats);
        prefetch(dx + (n + 1) * C * H * W, C * H * W);
      }
      for (int64_t phase = 0; phase < 4; phase++)
        convolve_sample(&phases[phase], planes, O, phase_weights[phase], C, NULL, false,
                        phase_out + phase * C * phase_floats);
      interleave_phases(C, H, W, phase_out, C * phase_floats, dx + n * C * H * W);
    }
  }
  return BPT_OK;
}

bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx) {
  if (a->stride_height == 2) return strided_backward_data(backend, a, dy, weight, dx);
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
  const direct_geometry g = geometry(a);
  const int64_t C = a->in_channels, O = a->out_channels, pixels = g.out_height * g.out_width;
  const int64_t in_floats = g.in_height * g.in_width;
  const int64_t weight_count = O * C * DIRECT_TAPS;
  int64_t chunk = (DIRECT_FILTER_PIXELS + pixels - 1) / pixels;
  const int threads = direct_threads(backend, a->batch);
  const int64_t per_thread = (a->batch + threads - 1) / threads;
  if (chunk > per_thread) chunk = per_thread;
  const size_t planes_floats = (size_t)(chunk * C * g.channel_floats + DIRECT_SLACK);
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
        pad_planes(&g, C, x + (first + s) * C * in_floats, planes + s * C * g.channel_floats);
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
