/* The public API's edges: size-tagged output structs never written past an older caller's size, the
 * compile-time version macros, the last status kept with the last message, destroy in any order, and an
 * optimiser step without a precision policy that never reads device memory back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bptrain.h"
#include "core/context.h"
#include "test_support.h"

/* A graph y = linear(x), loss = mse(y, t), compiled for a batch of 2 with an SGD optimiser. */
typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_node *x, *t;
} model;

static void model_create(model *m, const bpt_precision_options *precision) {
  m->context = test_context(3);
  const int64_t features = 4;
  bpt_node *y, *loss;
  assert_ok(m->context, bpt_graph_create(m->context, &m->graph));
  if (precision) assert_ok(m->context, bpt_graph_set_precision(m->graph, precision));
  assert_ok(m->context, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &m->x));
  assert_ok(m->context, bpt_graph_input(m->graph, "t", BPT_DTYPE_F32, 1, &features, &m->t));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc", m->x, features, BPT_INIT_HE_UNIFORM, &y));
  assert_ok(m->context, bpt_mse_loss(m->graph, "loss", y, m->t, &loss));
  assert_ok(m->context, bpt_graph_compile(m->graph, loss, 2));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.momentum = 0.9f; /* a velocity buffer in device memory, which the graph must free if it goes first */
  assert_ok(m->context, bpt_optimizer_create(m->graph, &options, &m->optimizer));
}

static void model_feed(model *m) {
  const int64_t dims[2] = {2, 4};
  bpt_tensor *tensor;
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, dims, &tensor));
  float *values = bpt_tensor_data(tensor);
  for (int i = 0; i < 8; i++)
    values[i] = 0.25f * (float)(i - 3);
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->x, tensor));
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->t, tensor));
  bpt_tensor_destroy(tensor);
}

static void model_train_step(model *m) {
  model_feed(m);
  assert_ok(m->context, bpt_graph_forward(m->graph));
  assert_ok(m->context, bpt_graph_backward(m->graph));
  assert_ok(m->context, bpt_optimizer_step(m->optimizer));
}

/* ---- Output structs --------------------------------------------------------------------------------- */

typedef struct grown_report {
  size_t size;
  int64_t first, second, third;
} grown_report;

/* A caller built when the struct ended after `second` gets exactly that much, and learns how much. */
static void output_copies_at_most_the_callers_size(void **state) {
  (void)state;
  unsigned char theirs[sizeof(grown_report) + 16];
  memset(theirs, 0xAB, sizeof theirs);
  const size_t older = offsetof(grown_report, third);
  memcpy(theirs, &older, sizeof older);
  grown_report ours = {.size = sizeof ours, .first = 1, .second = 2, .third = 3};
  assert_int_equal(bpt_copy_output(NULL, theirs, &ours, sizeof ours, offsetof(grown_report, second) + 8, "test"),
                   BPT_OK);
  size_t written;
  memcpy(&written, theirs, sizeof written);
  assert_int_equal(written, older);
  int64_t second;
  memcpy(&second, theirs + offsetof(grown_report, second), sizeof second);
  assert_int_equal(second, 2);
  for (size_t i = older; i < sizeof theirs; i++)
    assert_int_equal(theirs[i], 0xAB);
  /* Smaller than the first version: refused, nothing written. */
  const size_t tiny = sizeof(size_t);
  memset(theirs, 0xAB, sizeof theirs);
  memcpy(theirs, &tiny, sizeof tiny);
  assert_int_equal(bpt_copy_output(NULL, theirs, &ours, sizeof ours, offsetof(grown_report, second) + 8, "test"),
                   BPT_ERR_INVALID_ARGUMENT);
  for (size_t i = sizeof tiny; i < sizeof theirs; i++)
    assert_int_equal(theirs[i], 0xAB);
}

/* The public fillers go through that rule: bytes past the caller's struct stay as they were. */
static void public_reports_respect_the_size_field(void **state) {
  (void)state;
  model m;
  model_create(&m, NULL);
  model_train_step(&m);
  struct {
    bpt_graph_memory_stats stats;
    unsigned char guard[32];
  } memory;
  memset(&memory, 0xCD, sizeof memory);
  memory.stats.size = sizeof memory.stats;
  assert_ok(m.context, bpt_graph_memory(m.graph, &memory.stats));
  assert_int_equal(memory.stats.size, sizeof memory.stats);
  assert_int_equal(memory.stats.max_batch, 2);
  for (size_t i = 0; i < sizeof memory.guard; i++)
    assert_int_equal(memory.guard[i], 0xCD);
  memory.stats.size = 8;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "size field is 8", bpt_graph_memory(m.graph, &memory.stats));

  bpt_value_statistics statistics;
  memset(&statistics, 0xCD, sizeof statistics);
  statistics.size = sizeof statistics;
  assert_ok(m.context, bpt_graph_value_statistics(m.graph, m.x, &statistics));
  assert_int_equal(statistics.size, sizeof statistics);
  assert_int_equal(statistics.count, 8);
  statistics.size = 0; /* a caller that never set it */
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "size field is 0",
               bpt_graph_value_statistics(m.graph, m.x, &statistics));
  bpt_optimizer_destroy(m.optimizer);
  bpt_graph_destroy(m.graph);
  bpt_context_destroy(m.context);
}

/* A layer table without sizes (written before the field existed) is refused rather than misread. */
static void layer_specs_carry_their_size(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *y;
  const int64_t features = 3;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  const bpt_layer_spec unsized[] = {{.kind = BPT_LAYER_LINEAR, .units = 2}};
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "layer 0 has size 0",
               bpt_layer_sequential(graph, "a", x, unsized, 1, &y));
  const bpt_layer_spec layers[] = {{BPT_LAYER(BPT_LAYER_LINEAR), .units = 2}, {BPT_LAYER(BPT_LAYER_RELU)}};
  assert_ok(context, bpt_layer_sequential(graph, "b", x, layers, 2, &y));
  bpt_layer_spec spec = bpt_layer_spec_default(BPT_LAYER_TANH);
  assert_int_equal(spec.size, sizeof spec);
  assert_ok(context, bpt_layer_sequential(graph, "c", y, &spec, 1, &y));
  assert_string_equal(bpt_node_op_name(y), "tanh");
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* ---- Version ---------------------------------------------------------------------------------------- */

#if !BPT_VERSION_AT_LEAST(0, 1, 0) || BPT_VERSION_AT_LEAST(BPT_VERSION_MAJOR + 1, 0, 0)
#error "BPT_VERSION_AT_LEAST does not work in #if"
#endif

static void version_number_and_at_least(void **state) {
  (void)state;
  assert_int_equal(BPT_VERSION_NUMBER, BPT_VERSION_MAJOR * 10000 + BPT_VERSION_MINOR * 100 + BPT_VERSION_PATCH);
  assert_int_equal(bpt_version_number(), BPT_VERSION_NUMBER);
  assert_true(BPT_VERSION_AT_LEAST(BPT_VERSION_MAJOR, BPT_VERSION_MINOR, BPT_VERSION_PATCH));
  assert_false(BPT_VERSION_AT_LEAST(BPT_VERSION_MAJOR, BPT_VERSION_MINOR, BPT_VERSION_PATCH + 1));
  assert_false(BPT_VERSION_AT_LEAST(BPT_VERSION_MAJOR, BPT_VERSION_MINOR + 1, 0));
  assert_true(BPT_VERSION_AT_LEAST(0, 0, 99) == (BPT_VERSION_NUMBER >= 99));
}

/* ---- Last status ------------------------------------------------------------------------------------ */

static void last_status_comes_with_the_message(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  assert_int_equal(bpt_context_last_status(context), BPT_OK);
  assert_ok(context, bpt_graph_create(context, &graph));
  const bpt_status compiled = bpt_graph_compile(graph, NULL, 0); /* no nodes, batch 0 */
  assert_int_not_equal(compiled, BPT_OK);
  assert_int_equal(bpt_context_last_status(context), compiled);
  const int64_t dims = 0;
  bpt_node *x;
  assert_int_equal(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &dims, &x), BPT_ERR_SHAPE);
  assert_int_equal(bpt_context_last_status(context), BPT_ERR_SHAPE);
  /* A NULL handle has no context: the thread's slot holds both. */
  assert_int_equal(bpt_optimizer_step(NULL), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_context_last_status(NULL), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(NULL), "bpt_optimizer_step"));
  bpt_context_options options = bpt_context_options_default();
  options.backend = "no-such-backend";
  bpt_context *none;
  assert_int_equal(bpt_context_create(&options, &none), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_context_last_status(NULL), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_context_last_status(context), BPT_ERR_SHAPE); /* untouched by the thread's errors */
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* ---- Destroy order ---------------------------------------------------------------------------------- */

/* Graph first: the optimiser is detached, its calls fail cleanly, its destroy frees host memory only. */
static void graph_destroyed_before_its_optimizer(void **state) {
  (void)state;
  model m;
  model_create(&m, NULL);
  model_train_step(&m);
  bpt_graph_destroy(m.graph);
  assert_int_equal(bpt_optimizer_step(m.optimizer), BPT_ERR_STATE);
  assert_non_null(strstr(bpt_context_last_error(NULL), "graph was destroyed"));
  assert_int_equal(bpt_optimizer_set_learning_rate(m.optimizer, 0.5f), BPT_ERR_STATE);
  assert_int_equal(bpt_optimizer_step_count(m.optimizer), 1);
  bpt_optimizer_destroy(m.optimizer);
  bpt_context_destroy(m.context);
}

/* Context first: graph, optimiser and tensors keep working until they are destroyed, in any order. */
static void context_destroyed_before_its_graph(void **state) {
  (void)state;
  model m;
  model_create(&m, NULL);
  const int64_t dims[1] = {3};
  bpt_tensor *tensor;
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_F32, 1, dims, &tensor));
  bpt_context_destroy(m.context);
  model_train_step(&m);
  model_train_step(&m);
  assert_int_equal(bpt_optimizer_step_count(m.optimizer), 2);
  bpt_graph_destroy(m.graph);
  bpt_tensor_destroy(tensor);
  bpt_optimizer_destroy(m.optimizer);
}

/* ---- The step without a precision policy ------------------------------------------------------------ */

static int downloads;
static bpt_status (*real_download)(bpt_backend *, void *, const void *, size_t);
static bpt_status counting_download(bpt_backend *backend, void *host, const void *device, size_t bytes) {
  downloads++;
  return real_download(backend, host, device, bytes);
}

/* Counts the backend's device-to-host copies (each a synchronisation on a device) during steps. */
static int downloads_in_steps(const bpt_precision_options *precision) {
  model m;
  model_create(&m, precision);
  bpt_backend_vtable counting = *m.context->backend.vtable;
  real_download = counting.download;
  counting.download = counting_download;
  m.context->backend.vtable = &counting;
  int total = 0;
  for (int step = 0; step < 3; step++) {
    model_feed(&m);
    assert_ok(m.context, bpt_graph_forward(m.graph));
    assert_ok(m.context, bpt_graph_backward(m.graph));
    downloads = 0;
    assert_ok(m.context, bpt_optimizer_step(m.optimizer));
    total += downloads;
  }
  m.context->backend.vtable = &*bpt_backend_registry_find("cpu");
  bpt_optimizer_destroy(m.optimizer);
  bpt_graph_destroy(m.graph);
  bpt_context_destroy(m.context);
  return total;
}

static void steps_read_back_nothing_without_a_policy_and_once_with_one(void **state) {
  (void)state;
  assert_int_equal(downloads_in_steps(NULL), 0);
  /* A policy's step synchronises exactly once: the loss without scaling, one flag for loss and gradients with
   * it (which also shows the counter counts). */
  bpt_precision_options precision = bpt_precision_options_default();
  assert_int_equal(downloads_in_steps(&precision), 3);
  precision.compute_dtype = BPT_DTYPE_F16;
  precision.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  assert_int_equal(downloads_in_steps(&precision), 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(output_copies_at_most_the_callers_size), cmocka_unit_test(public_reports_respect_the_size_field),
      cmocka_unit_test(layer_specs_carry_their_size),           cmocka_unit_test(version_number_and_at_least),
      cmocka_unit_test(last_status_comes_with_the_message),     cmocka_unit_test(graph_destroyed_before_its_optimizer),
      cmocka_unit_test(context_destroyed_before_its_graph),     cmocka_unit_test(steps_read_back_nothing_without_a_policy_and_once_with_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
