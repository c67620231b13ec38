/**
 * @file number_format.h
 * @brief Narrow number formats (f16, bf16, FP8 E4M3/E5M2): host conversions with rounding and saturation choices, and
 * FP8 scale factors.
 */
#ifndef BPTRAIN_NUMBER_FORMAT_H
#define BPTRAIN_NUMBER_FORMAT_H

#include "context.h"

BPT_EXTERN_C_BEGIN

/** How a value between two representable numbers is rounded. */
typedef enum bpt_rounding {
  BPT_ROUND_NEAREST_EVEN = 0, /**< IEEE round to nearest, ties to even */
  BPT_ROUND_STOCHASTIC = 1    /**< up with probability equal to the distance from the lower neighbour, in ulps */
} bpt_rounding;

/** Options for bpt_convert(); get them from bpt_convert_options_default(). */
typedef struct bpt_convert_options {
  size_t size;           /**< sizeof(bpt_convert_options), set by the default function */
  bpt_rounding rounding; /**< default ::BPT_ROUND_NEAREST_EVEN */
  /** Non-zero: values beyond the largest finite number (and infinities) become that number. Zero
   * (default): they become infinity, or NaN for E4M3, which has no infinity. */
  int saturate;
  /** Every value is multiplied by scale before it is encoded, and after it is decoded: the per-tensor
   * scale factor of FP8 (see bpt_fp8_scale()). Default 1. */
  float scale;
  uint64_t seed; /**< picks the random stream for stochastic rounding; equal seeds give equal results */
} bpt_convert_options;

/** @return round to nearest even, no saturation, scale 1, seed 0. */
BPT_API bpt_convert_options bpt_convert_options_default(void);

/**
 * Converts @p count host values between any two of f32, f16, bf16, FP8 E4M3 and FP8 E5M2. Narrow formats are
 * stored as their bit patterns (uint16_t for f16 and bf16, uint8_t for FP8). Conversions between two narrow
 * formats go through f32, which holds every narrow value exactly.
 * @param options NULL for the defaults
 */
BPT_API bpt_status bpt_convert(bpt_context *context, const bpt_convert_options *options, int64_t count,
                               bpt_dtype source_dtype, const void *source, bpt_dtype destination_dtype,
                               void *destination);

/** @return the largest finite value of a floating-point dtype (65504 for f16, 448 for E4M3...), or 0. */
BPT_API float bpt_dtype_max_finite(bpt_dtype dtype);

/**
 * Computes a per-tensor scale factor for FP8: the largest power of two s such that max |values| * s does
 * not exceed the format's largest finite value (1 for an all-zero tensor). Powers of two keep the scaling
 * itself exact. Encode with scale s and decode with scale 1 / s.
 */
BPT_API bpt_status bpt_fp8_scale(bpt_context *context, bpt_dtype dtype, const float *values, int64_t count,
                                 float *scale);

BPT_EXTERN_C_END

#endif
