/* End-to-end behaviour of the public API: version queries and errors, bit-identical runs from one seed,
 * a small model learning a separable synthetic set, and partial batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static void version_and_status_strings(void **state) {
  (void)state;
  assert_string_equal(bpt_version(), "0.1.0");
  assert_int_equal(bpt_version_number(), BPT_VERSION_MAJOR * 10000 + BPT_VERSION_MINOR * 100 + BPT_VERSION_PATCH);
  assert_int_equal(bpt_abi_version(), BPT_ABI_VERSION);
  assert_string_equal(bpt_status_string(BPT_ERR_SHAPE), "shape mismatch");
  assert_string_equal(bpt_status_string((bpt_status)999), "unknown status");
  assert_int_equal(bpt_dtype_size(BPT_DTYPE_BF16), 2);
  assert_string_equal(bpt_dtype_name(BPT_DTYPE_FP8_E4M3), "fp8_e4m3");
  assert_true(bpt_backend_count() >= 1);
  assert_string_equal(bpt_backend_name(0), "cpu");
  assert_null(bpt_backend_name(-1));
}

static void context_errors_name_the_problem(void **state) {
  (void)state;
  bpt_context_options options = bpt_context_options_default();
  bpt_context *context = (bpt_context *)&options;
  options.backend = "tpu";
  assert_int_equal(bpt_context_create(&options, &context), BPT_ERR_INVALID_ARGUMENT);
  assert_null(context);
  assert_non_null(strstr(bpt_context_last_error(NULL), "backend 'tpu'"));
  options.backend = "cpu";
  options.size = 3;
  assert_int_equal(bpt_context_create(&options, &context), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(NULL), "size"));
  options = bpt_context_options_default();
  options.num_threads = -2;
  assert_int_equal(bpt_context_create(&options, &context), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(NULL), "num_threads"));

  context = test_context(1);
  assert_string_equal(bpt_context_backend(context), "cpu");
  assert_int_equal(bpt_context_num_threads(context), 2);
  bpt_graph *graph;
  bpt_node *x, *w, *y;
  int64_t features = 4, weight_dims[2] = {3, 5};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_parameter(graph, "w", 2, weight_dims, BPT_INIT_ZEROS, &w));
  assert_fails(context, BPT_ERR_SHAPE, "input 'x' has 4 features, weight 'w' expects 5",
               bpt_linear(graph, "fc", x, w, NULL, &y));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "already exists",
               bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &y));
  assert_fails(context, BPT_ERR_STATE, "compile the graph first", bpt_graph_forward(graph));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* Two linearly separable Gaussian blobs per class in 8-D, labels = nearest class centre. */
static void make_blobs(uint64_t seed, int count, float *x, int32_t *y) {
  test_random random;
  test_random_seed(&random, seed);
  for (int n = 0; n < count; n++) {
    int label = n % 3;
    y[n] = label;
    for (int f = 0; f < 8; f++) {
      float centre = (f % 3 == label) ? 2.0f : -1.0f;
      x[n * 8 + f] = centre + test_random_uniform(&random, -0.9f, 0.9f);
    }
  }
}

typedef struct trained {
  float losses[60];
  double accuracy;
} trained;

static trained train_blobs(uint64_t seed, int threads) {
  bpt_context_options options = bpt_context_options_default();
  options.seed = seed;
  options.num_threads = threads;
  bpt_context *context;
  assert_int_equal(bpt_context_create(&options, &context), BPT_OK);
  bpt_graph *graph;
  bpt_node *x, *labels, *hidden, *logits, *loss;
  int64_t features = 8;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc1", x, 16, BPT_INIT_HE_NORMAL, &hidden));
  assert_ok(context, bpt_relu(graph, "relu", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(graph, "fc2", hidden, 3, BPT_INIT_XAVIER_NORMAL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 32));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.kind = BPT_OPTIMIZER_ADAM;
  optimizer_options.learning_rate = 0.01f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  int64_t dims[2] = {32, 8};
  bpt_tensor *xs, *ys, *out;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &xs));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &ys));
  int64_t out_dims[2] = {32, 3};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, out_dims, &out));
  trained result;
  for (int step = 0; step < 60; step++) {
    make_blobs((uint64_t)step + 100, 32, bpt_tensor_data(xs), bpt_tensor_data(ys));
    assert_ok(context, bpt_graph_set_input(graph, x, xs));
    assert_ok(context, bpt_graph_set_input(graph, labels, ys));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_optimizer_step(optimizer));
    assert_ok(context, bpt_graph_loss(graph, &result.losses[step]));
  }
  /* Held-out data, in a partial batch of 20 to exercise batches below the compiled maximum. */
  assert_ok(context, bpt_tensor_set_batch(xs, 20));
  assert_ok(context, bpt_tensor_set_batch(ys, 20));
  make_blobs(7777, 20, bpt_tensor_data(xs), bpt_tensor_data(ys));
  assert_ok(context, bpt_graph_set_input(graph, x, xs));
  assert_ok(context, bpt_graph_set_input(graph, labels, ys));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, out));
  assert_int_equal(bpt_tensor_dim(out, 0), 20);
  const float *values = bpt_tensor_data(out);
  const int32_t *truth = bpt_tensor_data(ys);
  int correct = 0;
  for (int n = 0; n < 20; n++) {
    int best = 0;
    for (int c = 1; c < 3; c++) best = values[n * 3 + c] > values[n * 3 + best] ? c : best;
    correct += best == truth[n];
  }
  result.accuracy = correct / 20.0;
  bpt_tensor_destroy(xs);
  bpt_tensor_destroy(ys);
  bpt_tensor_destroy(out);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return result;
}

static void same_seed_gives_bit_identical_losses(void **state) {
  (void)state;
  trained first = train_blobs(42, 2), second = train_blobs(42, 2), other = train_blobs(43, 2);
  assert_memory_equal(first.losses, second.losses, sizeof first.losses);
  assert_memory_not_equal(first.losses, other.losses, sizeof first.losses);
}

static void small_model_learns_separable_set(void **state) {
  (void)state;
  trained result = train_blobs(5, 2);
  assert_true(result.losses[59] < 0.1f * result.losses[0]);
  assert_true(result.accuracy >= 0.95);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(version_and_status_strings),
      cmocka_unit_test(context_errors_name_the_problem),
      cmocka_unit_test(same_seed_gives_bit_identical_losses),
      cmocka_unit_test(small_model_learns_separable_set),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
