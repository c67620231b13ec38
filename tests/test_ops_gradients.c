/* Every op's backward against central finite differences of the loss, on random inputs.
 * Inputs carry no gradient, so each op sits between two linear layers: the first layer's weight
 * gradient then checks the op's input gradient too. */
#include <stdlib.h>

#include "test_support.h"

enum { BATCH = 5, FEATURES = 7, HIDDEN = 6, OUTPUTS = 4 };

typedef bpt_status (*unary_builder)(bpt_graph *, const char *, bpt_node *, bpt_node **);

static bpt_status leaky_relu_builder(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_leaky_relu(graph, name, x, 0.1f, out);
}

/* x -> linear -> op -> linear -> loss; the loss is MSE against a random target or cross-entropy. */
static void check_unary(unary_builder op, int use_cross_entropy, uint64_t seed) {
  bpt_context *context = test_context(seed);
  bpt_graph *graph;
  bpt_node *x, *target, *hidden, *output, *loss;
  int64_t features = FEATURES, outputs = OUTPUTS;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  if (use_cross_entropy)
    assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &target));
  else
    assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &outputs, &target));
  assert_ok(context, bpt_layer_linear(graph, "fc1", x, HIDDEN, BPT_INIT_XAVIER_UNIFORM, &hidden));
  if (op) assert_ok(context, op(graph, "op", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(graph, "fc2", hidden, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &output));
  if (use_cross_entropy)
    assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", output, target, &loss));
  else
    assert_ok(context, bpt_mse_loss(graph, "loss", output, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));

  /* Non-zero biases so that every bias gradient path matters. */
  int64_t count = bpt_graph_parameter_count(graph);
  float *parameters = malloc((size_t)count * sizeof *parameters);
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, parameters, count, -0.8f, 0.8f);
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
  free(parameters);

  int64_t x_dims[2] = {BATCH, FEATURES}, target_dims[2] = {BATCH, OUTPUTS};
  bpt_tensor *x_values, *target_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, x_dims, &x_values));
  test_random_fill(&random, bpt_tensor_data(x_values), BATCH * FEATURES, -1.5f, 1.5f);
  if (use_cross_entropy) {
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, target_dims, &target_values));
    int32_t *labels = bpt_tensor_data(target_values);
    for (int n = 0; n < BATCH; n++) labels[n] = n % OUTPUTS;
  } else {
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, target_dims, &target_values));
    test_random_fill(&random, bpt_tensor_data(target_values), BATCH * OUTPUTS, -1.0f, 1.0f);
  }
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_set_input(graph, target, target_values));
  test_check_gradients(context, graph, 1e-2, 2e-4, 2e-2, 0);

  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(target_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void linear_and_mse(void **state) {
  (void)state;
  check_unary(NULL, 0, 1);
}
static void relu(void **state) {
  (void)state;
  check_unary(bpt_relu, 0, 2);
}
static void leaky_relu(void **state) {
  (void)state;
  check_unary(leaky_relu_builder, 0, 3);
}
static void sigmoid(void **state) {
  (void)state;
  check_unary(bpt_sigmoid, 0, 4);
}
static void tanh_op(void **state) {
  (void)state;
  check_unary(bpt_tanh, 0, 5);
}
/* Exact-erf GELU; its backward may overwrite the first linear layer's unset output gradient (beta 0). */
static void gelu(void **state) {
  (void)state;
  check_unary(bpt_gelu, 0, 8);
}
static void softmax_cross_entropy(void **state) {
  (void)state;
  check_unary(bpt_relu, 1, 6);
}

/* A node feeding two consumers must receive the sum of both gradients: hidden feeds tanh and sigmoid,
 * and the loss compares the two branches (so MSE's target gradient is exercised as well). */
static void fan_out_accumulates(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *hidden, *a, *b, *loss;
  int64_t features = FEATURES;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_layer_linear(graph, "fc1", x, HIDDEN, BPT_INIT_XAVIER_UNIFORM, &hidden));
  assert_ok(context, bpt_tanh(graph, "a", hidden, &a));
  assert_ok(context, bpt_sigmoid(graph, "b", hidden, &b));
  assert_ok(context, bpt_layer_linear(graph, "fc2", a, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &a));
  assert_ok(context, bpt_layer_linear(graph, "fc3", b, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &b));
  assert_ok(context, bpt_mse_loss(graph, "loss", a, b, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 3));
  int64_t dims[2] = {3, FEATURES};
  bpt_tensor *values;
  test_random random;
  test_random_seed(&random, 7);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &values));
  test_random_fill(&random, bpt_tensor_data(values), 3 * FEATURES, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  test_check_gradients(context, graph, 1e-2, 2e-4, 2e-2, 0);
  bpt_tensor_destroy(values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(linear_and_mse),
      cmocka_unit_test(relu),
      cmocka_unit_test(leaky_relu),
      cmocka_unit_test(sigmoid),
      cmocka_unit_test(tanh_op),
      cmocka_unit_test(softmax_cross_entropy),
      cmocka_unit_test(fan_out_accumulates),
      cmocka_unit_test(gelu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
