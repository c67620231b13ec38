/* Number-format kernels on the CPU: casts between f32 and the narrow formats (nearest-even or stochastic),
 * in-place rounding through a format (the storage-precision emulation of mixed precision), the fused
 * unscale-and-check of loss scaling, and the absolute maximum behind per-tensor FP8 scales. All rounding
 * decisions come from core/number_format.c so the CPU is the reference for device ports. */
#include <math.h>
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "base/number_format.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define BPT_HAVE_F16C_PATH 1

/* F16C needs AVX's YMM registers saved by the OS (XCR0 bits 1 and 2); __builtin_cpu_supports would say it
 * for gcc only, clang 14 does not know the name. CPUID leaf 1, ECX: 27 OSXSAVE, 28 AVX, 29 F16C. */
static bool cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned needed = (1u << 27) | (1u << 28) | (1u << 29);
  if ((ecx & needed) != needed) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  (void)xcr0_high;
  return (xcr0_low & 6u) == 6u;
}
#endif

static float load(bpt_dtype dtype, const bpt_number_format *format, const void *values, int64_t i) {
  if (!format) return ((const float *)values)[i];
  uint32_t code = bpt_dtype_size(dtype) == 2 ? ((const uint16_t *)values)[i] : ((const uint8_t *)values)[i];
  return bpt_number_format_decode(format, code);
}

static void store(bpt_dtype dtype, const bpt_number_format *format, void *values, int64_t i, float value,
                  bool stochastic, uint32_t random_bits) {
  if (!format) {
    ((float *)values)[i] = value;
    return;
  }
  /* FP8 saturates (the usual choice for scaled FP8); f16 and bf16 overflow to inf so that loss scaling sees it. */
  bool saturate = bpt_dtype_size(dtype) == 1;
  uint32_t code = bpt_number_format_encode(format, value, saturate, stochastic, random_bits);
  if (bpt_dtype_size(dtype) == 2)
    ((uint16_t *)values)[i] = (uint16_t)code;
  else
    ((uint8_t *)values)[i] = (uint8_t)code;
}

static bool is_float(bpt_dtype dtype) { return dtype == BPT_DTYPE_F32 || bpt_number_format_of(dtype) != NULL; }

/* f32 to bf16 and back as the reference encodes and decodes (nearest even, subnormals kept, overflow to inf, NaN
 * payload kept and made quiet), on the bits, by the vector row loops of bf16_rows.c in blocks: the bf16 policy
 * casts every weight each step (precision.c) and 16-bit storage widens around f32-only kernels, and the generic
 * loop below costs a call per element. */
static void narrow_to_bf16(int64_t count, const float *source, uint16_t *destination) {
  const int64_t blocks = (count + BPT_STORAGE_STAGE - 1) / BPT_STORAGE_STAGE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t at = b * BPT_STORAGE_STAGE;
    bpt_cpu_bf16_narrow_row(source + at, count - at < BPT_STORAGE_STAGE ? count - at : BPT_STORAGE_STAGE,
                            destination + at);
  }
}

/* Exact, a signalling NaN made quiet as the reference decodes it. */
static void widen_from_bf16(int64_t count, const uint16_t *source, float *destination) {
  const int64_t blocks = (count + BPT_STORAGE_STAGE - 1) / BPT_STORAGE_STAGE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t at = b * BPT_STORAGE_STAGE;
    bpt_cpu_bf16_widen_row(source + at, count - at < BPT_STORAGE_STAGE ? count - at : BPT_STORAGE_STAGE,
                           destination + at);
  }
}

bpt_status bpt_cpu_cast(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                        bpt_dtype destination_dtype, void *destination, float scale) {
  if (!is_float(source_dtype) || !is_float(destination_dtype))
    return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cast from %s to %s is not supported", bpt_dtype_name(source_dtype),
                            bpt_dtype_name(destination_dtype));
  if (scale == 1.0f && source_dtype == BPT_DTYPE_F32 && destination_dtype == BPT_DTYPE_BF16) {
    narrow_to_bf16(count, source, destination);
    return BPT_OK;
  }
  if (scale == 1.0f && source_dtype == BPT_DTYPE_BF16 && destination_dtype == BPT_DTYPE_F32) {
    widen_from_bf16(count, source, destination);
    return BPT_OK;
  }
  const bpt_number_format *in = bpt_number_format_of(source_dtype), *out = bpt_number_format_of(destination_dtype);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    store(destination_dtype, out, destination, i, load(source_dtype, in, source, i) * scale, false, 0);
  return BPT_OK;
}

bpt_status bpt_cpu_cast_stochastic(bpt_backend *backend, int64_t count, const float *source,
                                   bpt_dtype destination_dtype, void *destination, float scale, uint64_t seed) {
  if (!is_float(destination_dtype))
    return bpt_backend_fail(backend, BPT_ERR_DTYPE, "stochastic cast to %s is not supported",
                            bpt_dtype_name(destination_dtype));
  const bpt_number_format *out = bpt_number_format_of(destination_dtype);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    store(destination_dtype, out, destination, i, source[i] * scale, true,
          bpt_number_format_random_bits(seed, (uint64_t)i));
  return BPT_OK;
}

static float round_through(const bpt_number_format *format, float value, bool saturate) {
  return bpt_number_format_decode(format, bpt_number_format_encode(format, value, saturate, false, 0));
}

/* NaN payloads are the reference's business: a second, cheap pass hands them to it. */
static void round_nans_through_reference(int64_t count, float *values, bpt_dtype dtype) {
  const bpt_number_format *format = bpt_number_format_of(dtype);
  for (int64_t i = 0; i < count; i++)
    if (values[i] != values[i]) values[i] = round_through(format, values[i], false);
}

/* Round to nearest even on the upper 16 bits; a carry out of the mantissa moves into the exponent, which
 * also turns values past the largest bf16 into infinity, as the reference does. */
static void round_to_bf16(int64_t count, float *values) {
  uint32_t nan_seen[BPT_CPU_REDUCTION_CHUNKS] = {0};
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++) {
    /* An integer OR, not a float count: a float sum would keep the compiler from vectorising the loop (it
     * may not reorder float additions), and this loop runs over every activation and weight copy each step. */
    uint32_t nans = 0;
    for (int64_t i = count * chunk / BPT_CPU_REDUCTION_CHUNKS; i < count * (chunk + 1) / BPT_CPU_REDUCTION_CHUNKS;
         i++) {
      uint32_t bits;
      float value = values[i];
      memcpy(&bits, &value, sizeof bits);
      uint32_t rounded_bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
      /* NaN: exponent all ones and a non-zero mantissa; left as it is here, handed to the reference below. */
      const uint32_t is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
      nans |= is_nan;
      rounded_bits = is_nan ? bits : rounded_bits;
      memcpy(&values[i], &rounded_bits, sizeof rounded_bits);
    }
    nan_seen[chunk] = nans;
  }
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++)
    if (nan_seen[chunk]) {
      round_nans_through_reference(count, values, BPT_DTYPE_BF16);
      return;
    }
}

#if BPT_HAVE_F16C_PATH
/* The target attribute sits on a plain range function: OpenMP's outlined loop bodies do not inherit it. */
__attribute__((target("avx,f16c"))) static void round_range_f16c(float *values, int64_t begin, int64_t end) {
  for (int64_t i = begin; i + 8 <= end; i += 8) {
    __m256 x = _mm256_loadu_ps(values + i);
    _mm256_storeu_ps(values + i, _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)));
  }
}

static void round_to_f16_f16c(int64_t count, float *values) {
  const int64_t vectors = count / 8;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++)
    round_range_f16c(values, 8 * (vectors * chunk / BPT_CPU_REDUCTION_CHUNKS),
                     8 * (vectors * (chunk + 1) / BPT_CPU_REDUCTION_CHUNKS));
  const bpt_number_format *format = bpt_number_format_of(BPT_DTYPE_F16);
  bool nan = false;
  for (int64_t i = vectors * 8; i < count; i++) values[i] = round_through(format, values[i], false);
  for (int64_t i = 0; i < count && !nan; i++) nan = values[i] != values[i];
  if (nan) round_nans_through_reference(count, values, BPT_DTYPE_F16);
}
#endif

bpt_status bpt_cpu_round_to_dtype(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values) {
  const bpt_number_format *format = bpt_number_format_of(dtype);
  if (dtype == BPT_DTYPE_F32) return BPT_OK;
  if (!format) return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cannot round to %s", bpt_dtype_name(dtype));
  /* Mixed-precision emulation rounds every activation and weight copy each step, so the two 16-bit formats
   * have fast paths (bf16: integer rounding on the bits; f16: the F16C conversion instructions); they agree
   * with the reference bit for bit (tests/test_precision.c), and NaNs are left to the reference. */
  if (dtype == BPT_DTYPE_BF16) {
    round_to_bf16(count, values);
    return BPT_OK;
  }
#if BPT_HAVE_F16C_PATH
  if (dtype == BPT_DTYPE_F16 && cpu_has_f16c()) {
    round_to_f16_f16c(count, values);
    return BPT_OK;
  }
#endif
  bool saturate = bpt_dtype_size(dtype) == 1;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    values[i] = round_through(format, values[i], saturate);
  return BPT_OK;
}

bpt_status bpt_cpu_unscale_check_finite(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                        int32_t *found_nonfinite) {
  (void)backend;
  /* Per-chunk flags rather than an OpenMP reduction clause: clang implements those with a global lock
   * symbol that the shared library would export. */
  int nonfinite[BPT_CPU_REDUCTION_CHUNKS] = {0};
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++) {
    int found = 0;
    for (int64_t i = count * chunk / BPT_CPU_REDUCTION_CHUNKS; i < count * (chunk + 1) / BPT_CPU_REDUCTION_CHUNKS;
         i++) {
      /* x - x is 0 for finite x and NaN for inf and NaN: one compare, no classification branch. */
      found |= (gradients[i] - gradients[i]) != 0.0f;
      gradients[i] *= inverse_scale;
    }
    nonfinite[chunk] = found;
  }
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++)
    if (nonfinite[chunk]) *found_nonfinite = 1;
  /* Only ever set, never cleared: the caller zeroes the flag, then may check several buffers into it. */
  return BPT_OK;
}

bpt_status bpt_cpu_absolute_max(bpt_backend *backend, int64_t count, const float *x, float *maximum) {
  (void)backend;
  float partial[BPT_CPU_REDUCTION_CHUNKS] = {0};
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++) {
    float largest = 0.0f;
    for (int64_t i = count * chunk / BPT_CPU_REDUCTION_CHUNKS; i < count * (chunk + 1) / BPT_CPU_REDUCTION_CHUNKS;
         i++) {
      float magnitude = fabsf(x[i]);
      if (magnitude > largest && isfinite(magnitude)) largest = magnitude;
    }
    partial[chunk] = largest;
  }
  float result = 0.0f;
  for (int chunk = 0; chunk < BPT_CPU_REDUCTION_CHUNKS; chunk++)
    result = partial[chunk] > result ? partial[chunk] : result;
  *maximum = result;
  return BPT_OK;
}
