/* Host conversions between f32 and the narrow formats (the public face of base/number_format.h), and
 * the per-tensor scale factor used for FP8. */
#include <math.h>
#include <string.h>

#include "bptrain/precision.h"
#include "core/context.h"
#include "base/number_format.h"

bpt_convert_options bpt_convert_options_default(void) {
  bpt_convert_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.rounding = BPT_ROUND_NEAREST_EVEN;
  options.scale = 1.0f;
  return options;
}

static bool is_float_dtype(bpt_dtype dtype) { return dtype == BPT_DTYPE_F32 || bpt_number_format_of(dtype); }

static float load(bpt_dtype dtype, const void *values, int64_t i) {
  const bpt_number_format *format = bpt_number_format_of(dtype);
  if (!format) return ((const float *)values)[i];
  uint32_t code = bpt_dtype_size(dtype) == 2 ? ((const uint16_t *)values)[i] : ((const uint8_t *)values)[i];
  return bpt_number_format_decode(format, code);
}

bpt_status bpt_convert(bpt_context *context, const bpt_convert_options *options, int64_t count,
                       bpt_dtype source_dtype, const void *source, bpt_dtype destination_dtype, void *destination) {
  const char *where = "bpt_convert";
  bpt_convert_options o = bpt_convert_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &o, sizeof o, options, options->size,
                               offsetof(bpt_convert_options, seed) + sizeof o.seed, where));
  if (count < 0) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: count %lld is negative", where, (long long)count);
  if (count > 0 && (!source || !destination))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: source or destination is NULL", where);
  if (!is_float_dtype(source_dtype) || !is_float_dtype(destination_dtype))
    return bpt_error(context, BPT_ERR_DTYPE, "%s: %s to %s is not a conversion between floating-point dtypes", where,
                     bpt_dtype_name(source_dtype), bpt_dtype_name(destination_dtype));
  if ((unsigned)o.rounding > (unsigned)BPT_ROUND_STOCHASTIC)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown rounding %d", where, (int)o.rounding);
  if (!isfinite(o.scale) || o.scale == 0.0f)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: scale %g must be finite and non-zero", where,
                     (double)o.scale);
  const bpt_number_format *format = bpt_number_format_of(destination_dtype);
  const bool stochastic = o.rounding == BPT_ROUND_STOCHASTIC;
  for (int64_t i = 0; i < count; i++) {
    float value = load(source_dtype, source, i) * o.scale;
    if (!format) {
      ((float *)destination)[i] = value;
      continue;
    }
    uint32_t random = stochastic ? bpt_number_format_random_bits(o.seed, (uint64_t)i) : 0;
    uint32_t code = bpt_number_format_encode(format, value, o.saturate != 0, stochastic, random);
    if (bpt_dtype_size(destination_dtype) == 2)
      ((uint16_t *)destination)[i] = (uint16_t)code;
    else
      ((uint8_t *)destination)[i] = (uint8_t)code;
  }
  return BPT_OK;
}

float bpt_dtype_max_finite(bpt_dtype dtype) {
  if (dtype == BPT_DTYPE_F32) return 0x1.fffffep127f;
  const bpt_number_format *format = bpt_number_format_of(dtype);
  return format ? bpt_number_format_decode(format, format->max_finite_code) : 0.0f;
}

bpt_status bpt_fp8_scale(bpt_context *context, bpt_dtype dtype, const float *values, int64_t count, float *scale) {
  const char *where = "bpt_fp8_scale";
  if (!scale || (count > 0 && !values))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: values or scale is NULL", where);
  if (dtype != BPT_DTYPE_FP8_E4M3 && dtype != BPT_DTYPE_FP8_E5M2)
    return bpt_error(context, BPT_ERR_DTYPE, "%s: %s is not an FP8 dtype", where, bpt_dtype_name(dtype));
  float maximum = 0.0f;
  for (int64_t i = 0; i < count; i++) {
    float magnitude = fabsf(values[i]);
    if (!isfinite(magnitude))
      return bpt_error(context, BPT_ERR_NUMERIC, "%s: value %lld is %g", where, (long long)i, (double)values[i]);
    maximum = magnitude > maximum ? magnitude : maximum;
  }
  *scale = 1.0f;
  if (maximum == 0.0f) return BPT_OK;
  /* The largest power of two with maximum * 2^k <= max_finite: k = floor(log2(max_finite / maximum)). */
  float ratio = bpt_dtype_max_finite(dtype) / maximum;
  int exponent;
  frexpf(isfinite(ratio) ? ratio : 0x1p127f, &exponent);
  if (exponent > 127) exponent = 127;
  float candidate = ldexpf(1.0f, exponent);
  while (maximum * candidate > bpt_dtype_max_finite(dtype)) candidate *= 0.5f;
  *scale = candidate;
  return BPT_OK;
}
