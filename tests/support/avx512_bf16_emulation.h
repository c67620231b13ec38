/* The five AVX-512 intrinsics of src/backends/cpu/gemm_bf16_avx512.c in plain C, for test_bf16_gemm.c, which
 * compiles that kernel with them so its register blocking (which lanes, which offsets, which stores) is
 * checked on CPUs without AVX512_BF16. _mm512_dpbf16_ps follows the SDM's VDPBF16PS, like the scalar kernel:
 * per lane, acc += odd product then += even product, each one FMA, subnormals in and out flushed to zero.
 * GCC/Clang vector types, so that the kernel's casts between them compile as they do with <immintrin.h>. */
#ifndef BPT_TEST_AVX512_BF16_EMULATION_H
#define BPT_TEST_AVX512_BF16_EMULATION_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* 64-byte vectors passed by value without AVX-512 enabled: GCC and Clang note the ABI change; nothing here
 * crosses an ABI boundary (all static inline, in one test). */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float __m512 __attribute__((vector_size(64)));
typedef long long __m512i __attribute__((vector_size(64)));
typedef short __m512bh __attribute__((vector_size(64)));

static inline __m512 _mm512_setzero_ps(void) { return (__m512){0}; }

static inline __m512i _mm512_loadu_si512(const void *source) {
  __m512i value;
  memcpy(&value, source, sizeof value);
  return value;
}

static inline __m512i _mm512_set1_epi32(int word) {
  uint32_t words[16];
  for (int i = 0; i < 16; i++) words[i] = (uint32_t)word;
  __m512i value;
  memcpy(&value, words, sizeof value);
  return value;
}

static inline void _mm512_storeu_ps(float *destination, __m512 value) {
  memcpy(destination, &value, sizeof value);
}

static inline float emulated_bf16_daz(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static inline __m512 _mm512_dpbf16_ps(__m512 accumulator, __m512bh a, __m512bh b) {
  float sums[16];
  uint16_t a_halves[32], b_halves[32];
  memcpy(sums, &accumulator, sizeof sums);
  memcpy(a_halves, &a, sizeof a_halves);
  memcpy(b_halves, &b, sizeof b_halves);
  for (int i = 0; i < 16; i++)
    for (int half = 1; half >= 0; half--) {
      float sum = fmaf(emulated_bf16_daz(a_halves[2 * i + half]), emulated_bf16_daz(b_halves[2 * i + half]), sums[i]);
      sums[i] = fabsf(sum) < 0x1p-126f ? copysignf(0.0f, sum) : sum;
    }
  memcpy(&accumulator, sums, sizeof sums);
  return accumulator;
}

#endif
