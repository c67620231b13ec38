/* An MLP trained on a Fashion-MNIST subset in f32, in bf16 and in f16 with dynamic loss scaling must end close
 * to the f32 test accuracy (same seed, same batches). Skips without the data set.
 *
 * The bound, 0.5 points, is checked on the full five-epoch run (examples/mnist_precision.c, figures in
 * docs/precision.md: bf16 -0.13, f16 +0.23). On a schedule short enough for a unit test the accuracy is still on
 * the steep part of its curve, where rounding differences alone moved it by up to 1.3 points between the three
 * runs in our measurements, so this test allows 1.5 points: it still fails when a precision mode trains badly
 * (gradients flushed to zero, a wrong cast), which moves the accuracy by far more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"

/* Plain SGD on a small MLP keeps the three trajectories close (momentum amplifies rounding differences into
 * run-to-run noise larger than the 0.5-point tolerance at this short a schedule). */
enum { BATCH = 128, TRAIN_BATCHES = 100, EPOCHS = 3, HIDDEN = 64 };

static double train_and_test(bpt_dataset *train, bpt_dataset *test, bpt_dtype dtype, float *final_scale) {
  bpt_context *context = test_context(42);
  bpt_graph *graph;
  bpt_node *images, *labels, *hidden, *logits, *loss;
  int64_t features = bpt_dataset_sample_size(train);
  assert_ok(context, bpt_graph_create(context, &graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = dtype;
  assert_ok(context, bpt_graph_set_precision(graph, &options));
  assert_ok(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &images));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc1", images, HIDDEN, BPT_INIT_HE_UNIFORM, &hidden));
  assert_ok(context, bpt_relu(graph, "relu1", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(graph, "fc2", hidden, 10, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.02f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  int64_t dims[2] = {BATCH, features}, logit_dims[2] = {BATCH, 10};
  bpt_tensor *x, *y, *out;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &y));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &out));
  for (int epoch = 0; epoch < EPOCHS; epoch++) {
    assert_ok(context, bpt_dataset_shuffle(train, 100 + (uint64_t)epoch));
    for (int64_t b = 0; b < TRAIN_BATCHES; b++) {
      assert_ok(context, bpt_dataset_batch(train, b, BATCH, x, y));
      assert_ok(context, bpt_graph_set_input(graph, images, x));
      assert_ok(context, bpt_graph_set_input(graph, labels, y));
      assert_ok(context, bpt_graph_forward(graph));
      assert_ok(context, bpt_graph_backward(graph));
      assert_ok(context, bpt_optimizer_step(optimizer));
    }
  }
  long correct = 0;
  for (int64_t b = 0; b < bpt_dataset_batch_count(test, BATCH); b++) {
    assert_ok(context, bpt_dataset_batch(test, b, BATCH, x, y));
    assert_ok(context, bpt_graph_set_input(graph, images, x));
    assert_ok(context, bpt_graph_set_input(graph, labels, y));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_read(graph, logits, out));
    const float *values = bpt_tensor_data(out);
    const int32_t *truth = bpt_tensor_data(y);
    for (int64_t n = 0; n < bpt_tensor_dim(y, 0); n++) {
      int best = 0;
      for (int c = 1; c < 10; c++)
        if (values[n * 10 + c] > values[n * 10 + best]) best = c;
      correct += best == truth[n];
    }
  }
  *final_scale = bpt_graph_loss_scale(graph);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_tensor_destroy(out);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return 100.0 * (double)correct / (double)bpt_dataset_size(test);
}

static void mixed_precision_matches_f32(void **state) {
  (void)state;
  const char *directory = test_fashion_mnist_directory();
  if (!directory) skip();
  bpt_context *context = test_context(1);
  bpt_dataset *train, *test;
  assert_ok(context, bpt_dataset_load_idx_directory(context, directory, "train", &train));
  assert_ok(context, bpt_dataset_load_idx_directory(context, directory, "t10k", &test));
  float scale;
  double f32 = train_and_test(train, test, BPT_DTYPE_F32, &scale);
  double bf16 = train_and_test(train, test, BPT_DTYPE_BF16, &scale);
  double f16 = train_and_test(train, test, BPT_DTYPE_F16, &scale);
  print_message("test accuracy after %d x %d batches: f32 %.2f%%, bf16 %.2f%%, f16 + loss scaling %.2f%% (scale %g)\n",
                EPOCHS, TRAIN_BATCHES, f32, bf16, f16, (double)scale);
  assert_true(f32 > 70.0);
  assert_true(fabs(bf16 - f32) <= 1.5);
  assert_true(fabs(f16 - f32) <= 1.5);
  bpt_dataset_destroy(train);
  bpt_dataset_destroy(test);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(mixed_precision_matches_f32)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
