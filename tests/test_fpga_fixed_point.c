/* Fixed-point quantisation of fpga-sim against hand-computed ap_fixed<W, I, Q, O> results: truncation toward
 * minus infinity, rounding ties toward plus infinity, wrap-around and saturation at both ends, NaN and
 * infinities, and the f32 format as the identity. */
#include <math.h>

#include "backends/fpga/fpga.h"
#include "core/context.h"
#include "test_kernels.h"
#include "test_support.h"

static bpt_fpga_format fixed(int word, int integer, bpt_fpga_rounding rounding, bpt_fpga_overflow overflow) {
  bpt_fpga_format format = {
      .fixed = true, .word_bits = word, .fraction_bits = word - integer, .rounding = rounding, .overflow = overflow};
  return format;
}

/* ap_fixed<8, 4>: steps of 1/16, range [-8, 7.9375]. */
static void truncation_goes_toward_minus_infinity(void **state) {
  (void)state;
  bpt_fpga_format f = fixed(8, 4, BPT_FPGA_TRUNCATE, BPT_FPGA_SATURATE);
  assert_true(bpt_fpga_quantize(&f, 0.03) == 0.0);
  assert_true(bpt_fpga_quantize(&f, -0.03) == -0.0625);
  assert_true(bpt_fpga_quantize(&f, 0.1249) == 0.0625);
  assert_true(bpt_fpga_quantize(&f, 1.0) == 1.0);
  assert_true(bpt_fpga_quantize(&f, -1.01) == -1.0625);
}

static void rounding_ties_go_up(void **state) {
  (void)state;
  bpt_fpga_format f = fixed(8, 4, BPT_FPGA_ROUND, BPT_FPGA_SATURATE);
  assert_true(bpt_fpga_quantize(&f, 0.03125) == 0.0625); /* exactly half a step */
  assert_true(bpt_fpga_quantize(&f, -0.03125) == 0.0);   /* AP_RND: ties toward plus infinity */
  assert_true(bpt_fpga_quantize(&f, 0.03) == 0.0);
  assert_true(bpt_fpga_quantize(&f, -0.04) == -0.0625);
  assert_true(bpt_fpga_quantize(&f, 7.96) == 7.9375); /* rounds up to 8, which saturates */
}

static void saturation_clamps_both_ends(void **state) {
  (void)state;
  bpt_fpga_format f = fixed(8, 4, BPT_FPGA_TRUNCATE, BPT_FPGA_SATURATE);
  assert_true(bpt_fpga_quantize(&f, 8.0) == 7.9375);
  assert_true(bpt_fpga_quantize(&f, 1e6) == 7.9375);
  assert_true(bpt_fpga_quantize(&f, -8.0) == -8.0);
  assert_true(bpt_fpga_quantize(&f, -8.01) == -8.0);
  assert_true(bpt_fpga_quantize(&f, INFINITY) == 7.9375);
  assert_true(bpt_fpga_quantize(&f, -INFINITY) == -8.0);
}

static void wrap_is_twos_complement(void **state) {
  (void)state;
  bpt_fpga_format f = fixed(8, 4, BPT_FPGA_TRUNCATE, BPT_FPGA_WRAP);
  assert_true(bpt_fpga_quantize(&f, 8.0) == -8.0);       /* 128 -> -128 */
  assert_true(bpt_fpga_quantize(&f, 9.0) == -7.0);       /* 144 -> -112 */
  assert_true(bpt_fpga_quantize(&f, -9.0) == 7.0);       /* -144 -> 112 */
  assert_true(bpt_fpga_quantize(&f, 16.0625) == 0.0625); /* 257 -> 1 */
  assert_true(bpt_fpga_quantize(&f, 7.9375) == 7.9375);
  /* Rounding happens before the wrap, as in ap_fixed: 7.97 rounds to 8 and then wraps. */
  bpt_fpga_format r = fixed(8, 4, BPT_FPGA_ROUND, BPT_FPGA_WRAP);
  assert_true(bpt_fpga_quantize(&r, 7.97) == -8.0);
}

static void special_values_and_wide_words(void **state) {
  (void)state;
  bpt_fpga_format f = fixed(8, 4, BPT_FPGA_ROUND, BPT_FPGA_WRAP);
  assert_true(bpt_fpga_quantize(&f, NAN) == 0.0);
  assert_true(bpt_fpga_quantize(&f, INFINITY) == 0.0);
  bpt_fpga_format wide = fixed(32, 16, BPT_FPGA_ROUND, BPT_FPGA_SATURATE);
  assert_true(bpt_fpga_quantize(&wide, 1.5) == 1.5);
  assert_true(bpt_fpga_quantize(&wide, 32767.99999) == 32767.0 + 65535.0 / 65536.0);
  assert_true(bpt_fpga_quantize(&wide, -40000.0) == -32768.0);
  assert_true(bpt_fpga_resolution(&wide) == 1.0 / 65536.0);
  bpt_fpga_format one_bit_fraction = fixed(2, 1, BPT_FPGA_TRUNCATE, BPT_FPGA_SATURATE); /* {-1, -0.5, 0, 0.5} */
  assert_true(bpt_fpga_quantize(&one_bit_fraction, 0.9) == 0.5);
  assert_true(bpt_fpga_quantize(&one_bit_fraction, -0.9) == -1.0);
  bpt_fpga_format f32 = {.fixed = false};
  assert_true(bpt_fpga_quantize(&f32, 0.1) == 0.1);
  assert_true(bpt_fpga_resolution(&f32) == 0.0);
}

/* The format reaches the kernels: a fixed-point activation saturates and snaps to the grid. */
static void kernels_apply_the_format(void **state) {
  (void)state;
  bpt_context_options options = bpt_context_options_default();
  options.backend = "fpga-sim";
  bpt_context *context = NULL;
  assert_ok(NULL, bpt_context_create(&options, &context));
  bpt_fpga_options fpga = bpt_fpga_options_default();
  fpga.format = BPT_FPGA_FORMAT_FIXED;
  fpga.word_bits = 8;
  fpga.integer_bits = 4;
  fpga.rounding = BPT_FPGA_TRUNCATE;
  fpga.overflow = BPT_FPGA_SATURATE;
  assert_ok(context, bpt_fpga_configure(context, &fpga));
  bpt_fpga_options bad = fpga;
  bad.integer_bits = 9;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "integer_bits", bpt_fpga_configure(context, &bad));
  bpt_backend *backend = &context->backend;
  const float x[4] = {10.0f, -3.3f, 0.07f, 2.5f};
  float y[4];
  bpt_kernel_node relu = test_activation_node(BPT_OP_RELU, 0.0f, 4, x, y, NULL, NULL);
  assert_int_equal(test_kernel_run(backend, &relu, false), BPT_OK);
  assert_true(y[0] == 7.9375f); /* saturated */
  assert_true(y[1] == 0.0f);
  assert_true(y[2] == 0.0625f); /* 0.07 * 16 = 1.12, truncated to 1 */
  assert_true(y[3] == 2.5f);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(truncation_goes_toward_minus_infinity), cmocka_unit_test(rounding_ties_go_up),
      cmocka_unit_test(saturation_clamps_both_ends),           cmocka_unit_test(wrap_is_twos_complement),
      cmocka_unit_test(special_values_and_wide_words),         cmocka_unit_test(kernels_apply_the_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
