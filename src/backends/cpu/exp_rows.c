/* softmax's and attention's exp(x - shift) over a row, with the row's sum: one loop body, compiled for AVX-512,
 * AVX2 + FMA and baseline x86-64 and chosen at run time like batch_norm_rows.c's loops. fast_exp.h's clamps and
 * special cases are selects, which GCC turns into blends only without -ftrapping-math (evaluating both sides
 * of a select could raise an FP exception a branch would not); no code here relies on FP traps. Measured in
 * bench/attention.c (causal, T 512, D 32, one thread): the scalar loop GCC otherwise emits made the fused
 * forward's row work as costly as its products. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "backends/cpu/exp_rows.h"
#include "backends/cpu/fast_exp.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

static inline float exp_row(float *row, int64_t count, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < count; i++) {
    row[i] = bpt_cpu_exp(row[i] - shift);
    sum += row[i];
  }
  return sum;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EXP_ROWS_VECTOR 1
#include "backends/cpu/avx512_target.h" /* AVX2 + FMA in the build that emulates AVX-512 */
BPT_AVX512_TARGET static float exp_row_avx512(float *row, int64_t count, float shift) {
  return exp_row(row, count, shift);
}
__attribute__((target("avx2,fma"))) static float exp_row_avx2(float *row, int64_t count, float shift) {
  return exp_row(row, count, shift);
}
#else
#define EXP_ROWS_VECTOR 0
#endif

float bpt_cpu_exp_row(bpt_cpu_loops loops, float *row, int64_t count, float shift) {
#if EXP_ROWS_VECTOR
  if (loops == BPT_CPU_LOOPS_AVX512) return exp_row_avx512(row, count, shift);
  if (loops == BPT_CPU_LOOPS_AVX2) return exp_row_avx2(row, count, shift);
#else
  (void)loops;
#endif
  return exp_row(row, count, shift);
}
