/* The bf16 policy's choice of units (bf16_unit.h). The probe runs in registers only, so it measures the core's
 * issue rate for the two instructions, not caches or memory; alternating rounds and taking each side's fastest
 * keeps a shared machine's interruptions out of it (they only ever slow a round down). The Intel Xeon measured
 * reads 0.48-0.52, far below the threshold; AMD Zen 4's products (2.0-3.1x f32) put it far above, so a noisy
 * probe should not flip the choice between runs. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "backends/cpu/bf16_unit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BPT_AVX512_EMULATION)
#include <immintrin.h>
#define PROBE_NATIVE 1
#endif

static struct {
  pthread_once_t once;
  bool native; /* oneDNN or the own kernel take linear's products */
  bool dot;    /* the own vdpbf16ps kernels (conv2d's lowering, the attention's blocks, gemm's fallback) pay */
  double ratio;
  char choice[192];
} unit = {.once = PTHREAD_ONCE_INIT};

#if defined(PROBE_NATIVE)
enum { PROBE_ITERATIONS = 40000 };

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 12 independent chains in 12 named registers: enough to cover either instruction's latency at its issue rate.
 * The empty asm makes every accumulator live each iteration, so the compiler neither drops nor merges the
 * chains, and keeps them in registers (an array would be stored back each iteration and time the stores). */
#define PROBE_LOOP(type, init, step)                                                                                   \
  type a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init, a8 = init, a9 = init,   \
       a10 = init, a11 = init;                                                                                         \
  const double start = seconds_now();                                                                                  \
  for (int i = 0; i < PROBE_ITERATIONS; i++) {                                                                         \
    step(a0) step(a1) step(a2) step(a3) step(a4) step(a5) step(a6) step(a7) step(a8) step(a9) step(a10)                \
        step(a11) __asm__ volatile(""                                                                                  \
                                   : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7),   \
                                     "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));                                        \
  }                                                                                                                    \
  return seconds_now() - start

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static double dot_seconds(void) {
  /* Pairs of bf16 1.0 and 2^-20: sums stay normal and far from overflow over the whole run. */
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x35803580);
  __asm__("" : "+v"(x), "+v"(y)); /* unknown to the compiler, so it cannot fold the products away */
#define DOT(a) a = _mm512_dpbf16_ps(a, x, y);
  PROBE_LOOP(__m512, _mm512_setzero_ps(), DOT);
#undef DOT
}

__attribute__((target("avx512f"))) static double fma_seconds(void) {
  __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0x1p-20f);
  __asm__("" : "+v"(x), "+v"(y)); /* else clang turns 1.0 * y + a into an add */
#define FMA(a) a = _mm512_fmadd_ps(x, y, a);
  PROBE_LOOP(__m512, _mm512_setzero_ps(), FMA);
#undef FMA
}

double bpt_cpu_bf16_unit_probe(int rounds) {
  if (!bpt_cpu_has_avx512_bf16()) return 0.0;
  (void)dot_seconds(), (void)fma_seconds(); /* the vector units' power-up and the frequency step, once */
  double dot = 1e30, fma = 1e30;
  for (int r = 0; r < (rounds > 0 ? rounds : 1); r++) {
    const double d = dot_seconds(), f = fma_seconds();
    dot = d < dot ? d : dot;
    fma = f < fma ? f : fma;
  }
  /* vdpbf16ps: 32 products and 32 sums per instruction; vfmadd231ps: 16 and 16. */
  return dot > 0.0 ? (32.0 / dot) / (16.0 / fma) : 0.0;
}
#else
double bpt_cpu_bf16_unit_probe(int rounds) {
  (void)rounds;
  return 0.0;
}
#endif

/* CPUID 7.0 EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), and the OS able to save tile state (XCR0 bits 17-18 in
 * CPUID 0xD.0 EAX): only then is oneDNN worth opening to ask whether its kernel is on tiles. */
#if !defined(BPT_AVX512_EMULATION)
static bool cpu_reports_amx(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid_max(0, NULL) < 0xd) return false;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  if ((edx & ((1u << 22) | (1u << 24))) != ((1u << 22) | (1u << 24))) return false;
  __cpuid_count(0xd, 0, eax, ebx, ecx, edx);
  return (eax & (3u << 17)) == (3u << 17);
#else
  return false;
#endif
}
#endif

static void decide(void) {
  if (!bpt_cpu_has_avx512_bf16()) return;
  const char *setting = getenv("BPT_BF16_GEMM");
  if (setting && (strcmp(setting, "bf16") == 0 || strcmp(setting, "own") == 0)) {
    unit.native = unit.dot = true;
    snprintf(unit.choice, sizeof unit.choice, "BPT_BF16_GEMM=%s", setting);
    return;
  }
  if (setting && strcmp(setting, "f32") == 0) {
    snprintf(unit.choice, sizeof unit.choice, "BPT_BF16_GEMM=f32");
    return;
  }
  const char *ignored = setting && *setting ? " (BPT_BF16_GEMM not one of bf16, own, f32: ignored)" : "";
#if defined(BPT_AVX512_EMULATION)
  /* The test build that emulates AVX-512 exists to run the own bf16 kernels. */
  unit.native = unit.dot = true;
  snprintf(unit.choice, sizeof unit.choice, "a test build that emulates AVX-512%s", ignored);
#else
  unit.ratio = bpt_cpu_bf16_unit_probe(3);
  unit.dot = unit.ratio >= BPT_CPU_BF16_UNIT_MIN_RATIO;
  const char *onednn = cpu_reports_amx() ? bpt_cpu_onednn_mode() : NULL;
  unit.native = unit.dot || (onednn && strstr(onednn, "amx"));
  snprintf(unit.choice, sizeof unit.choice, "vdpbf16ps does %.2fx the f32 FMA's multiply-adds per second here%s%s",
           unit.ratio, unit.dot || !unit.native ? "" : "; oneDNN multiplies on AMX tiles", ignored);
#endif
}

bool bpt_cpu_bf16_products_native(void) {
  pthread_once(&unit.once, decide);
  return unit.native;
}

bool bpt_cpu_bf16_dot_pays(void) {
  pthread_once(&unit.once, decide);
  return unit.dot;
}

const char *bpt_cpu_bf16_unit_choice(void) {
  pthread_once(&unit.once, decide);
  return unit.choice[0] ? unit.choice : NULL;
}

double bpt_cpu_bf16_unit_ratio(void) {
  pthread_once(&unit.once, decide);
  return unit.ratio;
}
