/* Winograd F(2x2, 3x3) for the stride-1 forward and data-gradient passes of the direct kernels
 * (conv2d_direct.h) on planes of 14 pixels or more.
 *
 * Each 2x2 block of outputs (a tile) comes from a 4x4 block of the padded input d: Y = A^T [U . V] A with
 * V = B^T d B and U = G g G^T, 16 multiplications per input channel instead of 36. The 16 products are
 * 16 independent GEMMs over the channels, M[xi] (O, tiles) = U[xi] (O, C) . V[xi] (C, tiles). The padded
 * input is split into the stride-2 phase planes (tile (ty, tx) is position u = ty R + tx of every phase,
 * R = TW + 1, the last of each row a garbage tile), so each of the 16 values of d is one contiguous run.
 * The transforms' coefficients are 0, +-1 and 1/2, so the results match the direct sums to float rounding. */
#include <string.h>

#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

#if DIRECT_KERNELS

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

/* Where a vector's lanes go: per tile row it touches, lanes [first, first + count) hold tiles whose two output
 * columns cover `pixels` pixels from `offset` in rows 2 ty (and 2 ty + 1 when `rows` is 2) of each plane. Rows of
 * R >= 8 tiles: a vector of 16 lanes touches 3 rows at most. */
#define WINOGRAD_SEGMENTS 4
typedef struct winograd_segment {
  int64_t first, count, pixels, offset, rows;
} winograd_segment;

static int winograd_segments(const direct_geometry *g, int64_t u, int64_t lanes, winograd_segment *segments) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row, tiles = g->positions;
  int count = 0;
  const int64_t end = u + lanes < tiles ? u + lanes : tiles;
  for (int64_t ty = u / R; ty * R < end; ty++) {
    const int64_t first = ty * R > u ? ty * R : u, last = ty * R + (W + 1) / 2 < end ? ty * R + (W + 1) / 2 : end;
    if (first >= last) continue;
    const int64_t column = 2 * (first - ty * R);
    segments[count].first = first - u;
    segments[count].count = last - first;
    segments[count].pixels = 2 * (last - first) < W - column ? 2 * (last - first) : W - column;
    segments[count].offset = 2 * ty * W + column;
    segments[count].rows = 2 * ty + 1 < H ? 2 : 1;
    count++;
  }
  return count;
}

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_winograd_tiles.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_winograd_tiles.h"

bpt_status bpt_cpu_winograd_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                     int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                     const float *bias, bool accumulate, float *out) {
  if (bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512)
    return winograd_convolve_avx512(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
  return winograd_convolve_avx2(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
}

#endif
