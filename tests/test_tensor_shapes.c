/* The tensor model's shape rules seen from the public API: sequence inputs and per-token linear against a
 * host reference, plain inputs still flattened, broadcasting and matmul refusals naming both inputs and their
 * shapes. Per-op values and gradients on every backend are test_backend_ops.c's. */
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { BATCH = 2, LENGTH = 3, FEATURES = 4, UNITS = 5 };

/* y (B, T, UNITS) = x (B, T, FEATURES) W^T + b, token by token, for a sequence input. */
static void sequence_linear_is_per_token(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *y;
  const int64_t features = FEATURES;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "tokens", BPT_DTYPE_F32, LENGTH, 1, &features, &x));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, UNITS, BPT_INIT_ZEROS, &y));
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  float parameters[UNITS * FEATURES + UNITS], inputs[BATCH * LENGTH * FEATURES];
  test_random random;
  test_random_seed(&random, 3);
  test_random_fill(&random, parameters, UNITS * FEATURES + UNITS, -1.0f, 1.0f);
  test_random_fill(&random, inputs, BATCH * LENGTH * FEATURES, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, UNITS * FEATURES + UNITS));
  const int64_t x_dims[3] = {BATCH, LENGTH, FEATURES}, y_dims[3] = {BATCH, LENGTH, UNITS};
  bpt_tensor *x_values, *y_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, x_dims, &x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, y_dims, &y_values));
  memcpy(bpt_tensor_data(x_values), inputs, sizeof inputs);
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, y, y_values));
  assert_int_equal(bpt_tensor_rank(y_values), 3);
  assert_int_equal(bpt_tensor_dim(y_values, 1), LENGTH);
  assert_int_equal(bpt_tensor_dim(y_values, 2), UNITS);
  const float *got = bpt_tensor_data(y_values);
  for (int token = 0; token < BATCH * LENGTH; token++)
    for (int u = 0; u < UNITS; u++) {
      double expected = parameters[UNITS * FEATURES + u];
      for (int f = 0; f < FEATURES; f++)
        expected += (double)inputs[token * FEATURES + f] * parameters[u * FEATURES + f];
      assert_float_equal(got[token * UNITS + u], expected, 1e-5);
    }
  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(y_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* A plain (batch, 3, 4) input still flattens into 12 features: today's linear, unchanged. */
static void plain_input_still_flattens(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *y;
  const int64_t dims[2] = {LENGTH, FEATURES};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 2, dims, &x));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, UNITS, BPT_INIT_ZEROS, &y));
  assert_int_equal(bpt_graph_parameter_count(graph), 0); /* not compiled yet */
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  assert_int_equal(bpt_graph_parameter_count(graph), UNITS * LENGTH * FEATURES + UNITS);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void sequence_input_checks_its_length(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x;
  const int64_t features = FEATURES;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_fails(context, BPT_ERR_SHAPE, "sequence length 0",
               bpt_graph_input_sequence(graph, "t", BPT_DTYPE_F32, 0, 1, &features, &x));
  assert_null(x);
  assert_ok(context, bpt_graph_input_sequence(graph, "t", BPT_DTYPE_F32, LENGTH, 1, &features, &x));
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  const int64_t wrong[3] = {BATCH, LENGTH + 1, FEATURES};
  bpt_tensor *values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, wrong, &values));
  assert_fails(context, BPT_ERR_SHAPE, "t", bpt_graph_set_input(graph, x, values));
  bpt_tensor_destroy(values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* Shapes that do not broadcast are refused when the node is made, naming both inputs and shapes. */
static void broadcast_refusals_name_both_shapes(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *a, *b, *c, *out;
  const int64_t a_dims[2] = {LENGTH, FEATURES}, b_dims[1] = {FEATURES + 1}, c_dims[1] = {FEATURES};
  const int64_t long_dims[3] = {2, LENGTH, FEATURES};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "a", BPT_DTYPE_F32, 2, a_dims, &a));
  assert_ok(context, bpt_graph_parameter(graph, "b", 1, b_dims, BPT_INIT_ZEROS, &b));
  assert_ok(context, bpt_graph_input(graph, "c", BPT_DTYPE_F32, 1, c_dims, &c));
  assert_fails(context, BPT_ERR_SHAPE, "inputs 'a' (Nx3x4) and 'b' (5) do not broadcast",
               bpt_add(graph, "sum", a, b, &out));
  assert_fails(context, BPT_ERR_SHAPE, "'c' (Nx4) do not broadcast: batched inputs must have the same rank",
               bpt_mul(graph, "product", a, c, &out));
  bpt_node *wide;
  assert_ok(context, bpt_graph_parameter(graph, "wide", 3, long_dims, BPT_INIT_ZEROS, &wide));
  assert_fails(context, BPT_ERR_SHAPE, "axis against the batch must be 1", bpt_add(graph, "sum", a, wide, &out));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void matmul_refusals_name_the_axes(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *q, *k, *out;
  const int64_t q_dims[3] = {2, LENGTH, FEATURES}, k_dims[3] = {2, LENGTH, FEATURES + 1}, w_dims[2] = {FEATURES, 1};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "q", BPT_DTYPE_F32, 3, q_dims, &q));
  assert_ok(context, bpt_graph_input(graph, "k", BPT_DTYPE_F32, 3, k_dims, &k));
  assert_fails(context, BPT_ERR_SHAPE, "differ in the contracted axis: 4 and 5",
               bpt_matmul(graph, "s", q, k, 0, 1, &out));
  assert_ok(context, bpt_matmul(graph, "s", q, k, 1, 0, &out)); /* q^T k: (2, 4, 5) per sample */
  bpt_node *rows, *w;
  assert_ok(context, bpt_graph_input(graph, "rows", BPT_DTYPE_F32, 1, &w_dims[0], &rows));
  assert_ok(context, bpt_graph_parameter(graph, "w", 2, w_dims, BPT_INIT_ZEROS, &w));
  assert_fails(context, BPT_ERR_SHAPE, "the batch cannot be the second operand's matrix axis",
               bpt_matmul(graph, "t", w, rows, 0, 0, &out));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* layer_norm and rms_norm: the parameters must have the last axis's size, epsilon must be positive, and a
 * batched rank-1 input (one value per sample) has no axis to normalise over. */
static void norm_refusals_name_the_parameter(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *scalar, *gamma, *wrong, *out;
  const int64_t x_dims[2] = {LENGTH, FEATURES}, wrong_dims[1] = {LENGTH};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "x", BPT_DTYPE_F32, LENGTH, 1, x_dims + 1, &x));
  assert_ok(context, bpt_graph_input(graph, "scalar", BPT_DTYPE_F32, 0, NULL, &scalar));
  assert_ok(context, bpt_graph_parameter(graph, "gamma", 1, x_dims + 1, BPT_INIT_ONES, &gamma));
  assert_ok(context, bpt_graph_parameter(graph, "wrong", 1, wrong_dims, BPT_INIT_ONES, &wrong));
  assert_fails(context, BPT_ERR_SHAPE, "layer_norm 'ln': gamma 'wrong' has shape 3; expected (4)",
               bpt_layer_norm(graph, "ln", x, wrong, NULL, 1e-5f, &out));
  assert_fails(context, BPT_ERR_SHAPE, "beta 'wrong' has shape 3; expected (4), the input's last axis",
               bpt_layer_norm(graph, "ln", x, gamma, wrong, 1e-5f, &out));
  assert_fails(context, BPT_ERR_SHAPE, "rms_norm 'rms': gamma 'wrong' has shape 3; expected (4)",
               bpt_rms_norm(graph, "rms", x, wrong, 1e-5f, &out));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "epsilon 0 must be finite and > 0",
               bpt_layer_norm(graph, "ln", x, gamma, NULL, 0.0f, &out));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "epsilon -1 must be finite and > 0",
               bpt_rms_norm(graph, "rms", x, gamma, -1.0f, &out));
  assert_fails(context, BPT_ERR_SHAPE, "input 'scalar' has shape N: no feature axis",
               bpt_layer_norm(graph, "ln", scalar, gamma, NULL, 1e-5f, &out));
  assert_fails(context, BPT_ERR_SHAPE, "bpt_layer_rms_norm 'rms': input 'scalar' has no feature axis",
               bpt_layer_rms_norm(graph, "rms", scalar, 1e-5f, &out));
  assert_ok(context, bpt_layer_layer_norm(graph, "ln", x, 1e-5f, &out));
  assert_int_equal(bpt_node_rank(out), 3);
  assert_ok(context, bpt_layer_rms_norm(graph, "rms", x, 1e-5f, &out));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* permute (N, 2, 3, 4) -> (N, 4, 2, 3) against the index arithmetic: y[n][d][t][h] = x[n][t][h][d]. */
static void permute_moves_axes(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *y;
  const int64_t dims[3] = {2, 3, 4}, axes[4] = {0, 3, 1, 2};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, dims, &x));
  assert_fails(context, BPT_ERR_SHAPE, "must stay axis 0",
               bpt_permute(graph, "bad", x, 4, (const int64_t[]){1, 0, 2, 3}, &y));
  assert_fails(context, BPT_ERR_SHAPE, "permutation of 0..3",
               bpt_permute(graph, "bad", x, 4, (const int64_t[]){0, 1, 1, 2}, &y));
  assert_ok(context, bpt_permute(graph, "moved", x, 4, axes, &y));
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  const int64_t x_dims[4] = {BATCH, 2, 3, 4}, y_dims[4] = {BATCH, 4, 2, 3};
  bpt_tensor *x_values, *y_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, x_dims, &x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, y_dims, &y_values));
  float *in = bpt_tensor_data(x_values);
  for (int i = 0; i < BATCH * 24; i++)
    in[i] = (float)i;
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, y, y_values));
  const float *out = bpt_tensor_data(y_values);
  for (int n = 0; n < BATCH; n++)
    for (int d = 0; d < 4; d++)
      for (int t = 0; t < 2; t++)
        for (int h = 0; h < 3; h++)
          assert_float_equal(out[((n * 4 + d) * 2 + t) * 3 + h], in[((n * 2 + t) * 3 + h) * 4 + d], 0.0);
  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(y_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* slice: the refusals name the node, the axis or range and the shape; the values are x's part. */
static void slice_takes_a_part_of_one_axis(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *y;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "x", BPT_DTYPE_F32, 3, 1, (const int64_t[]){6}, &x));
  assert_fails(context, BPT_ERR_SHAPE, "slice 'bad': input 'x' is batched: its batch (axis 0) cannot be sliced",
               bpt_slice(graph, "bad", x, 0, 0, 1, &y));
  assert_fails(context, BPT_ERR_SHAPE, "axis 3 is outside input 'x' (Nx3x6) of rank 3",
               bpt_slice(graph, "bad", x, 3, 0, 1, &y));
  assert_fails(context, BPT_ERR_SHAPE, "[4, 4 + 3) is not a non-empty range inside axis 2 of input 'x' (Nx3x6)",
               bpt_slice(graph, "bad", x, 2, 4, 3, &y));
  assert_fails(context, BPT_ERR_SHAPE, "not a non-empty range", bpt_slice(graph, "bad", x, 2, 1, 0, &y));
  assert_fails(context, BPT_ERR_SHAPE, "not a non-empty range", bpt_slice(graph, "bad", x, 2, -1, 2, &y));
  assert_fails(context, BPT_ERR_SHAPE, "not a non-empty range",
               bpt_slice(graph, "bad", x, 2, INT64_MAX, INT64_MAX, &y));
  assert_ok(context, bpt_slice(graph, "k", x, 2, 2, 3, &y));
  assert_true(bpt_node_rank(y) == 3 && bpt_node_dim(y, 1) == 3 && bpt_node_dim(y, 2) == 3);
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  const int64_t x_dims[3] = {BATCH, 3, 6}, y_dims[3] = {BATCH, 3, 3};
  bpt_tensor *x_values, *y_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, x_dims, &x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, y_dims, &y_values));
  float *in = bpt_tensor_data(x_values);
  for (int i = 0; i < BATCH * 18; i++)
    in[i] = (float)i;
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, y, y_values));
  const float *out = bpt_tensor_data(y_values);
  for (int r = 0; r < BATCH * 3; r++)
    for (int c = 0; c < 3; c++)
      assert_float_equal(out[r * 3 + c], in[r * 6 + 2 + c], 0.0);
  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(y_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* concat: the refusals name the node and both shapes; the values are the inputs' in order. */
static void concat_joins_along_one_axis(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *a, *b, *w, *y;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "a", BPT_DTYPE_F32, 2, (const int64_t[]){2, 3}, &a));
  assert_ok(context, bpt_graph_input(graph, "b", BPT_DTYPE_F32, 2, (const int64_t[]){2, 1}, &b));
  assert_ok(context, bpt_graph_parameter(graph, "w", 2, (const int64_t[]){2, 3}, BPT_INIT_ZEROS, &w));
  assert_fails(context, BPT_ERR_SHAPE, "concat 'bad': input 'a' is batched: values cannot be joined along the batch",
               bpt_concat(graph, "bad", 2, (bpt_node *[]){a, b}, 0, &y));
  assert_fails(context, BPT_ERR_SHAPE, "inputs 'a' (Nx2x3) and 'b' (Nx2x1) differ in an axis other than 1",
               bpt_concat(graph, "bad", 2, (bpt_node *[]){a, b}, 1, &y));
  assert_fails(context, BPT_ERR_SHAPE, "inputs 'a' (Nx2x3) and 'w' (2x3) differ",
               bpt_concat(graph, "bad", 2, (bpt_node *[]){a, w}, 2, &y));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "concat 'bad': 6 inputs given; between 1 and 5",
               bpt_concat(graph, "bad", 6, (bpt_node *[]){a, a, a, a, a, a}, 2, &y));
  assert_ok(context, bpt_concat(graph, "ab", 3, (bpt_node *[]){b, a, b}, 2, &y));
  assert_true(bpt_node_rank(y) == 3 && bpt_node_dim(y, 1) == 2 && bpt_node_dim(y, 2) == 5);
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  bpt_tensor *ta, *tb, *ty;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){BATCH, 2, 3}, &ta));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){BATCH, 2, 1}, &tb));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){BATCH, 2, 5}, &ty));
  float *va = bpt_tensor_data(ta), *vb = bpt_tensor_data(tb);
  for (int i = 0; i < BATCH * 6; i++)
    va[i] = (float)i;
  for (int i = 0; i < BATCH * 2; i++)
    vb[i] = -1.0f - (float)i;
  assert_ok(context, bpt_graph_set_input(graph, a, ta));
  assert_ok(context, bpt_graph_set_input(graph, b, tb));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, y, ty));
  const float *out = bpt_tensor_data(ty);
  for (int r = 0; r < BATCH * 2; r++) {
    assert_float_equal(out[r * 5], vb[r], 0.0);
    for (int c = 0; c < 3; c++)
      assert_float_equal(out[r * 5 + 1 + c], va[r * 3 + c], 0.0);
    assert_float_equal(out[r * 5 + 4], vb[r], 0.0);
  }
  bpt_tensor_destroy(ta);
  bpt_tensor_destroy(tb);
  bpt_tensor_destroy(ty);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sequence_linear_is_per_token),     cmocka_unit_test(plain_input_still_flattens),
      cmocka_unit_test(sequence_input_checks_its_length), cmocka_unit_test(broadcast_refusals_name_both_shapes),
      cmocka_unit_test(matmul_refusals_name_the_axes),    cmocka_unit_test(permute_moves_axes),
      cmocka_unit_test(norm_refusals_name_the_parameter),
      cmocka_unit_test(slice_takes_a_part_of_one_axis),   cmocka_unit_test(concat_joins_along_one_axis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
