/* The training toolkit: learning-rate schedules at chosen steps, parameter groups (own learning rate and
 * weight decay, buffers never updated), gradient clipping by norm and by value, per-parameter gradient
 * norms, and batch-norm folding (equal outputs in evaluation mode). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static float rate_at(const bpt_schedule_options *schedule, int64_t step) {
  float rate = -1.0f;
  bpt_status status = bpt_schedule_learning_rate(NULL, schedule, step, &rate);
  if (status != BPT_OK) fail_msg("schedule at step %lld: %s", (long long)step, bpt_context_last_error(NULL));
  return rate;
}

static void schedules_at_chosen_steps(void **state) {
  (void)state;
  bpt_schedule_options cosine = bpt_schedule_options_default();
  cosine.kind = BPT_SCHEDULE_COSINE;
  cosine.base_learning_rate = 0.1f;
  cosine.warmup_steps = 10;
  cosine.warmup_start_factor = 0.1f;
  cosine.total_steps = 100;
  cosine.minimum_learning_rate = 0.001f;
  assert_float_equal(rate_at(&cosine, 0), 0.01f, 1e-7f);
  assert_float_equal(rate_at(&cosine, 5), 0.055f, 1e-7f);
  assert_float_equal(rate_at(&cosine, 10), 0.1f, 1e-7f);
  assert_float_equal(rate_at(&cosine, 60), 0.001f + 0.099f * 0.5f, 1e-6f);
  assert_float_equal(rate_at(&cosine, 35), 0.001f + 0.099f * 0.5f * (1.0f + cosf(3.14159265f * 0.25f)), 1e-6f);
  assert_float_equal(rate_at(&cosine, 110), 0.001f, 1e-7f);
  assert_float_equal(rate_at(&cosine, 500), 0.001f, 1e-7f);

  bpt_schedule_options step = bpt_schedule_options_default();
  step.kind = BPT_SCHEDULE_STEP;
  step.base_learning_rate = 0.1f;
  step.step_size = 30;
  step.gamma = 0.1f;
  assert_float_equal(rate_at(&step, 29), 0.1f, 1e-7f);
  assert_float_equal(rate_at(&step, 30), 0.01f, 1e-8f);
  assert_float_equal(rate_at(&step, 65), 0.001f, 1e-9f);
  /* A growing rate stops at the float range with an error (converting a larger double to float is undefined:
   * UBSan in the sanitizer stage), and an infinite gamma is refused. */
  step.gamma = 1e30f;
  assert_float_equal(rate_at(&step, 30), 1e29f, 1e23f);
  float grown = 0.0f;
  assert_int_equal(bpt_schedule_learning_rate(NULL, &step, 60, &grown), BPT_ERR_NUMERIC);
  assert_non_null(strstr(bpt_context_last_error(NULL), "at step 60: base rate 0.1 x gamma 1e+30 ^ 2 exceeds"));
  step.base_learning_rate = 0.0f;
  assert_true(rate_at(&step, 6000) == 0.0f);
  step.gamma = INFINITY;
  assert_int_equal(bpt_schedule_learning_rate(NULL, &step, 0, &grown), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(NULL), "finite gamma > 0"));

  bpt_schedule_options broken = cosine;
  broken.total_steps = 0;
  float rate;
  assert_int_equal(bpt_schedule_learning_rate(NULL, &broken, 3, &rate), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(NULL), "total_steps"));
  /* With a context, the message is the context's (issue 17: it used to reach only the thread's slot). */
  bpt_context *context = test_context(1);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "bpt_schedule_learning_rate: cosine schedule needs total_steps >= 1",
               bpt_schedule_learning_rate(context, &broken, 3, &rate));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "bpt_schedule_learning_rate: step -1 must be >= 0",
               bpt_schedule_learning_rate(context, &cosine, -1, &rate));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "bpt_schedule_learning_rate: schedule is NULL",
               bpt_schedule_learning_rate(context, NULL, 3, &rate));
  bpt_context_destroy(context);
}

/* x (2) -> linear (1) -> MSE, plus a buffer that no optimiser may touch. */
typedef struct tiny_model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *target, *weight, *bias, *buffer;
  bpt_tensor *x_values, *target_values;
} tiny_model;

static void tiny_model_create(tiny_model *m) {
  m->context = test_context(5);
  bpt_node *y, *loss;
  int64_t two = 2, one = 1, weight_dims[2] = {1, 2};
  assert_ok(m->context, bpt_graph_create(m->context, &m->graph));
  assert_ok(m->context, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &two, &m->x));
  assert_ok(m->context, bpt_graph_input(m->graph, "target", BPT_DTYPE_F32, 1, &one, &m->target));
  assert_ok(m->context, bpt_graph_parameter(m->graph, "w", 2, weight_dims, BPT_INIT_ONES, &m->weight));
  assert_ok(m->context, bpt_graph_nontrainable_parameter(m->graph, "counts", 1, &two, BPT_INIT_ONES, &m->buffer));
  assert_ok(m->context, bpt_graph_parameter(m->graph, "b", 1, &one, BPT_INIT_ONES, &m->bias));
  assert_ok(m->context, bpt_linear(m->graph, "fc", m->x, m->weight, m->bias, &y));
  assert_ok(m->context, bpt_mse_loss(m->graph, "loss", y, m->target, &loss));
  assert_ok(m->context, bpt_graph_compile(m->graph, loss, 1));
  int64_t x_dims[2] = {1, 2}, t_dims[2] = {1, 1};
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, x_dims, &m->x_values));
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, t_dims, &m->target_values));
  float *x = bpt_tensor_data(m->x_values);
  x[0] = 1.0f;
  x[1] = -2.0f;
  ((float *)bpt_tensor_data(m->target_values))[0] = 3.0f;
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->x, m->x_values));
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->target, m->target_values));
}

static void tiny_model_destroy(tiny_model *m) {
  bpt_tensor_destroy(m->x_values);
  bpt_tensor_destroy(m->target_values);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static void parameter_groups_and_buffers(void **state) {
  (void)state;
  tiny_model m;
  tiny_model_create(&m);
  /* Parameters in order: w = (1, 1), counts = (1, 1) (buffer), b = 1. y = 1 - 2 + 1 = 0, loss = 9,
   * dloss/dy = -6: dw = (-6, 12), db = -6. */
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.1f;
  options.weight_decay = 0.5f;
  bpt_optimizer *optimizer;
  assert_ok(m.context, bpt_optimizer_create(m.graph, &options, &optimizer));
  assert_ok(m.context, bpt_optimizer_set_group(optimizer, &m.bias, 1, 0.5f, 0.0f));
  assert_ok(m.context, bpt_graph_forward(m.graph));
  assert_ok(m.context, bpt_graph_backward(m.graph));
  float gradient_norm;
  assert_ok(m.context, bpt_graph_gradient_norm(m.graph, m.weight, &gradient_norm));
  assert_float_equal(gradient_norm, sqrtf(36.0f + 144.0f), 1e-4f);
  assert_ok(m.context, bpt_optimizer_step(optimizer));
  float values[5];
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, values, 5));
  /* w -= 0.1 (g + 0.5 w); counts untouched despite decay; b -= 0.05 g with no decay. */
  assert_float_equal(values[0], 1.0f - 0.1f * (-6.0f + 0.5f), 1e-5f);
  assert_float_equal(values[1], 1.0f - 0.1f * (12.0f + 0.5f), 1e-5f);
  assert_float_equal(values[2], 1.0f, 0.0f);
  assert_float_equal(values[3], 1.0f, 0.0f);
  assert_float_equal(values[4], 1.0f - 0.05f * -6.0f, 1e-5f);
  /* A schedule sets the rate from the step count: after one step, warm-up is half done. */
  bpt_schedule_options schedule = bpt_schedule_options_default();
  schedule.base_learning_rate = 0.2f;
  schedule.warmup_steps = 2;
  assert_ok(m.context, bpt_optimizer_set_schedule(optimizer, &schedule));
  assert_float_equal(bpt_optimizer_learning_rate(optimizer), 0.1f, 1e-7f);
  assert_ok(m.context, bpt_optimizer_no_decay_on_vectors(optimizer));
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "not a parameter",
               bpt_optimizer_set_group(optimizer, &m.x, 1, 1.0f, 0.0f));
  bpt_optimizer_destroy(optimizer);
  tiny_model_destroy(&m);
}

static void clipping(void **state) {
  (void)state;
  tiny_model m;
  tiny_model_create(&m);
  assert_fails(m.context, BPT_ERR_STATE, "backward", bpt_graph_clip_gradient_norm(m.graph, 1.0f, NULL));
  assert_ok(m.context, bpt_graph_forward(m.graph));
  assert_ok(m.context, bpt_graph_backward(m.graph));
  /* Gradients (-6, 12 | 0, 0 | -6): norm sqrt(216). */
  float norm, g[5];
  assert_ok(m.context, bpt_graph_clip_gradient_norm(m.graph, 100.0f, &norm));
  assert_float_equal(norm, sqrtf(216.0f), 1e-4f);
  assert_ok(m.context, bpt_graph_read_gradients(m.graph, g, 5));
  assert_float_equal(g[1], 12.0f, 0.0f);
  assert_ok(m.context, bpt_graph_clip_gradient_norm(m.graph, 3.0f, &norm));
  assert_ok(m.context, bpt_graph_read_gradients(m.graph, g, 5));
  const float factor = 3.0f / sqrtf(216.0f);
  assert_float_equal(g[0], -6.0f * factor, 1e-5f);
  assert_float_equal(g[1], 12.0f * factor, 1e-5f);
  assert_float_equal(g[4], -6.0f * factor, 1e-5f);
  assert_ok(m.context, bpt_graph_clip_gradient_norm(m.graph, 100.0f, &norm));
  assert_float_equal(norm, 3.0f, 1e-4f);
  /* By value: everything into [-1, 1]. */
  assert_ok(m.context, bpt_graph_backward(m.graph));
  assert_ok(m.context, bpt_graph_clip_gradient_value(m.graph, 1.0f));
  assert_ok(m.context, bpt_graph_read_gradients(m.graph, g, 5));
  assert_float_equal(g[0], -1.0f, 0.0f);
  assert_float_equal(g[1], 1.0f, 0.0f);
  assert_float_equal(g[2], 0.0f, 0.0f);
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "limit", bpt_graph_clip_gradient_value(m.graph, -1.0f));
  tiny_model_destroy(&m);
}

/* conv -> BN -> ReLU -> conv (bias) -> BN -> global pool -> fc: both pairs fold, outputs agree. */
static void folding_keeps_eval_outputs(void **state) {
  (void)state;
  bpt_context *context = test_context(6);
  bpt_graph *graph;
  bpt_node *x, *labels, *y, *logits, *loss;
  int64_t image[3] = {3, 9, 9};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_conv2d(graph, "c1", x, 8, 3, 1, 1, 0, &y));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn1", y, &y));
  assert_ok(context, bpt_relu(graph, "r1", y, &y));
  assert_ok(context, bpt_layer_conv2d(graph, "c2", y, 6, 3, 2, 1, 1, &y));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn2", y, &y));
  assert_ok(context, bpt_global_avg_pool(graph, "gap", y, &y));
  assert_ok(context, bpt_layer_linear(graph, "fc", y, 4, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 8));
  int64_t dims[4] = {8, 3, 9, 9}, logit_dims[2] = {8, 4};
  bpt_tensor *values, *label_values, *before, *after;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &label_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &before));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &after));
  test_random random;
  test_random_seed(&random, 6);
  test_random_fill(&random, bpt_tensor_data(values), 8 * 3 * 81, -1.0f, 2.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  assert_ok(context, bpt_graph_set_input(graph, labels, label_values));
  /* A few training forwards move the running statistics and beta away from their initial values. */
  bpt_optimizer *optimizer;
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.1f;
  assert_ok(context, bpt_optimizer_create(graph, &options, &optimizer));
  for (int i = 0; i < 5; i++) {
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_optimizer_step(optimizer));
  }
  assert_ok(context, bpt_graph_set_training(graph, 0));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, before));
  int folded = 0;
  assert_ok(context, bpt_graph_fold_batch_norm(graph, &folded));
  assert_int_equal(folded, 2);
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, after));
  assert_true(test_relative_error(bpt_tensor_data(after), bpt_tensor_data(before), 8 * 4) < 1e-5);
  assert_fails(context, BPT_ERR_STATE, "folded", bpt_graph_set_training(graph, 1));
  assert_int_not_equal(bpt_graph_backward(graph), BPT_OK);
  bpt_optimizer_destroy(optimizer);
  bpt_tensor_destroy(values);
  bpt_tensor_destroy(label_values);
  bpt_tensor_destroy(before);
  bpt_tensor_destroy(after);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* A trained conv + batch-norm model survives a checkpoint: the running statistics are parameters (buffers
 * in the flat block), so a fresh graph that loads the file gives the same evaluation outputs. */
static void checkpoint_keeps_running_statistics(void **state) {
  (void)state;
  bpt_graph *graphs[2];
  bpt_node *inputs[2], *labels[2], *outputs[2];
  bpt_context *contexts[2] = {test_context(7), test_context(8)};
  int64_t image[3] = {2, 6, 6}, dims[4] = {4, 2, 6, 6}, logit_dims[2] = {4, 3};
  for (int g = 0; g < 2; g++) {
    bpt_context *context = contexts[g];
    bpt_node *y, *loss;
    assert_ok(context, bpt_graph_create(context, &graphs[g]));
    assert_ok(context, bpt_graph_input(graphs[g], "x", BPT_DTYPE_F32, 3, image, &inputs[g]));
    assert_ok(context, bpt_graph_input(graphs[g], "labels", BPT_DTYPE_I32, 0, NULL, &labels[g]));
    assert_ok(context, bpt_layer_conv2d(graphs[g], "c", inputs[g], 4, 3, 1, 1, 0, &y));
    assert_ok(context, bpt_layer_batch_norm(graphs[g], "bn", y, &y));
    assert_ok(context, bpt_global_avg_pool(graphs[g], "gap", y, &y));
    assert_ok(context, bpt_layer_linear(graphs[g], "fc", y, 3, BPT_INIT_HE_UNIFORM, &outputs[g]));
    assert_ok(context, bpt_softmax_cross_entropy(graphs[g], "loss", outputs[g], labels[g], &loss));
    assert_ok(context, bpt_graph_compile(graphs[g], loss, 4));
  }
  bpt_tensor *values, *label_values, *before, *after;
  assert_ok(contexts[0], bpt_tensor_create(contexts[0], BPT_DTYPE_F32, 4, dims, &values));
  assert_ok(contexts[0], bpt_tensor_create(contexts[0], BPT_DTYPE_I32, 1, dims, &label_values));
  assert_ok(contexts[0], bpt_tensor_create(contexts[0], BPT_DTYPE_F32, 2, logit_dims, &before));
  assert_ok(contexts[0], bpt_tensor_create(contexts[0], BPT_DTYPE_F32, 2, logit_dims, &after));
  test_random random;
  test_random_seed(&random, 7);
  test_random_fill(&random, bpt_tensor_data(values), 4 * 72, 1.0f, 3.0f);
  for (int g = 0; g < 2; g++) {
    assert_ok(contexts[g], bpt_graph_set_input(graphs[g], inputs[g], values));
    assert_ok(contexts[g], bpt_graph_set_input(graphs[g], labels[g], label_values));
  }
  for (int i = 0; i < 3; i++)
    assert_ok(contexts[0], bpt_graph_forward(graphs[0]));
  assert_ok(contexts[0], bpt_graph_set_training(graphs[0], 0));
  assert_ok(contexts[0], bpt_graph_forward(graphs[0]));
  assert_ok(contexts[0], bpt_graph_read(graphs[0], outputs[0], before));
  const char *path = test_write_file("cnn.ckpt", "", 0);
  assert_ok(contexts[0], bpt_checkpoint_save(graphs[0], path, NULL));
  assert_ok(contexts[1], bpt_checkpoint_load(graphs[1], path, NULL));
  assert_ok(contexts[1], bpt_graph_set_training(graphs[1], 0));
  assert_ok(contexts[1], bpt_graph_forward(graphs[1]));
  assert_ok(contexts[1], bpt_graph_read(graphs[1], outputs[1], after));
  assert_true(test_relative_error(bpt_tensor_data(after), bpt_tensor_data(before), 12) == 0.0);
  remove(path);
  bpt_tensor_destroy(values);
  bpt_tensor_destroy(label_values);
  bpt_tensor_destroy(before);
  bpt_tensor_destroy(after);
  for (int g = 0; g < 2; g++) {
    bpt_graph_destroy(graphs[g]);
    bpt_context_destroy(contexts[g]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(schedules_at_chosen_steps),
      cmocka_unit_test(parameter_groups_and_buffers),
      cmocka_unit_test(clipping),
      cmocka_unit_test(folding_keeps_eval_outputs),
      cmocka_unit_test(checkpoint_keeps_running_statistics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
