/* The generic encoder and decoder behind every narrow float format (see number_format.h). Rounding is
 * done on the integer significand: one add and one shift, whose increment selects nearest-even or
 * stochastic rounding, so the loop bodies stay branch-light enough to port to device code unchanged. */
#include "base/number_format.h"

#include <string.h>

static const bpt_number_format formats[] = {
    /* IEEE 754 binary16 */
    {.exponent_bits = 5, .mantissa_bits = 10, .bias = 15, .max_finite_code = 0x7bff, .has_infinity = true,
     .nan_code = 0x7e00, .subnormal_unit = 0x1p-24f},
    /* bfloat16: the upper half of an f32 */
    {.exponent_bits = 8, .mantissa_bits = 7, .bias = 127, .max_finite_code = 0x7f7f, .has_infinity = true,
     .nan_code = 0x7fc0, .subnormal_unit = 0x1p-133f},
    /* OCP FP8 E4M3: no infinity, one NaN (S.1111.111), so the top binade reaches 448 */
    {.exponent_bits = 4, .mantissa_bits = 3, .bias = 7, .max_finite_code = 0x7e, .has_infinity = false,
     .nan_code = 0x7f, .subnormal_unit = 0x1p-9f},
    /* OCP FP8 E5M2: IEEE-like, max 57344 */
    {.exponent_bits = 5, .mantissa_bits = 2, .bias = 15, .max_finite_code = 0x7b, .has_infinity = true,
     .nan_code = 0x7e, .subnormal_unit = 0x1p-16f},
};

const bpt_number_format *bpt_number_format_of(bpt_dtype dtype) {
  switch (dtype) {
  case BPT_DTYPE_F16: return &formats[0];
  case BPT_DTYPE_BF16: return &formats[1];
  case BPT_DTYPE_FP8_E4M3: return &formats[2];
  case BPT_DTYPE_FP8_E5M2: return &formats[3];
  default: return NULL;
  }
}

static uint32_t float_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static float bits_float(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

uint32_t bpt_number_format_encode(const bpt_number_format *format, float value, bool saturate, bool stochastic,
                                  uint32_t random_bits) {
  const int m = format->mantissa_bits;
  const uint32_t bits = float_bits(value);
  const uint32_t sign = (bits >> 31) << (format->exponent_bits + m);
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t mantissa = magnitude & 0x7fffffu;
  if (magnitude > 0x7f800000u) {
    /* NaN: keep the sign and as much payload as fits, and make it quiet. */
    uint32_t payload = format->has_infinity ? (mantissa >> (23 - m)) : 0;
    return sign | format->nan_code | payload;
  }
  /* value = significand * 2^(exponent - 23), significand with its implicit bit for normal f32 numbers. */
  const int biased = (int)(magnitude >> 23);
  const int exponent = biased ? biased - 127 : -126;
  uint64_t significand = biased ? (uint64_t)(mantissa | 0x800000u) : (uint64_t)mantissa;
  /* Results below the format's smallest normal exponent are subnormal: shift further right. */
  const int minimum_exponent = 1 - format->bias;
  const bool subnormal = exponent < minimum_exponent;
  int shift = (23 - m) + (subnormal ? minimum_exponent - exponent : 0);
  /* (exponent + bias - 1) << m plus a significand that still holds its implicit 2^m gives the code, and a
   * carry out of the significand moves into the exponent field by itself. */
  const uint64_t base = subnormal ? 0 : (uint64_t)(exponent + format->bias - 1) << m;
  if (shift > 32) {
    significand = 0;
    shift = 32;
  }
  const uint64_t increment = stochastic ? (uint64_t)(random_bits >> (32 - shift))
                                        : ((UINT64_C(1) << (shift - 1)) - 1 + ((significand >> shift) & 1));
  const uint64_t code = base + ((significand + increment) >> shift);
  if (code > format->max_finite_code || magnitude == 0x7f800000u) {
    if (saturate) return sign | format->max_finite_code;
    uint32_t overflow = format->has_infinity ? (uint32_t)(((1u << format->exponent_bits) - 1) << m) : format->nan_code;
    return sign | overflow;
  }
  return sign | (uint32_t)code;
}

float bpt_number_format_decode(const bpt_number_format *format, uint32_t code) {
  const int m = format->mantissa_bits;
  const uint32_t exponent_mask = (1u << format->exponent_bits) - 1;
  const uint32_t sign = ((code >> (format->exponent_bits + m)) & 1u) << 31;
  const uint32_t magnitude = code & ((1u << (format->exponent_bits + m)) - 1);
  const uint32_t exponent = magnitude >> m;
  const uint32_t mantissa = code & ((1u << m) - 1);
  if (format->has_infinity && exponent == exponent_mask) {
    /* Infinity, or a NaN whose payload is kept and made quiet (as hardware conversions do). */
    uint32_t quiet = mantissa ? 0x400000u : 0;
    return bits_float(sign | 0x7f800000u | quiet | (mantissa << (23 - m)));
  }
  if (!format->has_infinity && magnitude == format->nan_code) return bits_float(sign | 0x7fc00000u);
  if (exponent == 0) {
    /* mantissa * 2^(1 - bias - m) is exact in f32 for every format here. */
    float value = (float)mantissa * format->subnormal_unit;
    return bits_float(sign | float_bits(value));
  }
  return bits_float(sign | ((exponent - (uint32_t)format->bias + 127u) << 23) | (mantissa << (23 - m)));
}
