/* Typed op parameters (issue 24): the validator refuses out-of-range parameters naming node and parameter;
 * checkpoints keep parameters and run-time state (linear's FP8 scale, relu's mask choice) by name; a file of
 * format version 2, written by the library before typed parameters, still loads with the same values. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint.h"
#include "core/graph.h"
#include "fixtures/checkpoint_v2_model.h"
#include "test_support.h"

static void validator_names_node_parameter_value_and_range(void **state) {
  (void)state;
  bpt_context *c = test_context(1);
  bpt_graph *g;
  bpt_node *x, *image, *weight, *y;
  const int64_t features = 4, image_dims[3] = {1, 5, 5}, weight_dims[4] = {2, 1, 3, 3};
  assert_ok(c, bpt_graph_create(c, &g));
  assert_ok(c, bpt_graph_input(g, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_fails(c, BPT_ERR_INVALID_ARGUMENT, "dropout 'drop': probability 1.5 is outside [0, 1)",
               bpt_dropout(g, "drop", x, 1.5f, &y));
  assert_fails(c, BPT_ERR_INVALID_ARGUMENT, "leaky_relu 'leaky': slope inf must be finite",
               bpt_leaky_relu(g, "leaky", x, INFINITY, &y));
  assert_fails(c, BPT_ERR_INVALID_ARGUMENT,
               "binary_stochastic 'bs': estimator 7 is outside [0, 1] (0 identity, 1 sigmoid)",
               bpt_binary_stochastic(g, "bs", x, (bpt_straight_through)7, &y));
  assert_ok(c, bpt_graph_input(g, "image", BPT_DTYPE_F32, 3, image_dims, &image));
  assert_ok(c, bpt_graph_parameter(g, "w", 4, weight_dims, BPT_INIT_HE_UNIFORM, &weight));
  bpt_conv2d_options options = bpt_conv2d_options_default();
  options.stride_width = 0;
  assert_fails(c, BPT_ERR_INVALID_ARGUMENT,
               "conv2d 'conv': stride width 0 is outside [1, 2^31 - 1] (parameter 'stride_width')",
               bpt_conv2d(g, "conv", image, weight, NULL, &options, &y));
  /* A slot the op does not declare is refused too: it would be neither checked, printed nor saved. */
  const float stray[2] = {0.0f, 3.0f};
  assert_fails(c, BPT_ERR_INTERNAL, "dropout 'stray': float attribute slot 1 is set but not a declared parameter",
               bpt_graph_add_node_with_attributes(g, BPT_OP_DROPOUT, "stray", &x, 1, NULL, 0, stray, 2, &y));
  /* In range: accepted, and printed by name. */
  assert_ok(c, bpt_dropout(g, "drop", x, 0.25f, &y));
  char text[256];
  assert_string_equal(bpt_node_parameters_string(y, text, sizeof text), "probability=0.25");
  options = bpt_conv2d_options_default();
  options.padding_height = options.padding_width = 1;
  assert_ok(c, bpt_conv2d(g, "conv", image, weight, NULL, &options, &y));
  assert_string_equal(bpt_node_parameters_string(y, text, sizeof text),
                      "stride_height=1, stride_width=1, padding_height=1, padding_width=1, dilation_height=1, "
                      "dilation_width=1, groups=1");
  bpt_graph_destroy(g);
  bpt_context_destroy(c);
}

enum { BATCH = 8, FEATURES = 6, HIDDEN = 10, CLASSES = 3 };

typedef struct mlp {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *loss;
  bpt_optimizer *optimizer;
  bpt_tensor *x_values, *label_values;
} mlp;

/* x -> fc1 -> relu -> fc2 -> loss, fc2 keeping its input as FP8 for its weight gradient (a per-tensor scale
 * every forward computes: linear's run-time state "fp8_scale"). */
static void mlp_create(mlp *m, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->context = test_context(seed);
  bpt_context *c = m->context;
  const int64_t features = FEATURES, dims[2] = {BATCH, FEATURES};
  bpt_node *h;
  assert_ok(c, bpt_graph_create(c, &m->graph));
  bpt_precision_options precision = bpt_precision_options_default();
  precision.loss_scaling = BPT_LOSS_SCALING_NONE;
  precision.saved_activation_storage = BPT_ACTIVATION_STORAGE_FP8;
  assert_ok(c, bpt_graph_set_precision(m->graph, &precision));
  assert_ok(c, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &m->x));
  assert_ok(c, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
  assert_ok(c, bpt_layer_linear(m->graph, "fc1", m->x, HIDDEN, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(c, bpt_relu(m->graph, "relu", h, &h));
  assert_ok(c, bpt_layer_linear(m->graph, "fc2", h, CLASSES, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(c, bpt_softmax_cross_entropy(m->graph, "loss", h, m->labels, &m->loss));
  assert_ok(c, bpt_graph_compile(m->graph, m->loss, BATCH));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.5f;
  assert_ok(c, bpt_optimizer_create(m->graph, &options, &m->optimizer));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, dims, &m->x_values));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, dims, &m->label_values));
  test_random random;
  test_random_seed(&random, 3);
  test_random_fill(&random, bpt_tensor_data(m->x_values), BATCH * FEATURES, -3.0f, 3.0f);
  int32_t *labels = bpt_tensor_data(m->label_values);
  for (int n = 0; n < BATCH; n++)
    labels[n] = n % CLASSES;
  assert_ok(c, bpt_graph_set_input(m->graph, m->x, m->x_values));
  assert_ok(c, bpt_graph_set_input(m->graph, m->labels, m->label_values));
}

static void mlp_destroy(mlp *m) {
  bpt_optimizer_destroy(m->optimizer);
  bpt_tensor_destroy(m->x_values);
  bpt_tensor_destroy(m->label_values);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static bpt_node *node(mlp *m, const char *name) {
  bpt_node *found;
  assert_ok(m->context, bpt_graph_find_node(m->graph, name, &found));
  return found;
}

static void round_trip_keeps_parameters_and_state_by_name(void **state) {
  (void)state;
  mlp a, b;
  mlp_create(&a, 11);
  for (int step = 0; step < 3; step++) {
    assert_ok(a.context, bpt_graph_forward(a.graph));
    assert_ok(a.context, bpt_graph_backward(a.graph));
    assert_ok(a.context, bpt_optimizer_step(a.optimizer));
  }
  const float scale = node(&a, "fc2")->float_state[0];
  /* A power of two that scales max |x| into E4M3's 448; inputs within 3 and trained weights put it far from 1. */
  assert_true(scale > 0.0f && scale != 1.0f);
  assert_int_equal(node(&a, "relu")->int_state[0], 1); /* the CPU keeps relu's mask */
  const char *path = test_write_file("params-round-trip.ckpt", "", 0);
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  assert_int_equal(bpt_checkpoint_format_of(bytes), BPT_CHECKPOINT_FORMAT_VERSION);
  assert_non_null(memmem(bytes, size, "fp8_scale", 9));
  assert_non_null(memmem(bytes, size, "uses_mask", 9));
  assert_non_null(memmem(bytes, size, "label_smoothing", 15));
  free(bytes);

  mlp_create(&b, 12);
  assert_true(node(&b, "fc2")->float_state[0] != scale); /* nothing ran yet */
  bpt_checkpoint_contents loaded = bpt_checkpoint_contents_default();
  assert_ok(b.context, bpt_checkpoint_load(b.graph, path, &loaded));
  assert_true(node(&b, "fc2")->float_state[0] == scale);
  assert_int_equal(node(&b, "relu")->int_state[0], 1);
  const int64_t count = bpt_graph_parameter_count(a.graph);
  float *ours = calloc((size_t)count, sizeof *ours), *theirs = calloc((size_t)count, sizeof *theirs);
  assert_ok(a.context, bpt_graph_read_parameters(a.graph, ours, count));
  assert_ok(b.context, bpt_graph_read_parameters(b.graph, theirs, count));
  assert_memory_equal(ours, theirs, (size_t)count * sizeof *ours);
  free(ours);
  free(theirs);
  mlp_destroy(&a);
  mlp_destroy(&b);
}

/* A graph whose parameter differs is refused by the parameter's name. */
static void differing_parameter_is_refused_by_name(void **state) {
  (void)state;
  bpt_context *c = test_context(2);
  bpt_graph *a, *b;
  bpt_node *x, *y, *loss;
  const int64_t features = 4;
  const char *path = test_write_file("params-differ.ckpt", "", 0);
  for (int which = 0; which < 2; which++) {
    bpt_graph **g = which ? &b : &a;
    assert_ok(c, bpt_graph_create(c, g));
    assert_ok(c, bpt_graph_input(*g, "x", BPT_DTYPE_F32, 1, &features, &x));
    assert_ok(c, bpt_graph_input(*g, "y", BPT_DTYPE_I32, 0, NULL, &y));
    assert_ok(c, bpt_layer_linear(*g, "fc", x, 3, BPT_INIT_HE_UNIFORM, &x));
    assert_ok(c, bpt_softmax_cross_entropy_options(*g, "loss", x, y, -1, which ? 0.2f : 0.1f, &loss));
    assert_ok(c, bpt_graph_compile(*g, loss, 2));
  }
  assert_ok(c, bpt_checkpoint_save(a, path, NULL));
  assert_fails(c, BPT_ERR_SHAPE,
               "softmax_cross_entropy 'loss', has different op attributes in the file and in this graph: "
               "label_smoothing is 0.100000001 in the file, 0.200000003 here",
               bpt_checkpoint_load(b, path, NULL));
  bpt_graph_destroy(a);
  bpt_graph_destroy(b);
  bpt_context_destroy(c);
}

static void format_2_file_still_loads(void **state) {
  (void)state;
  char path[4096];
  const char *source = getenv("BPT_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/tests/fixtures/checkpoint_v2.bptckpt", source ? source : ".");
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  assert_non_null(bytes);
  assert_int_equal(bpt_checkpoint_format_of(bytes), BPT_CHECKPOINT_FORMAT_SLOTS);
  free(bytes);
  bpt_context *c = test_context(3);
  bpt_graph *g;
  bpt_node *loss;
  assert_ok(c, bpt_graph_create(c, &g));
  assert_ok(c, v2_model_build(g, &loss));
  assert_ok(c, bpt_graph_compile(g, loss, V2_BATCH));
  /* Strict: every node's attribute slots are compared with the parameters declared in them now. */
  assert_ok(c, bpt_checkpoint_load(g, path, NULL));
  float values[V2_PARAMETER_VALUES];
  assert_ok(c, bpt_graph_read_parameters(g, values, V2_PARAMETER_VALUES));
  for (int i = 0; i < V2_PARAMETER_VALUES; i++)
    assert_true(values[i] == v2_parameter_value(i));
  bpt_node *n;
  assert_ok(c, bpt_graph_find_node(g, "drop1", &n));
  assert_true(n->float_attributes[0] == 0.25f);
  assert_ok(c, bpt_graph_find_node(g, "relu1", &n));
  assert_int_equal(n->int_state[0], 1); /* compile's choice; version 2 stored 0 for it */
  assert_ok(c, bpt_graph_find_node(g, "fc1", &n));
  assert_true(n->float_state[0] == 0.0f);
  bpt_graph_destroy(g);

  /* The same model with another dropout rate is refused, naming the parameter in that slot. */
  bpt_node *x, *y, *h;
  const int64_t features = V2_FEATURES;
  assert_ok(c, bpt_graph_create(c, &g));
  assert_ok(c, bpt_graph_input(g, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(c, bpt_graph_input(g, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(c, bpt_layer_linear(g, "fc1", x, V2_HIDDEN, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(c, bpt_relu(g, "relu1", h, &h));
  assert_ok(c, bpt_dropout(g, "drop1", h, 0.5f, &h));
  assert_ok(c, bpt_leaky_relu(g, "leaky1", h, 0.2f, &h));
  assert_ok(c, bpt_layer_linear(g, "fc2", h, V2_CLASSES, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(c, bpt_softmax_cross_entropy_options(g, "loss", h, y, -1, 0.1f, &loss));
  assert_ok(c, bpt_graph_compile(g, loss, V2_BATCH));
  assert_fails(c, BPT_ERR_SHAPE, "float attribute 0 (parameter 'probability') is 0.25 in the file, 0.5 here",
               bpt_checkpoint_load(g, path, NULL));
  bpt_graph_destroy(g);
  bpt_context_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(validator_names_node_parameter_value_and_range),
      cmocka_unit_test(round_trip_keeps_parameters_and_state_by_name),
      cmocka_unit_test(differing_parameter_is_refused_by_name),
      cmocka_unit_test(format_2_file_still_loads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
