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

/* Under 14x14 the tiles-in-lanes layout of conv2d_winograd.c spends too many lanes on garbage tiles: see
 * conv2d_winograd_channels.h's small_product. Output channels in 64s with AVX-512, 16s with AVX2. */
bool bpt_cpu_winograd_small_applies(bpt_cpu_loops loops, const bpt_conv2d_args *a, int64_t in_channels,
                                    int64_t out_channels) {
  return a->stride_height == 1 && a->in_height >= 6 && a->in_width >= 6 && a->in_height < 14 && a->in_width < 14 &&
         in_channels % 16 == 0 && out_channels % (loops == BPT_CPU_LOOPS_AVX512 ? 64 : 16) == 0;
}

typedef void (*small_product_function)(const float *, int64_t, const float *, int64_t, int64_t, float *);

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_winograd_channels.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_winograd_channels.h"

bpt_status bpt_cpu_winograd_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                            const float *dy, float *dweight) {
  if (bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512)
    return winograd_backward_filter_avx512(backend, a, x, dy, dweight);
  return winograd_backward_filter_avx2(backend, a, x, dy, dweight);
}

bpt_status bpt_cpu_winograd_small_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                           int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                           const float *bias, bool accumulate, float *out) {
  if (bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512)
    return winograd_small_convolve_avx512(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate,
                                          out);
  return winograd_small_convolve_avx2(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
}

#endif
