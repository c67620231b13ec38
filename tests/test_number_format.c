/* Number formats: every f16 bit pattern and every rounding interval against an independent reference
 * (double-precision arithmetic, and the compiler's _Float16 where it has one), bf16 and both OCP FP8
 * formats against hand-checked tables, and stochastic rounding against its expectation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/number_format.h"
#include "test_support.h"

static uint32_t bits_of(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

/* Reference binary16 decoder: the textbook formula in double. */
static double reference_f16_decode(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double magnitude;
  if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
  else if (exponent == 0) magnitude = ldexp(mantissa, -24);
  else magnitude = ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

/* Reference binary16 encoder (round to nearest even): scale into an integer significand in double and let
 * rint() (ties to even in the default rounding mode) round it. */
static uint16_t reference_f16_encode(float x, int saturate) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return sign | 0x7e00;
  double a = fabs((double)x);
  uint16_t overflow = saturate ? 0x7bff : 0x7c00;
  if (a >= 65520.0) return sign | overflow;
  if (a < ldexp(1.0, -14)) return sign | (uint16_t)rint(a * ldexp(1.0, 24));
  int k;
  frexp(a, &k);
  int exponent = k - 1; /* a in [2^exponent, 2^(exponent + 1)) */
  double q = rint(a / ldexp(1.0, exponent - 10));
  if (q == 2048.0) {
    q = 1024.0;
    exponent++;
  }
  return sign | (uint16_t)(((exponent + 15) << 10) | ((int)q - 1024));
}

static const bpt_number_format *f16(void) { return bpt_number_format_of(BPT_DTYPE_F16); }

static void f16_every_bit_pattern_round_trips(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 65536; h++) {
    float decoded = bpt_number_format_decode(f16(), h);
    double expected = reference_f16_decode((uint16_t)h);
    if (isnan(expected)) {
      if (!isnan(decoded)) fail_msg("f16 0x%04x decodes to %g, expected NaN", h, (double)decoded);
      if ((h >> 15) != (bits_of(decoded) >> 31)) fail_msg("f16 NaN 0x%04x lost its sign", h);
      uint32_t again = bpt_number_format_encode(f16(), decoded, false, false, 0);
      /* NaNs come back quiet with their payload and sign, as hardware conversions return them. */
      if (again != (h | 0x0200)) fail_msg("f16 NaN 0x%04x round-trips to 0x%04x", h, again);
      continue;
    }
    if ((double)decoded != expected || (signbit(decoded) != 0) != ((h >> 15) != 0))
      fail_msg("f16 0x%04x decodes to %a, reference %a", h, (double)decoded, expected);
    uint32_t again = bpt_number_format_encode(f16(), decoded, false, false, 0);
    if (again != h) fail_msg("f16 0x%04x round-trips to 0x%04x", h, again);
#ifdef __FLT16_MAX__
    _Float16 native;
    uint16_t raw = (uint16_t)h;
    memcpy(&native, &raw, sizeof native);
    if (bits_of((float)native) != bits_of(decoded))
      fail_msg("f16 0x%04x: _Float16 gives %a, we give %a", h, (double)(float)native, (double)decoded);
#endif
  }
}

static void check_f16_encode(float x) {
  for (int saturate = 0; saturate < 2; saturate++) {
    uint32_t ours = bpt_number_format_encode(f16(), x, saturate, false, 0);
    uint16_t reference = reference_f16_encode(x, saturate);
    if (ours != reference)
      fail_msg("f32 %a (saturate %d) encodes to f16 0x%04x, reference 0x%04x", (double)x, saturate, ours, reference);
#ifdef __FLT16_MAX__
    if (!saturate && !isnan(x)) {
      _Float16 native = (_Float16)x;
      uint16_t raw;
      memcpy(&raw, &native, sizeof raw);
      if (raw != ours) fail_msg("f32 %a encodes to 0x%04x, _Float16 gives 0x%04x", (double)x, ours, raw);
    }
#endif
  }
}

/* Every interval between neighbouring f16 values: its midpoint (a tie), one f32 ulp either side of it, and
 * the endpoints; then a million random f32 values over the whole f16 range and beyond. */
static void f16_every_rounding_interval_matches_reference(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x7c00; h++) {
    for (int negative = 0; negative < 2; negative++) {
      double low = reference_f16_decode((uint16_t)h);
      double high = h == 0x7bff ? 65536.0 : reference_f16_decode((uint16_t)(h + 1));
      float middle = (float)((low + high) / 2.0);
      assert_true((double)middle == (low + high) / 2.0);
      float probes[] = {(float)low, middle, nextafterf(middle, 0.0f), nextafterf(middle, INFINITY), (float)high};
      for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) check_f16_encode(negative ? -probes[i] : probes[i]);
    }
  }
  float specials[] = {INFINITY, -INFINITY, NAN, -NAN, 0x1.fffffep127f, 1e-45f, -1e-45f, 0x1p-25f, 0x1.000002p-25f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) check_f16_encode(specials[i]);
  test_random random;
  test_random_seed(&random, 11);
  for (int i = 0; i < 1000000; i++) {
    float x = ldexpf(test_random_uniform(&random, -1.0f, 1.0f), (int)test_random_uniform(&random, -30.0f, 20.0f));
    check_f16_encode(x);
  }
}

typedef struct encode_case {
  float value;
  int saturate;
  uint32_t code;
} encode_case;

typedef struct decode_case {
  uint32_t code;
  float value; /* NaN for NaN */
} decode_case;

static void check_tables(bpt_dtype dtype, const encode_case *encodes, size_t encode_count, const decode_case *decodes,
                         size_t decode_count) {
  const bpt_number_format *format = bpt_number_format_of(dtype);
  assert_non_null(format);
  for (size_t i = 0; i < encode_count; i++) {
    uint32_t code = bpt_number_format_encode(format, encodes[i].value, encodes[i].saturate, false, 0);
    if (code != encodes[i].code)
      fail_msg("%s: %a (saturate %d) encodes to 0x%x, expected 0x%x", bpt_dtype_name(dtype),
               (double)encodes[i].value, encodes[i].saturate, code, encodes[i].code);
  }
  for (size_t i = 0; i < decode_count; i++) {
    float value = bpt_number_format_decode(format, decodes[i].code);
    bool same = isnan(decodes[i].value) ? isnan(value) : bits_of(value) == bits_of(decodes[i].value);
    if (!same)
      fail_msg("%s: 0x%x decodes to %a, expected %a", bpt_dtype_name(dtype), decodes[i].code, (double)value,
               (double)decodes[i].value);
  }
  /* Every finite code of the format survives decode then encode. */
  uint32_t codes = 1u << (1 + format->exponent_bits + format->mantissa_bits);
  for (uint32_t code = 0; code < codes; code++) {
    float value = bpt_number_format_decode(format, code);
    if (isnan(value) || isinf(value)) continue;
    uint32_t again = bpt_number_format_encode(format, value, false, false, 0);
    if (again != code) fail_msg("%s: 0x%x -> %a -> 0x%x", bpt_dtype_name(dtype), code, (double)value, again);
  }
}

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static void bf16_table(void **state) {
  (void)state;
  static const encode_case encodes[] = {
      {0x1.fep127f, 0, 0x7f7f},         /* max: 3.3895314e38 */
      {0x1.fffffep127f, 0, 0x7f80},     /* FLT_MAX rounds past max: infinity */
      {0x1.fffffep127f, 1, 0x7f7f},     /* ... or saturates */
      {INFINITY, 0, 0x7f80},            /* inf */
      {-INFINITY, 1, 0xff7f},           /* saturated -inf */
      {NAN, 0, 0x7fc0},                 /* NaN */
      {0x1p-126f, 0, 0x0080},           /* min normal */
      {0x1p-133f, 0, 0x0001},           /* min subnormal */
      {0x1p-134f, 0, 0x0000},           /* half the min subnormal: tie to even (0) */
      {0x1.8p-133f, 0, 0x0002},         /* 1.5 min subnormal: tie to even (2) */
      {0x1.01p0f, 0, 0x3f80},           /* 1 + 2^-8: tie between 0x3f80 and 0x3f81, to even */
      {0x1.03p0f, 0, 0x3f82},           /* 1 + 3 * 2^-8: tie, to even 0x3f82 */
      {0x1.0101p0f, 0, 0x3f81},         /* just above the tie */
      {-2.0f, 0, 0xc000},
      {0.0f, 0, 0x0000},
      {-0.0f, 0, 0x8000},
  };
  static const decode_case decodes[] = {{0x7f7f, 0x1.fep127f}, {0x0080, 0x1p-126f}, {0x0001, 0x1p-133f},
                                        {0x7f80, INFINITY},   {0xff80, -INFINITY}, {0x7fc0, NAN},
                                        {0x3f80, 1.0f},       {0xc000, -2.0f}};
  check_tables(BPT_DTYPE_BF16, encodes, COUNT(encodes), decodes, COUNT(decodes));
  /* bf16 is the upper half of an f32: every pattern decodes to its bits shifted left by 16. */
  const bpt_number_format *format = bpt_number_format_of(BPT_DTYPE_BF16);
  for (uint32_t code = 0; code < 65536; code++) {
    float value = bpt_number_format_decode(format, code);
    if (!isnan(value)) assert_int_equal(bits_of(value), code << 16);
  }
}

static void fp8_e4m3_table(void **state) {
  (void)state;
  static const encode_case encodes[] = {
      {448.0f, 0, 0x7e},     /* max: 1.75 * 2^8, S.1111.110 */
      {464.0f, 0, 0x7e},     /* tie between 448 and 480 (which would be the NaN pattern): to even 448 */
      {465.0f, 0, 0x7f},     /* overflow without saturation: NaN (E4M3 has no infinity) */
      {465.0f, 1, 0x7e},     /* saturated */
      {1e6f, 1, 0x7e},       {-1e6f, 1, 0xfe},
      {INFINITY, 0, 0x7f},   /* infinity: NaN */
      {INFINITY, 1, 0x7e},   /* infinity saturated: max */
      {NAN, 0, 0x7f},        {-NAN, 1, 0xff},
      {0x1p-6f, 0, 0x08},    /* min normal */
      {0x1p-9f, 0, 0x01},    /* min subnormal */
      {0x1p-10f, 0, 0x00},   /* half of it: tie to even, 0 */
      {0x1.8p-9f, 0, 0x02},  /* 1.5 subnormal units: tie to even, 2 */
      {0x1.4p-9f, 0, 0x01},  /* 1.25 units: down */
      {0x1.1p0f, 0, 0x38},   /* 1 + 1/16: tie between 1 (0x38) and 1.125 (0x39), to even */
      {0x1.3p0f, 0, 0x3a},   /* 1 + 3/16: tie between 0x39 and 0x3a, to even */
      {0x1.12p0f, 0, 0x39},  /* just above the first tie */
      {0x1.ep-7f, 0, 0x08},  /* 0.9375 * 2^-6 rounds up across the subnormal boundary to min normal */
      {-1.0f, 0, 0xb8},
  };
  static const decode_case decodes[] = {{0x7e, 448.0f},  {0xfe, -448.0f},   {0x7f, NAN},     {0xff, NAN},
                                        {0x08, 0x1p-6f}, {0x01, 0x1p-9f},   {0x07, 0x1.cp-7f}, {0x78, 256.0f},
                                        {0x38, 1.0f},    {0x80, -0.0f},     {0x7d, 416.0f}};
  check_tables(BPT_DTYPE_FP8_E4M3, encodes, COUNT(encodes), decodes, COUNT(decodes));
  assert_true(bpt_dtype_max_finite(BPT_DTYPE_FP8_E4M3) == 448.0f);
}

static void fp8_e5m2_table(void **state) {
  (void)state;
  static const encode_case encodes[] = {
      {57344.0f, 0, 0x7b},   /* max: 1.75 * 2^15 */
      {61440.0f, 0, 0x7c},   /* tie between max and 2^16: to even, which is infinity (IEEE) */
      {61440.0f, 1, 0x7b},   /* saturated */
      {61439.0f, 0, 0x7b},   /* just below the tie */
      {INFINITY, 0, 0x7c},   {-INFINITY, 0, 0xfc},
      {INFINITY, 1, 0x7b},   /* saturated infinity */
      {NAN, 0, 0x7e},
      {0x1p-14f, 0, 0x04},   /* min normal */
      {0x1p-16f, 0, 0x01},   /* min subnormal */
      {0x1p-17f, 0, 0x00},   /* tie to even: 0 */
      {0x1.8p-16f, 0, 0x02}, /* tie to even: 2 */
      {0x1.2p0f, 0, 0x3c},   /* 1 + 1/8: tie between 1 (0x3c) and 1.25 (0x3d), to even */
      {0x1.6p0f, 0, 0x3e},   /* 1 + 3/8: tie, to even 0x3e */
      {-1.5f, 0, 0xbe},
  };
  static const decode_case decodes[] = {{0x7b, 57344.0f}, {0x7c, INFINITY}, {0xfc, -INFINITY}, {0x7d, NAN},
                                        {0x7e, NAN},      {0x7f, NAN},      {0x04, 0x1p-14f},  {0x01, 0x1p-16f},
                                        {0x3c, 1.0f},     {0x03, 0x1.8p-15f}};
  check_tables(BPT_DTYPE_FP8_E5M2, encodes, COUNT(encodes), decodes, COUNT(decodes));
  assert_true(bpt_dtype_max_finite(BPT_DTYPE_FP8_E5M2) == 57344.0f);
}

/* Stochastic rounding must be unbiased: over N draws the mean of the rounded values equals the input
 * within 5 standard errors (sigma = ulp * sqrt(p (1 - p) / N)), and only the two neighbours ever appear. */
static void stochastic_rounding_is_unbiased(void **state) {
  (void)state;
  struct {
    bpt_dtype dtype;
    float value;
  } cases[] = {{BPT_DTYPE_F16, 1.0f + 0.3f * 0x1p-10f},  {BPT_DTYPE_F16, -3.7e-6f},         /* f16 subnormal */
               {BPT_DTYPE_F16, 0x1p-26f},                 {BPT_DTYPE_BF16, 3.14159265f},
               {BPT_DTYPE_BF16, 1e-39f},                  {BPT_DTYPE_FP8_E4M3, 0.3f},
               {BPT_DTYPE_FP8_E4M3, 300.0f},              {BPT_DTYPE_FP8_E5M2, -0.1f},
               {BPT_DTYPE_FP8_E5M2, 0x1.3p-16f}};
  const int draws = 200000;
  for (size_t c = 0; c < COUNT(cases); c++) {
    const bpt_number_format *format = bpt_number_format_of(cases[c].dtype);
    float x = cases[c].value;
    float down = bpt_number_format_decode(format, bpt_number_format_encode(format, x, true, true, 0));
    float up = bpt_number_format_decode(format, bpt_number_format_encode(format, x, true, true, 0xffffffffu));
    assert_true(fabsf(down) <= fabsf(x) && fabsf(up) >= fabsf(x));
    double sum = 0.0;
    for (int i = 0; i < draws; i++) {
      uint32_t random = bpt_number_format_random_bits(1234 + c, (uint64_t)i);
      float rounded = bpt_number_format_decode(format, bpt_number_format_encode(format, x, true, true, random));
      if (rounded != down && rounded != up)
        fail_msg("%s: %a rounded to %a, not a neighbour (%a, %a)", bpt_dtype_name(cases[c].dtype), (double)x,
                 (double)rounded, (double)down, (double)up);
      sum += rounded;
    }
    double ulp = fabs((double)up - (double)down);
    double p = fabs((double)x - (double)down) / ulp;
    double sigma = ulp * sqrt(p * (1.0 - p) / draws);
    double mean = sum / draws;
    if (fabs(mean - (double)x) > 5.0 * sigma + 1e-3 * ulp)
      fail_msg("%s: stochastic rounding of %a has mean %a (bias %.3g ulp, 5 sigma = %.3g ulp)",
               bpt_dtype_name(cases[c].dtype), (double)x, mean, (mean - x) / ulp, 5.0 * sigma / ulp);
  }
}

static void convert_api(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  float values[6] = {1.0f, -2.5f, 100.0f, 3000.0f, 1e-3f, -0.0f}, back[6];
  uint8_t codes[6];
  /* A per-tensor scale maps the largest magnitude near the top of E4M3, then back. */
  float scale;
  assert_ok(context, bpt_fp8_scale(context, BPT_DTYPE_FP8_E4M3, values, 6, &scale));
  assert_true(scale == 0.125f); /* 3000 * 0.125 = 375 <= 448 < 750 */
  bpt_convert_options options = bpt_convert_options_default();
  options.scale = scale;
  options.saturate = 1;
  assert_ok(context, bpt_convert(context, &options, 6, BPT_DTYPE_F32, values, BPT_DTYPE_FP8_E4M3, codes));
  options.scale = 1.0f / scale;
  assert_ok(context, bpt_convert(context, &options, 6, BPT_DTYPE_FP8_E4M3, codes, BPT_DTYPE_F32, back));
  for (int i = 0; i < 6; i++) assert_true(fabsf(back[i] - values[i]) <= 0.0625f * fabsf(values[i]) + 1e-3f);
  assert_true(back[0] == 1.0f && back[1] == -2.5f && signbit(back[5]));
  /* f16 <-> bf16 goes through f32. */
  uint16_t half[2], brain[2];
  float two[2] = {65504.0f, 1.0f / 3.0f};
  assert_ok(context, bpt_convert(context, NULL, 2, BPT_DTYPE_F32, two, BPT_DTYPE_F16, half));
  assert_ok(context, bpt_convert(context, NULL, 2, BPT_DTYPE_F16, half, BPT_DTYPE_BF16, brain));
  assert_int_equal(half[0], 0x7bff);
  assert_int_equal(brain[0], 0x4780); /* 65504 rounds to 65536 in bf16 */
  assert_fails(context, BPT_ERR_DTYPE, "i32", bpt_convert(context, NULL, 2, BPT_DTYPE_I32, two, BPT_DTYPE_F16, half));
  options = bpt_convert_options_default();
  options.scale = 0.0f;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "scale",
               bpt_convert(context, &options, 2, BPT_DTYPE_F32, two, BPT_DTYPE_F16, half));
  float bad[1] = {NAN};
  assert_fails(context, BPT_ERR_NUMERIC, "value 0", bpt_fp8_scale(context, BPT_DTYPE_FP8_E5M2, bad, 1, &scale));
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f16_every_bit_pattern_round_trips),
      cmocka_unit_test(f16_every_rounding_interval_matches_reference),
      cmocka_unit_test(bf16_table),
      cmocka_unit_test(fp8_e4m3_table),
      cmocka_unit_test(fp8_e5m2_table),
      cmocka_unit_test(stochastic_rounding_is_unbiased),
      cmocka_unit_test(convert_api),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
