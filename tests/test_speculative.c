/* Speculative backprop: threshold 0 is ordinary per-sample backprop bit for bit; the gate and the per-label
 * cache behave as documented (first sample of a label falls back, the cache follows the last sample, a hit
 * gives exactly the cached state's gradient, a miss gives the ordinary one); options and graphs are checked;
 * on fpga-sim the speculative backward overlaps the forward in the cycle model. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/graph.h"
#include "core/speculative.h"
#include "test_support.h"

enum { FEATURES = 12, CLASSES = 3 };

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *logits, *loss;
  bpt_optimizer *optimizer;
} model;

/* x (12) -> linear 8 -> leaky ReLU -> linear 6 -> tanh -> linear 3 -> softmax cross-entropy. */
static model make_model(const char *backend, float learning_rate, float momentum) {
  model m;
  bpt_context_options options = bpt_context_options_default();
  options.backend = backend;
  options.num_threads = 1;
  options.seed = 5;
  assert_ok(NULL, bpt_context_create(&options, &m.context));
  bpt_node *hidden;
  int64_t features = FEATURES;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input(m.graph, "x", BPT_DTYPE_F32, 1, &features, &m.x));
  assert_ok(m.context, bpt_graph_input(m.graph, "labels", BPT_DTYPE_I32, 0, NULL, &m.labels));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", m.x, 8, BPT_INIT_HE_NORMAL, &hidden));
  assert_ok(m.context, bpt_leaky_relu(m.graph, "act1", hidden, 0.01f, &hidden));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", hidden, 6, BPT_INIT_HE_NORMAL, &hidden));
  assert_ok(m.context, bpt_tanh(m.graph, "act2", hidden, &hidden));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc3", hidden, CLASSES, BPT_INIT_HE_NORMAL, &m.logits));
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

static bpt_speculative_trainer *make_trainer(model *m, float threshold, int threads, float clip) {
  bpt_speculative_options options = bpt_speculative_options_default();
  options.threshold = threshold;
  options.threads = threads;
  options.gradient_clip = clip;
  bpt_speculative_trainer *trainer = NULL;
  assert_ok(m->context, bpt_speculative_create(m->graph, m->x, m->labels, m->optimizer, &options, &trainer));
  return trainer;
}

/* Ordinary training written with the graph API: per sample forward and backward_accumulate, each loss seeded
 * with 1 / batch, the gradient clipped, one optimiser step per mini-batch. */
static void ordinary_batch(model *m, const data *d, int64_t first, int64_t count, float clip) {
  bpt_context *context = m->context;
  bpt_graph *graph = m->graph;
  int64_t one[2] = {1, FEATURES};
  bpt_tensor *x, *label;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, one, &x));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, one, &label));
  float seed = 1.0f / (float)count, unit = 1.0f;
  memcpy(graph->loss_gradient, &seed, sizeof seed); /* CPU device memory is host memory */
  assert_ok(context, bpt_graph_zero_gradients(graph));
  for (int64_t n = first; n < first + count; n++) {
    memcpy(bpt_tensor_data(x), (float *)bpt_tensor_data(d->images) + n * FEATURES, FEATURES * sizeof(float));
    ((int32_t *)bpt_tensor_data(label))[0] = ((int32_t *)bpt_tensor_data(d->labels))[n];
    assert_ok(context, bpt_graph_set_input(graph, m->x, x));
    assert_ok(context, bpt_graph_set_input(graph, m->labels, label));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward_accumulate(graph));
  }
  memcpy(graph->loss_gradient, &unit, sizeof unit);
  if (clip > 0.0f)
    for (int64_t i = 0; i < graph->parameter_elements; i++)
      graph->gradient_block[i] = fminf(clip, fmaxf(-clip, graph->gradient_block[i]));
  assert_ok(context, bpt_optimizer_step(m->optimizer));
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(label);
}

/* A view of rows [first, first + count) of d, as a fresh pair of tensors. */
static data slice(bpt_context *context, const data *d, int64_t first, int64_t count) {
  data s = make_data(context, count, (int32_t *)bpt_tensor_data(d->labels) + first, 0);
  memcpy(bpt_tensor_data(s.images), (float *)bpt_tensor_data(d->images) + first * FEATURES,
         (size_t)(count * FEATURES) * sizeof(float));
  return s;
}

static void threshold_zero_is_ordinary_backprop_bit_for_bit(void **state) {
  (void)state;
  const int32_t labels[20] = {0, 1, 2, 0, 0, 1, 2, 2, 1, 0, 1, 1, 0, 2, 0, 1, 2, 0, 1, 2};
  for (int threads = 1; threads <= 2; threads++) {
    model speculative = make_model("cpu", 0.1f, 0.9f), ordinary = make_model("cpu", 0.1f, 0.9f);
    data d = make_data(speculative.context, 20, labels, 1);
    bpt_speculative_trainer *trainer = make_trainer(&speculative, 0.0f, threads, 0.05f);
    const int64_t batches[3][2] = {{0, 7}, {7, 7}, {14, 6}};
    for (int b = 0; b < 3; b++) {
      data part = slice(speculative.context, &d, batches[b][0], batches[b][1]);
      assert_ok(speculative.context, bpt_speculative_train_batch(trainer, part.images, part.labels, NULL));
      ordinary_batch(&ordinary, &d, batches[b][0], batches[b][1], 0.05f);
      free_data(&part);
    }
    int64_t count = bpt_graph_parameter_count(speculative.graph);
    float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
    assert_ok(speculative.context, bpt_graph_read_parameters(speculative.graph, a, count));
    assert_ok(ordinary.context, bpt_graph_read_parameters(ordinary.graph, b, count));
    assert_memory_equal(a, b, (size_t)count * sizeof *a);
    float *initial = malloc((size_t)count * sizeof *initial); /* and training did move the weights */
    model fresh = make_model("cpu", 0.1f, 0.9f);
    assert_ok(fresh.context, bpt_graph_read_parameters(fresh.graph, initial, count));
    assert_true(test_relative_error(a, initial, count) > 1e-3);
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(speculative.context, bpt_speculative_get_counters(trainer, &counters));
    assert_int_equal(counters.samples, 20);
    assert_int_equal(counters.hits, 0);
    assert_int_equal(counters.fallbacks, 20);
    assert_int_equal(counters.cold_fallbacks, 3);
    free(a), free(b), free(initial);
    free_model(&fresh);
    bpt_speculative_destroy(trainer);
    free_data(&d);
    free_model(&speculative);
    free_model(&ordinary);
  }
}

/* The gradient of one sample by the graph's own backward (batch 1, seed 1). */
static void ordinary_gradient(model *m, const data *d, int64_t n, float *gradient) {
  data one = slice(m->context, d, n, 1);
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->x, one.images));
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->labels, one.labels));
  assert_ok(m->context, bpt_graph_forward(m->graph));
  assert_ok(m->context, bpt_graph_backward(m->graph));
  assert_ok(m->context, bpt_graph_read_gradients(m->graph, gradient, bpt_graph_parameter_count(m->graph)));
  free_data(&one);
}

/* With a learning rate of 0 the weights stay put, so a hit's gradient must equal, exactly, the ordinary
 * gradient of the cached sample: the previous sample with that label (the cache follows every sample). */
static void hits_use_the_last_sample_of_the_label(void **state) {
  (void)state;
  const int32_t labels[4] = {0, 0, 0, 1};
  model m = make_model("cpu", 0.0f, 0.0f);
  data d = make_data(m.context, 4, labels, 2);
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *expected = malloc((size_t)count * sizeof(float)), *actual = malloc((size_t)count * sizeof(float));
  bpt_speculative_trainer *trainer = make_trainer(&m, 10.0f, 2, 0.0f); /* every cached sample passes the gate */
  bpt_speculative_counters counters = {.size = sizeof counters};
  for (int64_t n = 0; n < 4; n++) {
    data one = slice(m.context, &d, n, 1);
    assert_ok(m.context, bpt_speculative_train_batch(trainer, one.images, one.labels, NULL));
    assert_ok(m.context, bpt_graph_read_gradients(m.graph, actual, count));
    /* Sample 0 and 3 are the first of their label: ordinary. Sample 1 gets sample 0's gradient, 2 gets 1's. */
    int64_t source = (n == 1 || n == 2) ? n - 1 : n;
    free_data(&one);
    ordinary_gradient(&m, &d, source, expected);
    assert_memory_equal(actual, expected, (size_t)count * sizeof(float));
  }
  assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
  assert_int_equal(counters.hits, 2);
  assert_int_equal(counters.cold_fallbacks, 2);
  assert_int_equal(counters.fallbacks, 2);
  /* Clearing the cache makes the next sample of a seen label fall back again. */
  assert_ok(m.context, bpt_speculative_clear_cache(trainer));
  data one = slice(m.context, &d, 0, 1);
  assert_ok(m.context, bpt_speculative_train_batch(trainer, one.images, one.labels, NULL));
  assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
  assert_int_equal(counters.cold_fallbacks, 3);
  assert_int_equal(counters.hits, 2);
  assert_ok(m.context, bpt_speculative_reset_counters(trainer));
  assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
  assert_int_equal(counters.samples, 0);
  free_data(&one);
  free(expected), free(actual);
  bpt_speculative_destroy(trainer);
  free_data(&d);
  free_model(&m);
}

/* A tiny positive threshold speculates but nearly every gate misses: the speculative terms are retracted
 * and the mini-batch gradient is the ordinary one up to rounding. */
static void misses_fall_back_to_the_ordinary_gradient(void **state) {
  (void)state;
  const int32_t labels[8] = {0, 1, 0, 1, 0, 2, 2, 0};
  for (int threads = 1; threads <= 2; threads++) {
    model m = make_model("cpu", 0.0f, 0.0f), reference = make_model("cpu", 0.0f, 0.0f);
    data d = make_data(m.context, 8, labels, 3);
    bpt_speculative_trainer *trainer = make_trainer(&m, 1e-12f, threads, 0.0f);
    assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
    ordinary_batch(&reference, &d, 0, 8, 0.0f);
    int64_t count = bpt_graph_parameter_count(m.graph);
    float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
    assert_ok(m.context, bpt_graph_read_gradients(m.graph, a, count));
    assert_ok(reference.context, bpt_graph_read_gradients(reference.graph, b, count));
    assert_true(test_relative_error(a, b, count) < 1e-6);
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
    assert_int_equal(counters.hits, 0);
    assert_int_equal(counters.fallbacks, 8);
    assert_int_equal(counters.cold_fallbacks, 3);
    assert_true(counters.mean_distance > 0.0);
    free(a), free(b);
    bpt_speculative_destroy(trainer);
    free_data(&d);
    free_model(&m);
    free_model(&reference);
  }
}

/* Hits and misses mixed in one mini-batch, two threads: the worker's gradients are merged and the missed ones
 * retracted, so with identical repeated samples (every gate hits) and lr 0 the gradient is the ordinary one. */
static void two_threads_mix_hits_and_misses(void **state) {
  (void)state;
  const int32_t labels[12] = {0, 1, 0, 1, 2, 0, 2, 2, 1, 0, 1, 2};
  model m = make_model("cpu", 0.0f, 0.0f), reference = make_model("cpu", 0.0f, 0.0f);
  data d = make_data(m.context, 12, labels, 8);
  float *images = bpt_tensor_data(d.images);
  for (int n = 3; n < 12; n++) /* samples 3.. repeat the first sample of their label: those gates see distance 0 */
    for (int j = 0; j < 3; j++)
      if (labels[j] == labels[n]) memcpy(images + n * FEATURES, images + j * FEATURES, FEATURES * sizeof(float));
  bpt_speculative_trainer *trainer = make_trainer(&m, 1e-6f, 2, 0.0f);
  assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
  ordinary_batch(&reference, &d, 0, 12, 0.0f);
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
  assert_ok(m.context, bpt_graph_read_gradients(m.graph, a, count));
  assert_ok(reference.context, bpt_graph_read_gradients(reference.graph, b, count));
  assert_true(test_relative_error(a, b, count) < 1e-6);
  bpt_speculative_counters counters = {.size = sizeof counters};
  assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
  assert_int_equal(counters.cold_fallbacks, 3);
  assert_true(counters.hits >= 5 && counters.fallbacks > counters.cold_fallbacks);
  free(a), free(b);
  bpt_speculative_destroy(trainer);
  free_data(&d);
  free_model(&m);
  free_model(&reference);
}

/* A worker left without jobs for longer than its spin (between mini-batches here, evaluation or data loading in a
 * program) sleeps instead of polling, and the next job wakes it: training goes on bit for bit as without the
 * pause. */
static void an_idle_worker_sleeps_and_wakes(void **state) {
  (void)state;
  const int32_t labels[8] = {0, 1, 2, 0, 1, 2, 0, 1};
  float *after[2];
  int64_t count = 0;
  for (int pause = 0; pause < 2; pause++) {
    model m = make_model("cpu", 0.1f, 0.9f);
    data d = make_data(m.context, 8, labels, 9);
    bpt_speculative_trainer *trainer = make_trainer(&m, 1.0f, 2, 0.0f); /* every gate passes: all hits */
    for (int b = 0; b < 3; b++) {
      assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
      if (!pause) continue;
      for (int waited = 0; waited < 2000 && !atomic_load(&trainer->sleeping); waited++) {
        struct timespec millisecond = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&millisecond, NULL);
      }
      assert_true(atomic_load(&trainer->sleeping));
    }
    count = bpt_graph_parameter_count(m.graph);
    after[pause] = malloc((size_t)count * sizeof(float));
    assert_ok(m.context, bpt_graph_read_parameters(m.graph, after[pause], count));
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
    assert_true(counters.hits >= 20);
    bpt_speculative_destroy(trainer); /* wakes a sleeping worker to stop it */
    free_data(&d);
    free_model(&m);
  }
  assert_memory_equal(after[0], after[1], (size_t)count * sizeof(float));
  free(after[0]), free(after[1]);
}

static void gate_distance_and_schedule(void **state) {
  (void)state;
  model m = make_model("cpu", 0.0f, 0.0f);
  bpt_speculative_options options = bpt_speculative_options_default();
  options.threshold = 0.1f;
  options.final_threshold = 0.3f;
  options.schedule_steps = 4;
  options.distance = BPT_SPECULATIVE_L2;
  bpt_speculative_trainer *trainer = NULL;
  assert_ok(m.context, bpt_speculative_create(m.graph, m.x, m.labels, m.optimizer, &options, &trainer));
  const int32_t labels[2] = {1, 1};
  data d = make_data(m.context, 2, labels, 4);
  float *images = bpt_tensor_data(d.images);
  memcpy(images + FEATURES, images, FEATURES * sizeof(float)); /* two equal samples: distance 0 */
  assert_true(fabsf(bpt_speculative_current_threshold(trainer) - 0.1f) < 1e-6f);
  assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
  assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
  assert_true(fabsf(bpt_speculative_current_threshold(trainer) - 0.2f) < 1e-6f);
  for (int i = 0; i < 4; i++)
    assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
  assert_true(fabsf(bpt_speculative_current_threshold(trainer) - 0.3f) < 1e-6f);
  /* The same sample again and again with lr 0: distance 0, so everything after the first hits. */
  bpt_speculative_counters counters = {.size = sizeof counters};
  assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
  assert_int_equal(counters.cold_fallbacks, 1);
  assert_int_equal(counters.hits, 11);
  assert_true(counters.mean_distance == 0.0);
  bpt_speculative_destroy(trainer);

  options = bpt_speculative_options_default();
  options.threads = 3;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "threads",
               bpt_speculative_create(m.graph, m.x, m.labels, m.optimizer, &options, &trainer));
  options = bpt_speculative_options_default();
  options.threshold = -1.0f;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "threshold",
               bpt_speculative_create(m.graph, m.x, m.labels, m.optimizer, &options, &trainer));
  /* Another graph's optimiser would step that graph (issue 30, class 5). */
  model other = make_model("cpu", 0.1f, 0.0f);
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "the optimizer belongs to another graph",
               bpt_speculative_create(m.graph, m.x, m.labels, other.optimizer, NULL, &trainer));
  free_model(&other);
  const int32_t bad[1] = {7};
  data wrong = make_data(m.context, 1, bad, 5);
  trainer = make_trainer(&m, 0.1f, 2, 0.0f);
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "label 7",
               bpt_speculative_train_batch(trainer, wrong.images, wrong.labels, NULL));
  bpt_speculative_destroy(trainer);
  free_data(&wrong);
  free_data(&d);
  free_model(&m);
}

static void graphs_outside_the_chain_are_refused(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *target, *y, *loss;
  int64_t features = 4;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &features, &target));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, 4, BPT_INIT_HE_NORMAL, &y));
  assert_ok(context, bpt_mse_loss(graph, "loss", y, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
  bpt_speculative_trainer *trainer = NULL;
  assert_fails(context, BPT_ERR_UNSUPPORTED, "softmax cross-entropy",
               bpt_speculative_create(graph, x, target, optimizer, NULL, &trainer));
  assert_null(trainer);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);

  /* The chain must start at the images input given to the trainer, not at another input. */
  bpt_node *labels, *other, *logits;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "other", BPT_DTYPE_F32, 1, &features, &other));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc", other, 3, BPT_INIT_HE_NORMAL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
  assert_fails(context, BPT_ERR_UNSUPPORTED, "does not lead back to input 'x'",
               bpt_speculative_create(graph, x, labels, optimizer, NULL, &trainer));
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);

  /* A ReLU keeps a 1-bit mask, so the linear output before it is transient: the cache could not snapshot it,
   * unless every value is kept. */
  for (int keep_all = 0; keep_all < 2; keep_all++) {
    bpt_node *hidden;
    assert_ok(context, bpt_graph_create(context, &graph));
    bpt_precision_options precision = bpt_precision_options_default();
    precision.keep_all_values = keep_all;
    assert_ok(context, bpt_graph_set_precision(graph, &precision));
    assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
    assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
    assert_ok(context, bpt_layer_linear(graph, "fc1", x, 5, BPT_INIT_HE_NORMAL, &hidden));
    assert_ok(context, bpt_relu(graph, "relu", hidden, &hidden));
    assert_ok(context, bpt_layer_linear(graph, "fc2", hidden, 3, BPT_INIT_HE_NORMAL, &logits));
    assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
    assert_ok(context, bpt_graph_compile(graph, loss, 2));
    assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
    if (keep_all) {
      assert_ok(context, bpt_speculative_create(graph, x, labels, optimizer, NULL, &trainer));
      bpt_speculative_destroy(trainer);
      trainer = NULL;
    } else {
      assert_fails(context, BPT_ERR_STATE, "the value of 'fc1' is not kept after forward; set keep_all_values",
                   bpt_speculative_create(graph, x, labels, optimizer, NULL, &trainer));
      assert_null(trainer);
    }
    bpt_optimizer_destroy(optimizer);
    bpt_graph_destroy(graph);
  }
  bpt_context_destroy(context);
}

/* Any destroy order (docs/guide.md): the optimiser, then the graph, then the context destroyed before the
 * trainer leave its calls failing with BPT_ERR_STATE instead of using freed memory, and its destroy frees what
 * is left (its worker thread stopped). ASan and valgrind runs of this test see any use after free. */
static void graph_or_optimizer_destroyed_first(void **state) {
  (void)state;
  const int32_t labels[6] = {0, 1, 2, 0, 1, 2};
  for (int threads = 1; threads <= 2; threads++) {
    model m = make_model("cpu", 0.05f, 0.0f);
    data d = make_data(m.context, 6, labels, 3);
    bpt_speculative_trainer *trainer = make_trainer(&m, 0.5f, threads, 0.0f);
    assert_ok(m.context, bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
    bpt_optimizer_destroy(m.optimizer);
    assert_fails(m.context, BPT_ERR_STATE, "the trainer's optimizer was destroyed",
                 bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
    bpt_graph_destroy(m.graph);
    assert_fails(NULL, BPT_ERR_STATE, "the trainer's graph was destroyed",
                 bpt_speculative_train_batch(trainer, d.images, d.labels, NULL));
    assert_ok(NULL, bpt_speculative_clear_cache(trainer));
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(NULL, bpt_speculative_get_counters(trainer, &counters));
    assert_int_equal(counters.cold_fallbacks, 3);
    bpt_context_destroy(m.context);
    bpt_speculative_destroy(trainer);
    free_data(&d);
  }
}

/* On fpga-sim the speculative backward runs on the second engine: at a generous threshold most samples hit,
 * the model hides cycles, and the run takes fewer simulated cycles than ordinary backprop. */
static void fpga_sim_overlaps_speculative_backward(void **state) {
  (void)state;
  int32_t labels[60];
  for (int i = 0; i < 60; i++)
    labels[i] = i % CLASSES;
  uint64_t cycles[2];
  for (int run = 0; run < 2; run++) {
    model m = make_model("fpga-sim", 0.05f, 0.0f);
    data d = make_data(m.context, 60, labels, 6);
    bpt_speculative_trainer *trainer = make_trainer(&m, run ? 1.0f : 0.0f, 2, 5.0f);
    assert_ok(m.context, bpt_fpga_reset_counters(m.context));
    for (int b = 0; b < 6; b++) {
      data part = slice(m.context, &d, b * 10, 10);
      assert_ok(m.context, bpt_speculative_train_batch(trainer, part.images, part.labels, NULL));
      free_data(&part);
    }
    bpt_fpga_report report = {.size = sizeof report};
    assert_ok(m.context, bpt_fpga_get_report(m.context, &report));
    cycles[run] = report.cycles;
    bpt_speculative_counters counters = {.size = sizeof counters};
    assert_ok(m.context, bpt_speculative_get_counters(trainer, &counters));
    if (run) {
      assert_int_equal(counters.hits, 57);
      assert_true(report.overlap_saved_cycles > 0);
    } else {
      assert_int_equal(counters.hits, 0);
    }
    bpt_speculative_destroy(trainer);
    free_data(&d);
    free_model(&m);
  }
  assert_true(cycles[1] < cycles[0] * 0.8);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threshold_zero_is_ordinary_backprop_bit_for_bit),
      cmocka_unit_test(hits_use_the_last_sample_of_the_label),
      cmocka_unit_test(misses_fall_back_to_the_ordinary_gradient),
      cmocka_unit_test(two_threads_mix_hits_and_misses),
      cmocka_unit_test(an_idle_worker_sleeps_and_wakes),
      cmocka_unit_test(gate_distance_and_schedule),
      cmocka_unit_test(graphs_outside_the_chain_are_refused),
      cmocka_unit_test(fpga_sim_overlaps_speculative_backward),
      cmocka_unit_test(graph_or_optimizer_destroyed_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
