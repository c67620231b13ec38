/* The pixel-major copies the weight-gradient and channels-in-lanes kernels read (conv2d_direct_transpose.c),
 * written once on conv2d_vec.h: blocks of VEC_LANES channels by VEC_LANES pixels are transposed in registers,
 * the rest element by element. */

#include "backends/cpu/conv2d_vec.h"

VEC_TARGET static void VEC(transpose_planes)(int64_t channels, int64_t pixels, const float *planes, float *transposed) {
  const int64_t block_channels = channels / VEC_LANES * VEC_LANES, block_pixels = pixels / VEC_LANES * VEC_LANES;
  for (int64_t c0 = 0; c0 < block_channels; c0 += VEC_LANES)
    for (int64_t p0 = 0; p0 < block_pixels; p0 += VEC_LANES) {
      vec_t rows[VEC_LANES];
      for (int r = 0; r < VEC_LANES; r++)
        rows[r] = vec_load(planes + (c0 + r) * pixels + p0);
      vec_transpose(rows);
      for (int r = 0; r < VEC_LANES; r++)
        vec_store(transposed + (p0 + r) * channels + c0, rows[r]);
    }
  for (int64_t c = 0; c < channels; c++)
    for (int64_t p = c < block_channels ? block_pixels : 0; p < pixels; p++)
      transposed[p * channels + c] = planes[c * pixels + p];
}

VEC_TARGET static void VEC(pad_transposed)(const direct_geometry *g, int64_t channels, const float *x,
                                           float *transposed) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  for (int64_t c0 = 0; c0 < channels; c0 += VEC_LANES)
    for (int64_t h = 0; h < H; h++)
      for (int64_t w0 = 0; w0 < W; w0 += VEC_LANES) {
        const int64_t count = W - w0 < VEC_LANES ? W - w0 : VEC_LANES;
        vec_t rows[VEC_LANES];
        for (int r = 0; r < VEC_LANES; r++)
          rows[r] = vec_load_first(x + ((c0 + r) * H + h) * W + w0, count);
        vec_transpose(rows);
        float *target = transposed + ((h + 1) * R + w0 + 1) * channels + c0;
        for (int64_t p = 0; p < count; p++)
          vec_store(target + p * channels, rows[p]);
      }
}

#include "backends/cpu/conv2d_vec_end.h"
