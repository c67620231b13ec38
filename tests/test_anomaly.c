/* Anomaly detection: the first node whose value is inf or NaN is named with its shape and forward pass,
 * whether the cause is an op overflowing, the fed data or a diverged parameter; the first backward that makes a
 * gradient non-finite is named too; off, nothing is checked. */
#include <math.h>
#include <stdlib.h>

#include "test_support.h"

enum { BATCH = 3, FEATURES = 16, HIDDEN = 5 };

typedef struct network {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *target;
  bpt_tensor *x_values, *target_values;
} network;

static void network_create(network *n) {
  n->context = test_context(7);
  bpt_context *c = n->context;
  int64_t features = FEATURES, outputs = 1, dims[2] = {BATCH, FEATURES}, target_dims[2] = {BATCH, 1};
  bpt_node *h, *loss;
  assert_ok(c, bpt_graph_create(c, &n->graph));
  assert_ok(c, bpt_graph_input(n->graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  assert_ok(c, bpt_graph_input(n->graph, "target", BPT_DTYPE_F32, 1, &outputs, &n->target));
  assert_ok(c, bpt_layer_linear(n->graph, "fc1", n->x, HIDDEN, BPT_INIT_ONES, &h));
  assert_ok(c, bpt_relu(n->graph, "relu", h, &h));
  assert_ok(c, bpt_layer_linear(n->graph, "fc2", h, 1, BPT_INIT_ONES, &h));
  assert_ok(c, bpt_mse_loss(n->graph, "loss", h, n->target, &loss));
  assert_ok(c, bpt_graph_compile(n->graph, loss, BATCH));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, dims, &n->x_values));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, target_dims, &n->target_values));
}

static void network_destroy(network *n) {
  bpt_tensor_destroy(n->x_values);
  bpt_tensor_destroy(n->target_values);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

static void feed(network *n, float value) {
  float *x = bpt_tensor_data(n->x_values);
  for (int i = 0; i < BATCH * FEATURES; i++)
    x[i] = value;
  assert_ok(n->context, bpt_graph_set_input(n->graph, n->x, n->x_values));
  assert_ok(n->context, bpt_graph_set_input(n->graph, n->target, n->target_values));
}

static void overflowing_op_is_named(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_int_equal(bpt_graph_anomaly_detection(n.graph), 0);
  assert_ok(n.context, bpt_graph_set_anomaly_detection(n.graph, 1));
  assert_int_equal(bpt_graph_anomaly_detection(n.graph), 1);
  feed(&n, 1.0f);
  assert_ok(n.context, bpt_graph_forward(n.graph)); /* forward pass 1 is clean */
  /* 16 finite inputs of 3e38 times weights of 1 sum past FLT_MAX inside fc1, not before. */
  feed(&n, 3e38f);
  assert_fails(n.context, BPT_ERR_NUMERIC,
               "anomaly: linear 'fc1' (shape 3x5) produced +inf at element 0 (15 non-finite values) in forward pass 2; "
               "its inputs are finite",
               bpt_graph_forward(n.graph));
  network_destroy(&n);
}

static void bad_data_and_bad_parameters_are_named(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_ok(n.context, bpt_graph_set_anomaly_detection(n.graph, 1));
  feed(&n, NAN);
  assert_fails(n.context, BPT_ERR_NUMERIC, "input 'x' (shape 3x16) produced NaN", bpt_graph_forward(n.graph));

  int64_t count = bpt_graph_parameter_count(n.graph);
  float *parameters = calloc((size_t)count, sizeof *parameters);
  parameters[count - 1] = -INFINITY; /* fc2.bias */
  assert_ok(n.context, bpt_graph_write_parameters(n.graph, parameters, count));
  feed(&n, 1.0f);
  assert_fails(n.context, BPT_ERR_NUMERIC, "parameter 'fc2.bias' (shape 1) produced -inf at element 0",
               bpt_graph_forward(n.graph));

  /* Off: the same forward pass runs and the loss carries the infinity, which is what the mode is for. */
  assert_ok(n.context, bpt_graph_set_anomaly_detection(n.graph, 0));
  assert_ok(n.context, bpt_graph_forward(n.graph));
  float loss;
  assert_ok(n.context, bpt_graph_loss(n.graph, &loss));
  assert_false(isfinite(loss));
  free(parameters);
  network_destroy(&n);
  assert_fails(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_set_anomaly_detection(NULL, 1));
  assert_int_equal(bpt_graph_anomaly_detection(NULL), 0);
}

/* A finite forward pass whose backward overflows: fc2's huge weights scale the loss gradient past FLT_MAX. */
static void overflowing_backward_is_named(void **state) {
  (void)state;
  network n;
  network_create(&n);
  assert_ok(n.context, bpt_graph_set_anomaly_detection(n.graph, 1));
  int64_t count = bpt_graph_parameter_count(n.graph);
  float *parameters = calloc((size_t)count, sizeof *parameters);
  for (int i = 0; i < HIDDEN; i++)
    parameters[FEATURES * HIDDEN + HIDDEN + i] = 3e38f; /* fc2.weight */
  assert_ok(n.context, bpt_graph_write_parameters(n.graph, parameters, count));
  float *target = bpt_tensor_data(n.target_values);
  for (int i = 0; i < BATCH; i++)
    target[i] = 100.0f;
  feed(&n, 0.0f);
  assert_ok(n.context, bpt_graph_forward(n.graph));
  assert_fails(
      n.context, BPT_ERR_NUMERIC,
      "anomaly: backward of linear 'fc2' produced -inf in the gradient of relu 'relu' (shape 3x5) at element 0 "
      "(15 non-finite values) in backward pass 1",
      bpt_graph_backward(n.graph));
  assert_ok(n.context, bpt_graph_set_anomaly_detection(n.graph, 0));
  assert_ok(n.context, bpt_graph_backward(n.graph));
  free(parameters);
  network_destroy(&n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(overflowing_op_is_named),
      cmocka_unit_test(bad_data_and_bad_parameters_are_named),
      cmocka_unit_test(overflowing_backward_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
