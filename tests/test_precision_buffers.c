/* Batch norm's running statistics under the bf16 and f16 precision policies. They are non-trainable parameters,
 * inside the parameter block with the weights, but they are state that forward writes, not weights that the
 * policy rounds into its compute dtype: each training step must move the f32 master statistics (which
 * checkpoints save and evaluation reads) exactly as it does without a policy. Before the fix they were
 * updated in the rounded weight copies, which the next step refreshed from the untouched master block: the
 * statistics never moved, and a ResNet trained in bf16 evaluated at 10% accuracy. No data set needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { BATCH = 16, CHANNELS = 3, STEPS = 20 };

typedef struct run {
  float running_mean[CHANNELS], running_variance[CHANNELS];
  float parameters[64];
  int64_t parameter_count;
  float eval_output[BATCH * CHANNELS];
} run;

/* The same batch every step: channel c has mean means[c] and a spread that grows with c. */
static void fill_batch(float *x) {
  static const float means[CHANNELS] = {2.0f, -1.0f, 0.5f};
  for (int n = 0; n < BATCH; n++)
    for (int c = 0; c < CHANNELS; c++)
      x[n * CHANNELS + c] = means[c] + (float)(c + 1) * ((float)n - 7.5f) / 7.5f;
}

static void read_vector(bpt_context *context, bpt_graph *graph, const char *name, float *values) {
  bpt_node *node;
  assert_ok(context, bpt_graph_find_node(graph, name, &node));
  const int64_t dims[1] = {CHANNELS};
  bpt_tensor *tensor;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 1, dims, &tensor));
  assert_ok(context, bpt_graph_read(graph, node, tensor));
  memcpy(values, bpt_tensor_data(tensor), sizeof(float) * CHANNELS);
  bpt_tensor_destroy(tensor);
}

/* x -> batch norm -> MSE against zero, trained STEPS steps on one batch, then evaluated on it. */
static void train(bpt_dtype dtype, run *out) {
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *target, *y, *loss;
  const int64_t channels = CHANNELS;
  assert_ok(context, bpt_graph_create(context, &graph));
  if (dtype != BPT_DTYPE_F32) {
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = dtype;
    options.loss_scaling = BPT_LOSS_SCALING_NONE;
    assert_ok(context, bpt_graph_set_precision(graph, &options));
  }
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &channels, &x));
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &channels, &target));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn", x, &y));
  assert_ok(context, bpt_mse_loss(graph, "loss", y, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.01f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  const int64_t dims[2] = {BATCH, CHANNELS};
  bpt_tensor *inputs, *zeros, *outputs;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &inputs));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &zeros));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &outputs));
  memset(bpt_tensor_data(zeros), 0, sizeof(float) * BATCH * CHANNELS);
  fill_batch(bpt_tensor_data(inputs));
  for (int step = 0; step < STEPS; step++) {
    assert_ok(context, bpt_graph_set_input(graph, x, inputs));
    assert_ok(context, bpt_graph_set_input(graph, target, zeros));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_optimizer_step(optimizer));
  }
  read_vector(context, graph, "bn.running_mean", out->running_mean);
  read_vector(context, graph, "bn.running_variance", out->running_variance);
  out->parameter_count = bpt_graph_parameter_count(graph);
  assert_true(out->parameter_count <= 64);
  assert_ok(context, bpt_graph_read_parameters(graph, out->parameters, out->parameter_count));

  assert_ok(context, bpt_graph_set_training(graph, 0));
  assert_ok(context, bpt_graph_set_input(graph, x, inputs));
  assert_ok(context, bpt_graph_set_input(graph, target, zeros));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, y, outputs));
  memcpy(out->eval_output, bpt_tensor_data(outputs), sizeof out->eval_output);

  bpt_tensor_destroy(inputs);
  bpt_tensor_destroy(zeros);
  bpt_tensor_destroy(outputs);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void assert_close(const char *what, int index, float value, float reference, float tolerance) {
  if (!(fabsf(value - reference) <= tolerance * (1.0f + fabsf(reference))))
    fail_msg("%s[%d] = %.6g, the f32 run has %.6g (tolerance %g)", what, index, (double)value, (double)reference,
             (double)tolerance);
}

static void check_policy(bpt_dtype dtype, float tolerance) {
  run f32, policy;
  train(BPT_DTYPE_F32, &f32);
  train(dtype, &policy);
  /* The f32 run itself: momentum 0.1 from a mean of 0 gives mean (1 - 0.9^STEPS) after STEPS equal batches. */
  static const float means[CHANNELS] = {2.0f, -1.0f, 0.5f};
  const float reached = 1.0f - powf(0.9f, (float)STEPS);
  for (int c = 0; c < CHANNELS; c++) assert_close("f32 running mean", c, f32.running_mean[c], means[c] * reached, 1e-4f);
  for (int c = 0; c < CHANNELS; c++) {
    assert_close("running mean", c, policy.running_mean[c], f32.running_mean[c], tolerance);
    assert_close("running variance", c, policy.running_variance[c], f32.running_variance[c], tolerance);
  }
  /* The master block (what checkpoints save) holds the same statistics as the nodes. */
  assert_int_equal(policy.parameter_count, f32.parameter_count);
  for (int64_t i = 0; i < f32.parameter_count; i++)
    assert_close("parameter block", (int)i, policy.parameters[i], f32.parameters[i], tolerance);
  for (int i = 0; i < BATCH * CHANNELS; i++)
    assert_close("evaluation output", i, policy.eval_output[i], f32.eval_output[i], 4.0f * tolerance);
}

/* bf16 keeps 8 significant bits: the inputs and outputs are rounded to about 0.4%. */
static void bf16_policy_updates_running_statistics(void **state) {
  (void)state;
  check_policy(BPT_DTYPE_BF16, 1e-2f);
}

static void f16_policy_updates_running_statistics(void **state) {
  (void)state;
  check_policy(BPT_DTYPE_F16, 2e-3f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bf16_policy_updates_running_statistics),
      cmocka_unit_test(f16_policy_updates_running_statistics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
