/* Speculative backprop on a convolutional chain (issue 28): conv2d, batch norm, ReLU, max and average pooling,
 * flatten and linear are accepted where they were refused; with the same properties test_speculative.c checks on
 * the MLP: threshold 0 is ordinary backprop bit for bit, a hit gives exactly the cached sample's gradient, a
 * miss the ordinary one up to rounding; ops outside the chain, and ops fpga-sim leaves to the CPU fallback,
 * are refused naming the node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "test_support.h"

enum { SIDE = 8, FEATURES = SIDE * SIDE, CLASSES = 3 };

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *logits, *loss;
  bpt_optimizer *optimizer;
} model;

/* x (1, 8, 8) -> conv 3@3x3 pad 1 (no bias) -> batch norm + ReLU (one batch_norm_relu node) -> max pool 2 -> conv 4@3x3
 * pad 1 -> ReLU -> avg pool 2 -> conv 2@1x1 (no bias) -> batch norm -> flatten -> linear 3 -> softmax cross-entropy,
 * every value kept (the cache snapshots them). */
static bpt_status build(bpt_graph *graph, bpt_node *x, bpt_node **logits) {
  const bpt_layer_spec layers[] = {
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 3, .kernel = 3, .padding = 1},
      {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_MAX_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 4, .kernel = 3, .padding = 1},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_AVG_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 2, .kernel = 1},
      {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
      {BPT_LAYER(BPT_LAYER_FLATTEN)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = CLASSES},
  };
  return bpt_layer_sequential(graph, "cnn", x, layers, (int)(sizeof layers / sizeof layers[0]), logits);
}

static model make_model(const char *backend, float learning_rate, float momentum) {
  model m;
  bpt_context_options options = bpt_context_options_default();
  options.backend = backend;
  options.num_threads = 1;
  options.seed = 5;
  options.cpu_fallback = 1;
  assert_ok(NULL, bpt_context_create(&options, &m.context));
  int64_t image[3] = {1, SIDE, SIDE};
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  bpt_precision_options precision = bpt_precision_options_default();
  precision.keep_all_values = 1;
  assert_ok(m.context, bpt_graph_set_precision(m.graph, &precision));
  assert_ok(m.context, bpt_graph_input(m.graph, "x", BPT_DTYPE_F32, 3, image, &m.x));
  assert_ok(m.context, bpt_graph_input(m.graph, "labels", BPT_DTYPE_I32, 0, NULL, &m.labels));
  assert_ok(m.context, build(m.graph, m.x, &m.logits));
  assert_ok(m.context, bpt_softmax_cross_entropy(m.graph, "loss", m.logits, m.labels, &m.loss));
  assert_ok(m.context, bpt_graph_compile(m.graph, m.loss, 16));
  bpt_optimizer_options optimizer = bpt_optimizer_options_default();
  optimizer.learning_rate = learning_rate;
  optimizer.momentum = momentum;
  assert_ok(m.context, bpt_optimizer_create(m.graph, &optimizer, &m.optimizer));
  return m;
}

static void free_model(model *m) {
  bpt_optimizer_destroy(m->optimizer);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

typedef struct data {
  bpt_tensor *images, *labels;
} data;

static data make_data(bpt_context *context, int64_t count, const int32_t *labels, uint64_t seed) {
  data d;
  int64_t dims[2] = {count, FEATURES};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &d.images));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &d.labels));
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, bpt_tensor_data(d.images), count * FEATURES, -1.0f, 1.0f);
  memcpy(bpt_tensor_data(d.labels), labels, (size_t)count * sizeof *labels);
  return d;
}

static void free_data(data *d) {
  bpt_tensor_destroy(d->images);
  bpt_tensor_destroy(d->labels);
}

static data slice(bpt_context *context, const data *d, int64_t first, int64_t count) {
  data s = make_data(context, count, (int32_t *)bpt_tensor_data(d->labels) + first, 0);
  memcpy(bpt_tensor_data(s.images), (float *)bpt_tensor_data(d->images) + first * FEATURES,
         (size_t)(count * FEATURES) * sizeof(float));
  return s;
}

static bpt_speculative_trainer *make_trainer(model *m, float threshold, int threads) {
  bpt_speculative_options options = bpt_speculative_options_default();
  options.threshold = threshold;
  options.threads = threads;
  bpt_speculative_trainer *trainer = NULL;
  assert_ok(m->context, bpt_speculative_create(m->graph, m->x, m->labels, m->optimizer, &options, &trainer));
  return trainer;
}

/* Ordinary per-sample training with the graph API: forward and backward_accumulate, each loss seeded 1 / batch. */
static void ordinary_batch(model *m, const data *d, int64_t first, int64_t count) {
  bpt_context *context = m->context;
  bpt_graph *graph = m->graph;
  float seed = 1.0f / (float)count, unit = 1.0f;
  memcpy(graph->loss_gradient, &seed, sizeof seed); /* CPU device memory is host memory */
  assert_ok(context, bpt_graph_zero_gradients(graph));
  for (int64_t n = first; n < first + count; n++) {
    data one = slice(context, d, n, 1);
    assert_ok(context, bpt_graph_set_input(graph, m->x, one.images));
    assert_ok(context, bpt_graph_set_input(graph, m->labels, one.labels));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward_accumulate(graph));
    free_data(&one);
  }
  memcpy(graph->loss_gradient, &unit, sizeof unit);
  assert_ok(context, bpt_optimizer_step(m->optimizer));
}

static void ordinary_gradient(model *m, const data *d, int64_t n, float *gradient) {
  data one = slice(m->context, d, n, 1);
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->x, one.images));
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->labels, one.labels));
  assert_ok(m->context, bpt_graph_forward(m->graph));
  assert_ok(m->context, bpt_graph_backward(m->graph));
  assert_ok(m->context, bpt_graph_read_gradients(m->graph, gradient, bpt_graph_parameter_count(m->graph)));
  free_data(&one);
}

/* On the CPU and on fpga-sim, which runs every op of the chain (convolutions, batch norm, pooling) itself. */
static void threshold_zero_is_ordinary_backprop_bit_for_bit(void **state) {
  (void)state;
  const int32_t labels[20] = {0, 1, 2, 0, 0, 1, 2, 2, 1, 0, 1, 1, 0, 2, 0, 1, 2, 0, 1, 2};
  for (int run = 0; run < 4; run++) {
    const char *backend = run < 2 ? "cpu" : "fpga-sim";
    const int threads = 1 + run % 2;
    model speculative = make_model(backend, 0.1f, 0.9f), ordinary = make_model(backend, 0.1f, 0.9f);
    data d = make_data(speculative.context, 20, labels, 1);
    bpt_speculative_trainer *trainer = make_trainer(&speculative, 0.0f, threads);
    const int64_t batches[3][2] = {{0, 7}, {7, 7}, {14, 6}};
    for (int b = 0; b < 3; b++) {
      data part = slice(speculative.context, &d, batches[b][0], batches[b][1]);
      assert_ok(speculative.context, bpt_speculative_train_batch(trainer, part.images, part.labels, NULL));
      ordinary_batch(&ordinary, &d, batches[b][0], batches[b][1]);
      free_data(&part);
    }
    int64_t count = bpt_graph_parameter_count(speculative.graph);
    float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
    assert_ok(speculative.context, bpt_graph_read_parameters(speculative.graph, a, count));
    assert_ok(ordinary.context, bpt_graph_read_parameters(ordinary.graph, b, count));
    assert_memory_equal(a, b, (size_t)count * sizeof *a);
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(speculative.context, bpt_speculative_get_counters(trainer, &counters));
    assert_int_equal(counters.hits, 0);
    assert_int_equal(counters.fallbacks, 20);
    free(a), free(b);
    bpt_speculative_destroy(trainer);
    free_data(&d);
    free_model(&speculative);
    free_model(&ordinary);
  }
}

/* Learning rate 0: a hit's gradient equals, bit for bit, the graph's own gradient of the previous sample of its
 * label, for the convolutions, the batch norm and the linear layer alike (one and two threads). */
static void hits_use_the_last_sample_of_the_label(void **state) {
  (void)state;
  const int32_t labels[4] = {0, 0, 0, 1};
  for (int threads = 1; threads <= 2; threads++) {
    model m = make_model("cpu", 0.0f, 0.0f);
    data d = make_data(m.context, 4, labels, 2);
    int64_t count = bpt_graph_parameter_count(m.graph);
    float *expected = malloc((size_t)count * sizeof(float)), *actual = malloc((size_t)count * sizeof(float));
    bpt_speculative_trainer *trainer = make_trainer(&m, 10.0f, threads);
    for (int64_t n = 0; n < 4; n++) {
      data one = slice(m.context, &d, n, 1);
      assert_ok(m.context, bpt_speculative_train_batch(trainer, one.images, one.labels, NULL));
      assert_ok(m.context, bpt_graph_read_gradients(m.graph, actual, count));
      int64_t source = (n == 1 || n == 2) ? n - 1 : n;
      free_data(&one);
      ordinary_gradient(&m, &d, source, expected);
      assert_memory_equal(actual, expected, (size_t)count * sizeof(float));
    }
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
    assert_int_equal(counters.hits, 2);
    assert_int_equal(counters.cold_fallbacks, 2);
    free(expected), free(actual);
    bpt_speculative_destroy(trainer);
    free_data(&d);
    free_model(&m);
  }
}

/* A tiny threshold speculates and (nearly) always misses: the retraction leaves the ordinary mini-batch gradient;
 * with repeated samples hits and misses mix in one mini-batch and the result is still the ordinary gradient. */
static void misses_and_mixed_batches_give_the_ordinary_gradient(void **state) {
  (void)state;
  const int32_t labels[12] = {0, 1, 0, 1, 2, 0, 2, 2, 1, 0, 1, 2};
  for (int mixed = 0; mixed < 2; mixed++) {
    for (int threads = 1; threads <= 2; threads++) {
      model m = make_model("cpu", 0.0f, 0.0f), reference = make_model("cpu", 0.0f, 0.0f);
      data d = make_data(m.context, 12, labels, 3);
      float *images = bpt_tensor_data(d.images);
      for (int n = 3; mixed && n < 12; n++) /* repeats of the first sample of their label: distance 0 */
        for (int j = 0; j < 3; j++)
          if (labels[j] == labels[n]) memcpy(images + n * FEATURES, images + j * FEATURES, FEATURES * sizeof(float));
      bpt_speculative_trainer *trainer = make_trainer(&m, mixed ? 1e-6f : 1e-12f, threads);
      assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
      ordinary_batch(&reference, &d, 0, 12);
      int64_t count = bpt_graph_parameter_count(m.graph);
      float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
      assert_ok(m.context, bpt_graph_read_gradients(m.graph, a, count));
      assert_ok(reference.context, bpt_graph_read_gradients(reference.graph, b, count));
      assert_true(test_relative_error(a, b, count) < 1e-5);
      bpt_speculative_counters counters = {.size = sizeof counters};
      assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
      assert_int_equal(counters.cold_fallbacks, 3);
      if (mixed)
        assert_true(counters.hits >= 5 && counters.fallbacks > counters.cold_fallbacks);
      else
        assert_int_equal(counters.fallbacks, 12);
      free(a), free(b);
      bpt_speculative_destroy(trainer);
      free_data(&d);
      free_model(&m);
      free_model(&reference);
    }
  }
}

/* Dropout is outside the chain: refused naming the node. On fpga-sim (with the CPU fallback, as it has no
 * convolution or pooling kernels) the node nearest the loss that runs on the CPU is refused, naming the backend. */
static void unsupported_nodes_are_refused(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *labels, *hidden, *logits, *loss;
  int64_t image[3] = {1, SIDE, SIDE};
  assert_ok(context, bpt_graph_create(context, &graph));
  bpt_precision_options precision = bpt_precision_options_default();
  precision.keep_all_values = 1;
  assert_ok(context, bpt_graph_set_precision(graph, &precision));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_conv2d(graph, "conv", x, 2, 3, 1, 1, 1, &hidden));
  assert_ok(context, bpt_dropout(graph, "drop", hidden, 0.5f, &hidden));
  assert_ok(context, bpt_flatten(graph, "flat", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(graph, "fc", hidden, CLASSES, BPT_INIT_HE_NORMAL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
  bpt_speculative_trainer *trainer = NULL;
  assert_fails(context, BPT_ERR_UNSUPPORTED, "node 'drop' (dropout) is not a linear, activation, conv2d",
               bpt_speculative_create(graph, x, labels, optimizer, NULL, &trainer));
  assert_null(trainer);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);

  /* A grouped convolution has no fpga-sim kernels: with cpu_fallback it runs on the CPU, which the speculative
   * backward (calling the kernels of the graph's backend) cannot use. */
  bpt_context_options context_options = bpt_context_options_default();
  context_options.backend = "fpga-sim";
  context_options.cpu_fallback = 1;
  assert_ok(NULL, bpt_context_create(&context_options, &context));
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_set_precision(graph, &precision));
  const int64_t pair[3] = {2, SIDE, SIDE}, weight_dims[4] = {4, 1, 3, 3};
  bpt_node *weight;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, pair, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_graph_parameter(graph, "grouped.weight", 4, weight_dims, BPT_INIT_HE_NORMAL, &weight));
  bpt_conv2d_options grouped = bpt_conv2d_options_default();
  grouped.groups = 2;
  assert_ok(context, bpt_conv2d(graph, "grouped", x, weight, NULL, &grouped, &hidden));
  assert_ok(context, bpt_flatten(graph, "flat", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(graph, "fc", hidden, CLASSES, BPT_INIT_HE_NORMAL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
  assert_fails(context, BPT_ERR_UNSUPPORTED, "node 'grouped' (conv2d) has no kernels on backend 'fpga-sim'",
               bpt_speculative_create(graph, x, labels, optimizer, NULL, &trainer));
  assert_null(trainer);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threshold_zero_is_ordinary_backprop_bit_for_bit),
      cmocka_unit_test(hits_use_the_last_sample_of_the_label),
      cmocka_unit_test(misses_and_mixed_batches_give_the_ordinary_gradient),
      cmocka_unit_test(unsupported_nodes_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
