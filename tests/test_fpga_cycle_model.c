/* The fpga-sim cycle model against counts worked out by hand: single pipelined loops, a GEMM loop nest,
 * II > 1, off-chip transfers, and the overlap of the two engines at a ping-pong join. */
#include <math.h>
#include <string.h>

#include "backends/fpga/fpga.h"
#include "core/context.h"
#include "test_kernels.h"
#include "test_support.h"

/* An fpga-sim context with 2 lanes (2 slices x 1), II `ii`, depth 3, everything on chip unless bram is 0,
 * off-chip bandwidth bytes_per_cycle. */
static bpt_context *small_part_with_bandwidth(int ii, int64_t bram_bytes, double bytes_per_cycle) {
  bpt_context_options options = bpt_context_options_default();
  options.backend = "fpga-sim";
  bpt_context *context = NULL;
  assert_ok(NULL, bpt_context_create(&options, &context));
  bpt_fpga_options fpga = bpt_fpga_options_default();
  fpga.dsp_slices = 2;
  fpga.lanes_per_slice = 1;
  fpga.initiation_interval = ii;
  fpga.pipeline_depth = 3;
  fpga.bram_bytes = bram_bytes;
  fpga.offchip_bytes_per_cycle = bytes_per_cycle;
  fpga.clock_mhz = 100.0;
  fpga.board_watts = 2.0;
  assert_ok(context, bpt_fpga_configure(context, &fpga));
  return context;
}

static bpt_context *small_part(int ii, int64_t bram_bytes) { return small_part_with_bandwidth(ii, bram_bytes, 16.0); }

static bpt_fpga_report report_of(bpt_context *context) {
  bpt_fpga_report report = {.size = sizeof report};
  assert_ok(context, bpt_fpga_get_report(context, &report));
  return report;
}

static void pipelined_loop_formula(void **state) {
  (void)state;
  assert_int_equal(bpt_fpga_pipelined_cycles(0, 1, 5), 0);
  assert_int_equal(bpt_fpga_pipelined_cycles(1, 4, 5), 5);
  assert_int_equal(bpt_fpga_pipelined_cycles(10, 1, 5), 14);
  assert_int_equal(bpt_fpga_pipelined_cycles(10, 3, 5), 32);
}

static void gemm_loop_nest(void **state) {
  (void)state;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[15] = {0}, c[10] = {0};
  bpt_gemm_args args = {.m = 2, .n = 5, .k = 3, .alpha = 1.0f, .a = a, .lda = 3, .b = b, .ldb = 5, .c = c, .ldc = 5};
  /* Per row: ceil(5 / 2) = 3 lane steps; one loop-entry cycle, then one flattened loop of 3 * 3 = 9 trips ->
   * 1 + 8 * II + 3. Two rows. (The entry cycle came with the RTL calibration, issue 28: 22 cycles before.) */
  const uint64_t expected_ii1 = 2 * (1 + 8 + 3), expected_ii2 = 2 * (1 + 16 + 3);
  bpt_context *context = small_part(1, 1 << 20);
  bpt_backend *backend = &context->backend;
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  bpt_fpga_report report = report_of(context);
  assert_int_equal(report.cycles, expected_ii1);
  assert_int_equal(report.transfer_cycles, 0);
  assert_true(report.seconds == (double)expected_ii1 / 100e6);
  assert_true(report.joules == report.seconds * 2.0);
  bpt_context_destroy(context);

  context = small_part(2, 1 << 20);
  backend = &context->backend;
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  assert_int_equal(report_of(context).cycles, expected_ii2);
  bpt_context_destroy(context);
}

static void offchip_operands_add_transfer_cycles(void **state) {
  (void)state;
  bpt_context *context = small_part(1, 0); /* no BRAM: every allocation is off chip */
  bpt_backend *backend = &context->backend;
  float *a, *b, *c;
  assert_int_equal(backend->vtable->alloc(backend, 6 * sizeof(float), (void **)&a), BPT_OK);
  assert_int_equal(backend->vtable->alloc(backend, 15 * sizeof(float), (void **)&b), BPT_OK);
  assert_int_equal(backend->vtable->alloc(backend, 10 * sizeof(float), (void **)&c), BPT_OK);
  for (int i = 0; i < 6; i++)
    a[i] = (float)i;
  for (int i = 0; i < 15; i++)
    b[i] = (float)i;
  bpt_gemm_args args = {.m = 2, .n = 5, .k = 3, .alpha = 1.0f, .a = a, .lda = 3, .b = b, .ldb = 5, .c = c, .ldc = 5};
  assert_ok(context, bpt_fpga_reset_counters(context));
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  /* (6 + 15 + 10) f32 values = 124 bytes at 16 bytes per cycle -> 8 cycles on top of the 24 of the loops. */
  bpt_fpga_report report = report_of(context);
  assert_int_equal(report.transfer_cycles, 8);
  assert_int_equal(report.cycles, 24 + 8);
  assert_true(report.off_chip_bytes > 0 && report.on_chip_bytes == 0);
  backend->vtable->free(backend, a);
  backend->vtable->free(backend, b);
  backend->vtable->free(backend, c);
  bpt_context_destroy(context);
}

/* The options take any positive bandwidth: a tiny one saturates a transfer's cycle count (converting a double
 * past 2^64 to an integer is undefined: UBSan in the sanitizer stage). */
static void a_tiny_bandwidth_saturates_the_transfer_cycles(void **state) {
  (void)state;
  bpt_context *context = small_part_with_bandwidth(1, 0, 1e-300);
  bpt_backend *backend = &context->backend;
  float *values;
  assert_int_equal(backend->vtable->alloc(backend, 4 * sizeof(float), (void **)&values), BPT_OK);
  const float host[4] = {1, 2, 3, 4};
  assert_int_equal(backend->vtable->upload(backend, values, host, sizeof host), BPT_OK);
  bpt_fpga_report report = report_of(context);
  assert_true(report.transfer_cycles == UINT64_MAX);
  backend->vtable->free(backend, values);
  bpt_context_destroy(context);
}

static void ping_pong_overlap_charges_the_longer_engine(void **state) {
  (void)state;
  bpt_context *context = small_part(1, 1 << 20);
  bpt_backend *backend = &context->backend;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[15] = {0}, c[10] = {0}, x[10] = {0}, y[10];
  const bpt_kernel_node relu = test_activation_node(BPT_OP_RELU, 0.0f, 10, x, y, NULL, NULL);
  bpt_gemm_args args = {.m = 2, .n = 5, .k = 3, .alpha = 1.0f, .a = a, .lda = 3, .b = b, .ldb = 5, .c = c, .ldc = 5};
  /* Engine 1: the GEMM above, 24 cycles. Engine 0: an activation over 10 values, 5 trips -> 4 + 3 = 7 cycles. */
  assert_int_equal(backend->vtable->engine_select(backend, 1), BPT_OK);
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  assert_int_equal(backend->vtable->engine_select(backend, 0), BPT_OK);
  assert_int_equal(test_kernel_run(backend, &relu, false), BPT_OK);
  assert_int_equal(backend->vtable->engine_join(backend), BPT_OK);
  bpt_fpga_report report = report_of(context);
  assert_int_equal(report.cycles, 24);
  assert_int_equal(report.overlap_saved_cycles, 7);
  assert_int_equal(report.compute_cycles, 31);
  /* The same work without a join is sequential: 24 + 7 more. */
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  assert_int_equal(test_kernel_run(backend, &relu, false), BPT_OK);
  assert_int_equal(report_of(context).cycles, 24 + 31);
  assert_int_equal(backend->vtable->engine_select(backend, 2), BPT_ERR_INVALID_ARGUMENT);
  /* Per kernel: two GEMMs of 2 x 5 x 3 = 30 MACs each in 2 x 24 cycles on 2 lanes: utilisation 60 / 96. */
  bpt_fpga_kernel_report gemm = {.size = sizeof gemm};
  assert_ok(context, bpt_fpga_get_kernel_report(context, BPT_FPGA_KERNEL_GEMM, &gemm));
  assert_string_equal(gemm.name, "gemm");
  assert_int_equal(gemm.calls, 2);
  assert_int_equal(gemm.compute_cycles, 48);
  assert_int_equal(gemm.operations, 60);
  assert_true(fabs(gemm.utilisation - 60.0 / 96.0) < 1e-12);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "index", bpt_fpga_get_kernel_report(context, -1, &gemm));
  assert_int_equal(bpt_fpga_kernel_count(), BPT_FPGA_KERNEL_COUNT);
  char text[2048];
  assert_ok(context, bpt_fpga_format_report(context, text, sizeof text));
  assert_non_null(strstr(text, "gemm"));
  assert_non_null(strstr(text, "hidden by engine overlap"));
  bpt_context_destroy(context);
}

static void api_rejects_other_backends(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_fpga_options options = bpt_fpga_options_default();
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "not 'fpga-sim'", bpt_fpga_configure(context, &options));
  bpt_fpga_report report = {.size = sizeof report};
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "not 'fpga-sim'", bpt_fpga_get_report(context, &report));
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pipelined_loop_formula),
      cmocka_unit_test(gemm_loop_nest),
      cmocka_unit_test(offchip_operands_add_transfer_cycles),
      cmocka_unit_test(a_tiny_bandwidth_saturates_the_transfer_cycles),
      cmocka_unit_test(ping_pong_overlap_charges_the_longer_engine),
      cmocka_unit_test(api_rejects_other_backends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
