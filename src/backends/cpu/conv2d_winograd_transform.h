/* Winograd F(2x2, 3x3)'s input and output transforms on VEC_LANES tiles or channels at once (one per lane), for
 * the target conv2d_vec.h was last set up for; shared by both Winograd layouts (conv2d_winograd_tiles.h,
 * conv2d_winograd_channels.h). The coefficients are 0, +-1 (and 1/2 in the weights' transform). */

/* V = B^T d B, d read from `source` at offset(i, j) for i, j in 0..3; V(i, j) is stored at out + (4 i + j) step. */
VEC_INLINE void VEC(winograd_input_transform)(const float *source, const int64_t offsets[16], float *out,
                                              int64_t step) {
  vec_t d[4][4], t[4][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      d[i][j] = vec_load(source + offsets[i * 4 + j]);
  for (int j = 0; j < 4; j++) {
    t[0][j] = vec_sub(d[0][j], d[2][j]);
    t[1][j] = vec_add(d[1][j], d[2][j]);
    t[2][j] = vec_sub(d[2][j], d[1][j]);
    t[3][j] = vec_sub(d[1][j], d[3][j]);
  }
  for (int i = 0; i < 4; i++) {
    float *row = out + 4 * i * step;
    vec_store(row, vec_sub(t[i][0], t[i][2]));
    vec_store(row + step, vec_add(t[i][1], t[i][2]));
    vec_store(row + 2 * step, vec_sub(t[i][2], t[i][1]));
    vec_store(row + 3 * step, vec_sub(t[i][1], t[i][3]));
  }
}

/* y (the tile's 2x2 outputs, row a column b) = A^T M A + shift, M(i, j) read from product + (4 i + j) step. */
VEC_INLINE void VEC(winograd_output_transform)(const float *product, int64_t step, vec_t shift, vec_t y[2][2]) {
  vec_t m[4][4], t[2][4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      m[i][j] = vec_load(product + (i * 4 + j) * step);
  for (int j = 0; j < 4; j++) {
    t[0][j] = vec_add(vec_add(m[0][j], m[1][j]), m[2][j]);
    t[1][j] = vec_sub(vec_sub(m[1][j], m[2][j]), m[3][j]);
  }
  for (int a = 0; a < 2; a++) {
    y[a][0] = vec_add(vec_add(vec_add(t[a][0], t[a][1]), t[a][2]), shift);
    y[a][1] = vec_add(vec_sub(vec_sub(t[a][1], t[a][2]), t[a][3]), shift);
  }
}
