/* Checkpoints matched by name and shape: a training checkpoint into an inference graph, a renamed, an added
 * and a removed layer, another width with the same value count (4-8-3 into 4-3-13), the load report, a
 * refused load that changes nothing, optimiser state restored by name into a graph with another packing, and
 * the old BPTPARAM / BPTPARM1 parameter files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint.h"
#include "core/graph.h"
#include "core/optimizer_state.h"
#include "test_support.h"

enum { FEATURES = 4, BATCH = 6, MAX_PARAMETERS = 256 };

typedef struct layer {
  const char *name;
  int64_t units;
} layer;

typedef struct net {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *y, *logits;
  bpt_optimizer *optimizer;
  bpt_tensor *images, *labels;
} net;

/* Linear layers with a ReLU between; a training net also has labels, a cross-entropy loss and SGD with
 * momentum; an inference net has neither (compiled without a loss). */
static void net_create(net *n, const layer *layers, int count, bool training, float momentum, uint64_t seed) {
  memset(n, 0, sizeof *n);
  n->context = test_context(seed);
  bpt_context *c = n->context;
  int64_t features = FEATURES, dims[2] = {BATCH, FEATURES};
  assert_ok(c, bpt_graph_create(c, &n->graph));
  assert_ok(c, bpt_graph_input(n->graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  bpt_node *h = n->x, *loss = NULL;
  for (int i = 0; i < count; i++) {
    char relu[64];
    if (i > 0) {
      snprintf(relu, sizeof relu, "%s.relu", layers[i - 1].name);
      assert_ok(c, bpt_relu(n->graph, relu, h, &h));
    }
    assert_ok(c, bpt_layer_linear(n->graph, layers[i].name, h, layers[i].units, BPT_INIT_HE_UNIFORM, &h));
  }
  n->logits = h;
  if (training) {
    assert_ok(c, bpt_graph_input(n->graph, "y", BPT_DTYPE_I32, 0, NULL, &n->y));
    assert_ok(c, bpt_softmax_cross_entropy(n->graph, "loss", n->logits, n->y, &loss));
  }
  assert_ok(c, bpt_graph_compile(n->graph, loss, BATCH));
  if (training) {
    bpt_optimizer_options options = bpt_optimizer_options_default();
    options.kind = BPT_OPTIMIZER_SGD;
    options.learning_rate = 0.1f;
    options.momentum = momentum;
    assert_ok(c, bpt_optimizer_create(n->graph, &options, &n->optimizer));
    assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, dims, &n->labels));
  }
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, dims, &n->images));
  test_random random;
  test_random_seed(&random, 17);
  test_random_fill(&random, bpt_tensor_data(n->images), BATCH * FEATURES, -1.0f, 1.0f);
  if (training) {
    int32_t *labels = bpt_tensor_data(n->labels);
    for (int i = 0; i < BATCH; i++)
      labels[i] = i % 3;
  }
}

static void net_train(net *n, int steps) {
  for (int s = 0; s < steps; s++) {
    assert_ok(n->context, bpt_graph_set_input(n->graph, n->x, n->images));
    assert_ok(n->context, bpt_graph_set_input(n->graph, n->y, n->labels));
    assert_ok(n->context, bpt_graph_forward(n->graph));
    assert_ok(n->context, bpt_graph_backward(n->graph));
    assert_ok(n->context, bpt_optimizer_step(n->optimizer));
  }
}

static void net_destroy(net *n) {
  bpt_tensor_destroy(n->images);
  bpt_tensor_destroy(n->labels);
  bpt_optimizer_destroy(n->optimizer);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

static const bpt_node *parameter_named(net *n, const char *name) {
  for (int p = 0; p < n->graph->parameter_count; p++)
    if (strcmp(n->graph->parameters[p]->name, name) == 0) return n->graph->parameters[p];
  fail_msg("no parameter '%s'", name);
  return NULL;
}

/* A parameter's values (buffer 0: the parameter block; 1: the optimiser's first state buffer). Returns count. */
static int64_t read_named(net *n, const char *name, int buffer, float *values) {
  const bpt_node *node = parameter_named(n, name);
  int64_t count = bpt_node_inner_count(node);
  assert_true(count <= MAX_PARAMETERS);
  const float *block = n->graph->parameter_block;
  if (buffer == 1) {
    bpt_optimizer_state view;
    bpt_optimizer_state_view(n->optimizer, &view);
    block = view.buffers[0];
  }
  bpt_backend *backend = n->graph->backend;
  assert_int_equal(
      backend->vtable->download(backend, values, block + node->param_offset, (size_t)count * sizeof(float)), BPT_OK);
  return count;
}

static void assert_same_named(net *a, net *b, const char *name, int buffer) {
  float x[MAX_PARAMETERS], y[MAX_PARAMETERS];
  int64_t count = read_named(a, name, buffer, x);
  assert_int_equal(read_named(b, name, buffer, y), count);
  assert_memory_equal(x, y, (size_t)count * sizeof(float));
}

static float *all_parameters(net *n) {
  int64_t count = bpt_graph_parameter_count(n->graph);
  float *values = malloc((size_t)count * sizeof *values);
  assert_ok(n->context, bpt_graph_read_parameters(n->graph, values, count));
  return values;
}

static const char *save(net *n, const char *name, bool with_optimizer) {
  static char paths[4][4096];
  static int slot;
  char *path = paths[slot++ % 4];
  strcpy(path, test_write_file(name, "", 0));
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = with_optimizer ? n->optimizer : NULL;
  assert_ok(n->context, bpt_checkpoint_save(n->graph, path, &contents));
  return path;
}

static bpt_checkpoint_load_options lenient(void) {
  bpt_checkpoint_load_options options = bpt_checkpoint_load_options_default();
  options.strict = 0;
  return options;
}

/* The report's list `entry` is exactly `names` (in order), each reason containing `reason`. */
static void assert_list(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry, const char *const *names,
                        int count, const char *reason) {
  assert_int_equal(bpt_checkpoint_report_count(report, entry), count);
  for (int i = 0; i < count; i++) {
    assert_string_equal(bpt_checkpoint_report_name(report, entry, i), names[i]);
    const char *why = bpt_checkpoint_report_reason(report, entry, i);
    assert_non_null(why);
    if (!strstr(why, reason)) fail_msg("entry '%s': reason '%s' does not mention '%s'", names[i], why, reason);
    if (!reason[0]) assert_string_equal(why, "");
  }
  assert_null(bpt_checkpoint_report_name(report, entry, count));
  assert_null(bpt_checkpoint_report_reason(report, entry, count));
}

static const layer mlp_4_8_3[] = {{"fc1", 8}, {"fc2", 3}};

static void an_inference_graph_loads_a_training_checkpoint(void **state) {
  (void)state;
  net trained, inference;
  net_create(&trained, mlp_4_8_3, 2, true, 0.9f, 1);
  net_train(&trained, 3);
  const char *path = save(&trained, "matching-train.ckpt", true);
  net_create(&inference, mlp_4_8_3, 2, false, 0.0f, 2); /* no labels, no loss: fewer nodes */
  assert_true(inference.graph->node_count < trained.graph->node_count);
  bpt_checkpoint_report *report = (bpt_checkpoint_report *)&report; /* must be replaced */
  bpt_checkpoint_load_options strict = bpt_checkpoint_load_options_default();
  assert_ok(inference.context, bpt_checkpoint_load_with_options(inference.graph, path, NULL, &strict, &report));
  const char *const loaded[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  assert_list(report, BPT_CHECKPOINT_LOADED, loaded, 4, "");
  assert_list(report, BPT_CHECKPOINT_SKIPPED, NULL, 0, "");
  assert_list(report, BPT_CHECKPOINT_MISSING, NULL, 0, "");
  bpt_checkpoint_report_destroy(report);
  float *expected = all_parameters(&trained), *got = all_parameters(&inference);
  assert_memory_equal(expected, got, (size_t)bpt_graph_parameter_count(trained.graph) * sizeof(float));
  free(expected);
  free(got);

  /* Both graphs compute the same logits. */
  int64_t dims[2] = {BATCH, 3};
  bpt_tensor *a, *b;
  assert_ok(trained.context, bpt_tensor_create(trained.context, BPT_DTYPE_F32, 2, dims, &a));
  assert_ok(inference.context, bpt_tensor_create(inference.context, BPT_DTYPE_F32, 2, dims, &b));
  assert_ok(trained.context, bpt_graph_set_input(trained.graph, trained.x, trained.images));
  assert_ok(trained.context, bpt_graph_set_input(trained.graph, trained.y, trained.labels));
  assert_ok(trained.context, bpt_graph_forward(trained.graph));
  assert_ok(trained.context, bpt_graph_read(trained.graph, trained.logits, a));
  assert_ok(inference.context, bpt_graph_set_input(inference.graph, inference.x, inference.images));
  assert_ok(inference.context, bpt_graph_forward(inference.graph));
  assert_ok(inference.context, bpt_graph_read(inference.graph, inference.logits, b));
  assert_memory_equal(bpt_tensor_data(a), bpt_tensor_data(b), sizeof(float) * BATCH * 3);
  bpt_tensor_destroy(a);
  bpt_tensor_destroy(b);

  /* And the other way: the inference graph's checkpoint loads strictly into the training graph. */
  const char *back = save(&inference, "matching-inference.ckpt", false);
  assert_ok(trained.context, bpt_checkpoint_load(trained.graph, back, NULL));
  net_destroy(&trained);
  net_destroy(&inference);
}

static void a_renamed_layer_is_named(void **state) {
  (void)state;
  net saved, renamed;
  net_create(&saved, mlp_4_8_3, 2, true, 0.9f, 1);
  net_train(&saved, 2);
  const char *path = save(&saved, "matching-renamed.ckpt", false);
  const layer with_head[] = {{"fc1", 8}, {"head", 3}};
  net_create(&renamed, with_head, 2, true, 0.9f, 2);
  float head[MAX_PARAMETERS], after[MAX_PARAMETERS];
  int64_t head_count = read_named(&renamed, "head.weight", 0, head);
  float *before = all_parameters(&renamed);

  bpt_checkpoint_report *report = (bpt_checkpoint_report *)&report;
  assert_fails(renamed.context, BPT_ERR_SHAPE,
               "parameter 'head.weight' [3,8] is missing in the file (the file has parameter 'fc2.weight' [3,8] in "
               "its place, which is not in this graph)",
               bpt_checkpoint_load_with_options(renamed.graph, path, NULL, NULL, &report));
  assert_null(report);
  float *unchanged = all_parameters(&renamed);
  assert_memory_equal(before, unchanged, (size_t)bpt_graph_parameter_count(renamed.graph) * sizeof(float));
  free(unchanged);

  bpt_checkpoint_load_options options = lenient();
  assert_ok(renamed.context, bpt_checkpoint_load_with_options(renamed.graph, path, NULL, &options, &report));
  const char *const loaded[] = {"fc1.weight", "fc1.bias"}, *const skipped[] = {"fc2.weight", "fc2.bias"},
                    *const missing[] = {"head.weight", "head.bias"};
  assert_list(report, BPT_CHECKPOINT_LOADED, loaded, 2, "");
  assert_list(report, BPT_CHECKPOINT_SKIPPED, skipped, 2, "not in this graph");
  assert_list(report, BPT_CHECKPOINT_MISSING, missing, 2, "not in the file");
  bpt_checkpoint_report_destroy(report);
  assert_same_named(&saved, &renamed, "fc1.weight", 0);
  assert_same_named(&saved, &renamed, "fc1.bias", 0);
  read_named(&renamed, "head.weight", 0, after);
  assert_memory_equal(head, after, (size_t)head_count * sizeof(float)); /* left as it was */
  free(before);
  net_destroy(&saved);
  net_destroy(&renamed);
}

static void an_added_or_removed_layer_is_named(void **state) {
  (void)state;
  net saved, added;
  net_create(&saved, mlp_4_8_3, 2, true, 0.9f, 1);
  const char *path = save(&saved, "matching-added.ckpt", false);
  const layer deeper[] = {{"fc1", 8}, {"mid", 8}, {"fc2", 3}};
  net_create(&added, deeper, 3, true, 0.9f, 2);
  assert_fails(added.context, BPT_ERR_SHAPE, "parameter 'mid.weight' [8,8] is missing in the file",
               bpt_checkpoint_load(added.graph, path, NULL));
  bpt_checkpoint_report *report;
  bpt_checkpoint_load_options options = lenient();
  assert_ok(added.context, bpt_checkpoint_load_with_options(added.graph, path, NULL, &options, &report));
  const char *const loaded[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}, *const missing[] = {"mid.weight",
                                                                                                         "mid.bias"};
  assert_list(report, BPT_CHECKPOINT_LOADED, loaded, 4, "");
  assert_list(report, BPT_CHECKPOINT_SKIPPED, NULL, 0, "");
  assert_list(report, BPT_CHECKPOINT_MISSING, missing, 2, "not in the file");
  bpt_checkpoint_report_destroy(report);
  assert_same_named(&saved, &added, "fc2.weight", 0);

  /* The deeper net's file into the shallower graph: the extra layer is named. */
  const char *deeper_path = save(&added, "matching-deeper.ckpt", false);
  assert_fails(saved.context, BPT_ERR_SHAPE, "parameter 'mid.weight' [8,8] in the file is not in this graph",
               bpt_checkpoint_load(saved.graph, deeper_path, NULL));
  net_destroy(&saved);
  net_destroy(&added);
}

/* 4-8-3 and 4-3-13 both hold 67 values: a count check alone would load one into the other. */
static void another_width_with_the_same_count_is_refused(void **state) {
  (void)state;
  net saved, other;
  net_create(&saved, mlp_4_8_3, 2, true, 0.9f, 1);
  const char *path = save(&saved, "matching-width.ckpt", false);
  const layer narrow[] = {{"fc1", 3}, {"fc2", 13}};
  net_create(&other, narrow, 2, true, 0.9f, 2);
  assert_int_equal(bpt_graph_parameter_count(saved.graph), bpt_graph_parameter_count(other.graph));
  float *before = all_parameters(&other);
  assert_fails(other.context, BPT_ERR_SHAPE, "parameter 'fc1.weight': shape [8,4] in the file, [3,4] in the graph",
               bpt_checkpoint_load(other.graph, path, NULL));
  bpt_checkpoint_report *report;
  bpt_checkpoint_load_options options = lenient();
  assert_ok(other.context, bpt_checkpoint_load_with_options(other.graph, path, NULL, &options, &report));
  const char *const skipped[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  assert_list(report, BPT_CHECKPOINT_LOADED, NULL, 0, "");
  assert_list(report, BPT_CHECKPOINT_SKIPPED, skipped, 4, " in the file, ");
  assert_list(report, BPT_CHECKPOINT_MISSING, NULL, 0, "");
  assert_string_equal(bpt_checkpoint_report_reason(report, BPT_CHECKPOINT_SKIPPED, 2),
                      "shape [3,8] in the file, [13,3] in the graph");
  bpt_checkpoint_report_destroy(report);
  float *after = all_parameters(&other);
  assert_memory_equal(before, after, (size_t)bpt_graph_parameter_count(other.graph) * sizeof(float));
  free(before);
  free(after);
  net_destroy(&saved);
  net_destroy(&other);
}

static void the_report_answers_out_of_range_calmly(void **state) {
  (void)state;
  assert_int_equal(bpt_checkpoint_report_count(NULL, BPT_CHECKPOINT_LOADED), 0);
  assert_null(bpt_checkpoint_report_name(NULL, BPT_CHECKPOINT_LOADED, 0));
  assert_null(bpt_checkpoint_report_reason(NULL, BPT_CHECKPOINT_MISSING, 0));
  bpt_checkpoint_report_destroy(NULL);
  net n;
  net_create(&n, mlp_4_8_3, 2, true, 0.9f, 1);
  const char *path = save(&n, "matching-report.ckpt", false);
  bpt_checkpoint_report *report;
  assert_ok(n.context, bpt_checkpoint_load_with_options(n.graph, path, NULL, NULL, &report));
  assert_int_equal(bpt_checkpoint_report_count(report, BPT_CHECKPOINT_LOADED), 4);
  assert_int_equal(bpt_checkpoint_report_count(report, (bpt_checkpoint_entry)7), 0);
  assert_null(bpt_checkpoint_report_name(report, BPT_CHECKPOINT_LOADED, -1));
  assert_null(bpt_checkpoint_report_name(report, (bpt_checkpoint_entry)-1, 0));
  assert_null(bpt_checkpoint_report_reason(report, BPT_CHECKPOINT_LOADED, 4));
  bpt_checkpoint_report_destroy(report);
  /* Without a report, and with options from an older caller that knew only `size`... `strict`. */
  bpt_checkpoint_load_options options = lenient();
  assert_ok(n.context, bpt_checkpoint_load_with_options(n.graph, path, NULL, &options, NULL));
  options.size = 1;
  assert_fails(n.context, BPT_ERR_INVALID_ARGUMENT, "bpt_checkpoint_load_with_options",
               bpt_checkpoint_load_with_options(n.graph, path, NULL, &options, NULL));
  net_destroy(&n);
}

/* A load refused late (after the parameters matched: the optimiser's momentum differs) changes nothing:
 * parameters, optimiser state, step count. */
static void a_refused_load_changes_nothing(void **state) {
  (void)state;
  net saved, other;
  net_create(&saved, mlp_4_8_3, 2, true, 0.9f, 1);
  net_train(&saved, 3);
  const char *path = save(&saved, "matching-atomic.ckpt", true);
  const layer deeper[] = {{"fc1", 8}, {"mid", 8}, {"fc2", 3}};
  net_create(&other, deeper, 3, true, 0.5f, 2);
  net_train(&other, 2);
  float *before = all_parameters(&other), velocity[MAX_PARAMETERS], velocity_after[MAX_PARAMETERS];
  int64_t velocity_count = read_named(&other, "fc1.weight", 1, velocity);
  for (int strict = 0; strict <= 1; strict++) {
    bpt_checkpoint_load_options options = bpt_checkpoint_load_options_default();
    options.strict = strict;
    bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
    contents.optimizer = other.optimizer;
    bpt_checkpoint_report *report = (bpt_checkpoint_report *)&report;
    bpt_status status = bpt_checkpoint_load_with_options(other.graph, path, &contents, &options, &report);
    if (strict)
      assert_fails(other.context, BPT_ERR_SHAPE, "'mid.weight'", status);
    else
      assert_fails(other.context, BPT_ERR_INVALID_ARGUMENT, "momentum 0.9, this one 0.5", status);
    assert_null(report);
    float *after = all_parameters(&other);
    assert_memory_equal(before, after, (size_t)bpt_graph_parameter_count(other.graph) * sizeof(float));
    free(after);
    read_named(&other, "fc1.weight", 1, velocity_after);
    assert_memory_equal(velocity, velocity_after, (size_t)velocity_count * sizeof(float));
    assert_int_equal(bpt_optimizer_step_count(other.optimizer), 2);
  }
  free(before);
  net_destroy(&saved);
  net_destroy(&other);
}

/* Optimiser state follows the names: the loading graph has a layer first, so every saved parameter sits at
 * another offset of its blocks. */
static void optimizer_state_is_restored_by_name(void **state) {
  (void)state;
  net saved, shifted;
  net_create(&saved, mlp_4_8_3, 2, true, 0.9f, 1);
  net_train(&saved, 3);
  const char *path = save(&saved, "matching-optimizer.ckpt", true);
  const layer with_stem[] = {{"stem", FEATURES}, {"fc1", 8}, {"fc2", 3}};
  net_create(&shifted, with_stem, 3, true, 0.9f, 2);
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = shifted.optimizer;
  bpt_checkpoint_load_options options = lenient();
  assert_ok(shifted.context, bpt_checkpoint_load_with_options(shifted.graph, path, &contents, &options, NULL));
  const char *const names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  for (int i = 0; i < 4; i++) {
    assert_same_named(&saved, &shifted, names[i], 0);
    assert_same_named(&saved, &shifted, names[i], 1);
  }
  float velocity[MAX_PARAMETERS];
  int64_t count = read_named(&shifted, "fc1.weight", 1, velocity);
  bool moving = false;
  for (int64_t i = 0; i < count; i++)
    moving = moving || velocity[i] != 0.0f;
  assert_true(moving); /* the test would be empty with zero velocities */
  count = read_named(&shifted, "stem.weight", 1, velocity);
  for (int64_t i = 0; i < count; i++)
    assert_true(velocity[i] == 0.0f); /* not in the file: untouched */
  assert_int_equal(bpt_optimizer_step_count(shifted.optimizer), 3);

  /* Not strict, a file without optimiser state leaves the optimiser as it is. */
  net_train(&shifted, 1);
  read_named(&shifted, "fc1.weight", 1, velocity);
  const char *plain = save(&saved, "matching-plain.ckpt", false);
  assert_ok(shifted.context, bpt_checkpoint_load_with_options(shifted.graph, plain, &contents, &options, NULL));
  assert_int_equal(bpt_optimizer_step_count(shifted.optimizer), 4);
  float again[MAX_PARAMETERS];
  read_named(&shifted, "fc1.weight", 1, again);
  assert_memory_equal(velocity, again, (size_t)count * sizeof(float));
  /* Strictly it is an error, as before. */
  const layer same[] = {{"fc1", 8}, {"fc2", 3}};
  net exact;
  net_create(&exact, same, 2, true, 0.9f, 3);
  contents.optimizer = exact.optimizer;
  assert_fails(exact.context, BPT_ERR_FORMAT, "no optimizer state", bpt_checkpoint_load(exact.graph, plain, &contents));
  net_destroy(&exact);
  net_destroy(&saved);
  net_destroy(&shifted);
}

/* An old parameter file: magic, little-endian i64 count, the values. */
static const char *write_legacy(const char *magic, const float *values, int64_t count, int64_t stated) {
  size_t size = 16 + (size_t)count * 4;
  unsigned char *bytes = malloc(size);
  memcpy(bytes, magic, 8);
  for (int i = 0; i < 8; i++)
    bytes[8 + i] = (unsigned char)((uint64_t)stated >> (8 * i));
  memcpy(bytes + 16, values, (size_t)count * 4); /* the machines these files came from were little-endian */
  const char *path = test_write_file("matching-legacy.bin", bytes, size);
  free(bytes);
  return path;
}

static void old_parameter_files_are_explained(void **state) {
  (void)state;
  net n, narrow;
  net_create(&n, mlp_4_8_3, 2, true, 0.9f, 1);
  int64_t count = bpt_graph_parameter_count(n.graph);
  float *values = malloc((size_t)count * sizeof *values);
  test_random random;
  test_random_seed(&random, 3);
  test_random_fill(&random, values, count, -1.0f, 1.0f);
  const char *path = write_legacy("BPTPARAM", values, count, count);
  float *before = all_parameters(&n);
  assert_fails(n.context, BPT_ERR_FORMAT, "is an old BPTPARAM parameter file (the C examples' --save format",
               bpt_checkpoint_load(n.graph, path, NULL));
  assert_fails(n.context, BPT_ERR_FORMAT, "load it once with bpt_checkpoint_load_with_options and strict = 0",
               bpt_checkpoint_load(n.graph, path, NULL));
  float *unchanged = all_parameters(&n);
  assert_memory_equal(before, unchanged, (size_t)count * sizeof(float));

  bpt_checkpoint_report *report;
  bpt_checkpoint_load_options options = lenient();
  assert_ok(n.context, bpt_checkpoint_load_with_options(n.graph, path, NULL, &options, &report));
  const char *const loaded[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  assert_list(report, BPT_CHECKPOINT_LOADED, loaded, 4, "by position from BPTPARAM file");
  bpt_checkpoint_report_destroy(report);
  float *got = all_parameters(&n);
  assert_memory_equal(values, got, (size_t)count * sizeof(float));

  /* Another count, a truncated file, the Python binding's format. */
  const layer wider[] = {{"fc1", 9}, {"fc2", 3}};
  net_create(&narrow, wider, 2, true, 0.9f, 2);
  assert_fails(narrow.context, BPT_ERR_SHAPE, "with 67 values; this graph has 75",
               bpt_checkpoint_load_with_options(narrow.graph, path, NULL, &options, NULL));
  path = write_legacy("BPTPARAM", values, count - 1, count);
  assert_fails(n.context, BPT_ERR_FORMAT,
               "BPTPARAM parameter file (the C examples' --save format before checkpoints), "
               "but truncated or malformed",
               bpt_checkpoint_load_with_options(n.graph, path, NULL, &options, NULL));
  path = write_legacy("BPTPARM1", values, count, count);
  assert_fails(n.context, BPT_ERR_FORMAT, "is an old BPTPARM1 parameter file (the Python binding's save() format",
               bpt_checkpoint_load(n.graph, path, NULL));
  free(values);
  free(before);
  free(unchanged);
  free(got);
  net_destroy(&n);
  net_destroy(&narrow);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_inference_graph_loads_a_training_checkpoint),
      cmocka_unit_test(a_renamed_layer_is_named),
      cmocka_unit_test(an_added_or_removed_layer_is_named),
      cmocka_unit_test(another_width_with_the_same_count_is_refused),
      cmocka_unit_test(the_report_answers_out_of_range_calmly),
      cmocka_unit_test(a_refused_load_changes_nothing),
      cmocka_unit_test(optimizer_state_is_restored_by_name),
      cmocka_unit_test(old_parameter_files_are_explained),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
