/* Host synchronisations per training step (issue 27, point 2), counted through the backend interface: the
 * graph's backend table is swapped for a copy whose members that make the host wait for the device (download,
 * synchronize, reduce_statistics: on CUDA each waits for the stream's queued work) count their calls. A step
 * (set inputs, forward, backward, optimiser step) waits at most where a value must reach the host: once, for
 * the host's decision in bpt_optimizer_step (src/core/precision.c: the loss's finiteness, or under dynamic
 * loss scaling the one overflow flag); the caller's read of the loss after an f32 step then costs nothing
 * (the step's copy; it was a second download), after a scaled one it is the one other wait. The bounds fail on
 * any wait added to the step. The CPU backend runs the same
 * core code as CUDA, so this holds the core to it on every machine; with a CUDA device it runs on "cuda" too
 * (otherwise it says why not). Waits inside a backend's own members (a CUDA kernel launcher that synchronised)
 * are not visible here: those are the GPU check's. */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "bptrain.h"
#include "core/graph.h"
#include "test_support.h"

enum { BATCH = 16, FEATURES = 12, HIDDEN = 24, CLASSES = 4, STEPS = 3 };

static const bpt_backend_vtable *original;
static bpt_backend_vtable counting;
static int waits, uploads;

static bpt_status counted_download(bpt_backend *backend, void *host, const void *device, size_t bytes) {
  waits++;
  return original->download(backend, host, device, bytes);
}

static bpt_status counted_synchronize(bpt_backend *backend) {
  waits++;
  return original->synchronize(backend);
}

static bpt_status counted_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                            double *sum_of_squares, int64_t *zeros) {
  waits++;
  return original->reduce_statistics(backend, count, x, sum, sum_of_squares, zeros);
}

/* Not a wait for queued compute (issue 27's upload fix), but counted to show what a step sends. */
static bpt_status counted_upload(bpt_backend *backend, void *device, const void *host, size_t bytes) {
  uploads++;
  return original->upload(backend, device, host, bytes);
}

static void start_counting(bpt_backend *backend) {
  original = backend->vtable;
  counting = *original;
  counting.download = counted_download;
  counting.upload = counted_upload;
  if (original->synchronize) counting.synchronize = counted_synchronize;
  if (original->reduce_statistics) counting.reduce_statistics = counted_reduce_statistics;
  backend->vtable = &counting;
}

static void stop_counting(bpt_backend *backend) { backend->vtable = original; }

typedef struct run {
  const char *backend;
  bpt_dtype compute;
  bpt_activation_storage storage;
  bool read_loss;
  int most; /* waits per step at most; -1: only reported */
  const char *why;
} run;

/* The mean number of waits per step over STEPS steps after a first one (which may set things up). */
static void count_step_waits(const run *r) {
  bpt_context_options options = bpt_context_options_default();
  options.backend = r->backend;
  options.num_threads = 2;
  options.seed = 5;
  bpt_context *context = NULL;
  assert_ok(NULL, bpt_context_create(&options, &context));
  bpt_graph *graph = NULL;
  bpt_node *x, *labels, *h, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, (const int64_t[]){FEATURES}, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc1", x, HIDDEN, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(context, bpt_relu(graph, "relu1", h, &h));
  assert_ok(context, bpt_layer_linear(graph, "fc2", h, HIDDEN, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(context, bpt_relu(graph, "relu2", h, &h));
  assert_ok(context, bpt_layer_linear(graph, "fc3", h, CLASSES, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", h, labels, &loss));
  bpt_precision_options precision = bpt_precision_options_default();
  precision.compute_dtype = r->compute;
  precision.saved_activation_storage = r->storage;
  assert_ok(context, bpt_graph_set_precision(graph, &precision));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  bpt_optimizer *optimizer = NULL;
  assert_ok(context, bpt_optimizer_create(graph, NULL, &optimizer));
  bpt_tensor *features = NULL, *classes = NULL;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, (const int64_t[]){BATCH, FEATURES}, &features));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, (const int64_t[]){BATCH}, &classes));
  test_random random;
  test_random_seed(&random, 9);
  test_random_fill(&random, bpt_tensor_data(features), BATCH * FEATURES, -1.0f, 1.0f);
  for (int n = 0; n < BATCH; n++)
    ((int32_t *)bpt_tensor_data(classes))[n] = n % CLASSES;

  start_counting(graph->backend);
  int counted = 0;
  for (int s = 0; s <= STEPS; s++) {
    if (s == 1) waits = uploads = 0;
    assert_ok(context, bpt_graph_set_input(graph, x, features));
    assert_ok(context, bpt_graph_set_input(graph, labels, classes));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_optimizer_step(optimizer));
    if (r->read_loss) {
      float value;
      assert_ok(context, bpt_graph_loss(graph, &value));
    }
    counted = s;
  }
  stop_counting(graph->backend);
  const double per_step = (double)waits / counted;
  printf("%-4s %-4s saved %-7s%-10s: %.2f waits and %.2f uploads per step (%s)\n", r->backend,
         bpt_dtype_name(r->compute), r->storage == BPT_ACTIVATION_STORAGE_FP8 ? "fp8" : "compute",
         r->read_loss ? " +loss" : "", per_step, (double)uploads / counted, r->why);
  if (r->most >= 0 && waits > r->most * counted)
    fail_msg("%s, %s%s: %d host waits in %d steps, more than %d per step (%s)", r->backend, bpt_dtype_name(r->compute),
             r->read_loss ? ", reading the loss" : "", waits, counted, r->most, r->why);
  bpt_tensor_destroy(features);
  bpt_tensor_destroy(classes);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void count_on(const char *backend) {
  const run runs[] = {
      {backend, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, false, 1, "the step's check of the loss"},
      {backend, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, true, 1, "the caller reads the step's copy"},
      {backend, BPT_DTYPE_F16, BPT_ACTIVATION_STORAGE_COMPUTE, true, 2, "the flag, then the loss read"},
      {backend, BPT_DTYPE_F16, BPT_ACTIVATION_STORAGE_COMPUTE, false, 1, "dynamic loss scaling's overflow flag"},
      {backend, BPT_DTYPE_BF16, BPT_ACTIVATION_STORAGE_COMPUTE, false, 1, "the step's check of the loss"},
      /* Known, not fixed (issue 27): each linear layer downloads its FP8 scale in forward. Reported only. */
      {backend, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_FP8, false, -1,
       "FP8 scales: one per linear layer saving FP8, known"},
  };
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++)
    count_step_waits(&runs[i]);
}

/* The loss kept on the host is the current forward's: a new forward on other labels reads a new loss, equal
 * to the loss node's value on the device. */
static void the_loss_read_is_the_current_forwards(void **state) {
  (void)state;
  bpt_context *context = test_context(8);
  bpt_graph *graph = NULL;
  bpt_node *x, *labels, *logits, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, (const int64_t[]){FEATURES}, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, CLASSES, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  bpt_tensor *features = NULL, *classes = NULL, *device_loss = NULL;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, (const int64_t[]){BATCH, FEATURES}, &features));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, (const int64_t[]){BATCH}, &classes));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 1, (const int64_t[]){1}, &device_loss));
  test_random random;
  test_random_seed(&random, 10);
  test_random_fill(&random, bpt_tensor_data(features), BATCH * FEATURES, -1.0f, 1.0f);
  float losses[2];
  for (int round = 0; round < 2; round++) {
    for (int n = 0; n < BATCH; n++)
      ((int32_t *)bpt_tensor_data(classes))[n] = (n + round) % CLASSES;
    assert_ok(context, bpt_graph_set_input(graph, x, features));
    assert_ok(context, bpt_graph_set_input(graph, labels, classes));
    assert_ok(context, bpt_graph_forward(graph));
    float again;
    assert_ok(context, bpt_graph_loss(graph, &losses[round]));
    assert_ok(context, bpt_graph_loss(graph, &again));
    assert_ok(context, bpt_graph_read(graph, loss, device_loss));
    assert_true(losses[round] == again);
    assert_true(losses[round] == *(const float *)bpt_tensor_data(device_loss));
  }
  assert_true(losses[0] != losses[1]);
  bpt_tensor_destroy(features);
  bpt_tensor_destroy(classes);
  bpt_tensor_destroy(device_loss);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void a_cpu_step_waits_only_where_a_value_reaches_the_host(void **state) {
  (void)state;
  count_on("cpu");
}

static void a_cuda_step_waits_only_where_a_value_reaches_the_host(void **state) {
  (void)state;
  for (int i = 0; i < bpt_backend_count(); i++) {
    if (strcmp(bpt_backend_name(i), "cuda") != 0) continue;
    char reason[512];
    if (bpt_backend_available(i, reason, sizeof reason) != BPT_OK) {
      print_message("skipped on cuda: %s\n", reason);
      skip();
    }
    count_on("cuda");
    return;
  }
  print_message("skipped on cuda: this library knows no cuda backend\n");
  skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_loss_read_is_the_current_forwards),
      cmocka_unit_test(a_cpu_step_waits_only_where_a_value_reaches_the_host),
      cmocka_unit_test(a_cuda_step_waits_only_where_a_value_reaches_the_host),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
