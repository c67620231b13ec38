/* Rows of bf16 storage widened to f32 and rounded back (bf16_storage.h's staging): the element-wise and row-wise
 * kernels stage every value they read and write through these, so they are vector loops, compiled three times
 * (baseline, AVX2, AVX-512F) and chosen by the CPU's widest loops. Widening is exact and rounding is integer
 * arithmetic, so every version gives the same bits. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BF16_ROWS_WIDE 1
#include "backends/cpu/avx512_target.h"
#define BF16_ROWS_AVX2_TARGET __attribute__((target("avx2")))
#else
#define BF16_ROWS_WIDE 0
#endif

#define BF16_ROWS_INLINE static inline __attribute__((always_inline))

/* Exact; a signalling NaN is made quiet, as the reference decodes it (number_format.c). */
BF16_ROWS_INLINE void widen(const uint16_t *source, int64_t n, float *destination) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)source[i] << 16;
    bits |= (bits & 0x7fffffffu) > 0x7f800000u ? 0x400000u : 0u;
    memcpy(&destination[i], &bits, sizeof bits);
  }
}

/* bpt_bf16_narrow on whole rows: nearest even on the upper 16 bits, NaN kept and made quiet. */
BF16_ROWS_INLINE void narrow(const float *source, int64_t n, uint16_t *destination) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &source[i], sizeof bits);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t nan = (bits >> 16) | 0x0040u;
    destination[i] = (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

static void widen_portable(const uint16_t *source, int64_t n, float *destination) { widen(source, n, destination); }
static void narrow_portable(const float *source, int64_t n, uint16_t *destination) { narrow(source, n, destination); }
#if BF16_ROWS_WIDE
BF16_ROWS_AVX2_TARGET static void widen_avx2(const uint16_t *source, int64_t n, float *destination) {
  widen(source, n, destination);
}
BF16_ROWS_AVX2_TARGET static void narrow_avx2(const float *source, int64_t n, uint16_t *destination) {
  narrow(source, n, destination);
}
BPT_AVX512_TARGET static void widen_avx512(const uint16_t *source, int64_t n, float *destination) {
  widen(source, n, destination);
}
BPT_AVX512_TARGET static void narrow_avx512(const float *source, int64_t n, uint16_t *destination) {
  narrow(source, n, destination);
}
#endif

void bpt_cpu_bf16_widen_row(const uint16_t *source, int64_t n, float *destination) {
#if BF16_ROWS_WIDE
  const bpt_cpu_loops loops = bpt_cpu_loops_supported();
  if (loops >= BPT_CPU_LOOPS_AVX512)
    widen_avx512(source, n, destination);
  else if (loops >= BPT_CPU_LOOPS_AVX2)
    widen_avx2(source, n, destination);
  else
#endif
    widen_portable(source, n, destination);
}

void bpt_cpu_bf16_narrow_row(const float *source, int64_t n, uint16_t *destination) {
#if BF16_ROWS_WIDE
  const bpt_cpu_loops loops = bpt_cpu_loops_supported();
  if (loops >= BPT_CPU_LOOPS_AVX512)
    narrow_avx512(source, n, destination);
  else if (loops >= BPT_CPU_LOOPS_AVX2)
    narrow_avx2(source, n, destination);
  else
#endif
    narrow_portable(source, n, destination);
}

void bpt_cpu_storage_copy(void *destination, bool destination16, int64_t destination_at, const void *source,
                          bool source16, int64_t source_at, int64_t n) {
  if (destination16 == source16) {
    const size_t size = destination16 ? sizeof(uint16_t) : sizeof(float);
    memcpy((char *)destination + (size_t)destination_at * size, (const char *)source + (size_t)source_at * size,
           (size_t)n * size);
  } else if (source16) {
    bpt_cpu_bf16_widen_row((const uint16_t *)source + source_at, n, (float *)destination + destination_at);
  } else {
    bpt_cpu_bf16_narrow_row((const float *)source + source_at, n, (uint16_t *)destination + destination_at);
  }
}

void bpt_cpu_storage_add(void *destination, bool destination16, int64_t destination_at, const void *source,
                         bool source16, int64_t source_at, int64_t n) {
  if (!destination16 && !source16) {
    float *d = (float *)destination + destination_at;
    const float *s = (const float *)source + source_at;
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      d[i] += s[i];
    return;
  }
  float d_stage[BPT_STORAGE_STAGE], s_stage[BPT_STORAGE_STAGE];
  for (int64_t o = 0; o < n; o += BPT_STORAGE_STAGE) {
    const int64_t m = n - o < BPT_STORAGE_STAGE ? n - o : BPT_STORAGE_STAGE;
    float *d = bpt_storage_write_row(destination, destination16, destination_at + o, m, true, d_stage);
    const float *s = bpt_storage_read_row(source, source16, source_at + o, m, s_stage);
#pragma omp simd
    for (int64_t i = 0; i < m; i++)
      d[i] += s[i];
    bpt_storage_commit_row(destination, destination16, destination_at + o, m, d);
  }
}

void bpt_cpu_storage_zero(void *destination, bool destination16, int64_t destination_at, int64_t n) {
  const size_t size = destination16 ? sizeof(uint16_t) : sizeof(float);
  memset((char *)destination + (size_t)destination_at * size, 0, (size_t)n * size); /* +0 in both */
}
