/* The per-step parameter check (robustness, issue 18 class 8): a NaN in the input passes ReLU, the loss stays
 * finite, and the update turns the first layer's weights into NaN. bpt_optimizer_step() must then fail with
 * BPT_ERR_NUMERIC naming the parameter, by default and without anomaly detection; clean steps must pass; the
 * check can be turned off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { BATCH = 4, FEATURES = 6, HIDDEN = 5, CLASSES = 3 };

typedef struct network {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *loss;
  bpt_tensor *x_values, *label_values;
  bpt_optimizer *optimizer;
} network;

static void network_create(network *n) {
  n->context = test_context(3);
  bpt_context *c = n->context;
  const int64_t features = FEATURES, one = 1, dims[2] = {BATCH, FEATURES}, label_dims[1] = {BATCH};
  bpt_node *h;
  assert_ok(c, bpt_graph_create(c, &n->graph));
  assert_ok(c, bpt_graph_input(n->graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  assert_ok(c, bpt_graph_input(n->graph, "labels", BPT_DTYPE_I32, 1, &one, &n->labels));
  assert_ok(c, bpt_layer_linear(n->graph, "fc1", n->x, HIDDEN, BPT_INIT_HE_NORMAL, &h));
  assert_ok(c, bpt_relu(n->graph, "relu", h, &h));
  assert_ok(c, bpt_layer_linear(n->graph, "fc2", h, CLASSES, BPT_INIT_HE_NORMAL, &h));
  assert_ok(c, bpt_softmax_cross_entropy(n->graph, "loss", h, n->labels, &n->loss));
  assert_ok(c, bpt_graph_compile(n->graph, n->loss, BATCH));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, dims, &n->x_values));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, label_dims, &n->label_values));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = 0.1f;
  assert_ok(c, bpt_optimizer_create(n->graph, &options, &n->optimizer));
}

static void network_destroy(network *n) {
  bpt_optimizer_destroy(n->optimizer);
  bpt_tensor_destroy(n->x_values);
  bpt_tensor_destroy(n->label_values);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

/* One batch of positive inputs times scale, with x[0] = poison when poison is not zero; forward and backward. */
static void forward_backward_scaled(network *n, float poison, float scale) {
  float *x = bpt_tensor_data(n->x_values);
  int32_t *labels = bpt_tensor_data(n->label_values);
  for (int i = 0; i < BATCH * FEATURES; i++) x[i] = (0.1f + 0.05f * (float)(i % 7)) * scale;
  for (int i = 0; i < BATCH; i++) labels[i] = i % CLASSES;
  if (poison != 0.0f) x[0] = poison;
  assert_ok(n->context, bpt_graph_set_input(n->graph, n->x, n->x_values));
  assert_ok(n->context, bpt_graph_set_input(n->graph, n->labels, n->label_values));
  assert_ok(n->context, bpt_graph_forward(n->graph));
  assert_ok(n->context, bpt_graph_backward(n->graph));
}

static void forward_backward(network *n, float poison) { forward_backward_scaled(n, poison, 1.0f); }

static int non_finite_parameters(network *n) {
  const int64_t count = bpt_graph_parameter_count(n->graph);
  float *values = calloc((size_t)count, sizeof *values);
  assert_ok(n->context, bpt_graph_read_parameters(n->graph, values, count));
  int bad = 0;
  for (int64_t i = 0; i < count; i++) bad += !isfinite(values[i]);
  free(values);
  return bad;
}

static void clean_steps_pass(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_int_equal(bpt_graph_parameter_check(n.graph), 1); /* on by default */
  assert_int_equal(bpt_graph_anomaly_detection(n.graph), 0);
  for (int step = 0; step < 3; step++) {
    forward_backward(&n, 0.0f);
    assert_ok(n.context, bpt_optimizer_step(n.optimizer));
  }
  assert_int_equal(bpt_optimizer_step_count(n.optimizer), 3);
  network_destroy(&n);
}

static void nan_input_fails_the_step_naming_the_parameter(void **state) {
  (void)state;
  network n;
  network_create(&n);
  forward_backward(&n, 0.0f);
  assert_ok(n.context, bpt_optimizer_step(n.optimizer));
  forward_backward(&n, NAN); /* every call so far returns OK: the NaN is silent until the update */
  assert_fails(n.context, BPT_ERR_NUMERIC, "step 2 made parameter 'fc1.weight' non-finite (NaN at element 0",
               bpt_optimizer_step(n.optimizer));
  assert_true(non_finite_parameters(&n) > 0);
  /* The parameters stay lost: later steps keep saying so rather than going back to OK. */
  forward_backward(&n, 0.0f);
  assert_fails(n.context, BPT_ERR_NUMERIC, "non-finite", bpt_optimizer_step(n.optimizer));
  network_destroy(&n);
}

/* An infinite input makes the loss and the gradients NaN. Without a precision policy the step no longer reads the
 * loss back (no host-device synchronisation per step), so the update runs and the check reports its damage. */
static void infinite_input_fails_the_step_too(void **state) {
  (void)state;
  network n;
  network_create(&n);
  forward_backward(&n, INFINITY);
  assert_fails(n.context, BPT_ERR_NUMERIC, "step 1 made parameter", bpt_optimizer_step(n.optimizer));
  assert_true(non_finite_parameters(&n) > 0);
  network_destroy(&n);
}

/* Finite loss, finite gradients, and an update that overflows: only a check after the update sees it. */
static void an_overflowing_update_fails_the_step(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_ok(n.context, bpt_optimizer_set_learning_rate(n.optimizer, 1e30f));
  forward_backward_scaled(&n, 0.0f, 1e10f);
  float loss = 0.0f;
  assert_ok(n.context, bpt_graph_loss(n.graph, &loss));
  assert_true(isfinite(loss));
  assert_fails(n.context, BPT_ERR_NUMERIC, "step 1 made parameter 'fc",
               bpt_optimizer_step(n.optimizer));
  network_destroy(&n);
}

static void the_check_can_be_turned_off(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_ok(n.context, bpt_graph_set_parameter_check(n.graph, 0));
  assert_int_equal(bpt_graph_parameter_check(n.graph), 0);
  forward_backward(&n, NAN);
  assert_ok(n.context, bpt_optimizer_step(n.optimizer)); /* the caller asked not to be told */
  assert_true(non_finite_parameters(&n) > 0);
  assert_ok(n.context, bpt_graph_set_parameter_check(n.graph, 1));
  forward_backward(&n, 0.0f);
  assert_fails(n.context, BPT_ERR_NUMERIC, "fc1.weight", bpt_optimizer_step(n.optimizer));
  assert_fails(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_set_parameter_check(NULL, 1));
  assert_int_equal(bpt_graph_parameter_check(NULL), 0);
  network_destroy(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(clean_steps_pass),
      cmocka_unit_test(nan_input_fails_the_step_naming_the_parameter),
      cmocka_unit_test(infinite_input_fails_the_step_too),
      cmocka_unit_test(an_overflowing_update_fails_the_step),
      cmocka_unit_test(the_check_can_be_turned_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
