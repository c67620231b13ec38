/* bf16 block products of the CPU attention under the bf16 policy (scaled_dot_product_attention.c), on CPUs with
 * AVX512_BF16. The operands are packed once into 32-bit words, each a pair of bf16 values adjacent along the
 * reduction (the even index in the low half), the layout vdpbf16ps reads; a head's keys and values are packed
 * once per head, not once per block, since a 64 x 64 x 64 product costs less than packing its operands again.
 * Packing rounds to nearest even (bpt_bf16_from_f32_bits) and pads a missing second element of a pair with 0.
 *
 * A (m x pairs words): word (r, p) at a[r * a_row + p * a_pair], so one packed matrix serves as A or, with its
 * steps swapped, as A transposed. B (pairs x n words): word (p, j) at b[p * ldb + j], j contiguous; the products
 * read B in whole vectors of 16 columns, so columns up to n rounded up to 16 must be readable (packers zero them
 * up to their out_ld). */
#ifndef BPT_CPU_ATTENTION_BF16_H
#define BPT_CPU_ATTENTION_BF16_H

#include <stdint.h>

/* Rows of x (rows x cols at ld) in pairs of columns: out[r * out_ld + p] = (x[r][2p], x[r][2p + 1]). */
void bpt_attention_pack_rows(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out, int64_t out_ld);
/* Pairs of x's rows, column by column: out[p * out_ld + c] = (x[2p][c], x[2p + 1][c]); columns [cols, out_ld)
 * zero. B for a reduction over x's rows (V in P V), or A transposed (P^T in P^T dO: a_row 1, a_pair out_ld). */
void bpt_attention_pack_row_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                  int64_t out_ld);
/* Pairs of x's columns, row by row into columns: out[p * out_ld + r] = (x[r][2p], x[r][2p + 1]); columns
 * [rows, out_ld) zero. B for a reduction over x's columns (K^T in Q K^T). */
void bpt_attention_pack_column_pairs(const float *x, int64_t ld, int64_t rows, int64_t cols, uint32_t *out,
                                     int64_t out_ld);

/* C (m x n at ldc) = alpha A B + beta C (beta 0: C is not read) with f32 accumulation over pairs. */
void bpt_attention_bf16_product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t *a, int64_t a_row,
                                int64_t a_pair, const uint32_t *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* Words to hold `count` values in pairs, rounded up to whole vectors of 16 words. */
static inline int64_t bpt_attention_words(int64_t count) { return ((count + 1) / 2 + 15) / 16 * 16; }
/* A row or column count rounded up to whole vectors of 16. */
static inline int64_t bpt_attention_vectors(int64_t count) { return (count + 15) / 16 * 16; }

#endif
