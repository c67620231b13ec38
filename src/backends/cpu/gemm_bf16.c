/* bf16 matrix products on the CPU (issue 16.2): the blocking, packing, edge tiles and threads, in plain C so
 * that the scalar micro-kernel runs the very same code on any CPU, and the dispatch that picks the native
 * vdpbf16ps micro-kernel (gemm_bf16_avx512.c) for the bf16 policy on CPUs with AVX512_BF16 (where bf16_unit.c
 * found it faster than the f32 units). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

/* Products of at least this many multiply-adds use the OpenMP team (below it, waking the team costs more). */
#define BF16_PARALLEL_VOLUME (1 << 18)

/* Element index of an operand as bf16: f32 operands are rounded here, bf16 ones are taken as stored. */
static inline uint32_t operand(const void *base, bool bf16, int64_t index) {
  if (bf16) return ((const uint16_t *)base)[index];
  uint32_t bits;
  memcpy(&bits, (const float *)base + index, sizeof bits);
  return bpt_bf16_from_f32_bits(bits);
}

/* panel[p width + l] = (line line0 + l, reduction k0 + 2p and + 1) of an operand whose element (line, k) sits
 * at line stride_line + k stride_k; lines from line_count on and the odd last index are zero. Always inlined
 * into pack() with bf16 a constant, so the loops carry no per-element branch: packing is most of the bf16
 * policy's GEMM time on small and middling products. */
static inline __attribute__((always_inline)) void pack_as(const bool bf16, const void *base, int64_t stride_line,
                                                          int64_t stride_k, int64_t line_count, int64_t line0,
                                                          int64_t width, int64_t k0, int64_t kc, uint32_t *panel) {
  const int64_t full = kc / 2, pairs = (kc + 1) / 2;
  const int64_t lines = line_count - line0 < width ? line_count - line0 : width;
  const int64_t origin = line0 * stride_line + k0 * stride_k;
  if (stride_k == 1) {
    /* Along a line the pairs are adjacent (A, or B^T). */
    for (int64_t l = 0; l < lines; l++) {
      const int64_t row = origin + l * stride_line;
      for (int64_t p = 0; p < full; p++)
        panel[p * width + l] = operand(base, bf16, row + 2 * p) | operand(base, bf16, row + 2 * p + 1) << 16;
      if (kc & 1) panel[full * width + l] = operand(base, bf16, row + 2 * full);
    }
  } else {
    /* Two reduction rows interleaved (A^T, or B), lines adjacent within each. */
    for (int64_t p = 0; p < pairs; p++) {
      const int64_t even = origin + 2 * p * stride_k, odd = even + stride_k;
      const bool has_odd = 2 * p + 1 < kc;
      for (int64_t l = 0; l < lines; l++)
        panel[p * width + l] = operand(base, bf16, even + l * stride_line) |
                               (has_odd ? operand(base, bf16, odd + l * stride_line) << 16 : 0u);
    }
  }
  for (int64_t p = 0; p < pairs; p++)
    for (int64_t l = lines; l < width; l++) panel[p * width + l] = 0;
}

/* Compiled twice and picked at load (an ifunc): the baseline x86-64 build packs 4 lanes with scalar stores,
 * the AVX2 clone 8 (perf, bf16 MLP step on one thread, AMD Zen 4: pack 18% of the step beside the vdpbf16ps
 * kernel's 27%; 10% with the clone, the kernel 33%). Integer operations only, so both give the same bits. The
 * emulated-AVX-512 test build keeps the single baseline version, so scripts/check-avx512-emulated.sh tests it.
 * gcc only, as conv2d.c's clones: clang 14 exports the ifunc's resolver ("pack.resolver") despite hidden
 * visibility, which the exported-symbols check refuses. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(BPT_AVX512_EMULATION)
#define BPT_PACK_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define BPT_PACK_CLONES
#endif
BPT_PACK_CLONES
static void pack(const void *base, bool bf16, int64_t stride_line, int64_t stride_k, int64_t line_count,
                 int64_t line0, int64_t width, int64_t k0, int64_t kc, uint32_t *panel) {
  if (bf16)
    pack_as(true, base, stride_line, stride_k, line_count, line0, width, k0, kc, panel);
  else
    pack_as(false, base, stride_line, stride_k, line_count, line0, width, k0, kc, panel);
}

void bpt_bf16_pack_a(const bpt_gemm_args *args, int64_t row0, int64_t k0, int64_t kc, uint32_t *panel) {
  /* op(A) (m, k): A (m, k) row-major, or A (k, m) when transposed. */
  pack(args->a, args->a_dtype == BPT_DTYPE_BF16, args->transpose_a ? 1 : args->lda, args->transpose_a ? args->lda : 1,
       args->m, row0, BPT_BF16_MR, k0, kc, panel);
}

void bpt_bf16_pack_b(const bpt_gemm_args *args, int64_t k0, int64_t kc, int64_t column0, uint32_t *panel) {
  /* op(B) (k, n): B (k, n) row-major, or B (n, k) when transposed; a line is one of op(B)'s columns. */
  pack(args->b, args->b_dtype == BPT_DTYPE_BF16, args->transpose_b ? args->ldb : 1, args->transpose_b ? 1 : args->ldb,
       args->n, column0, BPT_BF16_NR, k0, kc, panel);
}

static inline float bf16_to_f32_daz(uint32_t half) {
  uint32_t bits = (half & 0xffffu) << 16;
  if ((bits & 0x7f800000u) == 0) bits &= 0x80000000u;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static inline float flush_subnormal(float value) {
  return fabsf(value) < 0x1p-126f ? copysignf(0.0f, value) : value;
}

void bpt_bf16_micro_kernel_scalar(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel, float *tile) {
  for (int64_t i = 0; i < BPT_BF16_MR * BPT_BF16_NR; i++) tile[i] = 0.0f;
  for (int64_t p = 0; p < pairs; p++)
    for (int64_t r = 0; r < BPT_BF16_MR; r++) {
      const uint32_t a = a_panel[p * BPT_BF16_MR + r];
      const float a_even = bf16_to_f32_daz(a), a_odd = bf16_to_f32_daz(a >> 16);
      for (int64_t c = 0; c < BPT_BF16_NR; c++) {
        const uint32_t b = b_panel[p * BPT_BF16_NR + c];
        float *accumulator = &tile[r * BPT_BF16_NR + c];
        *accumulator = flush_subnormal(fmaf(a_odd, bf16_to_f32_daz(b >> 16), *accumulator));
        *accumulator = flush_subnormal(fmaf(a_even, bf16_to_f32_daz(b), *accumulator));
      }
    }
}

void bpt_bf16_store_tile(const float *tile, int64_t rows, int64_t columns, float alpha, float beta, void *c_values,
                         bool c_bf16, int64_t ldc, int64_t row0, int64_t column0) {
  if (c_bf16) {
    /* A bf16-stored C (storage dtype, issue 24.5): the f32 result rounded once, as the rounding pass would, by
     * the vector row loops (bf16_rows.c). */
    for (int64_t r = 0; r < rows; r++) {
      uint16_t *out = (uint16_t *)c_values + (row0 + r) * ldc + column0;
      const float *in = tile + r * BPT_BF16_NR;
      float row[BPT_BF16_NR];
      if (beta != 0.0f) bpt_cpu_bf16_widen_row(out, columns, row);
      for (int64_t j = 0; j < columns; j++) row[j] = beta == 0.0f ? alpha * in[j] : alpha * in[j] + beta * row[j];
      bpt_cpu_bf16_narrow_row(row, columns, out);
    }
    return;
  }
  float *c = c_values;
  for (int64_t r = 0; r < rows; r++) {
    float *out = c + (row0 + r) * ldc + column0;
    const float *in = tile + r * BPT_BF16_NR;
    if (beta == 0.0f)
      for (int64_t j = 0; j < columns; j++) out[j] = alpha * in[j];
    else
      for (int64_t j = 0; j < columns; j++) out[j] = alpha * in[j] + beta * out[j];
  }
}

static bool operand_dtype_ok(bpt_dtype dtype) { return dtype == BPT_DTYPE_F32 || dtype == BPT_DTYPE_BF16; }

static bool c_dtype_ok(bpt_dtype dtype) { return dtype == BPT_DTYPE_F32 || dtype == BPT_DTYPE_BF16; }

/* C = beta C, for an empty reduction. */
static void scale_c(const bpt_gemm_args *args) {
  const bool bf16 = args->c_dtype == BPT_DTYPE_BF16;
  for (int64_t i = 0; i < args->m; i++)
    for (int64_t j = 0; j < args->n; j++) {
      const int64_t index = i * args->ldc + j;
      bpt_storage_store(args->c, bf16, index,
                        args->beta == 0.0f ? 0.0f : args->beta * bpt_storage_load(args->c, bf16, index));
    }
}

static bpt_status run_blocked(bpt_backend *backend, const bpt_gemm_args *args, bpt_bf16_micro_kernel kernel);

/* A bf16 C over more than one reduction block accumulates in f32 scratch and is rounded once at the end: a
 * bf16 C carried between blocks would be rounded after each. */
static bpt_status run_through_f32(bpt_backend *backend, const bpt_gemm_args *args, bpt_bf16_micro_kernel kernel) {
  float *wide = malloc((size_t)(args->m * args->n) * sizeof *wide);
  if (!wide)
    return backend ? bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "bf16 gemm: no memory for %lld x %lld scratch",
                                      (long long)args->m, (long long)args->n)
                   : BPT_ERR_OUT_OF_MEMORY;
  /* Rows through the vector loops of bf16_rows.c (the rounding is the same as bpt_bf16_narrow's). */
  const uint16_t *narrow = (const uint16_t *)args->c;
  for (int64_t i = 0; i < args->m; i++)
    if (args->beta == 0.0f)
      memset(wide + i * args->n, 0, (size_t)args->n * sizeof *wide);
    else
      bpt_cpu_bf16_widen_row(narrow + i * args->ldc, args->n, wide + i * args->n);
  bpt_gemm_args f32 = *args;
  f32.c_dtype = BPT_DTYPE_F32;
  f32.c = wide;
  f32.ldc = args->n;
  const bpt_status status = run_blocked(backend, &f32, kernel);
  for (int64_t i = 0; status == BPT_OK && i < args->m; i++)
    bpt_cpu_bf16_narrow_row(wide + i * args->n, args->n, (uint16_t *)args->c + i * args->ldc);
  free(wide);
  return status;
}

bpt_status bpt_bf16_gemm_run(bpt_backend *backend, const bpt_gemm_args *args, bpt_bf16_micro_kernel kernel) {
  if (args->c_dtype == BPT_DTYPE_BF16 && args->k > BPT_BF16_KC && args->m > 0 && args->n > 0)
    return run_through_f32(backend, args, kernel);
  return run_blocked(backend, args, kernel);
}

static bpt_status run_blocked(bpt_backend *backend, const bpt_gemm_args *args, bpt_bf16_micro_kernel kernel) {
  if (!operand_dtype_ok(args->a_dtype) || !operand_dtype_ok(args->b_dtype) || !c_dtype_ok(args->c_dtype))
    return backend ? bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED, "bf16 gemm: operands %s x %s into %s",
                                      bpt_dtype_name(args->a_dtype), bpt_dtype_name(args->b_dtype),
                                      bpt_dtype_name(args->c_dtype))
                   : BPT_ERR_UNSUPPORTED;
  const int64_t m = args->m, n = args->n, k = args->k;
  if (m <= 0 || n <= 0) return BPT_OK;
  if (k <= 0) {
    scale_c(args);
    return BPT_OK;
  }
  const int64_t row_panels = (m + BPT_BF16_MR - 1) / BPT_BF16_MR, column_panels = (n + BPT_BF16_NR - 1) / BPT_BF16_NR;
  const int64_t max_pairs = ((k < BPT_BF16_KC ? k : BPT_BF16_KC) + 1) / 2;
  const int64_t a_words = row_panels * max_pairs * BPT_BF16_MR, b_words = column_panels * max_pairs * BPT_BF16_NR;
  /* 64-byte aligned: every panel is a multiple of 32 bytes long, and whole vectors are loaded from it. */
  const size_t a_bytes = ((size_t)a_words * sizeof(uint32_t) + 63) / 64 * 64;
  const size_t b_bytes = ((size_t)b_words * sizeof(uint32_t) + 63) / 64 * 64;
  uint32_t *a_packed = aligned_alloc(64, a_bytes), *b_packed = aligned_alloc(64, b_bytes);
  if (!a_packed || !b_packed) {
    free(a_packed);
    free(b_packed);
    return backend ? bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY,
                                      "bf16 gemm: no memory for packed %lld x %lld x %lld operands", (long long)m,
                                      (long long)n, (long long)k)
                   : BPT_ERR_OUT_OF_MEMORY;
  }
  const bool parallel = !omp_in_parallel() && (double)m * (double)n * (double)k >= BF16_PARALLEL_VOLUME;
#pragma omp parallel if (parallel)
  for (int64_t k0 = 0; k0 < k; k0 += BPT_BF16_KC) {
    const int64_t kc = k - k0 < BPT_BF16_KC ? k - k0 : BPT_BF16_KC, pairs = (kc + 1) / 2;
    const float beta = k0 == 0 ? args->beta : 1.0f;
#pragma omp for schedule(static)
    for (int64_t jp = 0; jp < column_panels; jp++)
      bpt_bf16_pack_b(args, k0, kc, jp * BPT_BF16_NR, b_packed + jp * max_pairs * BPT_BF16_NR);
#pragma omp for schedule(static)
    for (int64_t ip = 0; ip < row_panels; ip++)
      bpt_bf16_pack_a(args, ip * BPT_BF16_MR, k0, kc, a_packed + ip * max_pairs * BPT_BF16_MR);
    /* Column panels outside: a thread's consecutive tiles share one B panel, which stays in L1. */
#pragma omp for collapse(2) schedule(static)
    for (int64_t jp = 0; jp < column_panels; jp++)
      for (int64_t ip = 0; ip < row_panels; ip++) {
        _Alignas(64) float tile[BPT_BF16_MR * BPT_BF16_NR];
        kernel(pairs, a_packed + ip * max_pairs * BPT_BF16_MR, b_packed + jp * max_pairs * BPT_BF16_NR, tile);
        const int64_t rows = m - ip * BPT_BF16_MR, columns = n - jp * BPT_BF16_NR;
        bpt_bf16_store_tile(tile, rows < BPT_BF16_MR ? rows : BPT_BF16_MR,
                            columns < BPT_BF16_NR ? columns : BPT_BF16_NR, args->alpha, beta, args->c,
                            args->c_dtype == BPT_DTYPE_BF16, args->ldc,
                            ip * BPT_BF16_MR, jp * BPT_BF16_NR);
      }
  }
  free(a_packed);
  free(b_packed);
  return BPT_OK;
}

static bool detect_avx512_bf16(void) {
#if defined(BPT_AVX512_EMULATION)
  /* The test build that emulates AVX-512 (avx512_target.h): the kernel runs wherever the emulated loops do. */
  if (bpt_cpu_loops_supported() == BPT_CPU_LOOPS_AVX512) return true;
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned eax, ebx, ecx, edx;
  /* Leaf 1 ECX bit 27: the OS uses XSAVE, so XCR0 says which register states it saves. */
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  (void)xcr0_high;
  /* XCR0 bits 1-2 (SSE, AVX) and 5-7 (opmask, upper halves of ZMM0-15, ZMM16-31). */
  if ((xcr0_low & 0xe6u) != 0xe6u) return false;
  if (__get_cpuid_max(0, NULL) < 7) return false;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  /* Leaf 7.0 EBX: 16 AVX512F, 30 AVX512BW, 31 AVX512VL; leaf 7.1 EAX bit 5: AVX512_BF16. */
  const unsigned needed = (1u << 16) | (1u << 30) | (1u << 31);
  if ((ebx & needed) != needed) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax & (1u << 5)) != 0;
#else
  return false;
#endif
}

bool bpt_cpu_has_avx512_bf16(void) {
  /* Asked once: every GEMM of the bf16 policy asks, and CPUID serialises the pipeline. -1: not asked yet. */
  static int cached = -1;
  int known = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (known < 0) {
    known = detect_avx512_bf16() ? 1 : 0;
    __atomic_store_n(&cached, known, __ATOMIC_RELAXED);
  }
  return known == 1;
}

bpt_status bpt_cpu_gemm_bf16(bpt_backend *backend, const bpt_gemm_args *args, bool *handled) {
  *handled = args->bf16_products && operand_dtype_ok(args->a_dtype) && operand_dtype_ok(args->b_dtype) &&
             c_dtype_ok(args->c_dtype) && bpt_cpu_has_avx512_bf16();
  return *handled ? bpt_bf16_gemm_run(backend, args, bpt_bf16_micro_kernel_avx512) : BPT_OK;
}

/* The mode where AVX512_BF16 is present but the f32 units take the products (bf16_unit.c), with the reason. */
static struct {
  pthread_once_t once;
  char mode[256];
} f32_units = {.once = PTHREAD_ONCE_INIT};

static void describe_f32_units(void) {
  snprintf(f32_units.mode, sizeof f32_units.mode, "f32 units (cblas_sgemm on bf16 values), not AVX512_BF16: %s",
           bpt_cpu_bf16_unit_choice());
}

const char *bpt_cpu_bf16_gemm_mode(void) {
  if (!bpt_cpu_has_avx512_bf16()) return "emulated: bf16 storage, f32 arithmetic (no AVX512_BF16)";
  if (!bpt_cpu_bf16_products_native()) {
    pthread_once(&f32_units.once, describe_f32_units);
    return f32_units.mode;
  }
#if defined(BPT_AVX512_EMULATION)
  return "emulated AVX512_BF16 in plain C (a test build of the library, not for use)";
#else
  const char *onednn = bpt_cpu_onednn_mode();
  return onednn ? onednn : "native AVX512_BF16 (vdpbf16ps)";
#endif
}
