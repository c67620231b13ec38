/* The vector layer the direct and Winograd kernels are written on once and compiled for two targets. A kernel
 * body (conv2d_direct_tiles.h, conv2d_direct_filter.h, conv2d_winograd_tiles.h, conv2d_winograd_channels.h,
 * conv2d_transpose.h) includes it first and
 * conv2d_vec_end.h last, and a .c file includes the body twice: after defining CONV_VEC_AVX512 (16 lanes of
 * __m512) and after CONV_VEC_AVX2 (8 lanes of __m256, AVX2 + FMA). A body names its functions VEC(name)
 * (name_avx512, name_avx2) and uses only what is defined here (vec_t, vec_*, VEC_*), so each target gets the
 * same arithmetic with its own register width and tile sizes.
 *
 * The AVX2 versions of vec_load_first and vec_store_first go through a small stack buffer instead of
 * vmaskmovps: valgrind (which runs these kernels since it emulates AVX2) can flag vmaskmovps reading past an
 * allocation even where the lanes are masked, and tails are rare enough that the copy costs nothing
 * measurable. vec_maskload and vec_maskstore are the instructions themselves, for conv2d_small_tiles.h, whose
 * rows end inside their buffers and whose tails come once per row.
 * Private to the CPU backend. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/avx2_lanes.h"
#include "backends/cpu/avx512_target.h"

#if defined(CONV_VEC_AVX512)

#define vec_t __m512
#define VEC_LANES 16
#define VEC_LOOPS BPT_CPU_LOOPS_AVX512
#define VEC(name) name##_avx512
#define VEC_TARGET BPT_AVX512_TARGET
#define vec_zero() _mm512_setzero_ps()
#define vec_set1(x) _mm512_set1_ps(x)
#define vec_load(p) _mm512_loadu_ps(p)
#define vec_store(p, v) _mm512_storeu_ps((p), (v))
#define vec_add(a, b) _mm512_add_ps((a), (b))
#define vec_sub(a, b) _mm512_sub_ps((a), (b))
#define vec_fmadd(a, b, c) _mm512_fmadd_ps((a), (b), (c))
/* The first n (0..16) lanes from p, the rest zero; and the first n lanes of v stored at p. */
#define vec_load_first(p, n) _mm512_maskz_loadu_ps(direct_lanes(n), (p))
#define vec_store_first(p, v, n) _mm512_mask_storeu_ps((p), direct_lanes(n), (v))
/* A lane mask for the hardware's masked loads and stores (lanes off read as zero, are not written), and the
 * sum of a vector's lanes. Masked-off lanes are never touched, so a row's last partial vector may end at an
 * allocation's end. */
#define vec_mask_t __mmask16
#define vec_first_mask(n) direct_lanes(n)
#define vec_maskload(p, mask) _mm512_maskz_loadu_ps((mask), (p))
#define vec_maskstore(p, mask, v) _mm512_mask_storeu_ps((p), (mask), (v))
#define vec_sum_lanes(v) _mm512_reduce_add_ps(v)
/* conv2d_small_tiles.h: vectors of columns by 6 result rows per product tile (24 accumulators, 4 loads and 6
 * broadcasts per 24 FMAs), and output channels per weight-gradient tile of 5 taps: 2 (10 accumulators), since
 * GCC 12 kept 4 x 5 in memory and stored every accumulator on every step (0.80-0.86x of AVX2 on LeNet's conv2;
 * bench/conv_small.c). */
#define VEC_CONV_SMALL_VECTORS 4
#define VEC_CONV_SMALL_OUTPUTS 2
/* Output channels by vectors of tiles per register tile of the Winograd products (conv2d_winograd_tiles.h): 16
 * accumulators of 16 tiles, one load per 16 FMAs. Where the outputs do not come in 16s, half the block. */
#define VEC_WINOGRAD_BLOCK 16
#define VEC_WINOGRAD_VECTORS 1
/* The weight gradient's tile (conv2d_winograd_channels.c): output channels by vectors of input channels. */
#define VEC_FILTER_OUTPUTS 16
#define VEC_FILTER_VECTORS 1
/* Vectors of output channels per small-plane Winograd tile (conv2d_winograd_channels.h's small_product). */
#define VEC_SMALL_VECTORS 4
/* Vectors of positions per direct forward tile of DIRECT_BLOCK output channels (conv2d_direct_tiles.h): 4 x 6,
 * 24 accumulators, 6 loads and 4 broadcasts per 24 FMAs. */
#define VEC_DIRECT_VECTORS 6
/* Input channels per direct weight-gradient tile (conv2d_direct_filter.h), times 3 taps: 24 accumulators. */
#define VEC_FILTER_CHANNELS 8
/* target[p] (+)= lane first + p / 2 of evens (p even) or odds (p odd) for p < pixels (pixels <= 2 count): a
 * run of Winograd tiles' two output columns, interleaved into an image row. */
#define vec_store_interleaved vec_store_interleaved_avx512
#define vec_store_lanes vec_store_lanes_avx512
#ifndef CONV_VEC_AVX512_HELPERS
#define CONV_VEC_AVX512_HELPERS
static inline __attribute__((always_inline)) BPT_AVX512_TARGET void
vec_store_interleaved_avx512(float *target, __m512 evens, __m512 odds, int64_t first, int64_t count, int64_t pixels,
                             bool accumulate) {
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __mmask16 lanes = (__mmask16)(((1u << count) - 1u) << first);
  const __mmask16 first_half = direct_lanes(pixels < 16 ? pixels : 16);
  const __mmask16 second_half = direct_lanes(pixels > 16 ? pixels - 16 : 0);
  evens = _mm512_maskz_compress_ps(lanes, evens);
  odds = _mm512_maskz_compress_ps(lanes, odds);
  __m512 values = _mm512_permutex2var_ps(evens, low, odds);
  if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(first_half, target));
  _mm512_mask_storeu_ps(target, first_half, values);
  if (!second_half) return;
  values = _mm512_permutex2var_ps(evens, high, odds);
  if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(second_half, target + 16));
  _mm512_mask_storeu_ps(target + 16, second_half, values);
}

/* target[k] (+)= lane first + k of v for k < count: one output row's run of a tile of positions. */
static inline __attribute__((always_inline)) BPT_AVX512_TARGET void
vec_store_lanes_avx512(float *target, __m512 v, int64_t first, int64_t count, bool accumulate) {
  const __mmask16 lanes = (__mmask16)(((1u << count) - 1u) << first), low = direct_lanes(count);
  __m512 values = _mm512_maskz_compress_ps(lanes, v);
  if (accumulate) values = _mm512_add_ps(values, _mm512_maskz_loadu_ps(low, target));
  _mm512_mask_storeu_ps(target, low, values);
}

/* rows (VEC_LANES vectors) transposed in registers: row r lane l becomes row l lane r. */
#define vec_transpose vec_transpose_avx512
static inline __attribute__((always_inline)) BPT_AVX512_TARGET void vec_transpose_avx512(__m512 rows[16]) {
  __m512 pairs[16], quads[16];
  for (int r = 0; r < 16; r += 2) {
    pairs[r] = _mm512_unpacklo_ps(rows[r], rows[r + 1]);
    pairs[r + 1] = _mm512_unpackhi_ps(rows[r], rows[r + 1]);
  }
  /* quads[4 i + k], 128-bit lane L: column 4 L + k of rows 4 i .. 4 i + 3. */
  for (int r = 0; r < 16; r += 4) {
    const __m512d a = _mm512_castps_pd(pairs[r]), b = _mm512_castps_pd(pairs[r + 1]);
    const __m512d c = _mm512_castps_pd(pairs[r + 2]), d = _mm512_castps_pd(pairs[r + 3]);
    quads[r] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    quads[r + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    quads[r + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    quads[r + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int k = 0; k < 4; k++) {
    const __m512 even_low = _mm512_shuffle_f32x4(quads[k], quads[4 + k], 0x88);
    const __m512 odd_low = _mm512_shuffle_f32x4(quads[k], quads[4 + k], 0xdd);
    const __m512 even_high = _mm512_shuffle_f32x4(quads[8 + k], quads[12 + k], 0x88);
    const __m512 odd_high = _mm512_shuffle_f32x4(quads[8 + k], quads[12 + k], 0xdd);
    rows[k] = _mm512_shuffle_f32x4(even_low, even_high, 0x88);
    rows[8 + k] = _mm512_shuffle_f32x4(even_low, even_high, 0xdd);
    rows[4 + k] = _mm512_shuffle_f32x4(odd_low, odd_high, 0x88);
    rows[12 + k] = _mm512_shuffle_f32x4(odd_low, odd_high, 0xdd);
  }
}
#endif

#elif defined(CONV_VEC_AVX2)

#define vec_t __m256
#define VEC_LANES 8
#define VEC_LOOPS BPT_CPU_LOOPS_AVX2
#define VEC(name) name##_avx2
#define VEC_TARGET __attribute__((target("avx2,fma")))
#define vec_zero() _mm256_setzero_ps()
#define vec_set1(x) _mm256_set1_ps(x)
#define vec_load(p) _mm256_loadu_ps(p)
#define vec_store(p, v) _mm256_storeu_ps((p), (v))
#define vec_add(a, b) _mm256_add_ps((a), (b))
#define vec_sub(a, b) _mm256_sub_ps((a), (b))
#define vec_fmadd(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define vec_load_first(p, n) vec_load_first_avx2((p), (n))
#define vec_store_first(p, v, n) vec_store_first_avx2((p), (v), (n))
#define vec_store_interleaved vec_store_interleaved_avx2
#define vec_store_lanes vec_store_lanes_avx2
#define vec_mask_t __m256i
#define vec_first_mask(n) bpt_avx2_first_lanes(n)
#define vec_maskload(p, mask) _mm256_maskload_ps((p), (mask))
#define vec_maskstore(p, mask, v) _mm256_maskstore_ps((p), (mask), (v))
#define vec_sum_lanes(v) bpt_avx2_sum_lanes(v)
/* 2 x 6 (12 accumulators, 2 loads and 6 broadcasts per 12 FMAs) and 2 x 5 (10): the 16 ymm registers. */
#define VEC_CONV_SMALL_VECTORS 2
#define VEC_CONV_SMALL_OUTPUTS 2
/* 16 ymm registers: 4 output channels by 3 vectors of 8 tiles, 12 accumulators (enough for Zen 2's 2 FMA pipes
 * x 5 cycles), 3 loads and 4 broadcasts per 12 FMAs, the 3 input vectors and a broadcast. Measured
 * (bench/conv_kernels.c, 1 thread, shared machine) against 8 x 1: 16 -> 16 on 28x28 forward 5.3-5.9 against
 * 6.5-6.6 ms, data 5.3-6.2 against 6.0-6.7; 32 -> 32 on 14x14 even (5.1-5.7 against 5.0-5.5); 4 x 2 slower. */
#define VEC_WINOGRAD_BLOCK 4
#define VEC_WINOGRAD_VECTORS 3
/* The channels-in-lanes weight gradient: 8 output channels by a vector of 8 input channels (not re-measured). */
#define VEC_FILTER_OUTPUTS 8
#define VEC_FILTER_VECTORS 1
#define VEC_SMALL_VECTORS 2
/* 4 x 3: 12 accumulators, 3 input vectors and a broadcast fill the 16 ymm registers. */
#define VEC_DIRECT_VECTORS 3
/* 4 input channels by 3 taps: 12 accumulators. */
#define VEC_FILTER_CHANNELS 4

#ifndef CONV_VEC_AVX2_HELPERS
#define CONV_VEC_AVX2_HELPERS
__attribute__((target("avx2,fma"))) static inline __m256 vec_load_first_avx2(const float *p, int64_t n) {
  if (n == 8) return _mm256_loadu_ps(p);
  float lanes[8] = {0};
  memcpy(lanes, p, (size_t)n * sizeof *p);
  return _mm256_loadu_ps(lanes);
}
__attribute__((target("avx2,fma"))) static inline void vec_store_first_avx2(float *p, __m256 v, int64_t n) {
  if (n == 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, v);
  memcpy(p, lanes, (size_t)n * sizeof *p);
}
/* No compress instruction: a whole vector's run (8 tiles of one tile row, the common case on planes of 16 or
 * more) is interleaved in registers, anything else lane by lane from a buffer. */
__attribute__((target("avx2,fma"))) static inline void vec_store_interleaved_avx2(float *target, __m256 evens,
                                                                                  __m256 odds, int64_t first,
                                                                                  int64_t count, int64_t pixels,
                                                                                  bool accumulate) {
  (void)count;
  if (first == 0 && pixels == 16) {
    const __m256 low = _mm256_unpacklo_ps(evens, odds), high = _mm256_unpackhi_ps(evens, odds);
    __m256 front = _mm256_permute2f128_ps(low, high, 0x20), back = _mm256_permute2f128_ps(low, high, 0x31);
    if (accumulate) {
      front = _mm256_add_ps(front, _mm256_loadu_ps(target));
      back = _mm256_add_ps(back, _mm256_loadu_ps(target + 8));
    }
    _mm256_storeu_ps(target, front);
    _mm256_storeu_ps(target + 8, back);
    return;
  }
  float even[8], odd[8];
  _mm256_storeu_ps(even, evens);
  _mm256_storeu_ps(odd, odds);
  for (int64_t p = 0; p < pixels; p++) {
    const float value = p % 2 ? odd[first + p / 2] : even[first + p / 2];
    target[p] = accumulate ? target[p] + value : value;
  }
}

__attribute__((target("avx2,fma"))) static inline void vec_store_lanes_avx2(float *target, __m256 v, int64_t first,
                                                                            int64_t count, bool accumulate) {
  if (first == 0 && count == 8) {
    _mm256_storeu_ps(target, accumulate ? _mm256_add_ps(v, _mm256_loadu_ps(target)) : v);
    return;
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, v);
  for (int64_t k = 0; k < count; k++)
    target[k] = accumulate ? target[k] + lanes[first + k] : lanes[first + k];
}

#define vec_transpose vec_transpose_avx2
__attribute__((target("avx2,fma"))) static inline void vec_transpose_avx2(__m256 rows[8]) {
  __m256 pairs[8], quads[8];
  for (int r = 0; r < 8; r += 2) {
    pairs[r] = _mm256_unpacklo_ps(rows[r], rows[r + 1]);
    pairs[r + 1] = _mm256_unpackhi_ps(rows[r], rows[r + 1]);
  }
  /* quads[4 i + k], 128-bit half H: column 4 H + k of rows 4 i .. 4 i + 3. */
  for (int r = 0; r < 8; r += 4) {
    quads[r] = _mm256_shuffle_ps(pairs[r], pairs[r + 2], 0x44);
    quads[r + 1] = _mm256_shuffle_ps(pairs[r], pairs[r + 2], 0xee);
    quads[r + 2] = _mm256_shuffle_ps(pairs[r + 1], pairs[r + 3], 0x44);
    quads[r + 3] = _mm256_shuffle_ps(pairs[r + 1], pairs[r + 3], 0xee);
  }
  for (int k = 0; k < 4; k++) {
    rows[k] = _mm256_permute2f128_ps(quads[k], quads[4 + k], 0x20);
    rows[4 + k] = _mm256_permute2f128_ps(quads[k], quads[4 + k], 0x31);
  }
}
#endif

#else
#error "define CONV_VEC_AVX512 or CONV_VEC_AVX2 before including conv2d_vec.h"
#endif

#define VEC_INLINE static inline __attribute__((always_inline)) VEC_TARGET
