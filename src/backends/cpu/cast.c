/* Number-format kernels on the CPU: casts between f32 and the narrow formats (nearest-even or stochastic),
 * in-place rounding through a format (the storage-precision emulation of mixed precision), the fused
 * unscale-and-check of loss scaling, and the absolute maximum behind per-tensor FP8 scales. All rounding
 * decisions come from core/number_format.c so the CPU is the reference for device ports. */
#include <math.h>

#include "backends/cpu/cpu.h"
#include "core/number_format.h"

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

bpt_status bpt_cpu_cast(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                        bpt_dtype destination_dtype, void *destination, float scale) {
  if (!is_float(source_dtype) || !is_float(destination_dtype))
    return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cast from %s to %s is not supported", bpt_dtype_name(source_dtype),
                            bpt_dtype_name(destination_dtype));
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

bpt_status bpt_cpu_round_to_dtype(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values) {
  const bpt_number_format *format = bpt_number_format_of(dtype);
  if (dtype == BPT_DTYPE_F32) return BPT_OK;
  if (!format) return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cannot round to %s", bpt_dtype_name(dtype));
  bool saturate = bpt_dtype_size(dtype) == 1;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++)
    values[i] = bpt_number_format_decode(format, bpt_number_format_encode(format, values[i], saturate, false, 0));
  return BPT_OK;
}

bpt_status bpt_cpu_unscale_check_finite(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                        int32_t *found_nonfinite) {
  (void)backend;
  int nonfinite = 0;
#pragma omp parallel for reduction(| : nonfinite) if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    /* x - x is 0 for finite x and NaN for inf and NaN: one compare, no classification branch. */
    nonfinite |= (gradients[i] - gradients[i]) != 0.0f;
    gradients[i] *= inverse_scale;
  }
  /* Only ever set, never cleared: the caller zeroes the flag, then may check several buffers into it. */
  if (nonfinite) *found_nonfinite = 1;
  return BPT_OK;
}

bpt_status bpt_cpu_absolute_max(bpt_backend *backend, int64_t count, const float *x, float *maximum) {
  (void)backend;
  float result = 0.0f;
#pragma omp parallel for reduction(max : result) if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float magnitude = fabsf(x[i]);
    if (magnitude > result && isfinite(magnitude)) result = magnitude;
  }
  *maximum = result;
  return BPT_OK;
}
