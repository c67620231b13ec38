/* CPU kernels against plain reference implementations: every GEMM transpose case on random shapes
 * (the forward, input-gradient and weight-gradient products of linear), bias and activation kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/context.h"
#include "test_kernels.h"
#include "test_support.h"

static bpt_backend *cpu_backend(bpt_context *context) { return &context->backend; }

static void gemm_matches_reference_for_all_transposes(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = cpu_backend(context);
  test_random random;
  test_random_seed(&random, 11);
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 9}, {64, 33, 128}, {128, 784, 10}, {31, 257, 65}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int transpose_a = 0; transpose_a < 2; transpose_a++)
      for (int transpose_b = 0; transpose_b < 2; transpose_b++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        /* Leading dimensions larger than the rows so strided access is exercised too. */
        int64_t lda = (transpose_a ? m : k) + 3, ldb = (transpose_b ? k : n) + 2, ldc = n + 1;
        int64_t a_rows = transpose_a ? k : m, b_rows = transpose_b ? n : k;
        float *a = malloc((size_t)(a_rows * lda) * sizeof *a), *b = malloc((size_t)(b_rows * ldb) * sizeof *b);
        float *c = malloc((size_t)(m * ldc) * sizeof *c), *expected = malloc((size_t)(m * ldc) * sizeof *c);
        test_random_fill(&random, a, a_rows * lda, -1.0f, 1.0f);
        test_random_fill(&random, b, b_rows * ldb, -1.0f, 1.0f);
        test_random_fill(&random, c, m * ldc, -1.0f, 1.0f);
        memcpy(expected, c, (size_t)(m * ldc) * sizeof *c);
        float alpha = 0.75f, beta = (s % 2) ? 1.0f : 0.0f;
        bpt_gemm_args args = {.transpose_a = transpose_a, .transpose_b = transpose_b, .m = m, .n = n, .k = k,
                              .alpha = alpha, .a = a, .lda = lda, .b = b, .ldb = ldb, .beta = beta, .c = c, .ldc = ldc};
        assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
        test_reference_gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, expected, ldc);
        double error = test_relative_error(c, expected, m * ldc);
        if (error > 1e-5)
          fail_msg("gemm %lldx%lldx%lld ta=%d tb=%d: relative error %g", (long long)m, (long long)n, (long long)k,
                   transpose_a, transpose_b, error);
        free(a);
        free(b);
        free(c);
        free(expected);
      }
  bpt_context_destroy(context);
}

static void bias_kernels_match_reference(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = cpu_backend(context);
  test_random random;
  test_random_seed(&random, 12);
  enum { ROWS = 37, COLS = 129 };
  float y[ROWS * COLS], expected[ROWS * COLS], bias[COLS], gradient[COLS], expected_gradient[COLS];
  test_random_fill(&random, y, ROWS * COLS, -1.0f, 1.0f);
  test_random_fill(&random, bias, COLS, -1.0f, 1.0f);
  test_random_fill(&random, gradient, COLS, -1.0f, 1.0f);
  memcpy(expected_gradient, gradient, sizeof gradient);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) {
      expected[r * COLS + c] = y[r * COLS + c] + bias[c];
      expected_gradient[c] += y[r * COLS + c];
    }
  bpt_kernel_node node = test_linear_bias_node(ROWS, COLS, bias, gradient, y, y);
  assert_int_equal(test_kernel_run(backend, &node, true), BPT_OK);
  assert_true(test_relative_error(gradient, expected_gradient, COLS) < 1e-6);
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  assert_true(test_relative_error(y, expected, ROWS * COLS) < 1e-7);
  bpt_context_destroy(context);
}

static double reference_activation(bpt_activation kind, double x) {
  switch (kind) {
  case BPT_ACTIVATION_RELU: return x > 0 ? x : 0;
  case BPT_ACTIVATION_LEAKY_RELU: return x > 0 ? x : 0.2 * x;
  case BPT_ACTIVATION_SIGMOID: return 1 / (1 + exp(-x));
  case BPT_ACTIVATION_TANH: return tanh(x);
  }
  return NAN;
}

/* Large enough to take the OpenMP path, so the parallel loops are what is checked. */
static void activations_match_reference(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = cpu_backend(context);
  test_random random;
  test_random_seed(&random, 13);
  const int64_t count = 100003;
  float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y), *expected = malloc(count * sizeof *y);
  float *dy = malloc(count * sizeof *dy), *dx = malloc(count * sizeof *dx), *expected_dx = malloc(count * sizeof *dx);
  test_random_fill(&random, x, count, -6.0f, 6.0f);
  test_random_fill(&random, dy, count, -1.0f, 1.0f);
  bpt_activation kinds[] = {BPT_ACTIVATION_RELU, BPT_ACTIVATION_LEAKY_RELU, BPT_ACTIVATION_SIGMOID,
                            BPT_ACTIVATION_TANH};
  const bpt_op_id ops[] = {BPT_OP_RELU, BPT_OP_LEAKY_RELU, BPT_OP_SIGMOID, BPT_OP_TANH};
  for (size_t k = 0; k < 4; k++) {
    for (int64_t i = 0; i < count; i++) {
      expected[i] = (float)reference_activation(kinds[k], x[i]);
      double h = 1e-3;
      double derivative = kinds[k] <= BPT_ACTIVATION_LEAKY_RELU
                              ? (x[i] > 0 ? 1.0 : (kinds[k] == BPT_ACTIVATION_RELU ? 0.0 : 0.2))
                              : (reference_activation(kinds[k], x[i] + h) - reference_activation(kinds[k], x[i] - h)) /
                                    (2 * h);
      dx[i] = 0.5f;
      expected_dx[i] = (float)(0.5 + derivative * dy[i]);
    }
    bpt_kernel_node node = test_activation_node(ops[k], 0.2f, count, x, y, dx, dy);
    assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
    assert_true(test_relative_error(y, expected, count) < 1e-6);
    assert_int_equal(test_kernel_run(backend, &node, true), BPT_OK);
    double error = test_relative_error(dx, expected_dx, count);
    if (error > 1e-5) fail_msg("activation %d backward: relative error %g", (int)kinds[k], error);
  }
  free(x);
  free(y);
  free(expected);
  free(dy);
  free(dx);
  free(expected_dx);
  bpt_context_destroy(context);
}

/* Large logits must not overflow: the stable form gives the exact loss log(1 + e^-1000) ~ 0. */
static void softmax_cross_entropy_is_stable(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = cpu_backend(context);
  float logits[6] = {1000.0f, 0.0f, -1000.0f, 3.0f, 1.0f, 2.0f}, probabilities[6], loss = -1.0f;
  int32_t labels[2] = {0, 2};
  bpt_kernel_node node = test_kernel_node(BPT_OP_SOFTMAX_CROSS_ENTROPY);
  node.input_count = 2;
  node.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, logits, NULL, 2, (const int64_t[]){2, 3});
  node.inputs[1] = test_kernel_tensor(BPT_DTYPE_I32, labels, NULL, 1, (const int64_t[]){2});
  node.output = test_kernel_tensor(BPT_DTYPE_F32, &loss, NULL, 0, NULL);
  node.saved = probabilities;
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  double second = log(exp(3.0) + exp(1.0) + exp(2.0)) - 2.0;
  assert_true(fabs(loss - second / 2.0) < 1e-6);
  assert_true(isfinite(probabilities[2]) && probabilities[0] == 1.0f);
  int32_t bad_labels[2] = {0, 3};
  node.inputs[1].value = bad_labels;
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(backend->error_message, "label 3"));
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gemm_matches_reference_for_all_transposes),
      cmocka_unit_test(bias_kernels_match_reference),
      cmocka_unit_test(activations_match_reference),
      cmocka_unit_test(softmax_cross_entropy_is_stable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
