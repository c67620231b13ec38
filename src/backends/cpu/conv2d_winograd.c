/* Winograd F(2x2, 3x3) for the stride-1 forward and data-gradient passes of the direct kernels
 * (conv2d_direct.h) on planes of 14 pixels or more.
 *
 * Each 2x2 block of outputs (a tile) comes from a 4x4 block of the padded input d: Y = A^T [U . V] A with
 * V = B^T d B and U = G g G^T, 16 multiplications per input channel instead of 36. The 16 products are
 * 16 independent GEMMs over the channels, M[xi] (O, tiles) = U[xi] (O, C) . V[xi] (C, tiles). The padded
 * input is split into the stride-2 phase planes (tile (ty, tx) is position u = ty R + tx of every phase,
 * R = TW + 1, the last of each row a garbage tile), so each of the 16 values of d is one contiguous run.
 * The transforms' coefficients are 0, +-1 and 1/2, so the results match the direct sums to float rounding. */
#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

#if DIRECT_KERNELS

/* Output channels per register tile of the products: 16 where the outputs come in 16s, 8 otherwise. The tiles
 * go 16 at a time (one vector) through all three steps, so that a group's transformed inputs and products
 * stay in L1 between them instead of travelling through L2 as whole-sample buffers. */
#define WINOGRAD_BLOCK 16

void bpt_cpu_winograd_weights(const float *w, int64_t out, int64_t in, bool transposed, int64_t block, float *packed) {
  const int64_t outputs = transposed ? in : out, inputs = transposed ? out : in;
  for (int64_t o = 0; o < outputs; o++)
    for (int64_t c = 0; c < inputs; c++) {
      float g[3][3], half[4][3];
      for (int64_t tap = 0; tap < DIRECT_TAPS; tap++)
        g[tap / 3][tap % 3] =
            transposed ? w[(c * in + o) * DIRECT_TAPS + DIRECT_TAPS - 1 - tap] : w[(o * in + c) * DIRECT_TAPS + tap];
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
          packed[(((i * 4 + j) * (outputs / block) + o / block) * inputs + c) * block + o % block] = u[j];
      }
    }
}

/* V[xi] (C, 16) = B^T d B for the 16 tiles from tile u of every channel. */
DIRECT_TARGET static void winograd_input(const direct_geometry *g, const float *planes, int64_t channels, int64_t u,
                                         float *transformed) {
  int64_t offsets[16];
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 4; j++)
      offsets[i * 4 + j] = ((i % 2) * 2 + j % 2) * g->plane + (i / 2) * g->row + j / 2;
  for (int64_t c = 0; c < channels; c++)
    winograd_input_transform(planes + c * g->channel_floats + u, offsets, transformed + c * 16, channels * 16);
}

/* M[xi] (block outputs, 16 tiles) = U[xi] block . V[xi] for all 16 xi, each reduction over the channels in
 * registers (one accumulator per output channel). */
DIRECT_INLINE void winograd_product(const int block, const float *weights, int64_t blocks, const float *transformed,
                                    int64_t channels, float *product) {
  for (int64_t xi = 0; xi < 16; xi++) {
    const float *block_weights = weights + xi * blocks * channels * block;
    const float *source = transformed + xi * channels * 16;
    __m512 acc[WINOGRAD_BLOCK];
    for (int m = 0; m < block; m++)
      acc[m] = _mm512_setzero_ps();
    for (int64_t c = 0; c < channels; c++) {
      const __m512 in = _mm512_loadu_ps(source + c * 16);
      for (int m = 0; m < block; m++)
        acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(block_weights[c * block + m]), in, acc[m]);
    }
    for (int m = 0; m < block; m++)
      _mm512_storeu_ps(product + (xi * block + m) * 16, acc[m]);
  }
}

DIRECT_TARGET static void winograd_product_16(const float *weights, int64_t blocks, const float *transformed,
                                              int64_t channels, float *product) {
  winograd_product(16, weights, blocks, transformed, channels, product);
}

DIRECT_TARGET static void winograd_product_8(const float *weights, int64_t blocks, const float *transformed,
                                             int64_t channels, float *product) {
  winograd_product(8, weights, blocks, transformed, channels, product);
}

/* out (block planes of H W) (+)= A^T M A (+ bias) for the 16 tiles from tile u: tile (ty, tx) gives pixels
 * (2 ty + a, 2 tx + b). */
DIRECT_TARGET static void winograd_output(const direct_geometry *g, const float *product, int64_t block, int64_t u,
                                          const float *bias, bool accumulate, float *out) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row, tiles = g->positions;
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  /* The group's lanes by tile row ty (rows of R >= 8 tiles: 3 at most): compressed, their two columns
   * interleaved, stored on rows 2 ty and 2 ty + 1 from `offset`. The same for every output channel. */
  struct {
    __mmask16 lanes, first_half, second_half;
    int64_t offset, rows;
  } segments[4];
  int count = 0;
  const int64_t end = u + 16 < tiles ? u + 16 : tiles;
  for (int64_t ty = u / R; ty * R < end; ty++) {
    const int64_t first = ty * R > u ? ty * R : u, last = ty * R + (W + 1) / 2 < end ? ty * R + (W + 1) / 2 : end;
    if (first >= last) continue;
    const int64_t column = 2 * (first - ty * R),
                  pixels = 2 * (last - first) < W - column ? 2 * (last - first) : W - column;
    segments[count].lanes = (__mmask16)((((1u << (last - u)) - 1u) >> (first - u)) << (first - u));
    segments[count].first_half = direct_lanes(pixels < 16 ? pixels : 16);
    segments[count].second_half = direct_lanes(pixels > 16 ? pixels - 16 : 0);
    segments[count].offset = 2 * ty * W + column;
    segments[count].rows = 2 * ty + 1 < H ? 2 : 1;
    count++;
  }
  for (int64_t o = 0; o < block; o++) {
    float *plane = out + o * H * W;
    const __m512 shift = _mm512_set1_ps(bias ? bias[o] : 0.0f);
    __m512 m[4][4], t[2][4], y[2][2];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++)
        m[i][j] = _mm512_loadu_ps(product + ((i * 4 + j) * block + o) * 16);
    for (int j = 0; j < 4; j++) {
      t[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
      t[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
    }
    for (int a = 0; a < 2; a++) {
      y[a][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(t[a][0], t[a][1]), t[a][2]), shift);
      y[a][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(t[a][1], t[a][2]), t[a][3]), shift);
    }
    for (int k = 0; k < count; k++)
      for (int a = 0; a < segments[k].rows; a++) {
        const __m512 evens = _mm512_maskz_compress_ps(segments[k].lanes, y[a][0]);
        const __m512 odds = _mm512_maskz_compress_ps(segments[k].lanes, y[a][1]);
        float *target = plane + segments[k].offset + a * W;
        __m512 values = _mm512_permutex2var_ps(evens, low, odds);
        if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(segments[k].first_half, target));
        _mm512_mask_storeu_ps(target, segments[k].first_half, values);
        if (!segments[k].second_half) continue;
        values = _mm512_permutex2var_ps(evens, high, odds);
        if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(segments[k].second_half, target + 16));
        _mm512_mask_storeu_ps(target + 16, segments[k].second_half, values);
      }
  }
}

/* Whether the Winograd path takes a stride-1 pass: planes wide and tall enough that few tiles are garbage. */
bool bpt_cpu_winograd_applies(const bpt_conv2d_args *a) { return a->in_height >= 14 && a->in_width >= 14; }

/* The tile geometry: the stride-2 phase planes of the padded input, OH x OW = TH x TW tiles. */
static direct_geometry winograd_geometry(const bpt_conv2d_args *a) {
  bpt_conv2d_args tiles = *a;
  tiles.stride_height = tiles.stride_width = 2;
  tiles.out_height = (a->in_height + 1) / 2;
  tiles.out_width = (a->in_width + 1) / 2;
  return bpt_cpu_direct_geometry(&tiles);
}

bpt_status bpt_cpu_winograd_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                     int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                     const float *bias, bool accumulate, float *out) {
  const direct_geometry g = winograd_geometry(a);
  const int64_t plane_floats = a->in_height * a->in_width;
  const int64_t block = out_channels % 16 == 0 ? 16 : 8, blocks = out_channels / block;
  const size_t packed_floats = (size_t)(16 * in_channels * out_channels);
  const size_t planes_floats = (size_t)(in_channels * g.channel_floats + DIRECT_SLACK);
  const size_t transformed_floats = (size_t)(16 * in_channels * 16), product_floats = (size_t)(16 * block * 16);
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
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_planes(&g, in_channels, x + n * in_channels * plane_floats, planes);
      const int64_t groups = (g.positions + 15) / 16, x_floats = in_channels * plane_floats,
                    out_floats = out_channels * plane_floats;
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : x + (n + 1) * x_floats,
                                    last || !accumulate ? NULL : out + (n + 1) * out_floats, x_floats, out_floats};
      for (int64_t u = 0; u < g.positions; u += 16) {
        bpt_cpu_direct_prefetch(&next, u / 16, groups);
        winograd_input(&g, planes, in_channels, u, transformed);
        for (int64_t b = 0; b < blocks; b++) {
          const float *weights = packed + b * in_channels * block;
          if (block == 16)
            winograd_product_16(weights, blocks, transformed, in_channels, product);
          else
            winograd_product_8(weights, blocks, transformed, in_channels, product);
          winograd_output(&g, product, block, u, bias ? bias + b * block : NULL, accumulate,
                          out + (n * out_channels + b * block) * plane_floats);
        }
      }
    }
  }
  return BPT_OK;
}

#endif
