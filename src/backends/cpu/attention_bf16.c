/* bf16 block products of the CPU attention (attention_bf16.h). The product keeps a tile of up to 4 rows by 4
 * vectors of 16 columns in 16 ZMM accumulators: per pair, 4 loads of B and 4 broadcasts of A feed 16 vdpbf16ps.
 * Compiled for AVX512_BF16 by function attribute only, and called only where CPUID reports it. */
#include "backends/cpu/attention_bf16.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BPT_AVX512_EMULATION)
#include "backends/cpu/avx512_target.h"
#define ATTENTION_BF16_NATIVE 1
#endif

static inline uint32_t pair_word(float low, float high) {
  uint32_t a, b;
  memcpy(&a, &low, sizeof a);
  memcpy(&b, &high, sizeof b);
  return (uint32_t)bpt_bf16_from_f32_bits(a) | (uint32_t)bpt_bf16_from_f32_bits(b) << 16;
}

static void pack_rows_scalar(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out, int64_t out_ld) {
  const int64_t pairs = cols / 2;
  for (int64_t r = 0; r < rows; r++) {
    const float *row = x + r * ld;
    uint32_t *to = out + r * out_ld;
    for (int64_t p = 0; p < pairs; p++) to[p] = pair_word(row[2 * p], row[2 * p + 1]);
    if (cols % 2) to[pairs] = pair_word(row[cols - 1], 0.0f);
  }
}

static void pack_row_pairs_scalar(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                  int64_t out_ld) {
  for (int64_t p = 0; p < (rows + 1) / 2; p++) {
    const float *even = x + 2 * p * ld, *odd = 2 * p + 1 < rows ? even + ld : NULL;
    uint32_t *to = out + p * out_ld;
    for (int64_t c = 0; c < cols; c++) to[c] = pair_word(even[c], odd ? odd[c] : 0.0f);
    for (int64_t c = cols; c < out_ld; c++) to[c] = 0;
  }
}

static void pack_column_pairs_scalar(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                     int64_t out_ld) {
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t p = 0; p < pairs; p++)
    for (int64_t r = rows; r < out_ld; r++) out[p * out_ld + r] = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *row = x + r * ld;
    for (int64_t p = 0; p < cols / 2; p++) out[p * out_ld + r] = pair_word(row[2 * p], row[2 * p + 1]);
    if (cols % 2) out[(pairs - 1) * out_ld + r] = pair_word(row[cols - 1], 0.0f);
  }
}

#if defined(ATTENTION_BF16_NATIVE)

/* One tile of R rows by V vectors; R and V are constants where it is inlined, so the accumulators stay in
 * registers. The last vector stores only the columns up to n. */
BPT_AVX512_BF16_TARGET static inline __attribute__((always_inline)) void tile(const int R, const int V, int64_t n, int64_t pairs, float alpha,
                                                       const uint32_t *a, int64_t a_row, int64_t a_pair,
                                                       const uint32_t *b, int64_t ldb, float beta, float *c,
                                                       int64_t ldc) {
  __m512 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; p++) {
    __m512bh columns[4];
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) columns[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32((int)a[r * a_row + p * a_pair]);
#pragma GCC unroll 4
      for (int v = 0; v < V; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], pair, columns[v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha), keep = _mm512_set1_ps(beta);
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
      const int64_t left = n - 16 * v;
      const __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
      float *to = c + r * ldc + 16 * v;
      __m512 result = _mm512_mul_ps(acc[r][v], scale);
      if (beta != 0.0f) result = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, to), keep, result);
      _mm512_mask_storeu_ps(to, mask, result);
    }
}

/* The packers the attention runs per block, a vector at a time: VCVTNE2PS2BF16 rounds as
 * bpt_bf16_from_f32_bits does, and masked loads read the missing second element of a pair as 0. */
static inline __mmask16 first_lanes(int64_t count) {
  return count >= 16 ? (__mmask16)0xffff : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1u);
}

BPT_AVX512_BF16_TARGET static void pack_rows_vector(const float *x, int64_t ld, int64_t rows, int64_t cols,
                                                    uint32_t *out, int64_t out_ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c += 32) {
      const float *from = x + r * ld + c;
      const __m512 low = _mm512_maskz_loadu_ps(first_lanes(cols - c), from);
      const __m512 high = _mm512_maskz_loadu_ps(first_lanes(cols - c - 16), from + 16);
      const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(high, low);
      _mm512_mask_storeu_epi32(out + r * out_ld + c / 2, first_lanes((cols - c + 1) / 2), words);
    }
}

BPT_AVX512_BF16_TARGET static void pack_row_pairs_vector(const float *x, int64_t ld, int64_t rows, int64_t cols,
                                                         uint32_t *out, int64_t out_ld) {
  /* [even 0..15 | odd 0..15] as 16-bit lanes into (even c, odd c) pairs. */
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t p = 0; p < (rows + 1) / 2; p++) {
    const float *even = x + 2 * p * ld, *odd = even + ld;
    const bool has_odd = 2 * p + 1 < rows;
    uint32_t *to = out + p * out_ld;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 lanes = first_lanes(cols - c);
      const __m512 e = _mm512_maskz_loadu_ps(lanes, even + c);
      const __m512 o = has_odd ? _mm512_maskz_loadu_ps(lanes, odd + c) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(o, e);
      _mm512_mask_storeu_epi32(to + c, lanes, _mm512_permutexvar_epi16(interleave, both));
    }
    for (int64_t c = cols; c < out_ld; c++) to[c] = 0;
  }
}

/* The transpose, 16 rows at a time: two gathers (the pair's even and odd column down the rows), one
 * conversion and one interleave per 16 words; x's rows must be fewer than 2^31 / ld floats apart. */
BPT_AVX512_BF16_TARGET static void pack_column_pairs_vector(const float *x, int64_t ld, int64_t rows, int64_t cols,
                                                            uint32_t *out, int64_t out_ld) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i steps = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)ld));
  for (int64_t p = 0; p < (cols + 1) / 2; p++) {
    uint32_t *to = out + p * out_ld;
    const bool has_odd = 2 * p + 1 < cols;
    for (int64_t r = 0; r < rows; r += 16) {
      const __mmask16 lanes = first_lanes(rows - r);
      const float *column = x + r * ld + 2 * p;
      const __m512 e = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, steps, column, 4);
      const __m512 o = has_odd ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, steps, column + 1, 4)
                               : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(to + r, lanes,
                               _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(o, e)));
    }
    for (int64_t r = rows; r < out_ld; r++) to[r] = 0;
  }
}

void bpt_attention_pack_column_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                     int64_t out_ld) {
  if (bpt_cpu_has_avx512_bf16() && ld * 16 < INT32_MAX)
    pack_column_pairs_vector(x, ld, rows, cols, out, out_ld);
  else
    pack_column_pairs_scalar(x, ld, rows, cols, out, out_ld);
}

void bpt_attention_pack_rows(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out, int64_t out_ld) {
  if (bpt_cpu_has_avx512_bf16())
    pack_rows_vector(x, ld, rows, cols, out, out_ld);
  else
    pack_rows_scalar(x, ld, rows, cols, out, out_ld);
}

void bpt_attention_pack_row_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                  int64_t out_ld) {
  if (bpt_cpu_has_avx512_bf16())
    pack_row_pairs_vector(x, ld, rows, cols, out, out_ld);
  else
    pack_row_pairs_scalar(x, ld, rows, cols, out, out_ld);
}

#define TILE_CASE(R, V)                                                                                               \
  case (R) * 8 + (V): tile(R, V, n, pairs, alpha, a, a_row, a_pair, b, ldb, beta, c, ldc); break

BPT_AVX512_BF16_TARGET static void tile_any(int rows, int vectors, int64_t n, int64_t pairs, float alpha,
                                            const uint32_t *a, int64_t a_row, int64_t a_pair, const uint32_t *b,
                                            int64_t ldb, float beta, float *c, int64_t ldc) {
  switch (rows * 8 + vectors) {
    TILE_CASE(4, 4); TILE_CASE(4, 3); TILE_CASE(4, 2); TILE_CASE(4, 1);
    TILE_CASE(3, 4); TILE_CASE(3, 3); TILE_CASE(3, 2); TILE_CASE(3, 1);
    TILE_CASE(2, 4); TILE_CASE(2, 3); TILE_CASE(2, 2); TILE_CASE(2, 1);
    TILE_CASE(1, 4); TILE_CASE(1, 3); TILE_CASE(1, 2); TILE_CASE(1, 1);
  default: break;
  }
}

void bpt_attention_bf16_product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t *a, int64_t a_row,
                                int64_t a_pair, const uint32_t *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t columns = n - j0 < 64 ? n - j0 : 64;
    const int vectors = (int)((columns + 15) / 16);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
      const int rows = m - r0 < 4 ? (int)(m - r0) : 4;
      tile_any(rows, vectors, columns, pairs, alpha, a + r0 * a_row, a_row, a_pair, b + j0, ldb, beta,
               c + r0 * ldc + j0, ldc);
    }
  }
}

#else

void bpt_attention_pack_column_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                     int64_t out_ld) {
  pack_column_pairs_scalar(x, ld, rows, cols, out, out_ld);
}

void bpt_attention_pack_rows(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out, int64_t out_ld) {
  pack_rows_scalar(x, ld, rows, cols, out, out_ld);
}

void bpt_attention_pack_row_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                  int64_t out_ld) {
  pack_row_pairs_scalar(x, ld, rows, cols, out, out_ld);
}

/* Without AVX512_BF16 intrinsics the attention never takes this path (it asks bpt_cpu_has_avx512_bf16);
 * this plain loop keeps the symbol defined and computes what the native one does. */
void bpt_attention_bf16_product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t *a, int64_t a_row,
                                int64_t a_pair, const uint32_t *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = 0; j < n; j++) {
      float sum = 0.0f;
      for (int64_t p = 0; p < pairs; p++) {
        const uint32_t x = a[r * a_row + p * a_pair], y = b[p * ldb + j];
        sum += bpt_bf16_widen((uint16_t)x) * bpt_bf16_widen((uint16_t)y) +
               bpt_bf16_widen((uint16_t)(x >> 16)) * bpt_bf16_widen((uint16_t)(y >> 16));
      }
      c[r * ldc + j] = alpha * sum + (beta != 0.0f ? beta * c[r * ldc + j] : 0.0f);
    }
}

#endif
