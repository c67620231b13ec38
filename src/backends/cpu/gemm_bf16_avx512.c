/* The native micro-kernel of the bf16 GEMM (gemm_bf16.c): an 8 x 48 tile of f32 accumulators in 24 ZMM
 * registers, one vdpbf16ps per accumulator and pair of reduction indices. Compiled for AVX512_BF16 by function
 * attribute only, so the rest of the library runs on any x86-64; called only where CPUID reports the feature. */
#include "backends/cpu/gemm_bf16.h"

#if defined(BPT_BF16_EMULATED_INTRINSICS)
/* tests/test_bf16_gemm.c compiles this file once more with the intrinsics below written in plain C
 * (tests/support/avx512_emulation.h), so the kernel's indexing is tested on CPUs without AVX512_BF16. */
#include BPT_BF16_EMULATED_INTRINSICS
#define BF16_KERNEL_TARGET
#define BF16_NATIVE 1
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backends/cpu/avx512_target.h"
#define BF16_KERNEL_TARGET BPT_AVX512_BF16_TARGET
#define BF16_NATIVE 1
#endif

#if defined(BF16_NATIVE)

BF16_KERNEL_TARGET void bpt_bf16_micro_kernel_avx512(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel,
                                                     float *tile) {
  __m512 accumulators[BPT_BF16_MR][3];
#pragma GCC unroll 8
  for (int r = 0; r < BPT_BF16_MR; r++)
    accumulators[r][0] = accumulators[r][1] = accumulators[r][2] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; p++) {
    /* 48 columns' pairs of B; each row's pair of A broadcast to all 16 lanes. */
    const uint32_t *b = b_panel + p * BPT_BF16_NR, *a = a_panel + p * BPT_BF16_MR;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16),
                   b2 = (__m512bh)_mm512_loadu_si512(b + 32);
#pragma GCC unroll 8
    for (int r = 0; r < BPT_BF16_MR; r++) {
      const __m512bh pair = (__m512bh)_mm512_set1_epi32((int)a[r]);
      accumulators[r][0] = _mm512_dpbf16_ps(accumulators[r][0], pair, b0);
      accumulators[r][1] = _mm512_dpbf16_ps(accumulators[r][1], pair, b1);
      accumulators[r][2] = _mm512_dpbf16_ps(accumulators[r][2], pair, b2);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < BPT_BF16_MR; r++) {
    _mm512_storeu_ps(tile + r * BPT_BF16_NR, accumulators[r][0]);
    _mm512_storeu_ps(tile + r * BPT_BF16_NR + 16, accumulators[r][1]);
    _mm512_storeu_ps(tile + r * BPT_BF16_NR + 32, accumulators[r][2]);
  }
}

#else

/* Never called without x86-64 (bpt_cpu_has_avx512_bf16 is false there); the scalar kernel keeps it defined. */
void bpt_bf16_micro_kernel_avx512(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel, float *tile) {
  bpt_bf16_micro_kernel_scalar(pairs, a_panel, b_panel, tile);
}

#endif
