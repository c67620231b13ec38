/* The AVX-512 intrinsics the CPU backend uses, written in plain C over GCC/Clang vector types, so that its
 * AVX-512 loops run (slowly) on CPUs without AVX-512. Two users:
 *  - the test build of the whole library that emulates AVX-512 (cmake -DBPT_AVX512_EMULATION=ON,
 *    scripts/check-avx512-emulated.sh): src/backends/cpu/avx512_target.h includes this header after
 *    <immintrin.h>, compiles the AVX-512 loops without an AVX-512 target and reports the AVX-512 loop level
 *    and AVX512_BF16 wherever the CPU has AVX2 + FMA, so every test that loops over the levels runs them;
 *  - test_bf16_gemm.c, which compiles the vdpbf16ps micro-kernel once more with these.
 * Each intrinsic follows the Intel SDM's definition of its instruction, lane by lane; the masked loads and
 * stores touch only the lanes their mask selects (as the hardware's fault suppression does), and
 * _mm512_reduce_add_ps adds in the order GCC's avx512fintrin.h does, so sums round as on the real CPU built by
 * GCC. The names are macros onto bpt_emulated_*, so they override <immintrin.h>'s own declarations when both
 * are included. Test code only: never part of a shipped library. */
#ifndef BPT_TEST_AVX512_EMULATION_H
#define BPT_TEST_AVX512_EMULATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 64-byte vectors passed by value without AVX-512 enabled: GCC and Clang note the ABI change; nothing here
 * crosses an ABI boundary (all static inline). */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float bpt_emulated_m512 __attribute__((vector_size(64)));
typedef double bpt_emulated_m512d __attribute__((vector_size(64)));
typedef long long bpt_emulated_m512i __attribute__((vector_size(64)));
typedef short bpt_emulated_m512bh __attribute__((vector_size(64)));
typedef int32_t bpt_emulated_words __attribute__((vector_size(64)));
typedef uint16_t bpt_emulated_mmask16;

#undef __m512
#undef __m512d
#undef __m512i
#undef __m512bh
#undef __mmask16
#define __m512 bpt_emulated_m512
#define __m512d bpt_emulated_m512d
#define __m512i bpt_emulated_m512i
#define __m512bh bpt_emulated_m512bh
#define __mmask16 bpt_emulated_mmask16

#ifndef _CMP_GT_OQ
#define _CMP_GT_OQ 0x1e
#endif

/* Always inlined, so that inside a loop compiled for AVX2 + FMA (avx512_target.h) fmaf becomes one
 * instruction instead of a call. */
#define BPT_EMULATED static inline __attribute__((always_inline, unused))

#undef _mm512_setzero_ps
#undef _mm512_set1_ps
#undef _mm512_set1_epi32
#undef _mm512_setr_epi32
#undef _mm512_loadu_ps
#undef _mm512_loadu_si512
#undef _mm512_storeu_ps
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_maskz_mov_ps
#undef _mm512_add_ps
#undef _mm512_sub_ps
#undef _mm512_mul_ps
#undef _mm512_maskz_sub_ps
#undef _mm512_fmadd_ps
#undef _mm512_mask_cmp_ps_mask
#undef _mm512_maskz_compress_ps
#undef _mm512_permutex2var_ps
#undef _mm512_reduce_add_ps
#undef _mm512_castps_pd
#undef _mm512_castpd_ps
#undef _mm512_unpacklo_ps
#undef _mm512_unpackhi_ps
#undef _mm512_unpacklo_pd
#undef _mm512_unpackhi_pd
#undef _mm512_shuffle_f32x4
#undef _mm512_dpbf16_ps
#define _mm512_setzero_ps bpt_emulated_setzero_ps
#define _mm512_set1_ps bpt_emulated_set1_ps
#define _mm512_set1_epi32 bpt_emulated_set1_epi32
#define _mm512_setr_epi32 bpt_emulated_setr_epi32
#define _mm512_loadu_ps bpt_emulated_loadu_ps
#define _mm512_loadu_si512 bpt_emulated_loadu_si512
#define _mm512_storeu_ps bpt_emulated_storeu_ps
#define _mm512_maskz_loadu_ps bpt_emulated_maskz_loadu_ps
#define _mm512_mask_storeu_ps bpt_emulated_mask_storeu_ps
#define _mm512_maskz_mov_ps bpt_emulated_maskz_mov_ps
#define _mm512_add_ps bpt_emulated_add_ps
#define _mm512_sub_ps bpt_emulated_sub_ps
#define _mm512_mul_ps bpt_emulated_mul_ps
#define _mm512_maskz_sub_ps bpt_emulated_maskz_sub_ps
#define _mm512_fmadd_ps bpt_emulated_fmadd_ps
#define _mm512_mask_cmp_ps_mask bpt_emulated_mask_cmp_ps_mask
#define _mm512_maskz_compress_ps bpt_emulated_maskz_compress_ps
#define _mm512_permutex2var_ps bpt_emulated_permutex2var_ps
#define _mm512_reduce_add_ps bpt_emulated_reduce_add_ps
#define _mm512_castps_pd bpt_emulated_castps_pd
#define _mm512_castpd_ps bpt_emulated_castpd_ps
#define _mm512_unpacklo_ps bpt_emulated_unpacklo_ps
#define _mm512_unpackhi_ps bpt_emulated_unpackhi_ps
#define _mm512_unpacklo_pd bpt_emulated_unpacklo_pd
#define _mm512_unpackhi_pd bpt_emulated_unpackhi_pd
#define _mm512_shuffle_f32x4 bpt_emulated_shuffle_f32x4
#define _mm512_dpbf16_ps bpt_emulated_dpbf16_ps

/* ---- set, load, store ---- */

BPT_EMULATED __m512 bpt_emulated_setzero_ps(void) { return (__m512){0}; }

BPT_EMULATED __m512 bpt_emulated_set1_ps(float value) {
  __m512 v;
  for (int i = 0; i < 16; i++)
    v[i] = value;
  return v;
}

BPT_EMULATED __m512i bpt_emulated_set1_epi32(int word) {
  bpt_emulated_words words;
  for (int i = 0; i < 16; i++)
    words[i] = word;
  return (__m512i)words;
}

/* setr: the first argument is lane 0. */
BPT_EMULATED __m512i bpt_emulated_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7, int e8,
                                             int e9, int e10, int e11, int e12, int e13, int e14, int e15) {
  const bpt_emulated_words words = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
  return (__m512i)words;
}

BPT_EMULATED __m512 bpt_emulated_loadu_ps(const void *source) {
  __m512 v;
  memcpy(&v, source, sizeof v);
  return v;
}

BPT_EMULATED __m512i bpt_emulated_loadu_si512(const void *source) {
  __m512i v;
  memcpy(&v, source, sizeof v);
  return v;
}

BPT_EMULATED void bpt_emulated_storeu_ps(void *target, __m512 v) { memcpy(target, &v, sizeof v); }

BPT_EMULATED __m512 bpt_emulated_maskz_loadu_ps(__mmask16 k, const void *source) {
  const float *p = (const float *)source;
  __m512 v = {0};
  for (int i = 0; i < 16; i++)
    if (k >> i & 1) v[i] = p[i];
  return v;
}

BPT_EMULATED void bpt_emulated_mask_storeu_ps(void *target, __mmask16 k, __m512 v) {
  float *p = (float *)target;
  for (int i = 0; i < 16; i++)
    if (k >> i & 1) p[i] = v[i];
}

BPT_EMULATED __m512 bpt_emulated_maskz_mov_ps(__mmask16 k, __m512 a) {
  __m512 v = {0};
  for (int i = 0; i < 16; i++)
    if (k >> i & 1) v[i] = a[i];
  return v;
}

/* ---- arithmetic ---- */

BPT_EMULATED __m512 bpt_emulated_add_ps(__m512 a, __m512 b) { return a + b; }
BPT_EMULATED __m512 bpt_emulated_sub_ps(__m512 a, __m512 b) { return a - b; }
BPT_EMULATED __m512 bpt_emulated_mul_ps(__m512 a, __m512 b) { return a * b; }

BPT_EMULATED __m512 bpt_emulated_maskz_sub_ps(__mmask16 k, __m512 a, __m512 b) {
  return bpt_emulated_maskz_mov_ps(k, a - b);
}

/* One rounding per lane, as vfmadd. */
BPT_EMULATED __m512 bpt_emulated_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  __m512 v;
  for (int i = 0; i < 16; i++)
    v[i] = fmaf(a[i], b[i], c[i]);
  return v;
}

/* Only the predicate the library uses: greater than, ordered (NaN compares false), quiet. */
#define bpt_emulated_mask_cmp_ps_mask(k, a, b, predicate)                                                              \
  (bpt_emulated_require_gt_oq(predicate), bpt_emulated_mask_cmp_gt((k), (a), (b)))
#define bpt_emulated_require_gt_oq(predicate) ((void)sizeof(char[(predicate) == _CMP_GT_OQ ? 1 : -1]))
BPT_EMULATED __mmask16 bpt_emulated_mask_cmp_gt(__mmask16 k, __m512 a, __m512 b) {
  unsigned bits = 0;
  for (int i = 0; i < 16; i++)
    if ((k >> i & 1) && a[i] > b[i]) bits |= 1u << i;
  return (__mmask16)bits;
}

/* GCC's order: the upper 256 bits plus the lower, then the upper 128 plus the lower, then lanes 2-3 plus 0-1,
 * then lane 0 plus lane 1. */
BPT_EMULATED float bpt_emulated_reduce_add_ps(__m512 a) {
  float halves[8], quarters[4];
  for (int i = 0; i < 8; i++)
    halves[i] = a[8 + i] + a[i];
  for (int i = 0; i < 4; i++)
    quarters[i] = halves[4 + i] + halves[i];
  return (quarters[0] + quarters[2]) + (quarters[1] + quarters[3]);
}

/* ---- moving lanes ---- */

BPT_EMULATED __m512d bpt_emulated_castps_pd(__m512 a) { return (__m512d)a; }
BPT_EMULATED __m512 bpt_emulated_castpd_ps(__m512d a) { return (__m512)a; }

/* The selected lanes packed from lane 0 up, in order; the rest zero. */
BPT_EMULATED __m512 bpt_emulated_maskz_compress_ps(__mmask16 k, __m512 a) {
  __m512 v = {0};
  int j = 0;
  for (int i = 0; i < 16; i++)
    if (k >> i & 1) v[j++] = a[i];
  return v;
}

/* Lane i: bits 0-3 of index word i pick the lane, bit 4 picks b over a. */
BPT_EMULATED __m512 bpt_emulated_permutex2var_ps(__m512 a, __m512i index, __m512 b) {
  const bpt_emulated_words words = (bpt_emulated_words)index;
  __m512 v;
  for (int i = 0; i < 16; i++)
    v[i] = (words[i] & 16) ? b[words[i] & 15] : a[words[i] & 15];
  return v;
}

/* In each 128-bit lane L: a's and b's elements 0, 1 (lo) or 2, 3 (hi) of that lane, interleaved. */
BPT_EMULATED __m512 bpt_emulated_unpack_ps(__m512 a, __m512 b, int first) {
  __m512 v;
  for (int lane = 0; lane < 4; lane++)
    for (int k = 0; k < 2; k++) {
      v[4 * lane + 2 * k] = a[4 * lane + first + k];
      v[4 * lane + 2 * k + 1] = b[4 * lane + first + k];
    }
  return v;
}
BPT_EMULATED __m512 bpt_emulated_unpacklo_ps(__m512 a, __m512 b) { return bpt_emulated_unpack_ps(a, b, 0); }
BPT_EMULATED __m512 bpt_emulated_unpackhi_ps(__m512 a, __m512 b) { return bpt_emulated_unpack_ps(a, b, 2); }

/* In each 128-bit lane L: a's element then b's element, both the lane's first (lo) or second (hi) double. */
BPT_EMULATED __m512d bpt_emulated_unpack_pd(__m512d a, __m512d b, int which) {
  __m512d v;
  for (int lane = 0; lane < 4; lane++) {
    v[2 * lane] = a[2 * lane + which];
    v[2 * lane + 1] = b[2 * lane + which];
  }
  return v;
}
BPT_EMULATED __m512d bpt_emulated_unpacklo_pd(__m512d a, __m512d b) { return bpt_emulated_unpack_pd(a, b, 0); }
BPT_EMULATED __m512d bpt_emulated_unpackhi_pd(__m512d a, __m512d b) { return bpt_emulated_unpack_pd(a, b, 1); }

/* 128-bit lanes: result lanes 0 and 1 from a, 2 and 3 from b, each picked by two bits of the immediate. */
BPT_EMULATED __m512 bpt_emulated_shuffle_f32x4(__m512 a, __m512 b, int immediate) {
  __m512 v;
  for (int lane = 0; lane < 4; lane++) {
    const __m512 source = lane < 2 ? a : b;
    const int from = immediate >> (2 * lane) & 3;
    for (int k = 0; k < 4; k++)
      v[4 * lane + k] = source[4 * from + k];
  }
  return v;
}

/* ---- bf16 ---- */

BPT_EMULATED float bpt_emulated_bf16_daz(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* VDPBF16PS: per lane, acc += the odd pair's product, then += the even pair's, each one FMA; subnormal inputs
 * and results flushed to zero. */
BPT_EMULATED __m512 bpt_emulated_dpbf16_ps(__m512 accumulator, __m512bh a, __m512bh b) {
  uint16_t a_halves[32], b_halves[32];
  memcpy(a_halves, &a, sizeof a_halves);
  memcpy(b_halves, &b, sizeof b_halves);
  for (int i = 0; i < 16; i++)
    for (int half = 1; half >= 0; half--) {
      const float sum = fmaf(bpt_emulated_bf16_daz(a_halves[2 * i + half]),
                             bpt_emulated_bf16_daz(b_halves[2 * i + half]), accumulator[i]);
      accumulator[i] = fabsf(sum) < 0x1p-126f ? copysignf(0.0f, sum) : sum;
    }
  return accumulator;
}

#endif
