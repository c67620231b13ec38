/* Lane helpers for the CPU kernels that write their own AVX2 loops (batch_norm_rows.c, conv2d_small.c): a
 * mask of the first lanes, for a row's last, partial vector, and the sum of a vector's lanes. Each is inlined
 * into its caller, whose target attribute includes AVX2. Private to the CPU backend; x86-64 with GCC or
 * clang only. */
#ifndef BPT_CPU_AVX2_LANES_H
#define BPT_CPU_AVX2_LANES_H

#include <stdint.h>

#include <immintrin.h>

#define BPT_AVX2_LANES_INLINE static inline __attribute__((always_inline, target("avx2")))

/* Lanes [0, n) set, n in 0..8: the mask of _mm256_maskload_ps and _mm256_maskstore_ps. */
BPT_AVX2_LANES_INLINE __m256i bpt_avx2_first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The sum of v's 8 lanes: halves, then pairs, then the last two. */
BPT_AVX2_LANES_INLINE float bpt_avx2_sum_lanes(__m256 v) {
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
}

#endif
