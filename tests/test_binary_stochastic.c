/* Binary stochastic neurons: the forward fires with probability sigmoid(z) (statistically), is reproducible
 * from the seed, thresholds at 0.5 in deterministic mode, and its gradients are exactly the straight-through
 * formulas (identity and sigmoid-adjusted), recomputed here by hand from the values the graph used. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { BATCH = 64, FEATURES = 5, HIDDEN = 32, OUTPUTS = 3 };

typedef struct network {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *t, *z, *a, *y, *loss;
  bpt_tensor *x_values, *t_values;
} network;

static void network_create(network *n, bpt_straight_through estimator, uint64_t seed) {
  n->context = test_context(seed);
  bpt_context *context = n->context;
  int64_t features = FEATURES, outputs = OUTPUTS;
  assert_ok(context, bpt_graph_create(context, &n->graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.keep_all_values = 1; /* the test reads z, a and y after forward */
  assert_ok(context, bpt_graph_set_precision(n->graph, &options));
  assert_ok(context, bpt_graph_input(n->graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  assert_ok(context, bpt_graph_input(n->graph, "t", BPT_DTYPE_F32, 1, &outputs, &n->t));
  assert_ok(context, bpt_layer_linear(n->graph, "fc1", n->x, HIDDEN, BPT_INIT_XAVIER_UNIFORM, &n->z));
  assert_ok(context, bpt_binary_stochastic(n->graph, "bsn", n->z, estimator, &n->a));
  assert_ok(context, bpt_layer_linear(n->graph, "fc2", n->a, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &n->y));
  assert_ok(context, bpt_mse_loss(n->graph, "loss", n->y, n->t, &n->loss));
  assert_ok(context, bpt_graph_compile(n->graph, n->loss, BATCH));
  int64_t x_dims[2] = {BATCH, FEATURES}, t_dims[2] = {BATCH, OUTPUTS};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, x_dims, &n->x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, t_dims, &n->t_values));
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, bpt_tensor_data(n->x_values), BATCH * FEATURES, -2.0f, 2.0f);
  test_random_fill(&random, bpt_tensor_data(n->t_values), BATCH * OUTPUTS, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(n->graph, n->x, n->x_values));
  assert_ok(context, bpt_graph_set_input(n->graph, n->t, n->t_values));
}

static void network_destroy(network *n) {
  bpt_tensor_destroy(n->x_values);
  bpt_tensor_destroy(n->t_values);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

static float *read_node(network *n, bpt_node *node, int64_t columns) {
  int64_t dims[2] = {BATCH, columns};
  bpt_tensor *tensor;
  assert_ok(n->context, bpt_tensor_create(n->context, BPT_DTYPE_F32, 2, dims, &tensor));
  assert_ok(n->context, bpt_graph_read(n->graph, node, tensor));
  float *copy = malloc((size_t)(BATCH * columns) * sizeof *copy);
  memcpy(copy, bpt_tensor_data(tensor), (size_t)(BATCH * columns) * sizeof *copy);
  bpt_tensor_destroy(tensor);
  return copy;
}

static float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

/* Over many forward passes, each neuron fires with frequency sigmoid(z) (5 standard errors), outputs are
 * exactly 0 or 1, and deterministic mode gives 1[z > 0]. */
static void forward_fires_with_probability_sigmoid(void **state) {
  (void)state;
  network n;
  network_create(&n, BPT_STRAIGHT_THROUGH_SIGMOID, 21);
  enum { PASSES = 400 };
  float *z = NULL;
  double *fired = calloc(BATCH * HIDDEN, sizeof *fired);
  for (int pass = 0; pass < PASSES; pass++) {
    assert_ok(n.context, bpt_graph_forward(n.graph));
    if (!z) z = read_node(&n, n.z, HIDDEN);
    float *a = read_node(&n, n.a, HIDDEN);
    for (int i = 0; i < BATCH * HIDDEN; i++) {
      assert_true(a[i] == 0.0f || a[i] == 1.0f);
      fired[i] += a[i];
    }
    free(a);
  }
  for (int i = 0; i < BATCH * HIDDEN; i++) {
    double p = sigmoid(z[i]), frequency = fired[i] / PASSES;
    double sigma = sqrt(p * (1.0 - p) / PASSES);
    if (fabs(frequency - p) > 5.0 * sigma + 1e-9)
      fail_msg("neuron %d: z %g fired %.3f of the time, sigmoid %.3f", i, (double)z[i], frequency, p);
  }
  assert_ok(n.context, bpt_graph_set_deterministic(n.graph, 1));
  assert_ok(n.context, bpt_graph_forward(n.graph));
  float *a = read_node(&n, n.a, HIDDEN);
  for (int i = 0; i < BATCH * HIDDEN; i++) assert_true(a[i] == (sigmoid(z[i]) > 0.5f ? 1.0f : 0.0f));
  free(a);
  free(z);
  free(fired);
  network_destroy(&n);
}

/* Equal seeds give equal draws; successive passes draw afresh. */
static void forward_is_reproducible_from_the_seed(void **state) {
  (void)state;
  network first, second;
  network_create(&first, BPT_STRAIGHT_THROUGH_IDENTITY, 22);
  network_create(&second, BPT_STRAIGHT_THROUGH_IDENTITY, 22);
  assert_ok(first.context, bpt_graph_forward(first.graph));
  assert_ok(second.context, bpt_graph_forward(second.graph));
  float *a1 = read_node(&first, first.a, HIDDEN), *a2 = read_node(&second, second.a, HIDDEN);
  assert_memory_equal(a1, a2, BATCH * HIDDEN * sizeof *a1);
  assert_ok(first.context, bpt_graph_forward(first.graph));
  float *a3 = read_node(&first, first.a, HIDDEN);
  assert_memory_not_equal(a1, a3, BATCH * HIDDEN * sizeof *a1);
  free(a1);
  free(a2);
  free(a3);
  network_destroy(&first);
  network_destroy(&second);
}

/* Gradients against the straight-through formulas: da = dy W2, dz = da (identity) or da s (1 - s), then
 * dW1 = dz^T x, db1 = sum dz, dW2 = dy^T a. */
static void check_straight_through(bpt_straight_through estimator, uint64_t seed) {
  network n;
  network_create(&n, estimator, seed);
  assert_ok(n.context, bpt_graph_forward(n.graph));
  assert_ok(n.context, bpt_graph_backward(n.graph));
  float *z = read_node(&n, n.z, HIDDEN), *a = read_node(&n, n.a, HIDDEN), *y = read_node(&n, n.y, OUTPUTS);
  int64_t count = bpt_graph_parameter_count(n.graph);
  float *parameters = malloc((size_t)count * sizeof *parameters), *gradients = malloc((size_t)count * sizeof *gradients);
  assert_ok(n.context, bpt_graph_read_parameters(n.graph, parameters, count));
  assert_ok(n.context, bpt_graph_read_gradients(n.graph, gradients, count));
  /* Packed in declaration order: fc1.weight (H, F), fc1.bias (H), fc2.weight (O, H), fc2.bias (O). */
  const float *w2 = parameters + HIDDEN * FEATURES + HIDDEN;
  const float *x = bpt_tensor_data(n.x_values), *t = bpt_tensor_data(n.t_values);
  double dw1[HIDDEN * FEATURES] = {0}, db1[HIDDEN] = {0}, dw2[OUTPUTS * HIDDEN] = {0};
  for (int b = 0; b < BATCH; b++) {
    double dy[OUTPUTS];
    for (int o = 0; o < OUTPUTS; o++) dy[o] = 2.0 * ((double)y[b * OUTPUTS + o] - t[b * OUTPUTS + o]) / (BATCH * OUTPUTS);
    for (int h = 0; h < HIDDEN; h++) {
      double da = 0.0;
      for (int o = 0; o < OUTPUTS; o++) {
        da += dy[o] * w2[o * HIDDEN + h];
        dw2[o * HIDDEN + h] += dy[o] * a[b * HIDDEN + h];
      }
      double s = 1.0 / (1.0 + exp(-(double)z[b * HIDDEN + h]));
      double dz = estimator == BPT_STRAIGHT_THROUGH_SIGMOID ? da * s * (1.0 - s) : da;
      db1[h] += dz;
      for (int f = 0; f < FEATURES; f++) dw1[h * FEATURES + f] += dz * x[b * FEATURES + f];
    }
  }
  float expected[HIDDEN * FEATURES + HIDDEN + OUTPUTS * HIDDEN];
  for (int i = 0; i < HIDDEN * FEATURES; i++) expected[i] = (float)dw1[i];
  for (int i = 0; i < HIDDEN; i++) expected[HIDDEN * FEATURES + i] = (float)db1[i];
  for (int i = 0; i < OUTPUTS * HIDDEN; i++) expected[HIDDEN * FEATURES + HIDDEN + i] = (float)dw2[i];
  double error = test_relative_error(gradients, expected, HIDDEN * FEATURES + HIDDEN + OUTPUTS * HIDDEN);
  if (error > 1e-5) fail_msg("straight-through gradients differ from the formula: relative error %g", error);
  free(z);
  free(a);
  free(y);
  free(parameters);
  free(gradients);
  network_destroy(&n);
}

static void identity_straight_through_gradient(void **state) {
  (void)state;
  check_straight_through(BPT_STRAIGHT_THROUGH_IDENTITY, 23);
}

static void sigmoid_straight_through_gradient(void **state) {
  (void)state;
  check_straight_through(BPT_STRAIGHT_THROUGH_SIGMOID, 24);
}

static void bad_estimator_is_refused(void **state) {
  (void)state;
  bpt_context *context = test_context(25);
  bpt_graph *graph;
  bpt_node *x, *out;
  int64_t features = 3;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "estimator",
               bpt_binary_stochastic(graph, "bsn", x, (bpt_straight_through)7, &out));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forward_fires_with_probability_sigmoid),
      cmocka_unit_test(forward_is_reproducible_from_the_seed),
      cmocka_unit_test(identity_straight_through_gradient),
      cmocka_unit_test(sigmoid_straight_through_gradient),
      cmocka_unit_test(bad_estimator_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
