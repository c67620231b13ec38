/* Winograd F(2x2, 3x3) with channels in lanes (conv2d_direct.h): the weight gradient of the direct kernels'
 * stride-1 3x3 convolutions with input and output channels in 16s, and below it the forward and data-gradient
 * passes on planes too small for conv2d_winograd.c's tiles in lanes.
 *
 * The forward pass of one 2x2 tile is Y = A^T [(G g G^T) . (B^T d B)] A, linear in g, so its adjoint is
 * dg = G^T [(A dY A^T) . (B^T d B)] G: per tile, 16 products (one per xi) of dy's transformed tile against
 * the input's, summed over every tile of every sample, M[xi] (O, C) = sum_t D[xi] (O, t) V[xi] (t, C), and
 * transformed back to 3x3 once at the end. 16 multiplications per (o, c) and tile instead of 36.
 * V comes from the pixel-major padded input (channels in lanes, as in conv2d_direct_filter.c), so each
 * tile's V[xi] is a vector of 16 input channels and D[xi]'s entries are broadcast against it:
 * 16 accumulators of output channels per (xi, vector of input channels), one load per 16 FMAs.
 * Odd planes end in half tiles: dy's missing row or column is zero, which zeroes every product that reads the
 * input row or column beyond the padding (row 3 and column 3 of A are (0, -1)), so those need only be finite. */
#include <string.h>

#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

#if DIRECT_KERNELS

/* Tiles per group: a group's transformed tiles (both operands) stay in L1 for its 16 products. */
#define GROUP_TILES 16

bool bpt_cpu_winograd_filter_applies(const bpt_conv2d_args *a) {
  return a->stride_height == 1 && a->in_height >= 6 && a->in_width >= 6 && a->in_channels % 16 == 0 &&
         a->out_channels % 16 == 0;
}

/* phases (O planes of 4 phases (a, b) of TH TW) = dy (O, H, W) split by row and column parity: phase (a, b)
 * tile t = ty TW + tx holds dy (2 ty + a, 2 tx + b), or zero past an odd plane's edge. */
DIRECT_TARGET static void split_dy_avx512(const float *dy, int64_t out_channels, int64_t H, int64_t W, float *phases) {
  const int64_t TW = (W + 1) / 2, tiles = (H + 1) / 2 * TW;
  if (H % 2 || W % 2) memset(phases, 0, (size_t)(out_channels * 4 * tiles) * sizeof *phases);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t o = 0; o < out_channels; o++)
    for (int64_t h = 0; h < H; h++) {
      const float *row = dy + (o * H + h) * W;
      float *evens = phases + (o * 4 + h % 2 * 2) * tiles + h / 2 * TW, *odds = evens + tiles;
      for (int64_t k = 0; k < W; k += 32) {
        const int64_t count = W - k < 32 ? W - k : 32;
        const __m512 low = _mm512_maskz_loadu_ps(direct_lanes(count < 16 ? count : 16), row + k);
        const __m512 high = _mm512_maskz_loadu_ps(direct_lanes(count > 16 ? count - 16 : 0), row + k + 16);
        _mm512_mask_storeu_ps(evens + k / 2, direct_lanes((count + 1) / 2), _mm512_permutex2var_ps(low, even, high));
        _mm512_mask_storeu_ps(odds + k / 2, direct_lanes(count / 2), _mm512_permutex2var_ps(low, odd, high));
      }
    }
}

/* dweight (O, C, 3, 3) += G^T M G for every (o, c), M[xi] = sums (16 xi of (O, C)). */
static void add_weight_gradient(const float *sums, int64_t out_channels, int64_t channels, float *dweight) {
  const int64_t pairs = out_channels * channels;
  for (int64_t pair = 0; pair < pairs; pair++) {
    float m[4][4], half[3][4];
    for (int xi = 0; xi < 16; xi++)
      m[xi / 4][xi % 4] = sums[xi * pairs + pair];
    /* G^T = [[1, 1/2, 1/2, 0], [0, 1/2, -1/2, 0], [0, 1/2, 1/2, 1]]: rows, then columns. */
    for (int j = 0; j < 4; j++) {
      half[0][j] = m[0][j] + 0.5f * (m[1][j] + m[2][j]);
      half[1][j] = 0.5f * (m[1][j] - m[2][j]);
      half[2][j] = 0.5f * (m[1][j] + m[2][j]) + m[3][j];
    }
    float *target = dweight + pair * DIRECT_TAPS;
    for (int i = 0; i < 3; i++) {
      target[i * 3] += half[i][0] + 0.5f * (half[i][1] + half[i][2]);
      target[i * 3 + 1] += 0.5f * (half[i][1] - half[i][2]);
      target[i * 3 + 2] += 0.5f * (half[i][1] + half[i][2]) + half[i][3];
    }
  }
}

/* dy's phases in plain C, for AVX2 (no two-source permute across 16 lanes): the compiler vectorises nothing
 * here, but it is one pass over dy per sample against 16 products per tile. */
static void split_dy_avx2(const float *dy, int64_t out_channels, int64_t H, int64_t W, float *phases) {
  const int64_t TW = (W + 1) / 2, tiles = (H + 1) / 2 * TW;
  if (H % 2 || W % 2) memset(phases, 0, (size_t)(out_channels * 4 * tiles) * sizeof *phases);
  for (int64_t o = 0; o < out_channels; o++)
    for (int64_t h = 0; h < H; h++) {
      const float *row = dy + (o * H + h) * W;
      float *evens = phases + (o * 4 + h % 2 * 2) * tiles + h / 2 * TW, *odds = evens + tiles;
      for (int64_t w = 0; w < W; w++)
        (w % 2 ? odds : evens)[w / 2] = row[w];
    }
}

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_winograd_filter.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_winograd_filter.h"

bpt_status bpt_cpu_winograd_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                            const float *dy, float *dweight) {
  if (bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512)
    return winograd_backward_filter_avx512(backend, a, x, dy, dweight);
  return winograd_backward_filter_avx2(backend, a, x, dy, dweight);
}

/* ---- Forward and data gradient on small planes ----
 * Under 14x14 the tiles-in-lanes layout of conv2d_winograd.c spends too many lanes on garbage tiles, so here
 * (like the direct kernels' pixel-major tiles) each tile's V[xi] is a vector of 16 input channels again, and
 * M[xi] (tiles, O) = V[xi] (tiles, C) U[xi] (C, O) broadcasts V's entries against vectors of 64 output
 * channels: up to 6 tiles by 4 vectors, 24 accumulators, 4 loads and 6 broadcasts per 24 FMAs. */
#define SMALL_TILES 6
#define SMALL_CHANNELS 64

bool bpt_cpu_winograd_small_applies(const bpt_conv2d_args *a, int64_t in_channels, int64_t out_channels) {
  return a->stride_height == 1 && a->in_height >= 6 && a->in_width >= 6 && a->in_height < 14 && a->in_width < 14 &&
         in_channels % 16 == 0 && out_channels % SMALL_CHANNELS == 0;
}

/* product (16 xi of (P tiles, 64)) = V[xi] (P, C) U[xi] (C, o0 .. o0 + 64). */
DIRECT_INLINE void small_product(const int P, const float *x_transformed, int64_t channels, const float *packed,
                                 int64_t out_channels, int64_t o0, float *product) {
  for (int64_t xi = 0; xi < 16; xi++) {
    const float *weights = packed + xi * channels * out_channels + o0;
    const float *values = x_transformed + xi * GROUP_TILES * channels;
    __m512 acc[SMALL_TILES][4];
    for (int k = 0; k < P; k++)
      for (int v = 0; v < 4; v++)
        acc[k][v] = _mm512_setzero_ps();
    for (int64_t c = 0; c < channels; c++) {
      __m512 weight[4];
      for (int v = 0; v < 4; v++)
        weight[v] = _mm512_loadu_ps(weights + c * out_channels + 16 * v);
      for (int k = 0; k < P; k++) {
        const __m512 value = _mm512_set1_ps(values[k * channels + c]);
        for (int v = 0; v < 4; v++)
          acc[k][v] = _mm512_fmadd_ps(value, weight[v], acc[k][v]);
      }
    }
    for (int k = 0; k < P; k++)
      for (int v = 0; v < 4; v++)
        _mm512_storeu_ps(product + (xi * SMALL_TILES + k) * SMALL_CHANNELS + 16 * v, acc[k][v]);
  }
}

#define SMALL_PRODUCT(P)                                                                                               \
  DIRECT_TARGET static void small_product_##P(const float *x_transformed, int64_t channels, const float *packed,       \
                                              int64_t out_channels, int64_t o0, float *product) {                      \
    small_product(P, x_transformed, channels, packed, out_channels, o0, product);                                      \
  }
SMALL_PRODUCT(1)
SMALL_PRODUCT(2)
SMALL_PRODUCT(3)
SMALL_PRODUCT(4)
SMALL_PRODUCT(5)
SMALL_PRODUCT(6)
typedef void (*small_product_function)(const float *, int64_t, const float *, int64_t, int64_t, float *);
static const small_product_function small_products[SMALL_TILES + 1] = {
    NULL, small_product_1, small_product_2, small_product_3, small_product_4, small_product_5, small_product_6};

/* pixels (H W pixels of O, from o0) = A^T M A for `count` tiles from tile t0, the pixels inside the plane. */
DIRECT_TARGET static void small_output(const float *product, int64_t count, int64_t t0, int64_t TW, int64_t H,
                                       int64_t W, int64_t out_channels, int64_t o0, float *pixels) {
  for (int64_t k = 0; k < count; k++) {
    const int64_t ty = (t0 + k) / TW, tx = (t0 + k) % TW;
    for (int v = 0; v < 4; v++) {
      __m512 m[4][4], t[2][4];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
          m[i][j] = _mm512_loadu_ps(product + ((i * 4 + j) * SMALL_TILES + k) * SMALL_CHANNELS + 16 * v);
      for (int j = 0; j < 4; j++) {
        t[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
        t[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
      }
      for (int a = 0; a < 2 && 2 * ty + a < H; a++) {
        float *row = pixels + ((2 * ty + a) * W + 2 * tx) * out_channels + o0 + 16 * v;
        _mm512_storeu_ps(row, _mm512_add_ps(_mm512_add_ps(t[a][0], t[a][1]), t[a][2]));
        if (2 * tx + 1 < W)
          _mm512_storeu_ps(row + out_channels, _mm512_sub_ps(_mm512_sub_ps(t[a][1], t[a][2]), t[a][3]));
      }
    }
  }
}

/* out (O planes of H W) (+)= pixels (H W pixels of O) transposed (+ bias). */
DIRECT_TARGET static void small_store(const float *pixels, int64_t count, int64_t out_channels, const float *bias,
                                      bool accumulate, float *transposed, float *out) {
  bpt_cpu_direct_transpose_planes(BPT_CPU_LOOPS_AVX512, count, out_channels, pixels, transposed);
  for (int64_t o = 0; o < out_channels; o++) {
    const __m512 shift = _mm512_set1_ps(bias ? bias[o] : 0.0f);
    for (int64_t p = 0; p < count; p += 16) {
      const __mmask16 lanes = direct_lanes(count - p < 16 ? count - p : 16);
      float *target = out + o * count + p;
      __m512 values = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, transposed + o * count + p), shift);
      if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(lanes, target));
      _mm512_mask_storeu_ps(target, lanes, values);
    }
  }
}

bpt_status bpt_cpu_winograd_small_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                           int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                           const float *bias, bool accumulate, float *out) {
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
      bpt_cpu_direct_pad_transposed(BPT_CPU_LOOPS_AVX512, &g, C, x + n * C * pixels, transposed_x);
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * C * pixels,
                                    last || !accumulate ? NULL : out + (n + 1) * O * pixels, C * pixels, O * pixels};
      for (int64_t group = 0, t0 = 0; group < groups; group++) {
        const int64_t count = direct_tile_vectors(tiles - t0, group, groups);
        bpt_cpu_direct_prefetch(&next, group, groups);
        transform_input_avx512(transposed_x, C, g.row, TW, t0, count, x_group);
        for (int64_t o0 = 0; o0 < O; o0 += SMALL_CHANNELS) {
          small_products[count](x_group, C, packed, O, o0, product);
          small_output(product, count, t0, TW, H, W, O, o0, pixel_out);
        }
        t0 += count;
      }
      small_store(pixel_out, pixels, O, bias, accumulate, plane_out, out + n * O * pixels);
    }
  }
  return BPT_OK;
}

#endif
