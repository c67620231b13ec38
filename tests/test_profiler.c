/* The profiler: what it records per op and step, the numbers it derives (linear and conv2d FLOPs), its summary's
 * snprintf contract, the Chrome trace file, pausing, reset and its errors. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/profiler.h"
#include "test_support.h"

enum { BATCH = 8, FEATURES = 5, HIDDEN = 6, CLASSES = 3, STEPS = 3 };

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_node *x, *labels;
  bpt_tensor *x_values, *label_values;
} model;

static void model_create(model *m) {
  m->context = test_context(3);
  int64_t features = FEATURES;
  bpt_node *hidden, *logits, *loss;
  assert_ok(m->context, bpt_graph_create(m->context, &m->graph));
  assert_ok(m->context, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &m->x));
  assert_ok(m->context, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc1", m->x, HIDDEN, BPT_INIT_HE_UNIFORM, &hidden));
  assert_ok(m->context, bpt_relu(m->graph, "relu1", hidden, &hidden));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc2", hidden, CLASSES, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(m->context, bpt_softmax_cross_entropy(m->graph, "loss", logits, m->labels, &loss));
  assert_ok(m->context, bpt_graph_compile(m->graph, loss, BATCH));
  assert_ok(m->context, bpt_optimizer_create(m->graph, NULL, &m->optimizer));
  int64_t dims[2] = {BATCH, FEATURES};
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, dims, &m->x_values));
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_I32, 1, dims, &m->label_values));
  test_random random;
  test_random_seed(&random, 5);
  test_random_fill(&random, bpt_tensor_data(m->x_values), BATCH * FEATURES, -1.0f, 1.0f);
  int32_t *labels = bpt_tensor_data(m->label_values);
  for (int n = 0; n < BATCH; n++)
    labels[n] = n % CLASSES;
}

static void model_steps(model *m, int steps) {
  for (int s = 0; s < steps; s++) {
    assert_ok(m->context, bpt_graph_set_input(m->graph, m->x, m->x_values));
    assert_ok(m->context, bpt_graph_set_input(m->graph, m->labels, m->label_values));
    assert_ok(m->context, bpt_graph_forward(m->graph));
    assert_ok(m->context, bpt_graph_backward(m->graph));
    assert_ok(m->context, bpt_optimizer_step(m->optimizer));
  }
}

static void model_destroy(model *m) {
  bpt_tensor_destroy(m->x_values);
  bpt_tensor_destroy(m->label_values);
  bpt_optimizer_destroy(m->optimizer);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static char *summary(const bpt_context *context) {
  size_t length = bpt_profiler_summary(context, NULL, 0);
  char *text = malloc(length + 1);
  assert_non_null(text);
  assert_int_equal(bpt_profiler_summary(context, text, length + 1), length);
  assert_int_equal(strlen(text), length);
  return text;
}

static size_t count_occurrences(const char *haystack, const char *needle) {
  size_t count = 0;
  for (const char *at = strstr(haystack, needle); at; at = strstr(at + 1, needle))
    count++;
  return count;
}

static void records_ops_steps_and_optimizer(void **state) {
  (void)state;
  model m;
  model_create(&m);
  model_steps(&m, 1); /* not recorded: the profiler is off */
  assert_int_equal(bpt_profiler_enabled(m.context), 0);
  assert_ok(m.context, bpt_profiler_enable(m.context, 1));
  assert_int_equal(bpt_profiler_enabled(m.context), 1);
  model_steps(&m, STEPS);

  char *text = summary(m.context);
  fputs(text, stderr);
  assert_non_null(strstr(text, "profile: 3 steps"));
  /* One row per (phase, op, node): fc1, relu1, fc2, loss forward and backward, and the optimiser. */
  assert_non_null(strstr(text, "forward    linear                  fc1"));
  assert_non_null(strstr(text, "backward   relu                    relu1"));
  assert_non_null(strstr(text, "optimizer  sgd                     step"));
  assert_int_equal(count_occurrences(text, "\nforward "), 4);
  assert_int_equal(count_occurrences(text, "\nbackward "), 4);
  free(text);

  const char *path = test_write_file("profile.json", "", 0);
  assert_ok(m.context, bpt_profiler_write_trace(m.context, path));
  char *trace = (char *)test_read_file(path, NULL);
  assert_true(strncmp(trace, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 39) == 0);
  assert_non_null(strstr(trace, "\n]}\n"));
  /* 3 steps x (4 forward + 4 backward + 1 optimiser) events, plus one span per step. */
  assert_int_equal(count_occurrences(trace, "\"ph\":\"X\""), STEPS * 9 + STEPS);
  assert_non_null(strstr(trace, "\"name\":\"step 2\""));
  assert_null(strstr(trace, "\"name\":\"step 3\""));
  /* fc1 forward: x (8, 5) W^T (5, 6) is 2 * 8 * 5 * 6 FLOPs plus 8 * 6 bias adds = 528, moving
   * x, W, y (40 + 30 + 48 floats) and the bias (6) = 496 bytes. */
  assert_non_null(strstr(trace, "\"name\":\"fc1\",\"cat\":\"forward\""));
  assert_non_null(strstr(trace, "\"op\":\"linear\",\"step\":0,\"bytes\":496,\"flops\":528}"));
  /* fc1 backward: the input needs no gradient, so only dW (480) and the bias (48). */
  assert_int_equal(count_occurrences(trace, "\"op\":\"linear\",\"step\":1,\"bytes\":"), 4);
  free(trace);
  remove(path);
  model_destroy(&m);
}

/* conv2d reports the FLOPs of the direct convolution (issue 29: the profiler showed "-" for conv2d, most of a
 * CNN step): 2 N O OH OW (C / groups) kh kw per product, plus the bias; backward counts only the products it
 * runs (none for the image input's gradient). */
static void conv2d_flops_are_counted(void **state) {
  (void)state;
  bpt_context *context = test_context(4);
  bpt_graph *graph;
  bpt_node *images, *labels, *w1, *b1, *w2, *x, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 3, (const int64_t[]){3, 6, 6}, &images));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_graph_parameter(graph, "w1", 4, (const int64_t[]){4, 3, 3, 3}, BPT_INIT_HE_NORMAL, &w1));
  assert_ok(context, bpt_graph_parameter(graph, "b1", 1, (const int64_t[]){4}, BPT_INIT_ZEROS, &b1));
  assert_ok(context, bpt_graph_parameter(graph, "w2", 4, (const int64_t[]){4, 2, 3, 3}, BPT_INIT_HE_NORMAL, &w2));
  bpt_conv2d_options conv = bpt_conv2d_options_default();
  conv.padding_height = conv.padding_width = 1;
  assert_ok(context, bpt_conv2d(graph, "conv1", images, w1, b1, &conv, &x));
  conv.stride_height = conv.stride_width = 2;
  conv.groups = 2;
  assert_ok(context, bpt_conv2d(graph, "conv2", x, w2, NULL, &conv, &x));
  assert_ok(context, bpt_global_avg_pool(graph, "pool", x, &x));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", x, labels, &loss));
  /* Planned for 5 samples and run on 2: the counts are the run's. */
  assert_ok(context, bpt_graph_compile(graph, loss, 5));
  bpt_tensor *pixels, *classes;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, (const int64_t[]){2, 3, 6, 6}, &pixels));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, (const int64_t[]){2}, &classes));
  test_random random;
  test_random_seed(&random, 6);
  test_random_fill(&random, bpt_tensor_data(pixels), 2 * 3 * 6 * 6, -1.0f, 1.0f);
  ((int32_t *)bpt_tensor_data(classes))[0] = 1;
  ((int32_t *)bpt_tensor_data(classes))[1] = 3;
  assert_ok(context, bpt_graph_set_input(graph, images, pixels));
  assert_ok(context, bpt_graph_set_input(graph, labels, classes));
  assert_ok(context, bpt_profiler_enable(context, 1));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  const char *path = test_write_file("conv_profile.json", "", 0);
  assert_ok(context, bpt_profiler_write_trace(context, path));
  char *trace = (char *)test_read_file(path, NULL);
  /* conv1 forward: y (2, 4, 6, 6) = 288 outputs of 27 products each: 2 * 288 * 27 + 288 bias = 15840 FLOPs;
   * x, w, y (216 + 108 + 288 floats) and the bias (4) = 2464 bytes. */
  assert_non_null(strstr(trace, "\"op\":\"conv2d\",\"step\":0,\"bytes\":2464,\"flops\":15840}"));
  /* conv1 backward: the images need no gradient, so dW (15552) and the bias (288); 2448 + 4 (288 + 4) bytes. */
  assert_non_null(strstr(trace, "\"op\":\"conv2d\",\"step\":0,\"bytes\":3616,\"flops\":15840}"));
  /* conv2 (2 groups, stride 2): 72 outputs of 2 * 3 * 3 products: 2592 FLOPs forward, and twice that backward
   * (dx and dW); 288 + 72 + 72 floats per product. */
  assert_non_null(strstr(trace, "\"op\":\"conv2d\",\"step\":0,\"bytes\":1728,\"flops\":2592}"));
  assert_non_null(strstr(trace, "\"op\":\"conv2d\",\"step\":0,\"bytes\":3456,\"flops\":5184}"));
  free(trace);
  remove(path);
  bpt_tensor_destroy(pixels);
  bpt_tensor_destroy(classes);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void pause_keeps_and_reset_drops(void **state) {
  (void)state;
  model m;
  model_create(&m);
  assert_ok(m.context, bpt_profiler_enable(m.context, 1));
  model_steps(&m, 2);
  assert_ok(m.context, bpt_profiler_enable(m.context, 0));
  model_steps(&m, 2);
  char *text = summary(m.context);
  assert_non_null(strstr(text, "profile: 2 steps"));
  free(text);
  assert_ok(m.context, bpt_profiler_reset(m.context));
  text = summary(m.context);
  assert_non_null(strstr(text, "nothing recorded"));
  free(text);
  model_destroy(&m);
}

static void summary_follows_snprintf(void **state) {
  (void)state;
  model m;
  model_create(&m);
  assert_ok(m.context, bpt_profiler_enable(m.context, 1));
  model_steps(&m, 1);
  size_t length = bpt_profiler_summary(m.context, NULL, 0);
  assert_true(length > 100);
  char small[10];
  memset(small, 'x', sizeof small);
  assert_int_equal(bpt_profiler_summary(m.context, small, sizeof small), length);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_true(strncmp(small, "profile: ", 9) == 0);
  model_destroy(&m);
}

/* The comm layer records from its own thread while backward runs on the main one. */
static void *record_communication(void *argument) {
  bpt_context *context = argument;
  for (int i = 0; i < 200; i++) {
    uint64_t start = bpt_profiler_now();
    bpt_profiler_record(context, BPT_PROFILE_COMM, i % 2 ? "bucket 1" : "bucket 0", "all-reduce", start, 4096.0, 0.0);
  }
  return NULL;
}

static void records_communication_from_another_thread(void **state) {
  (void)state;
  model m;
  model_create(&m);
  assert_ok(m.context, bpt_profiler_enable(m.context, 1));
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, record_communication, m.context), 0);
  model_steps(&m, STEPS);
  pthread_join(thread, NULL);
  char *text = summary(m.context);
  /* The row layout of bpt_profiler_summary(): phase, op, node, calls. */
  char expected[160];
  for (int bucket = 0; bucket < 2; bucket++) {
    snprintf(expected, sizeof expected, "%-9s  %-22s  bucket %-17d  %8d", "comm", "all-reduce", bucket, 100);
    assert_non_null(strstr(text, expected));
  }
  assert_non_null(strstr(text, "profile: 3 steps"));
  free(text);
  model_destroy(&m);
}

static void reports_errors(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  assert_fails(context, BPT_ERR_STATE, "bpt_profiler_enable", bpt_profiler_write_trace(context, "unused.json"));
  assert_ok(context, bpt_profiler_enable(context, 1));
  assert_fails(context, BPT_ERR_IO, "/no/such/folder/trace.json",
               bpt_profiler_write_trace(context, "/no/such/folder/trace.json"));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "path is NULL", bpt_profiler_write_trace(context, NULL));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "path is NULL or empty", bpt_profiler_write_trace(context, ""));
  assert_int_equal(bpt_profiler_enable(NULL, 1), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_profiler_reset(NULL), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_profiler_enabled(NULL), 0);
  char text[64];
  assert_true(bpt_profiler_summary(NULL, text, sizeof text) > 0);
  assert_non_null(strstr(text, "nothing recorded"));
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(records_ops_steps_and_optimizer),
      cmocka_unit_test(conv2d_flops_are_counted),
      cmocka_unit_test(pause_keeps_and_reset_drops),
      cmocka_unit_test(summary_follows_snprintf),
      cmocka_unit_test(records_communication_from_another_thread),
      cmocka_unit_test(reports_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
