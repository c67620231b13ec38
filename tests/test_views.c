/* Views (issue 24.2): a reshape shares its input's value and gradient buffers (memory_plan.c). The memory plan
 * places only the source, for the readers of the source and of every view of it together, so a graph with
 * reshapes must train exactly as the same graph without them (one arithmetic, bit for bit) in the same bytes,
 * its gradients must match finite differences where a value is read both directly and through a view, a view
 * nothing reads stays readable, a recompute segment keeps a source whose view is read outside it, and batch-norm
 * folding moves a norm's views with it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/cnn.h"
#include "bptrain/memory.h"
#include "core/graph.h"
#include "test_support.h"

enum { BATCH = 3, FEATURES = 7, HIDDEN = 12, OUTPUTS = 4 };

typedef struct net {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *hidden, *viewed, *loss;
} net;

/* x -> fc1 -> hidden; b = sigmoid(hidden); z = add(b seen as 12, b), whose backward overwrites b's unset
 * gradient through the view first; b2 = sigmoid(z); a = tanh(hidden seen as 3x4, then as 12 again: a view of a
 * view), read after z, a transient value that must not take hidden's bytes; mse(fc2(a seen as 3x4), fc3(b2)).
 * Without views every reader reads its source directly. With recompute, fc1 .. a's view is a segment whose last
 * view fc2 reads from outside. */
static void net_build(net *n, bool views, bool recompute) {
  memset(n, 0, sizeof *n);
  n->context = test_context(7);
  bpt_context *context = n->context;
  assert_ok(context, bpt_graph_create(context, &n->graph));
  bpt_graph *graph = n->graph;
  const int64_t features = FEATURES, grid[2] = {3, 4}, flat = HIDDEN;
  bpt_node *a, *b, *b_seen, *first;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  assert_ok(context, bpt_layer_linear(graph, "fc1", n->x, HIDDEN, BPT_INIT_XAVIER_UNIFORM, &n->hidden));
  assert_ok(context, bpt_graph_find_node(graph, "fc1.weight", &first));
  a = n->hidden;
  if (views) {
    assert_ok(context, bpt_reshape(graph, "grid", a, 2, grid, &a));
    assert_ok(context, bpt_reshape(graph, "flat", a, 1, &flat, &a));
    n->viewed = a;
  }
  assert_ok(context, bpt_sigmoid(graph, "b", n->hidden, &b));
  b_seen = b;
  if (views) assert_ok(context, bpt_reshape(graph, "b_seen", b, 1, &flat, &b_seen));
  assert_ok(context, bpt_add(graph, "z", b_seen, b, &b));
  assert_ok(context, bpt_sigmoid(graph, "b2", b, &b));
  assert_ok(context, bpt_tanh(graph, "a", a, &a));
  if (views) assert_ok(context, bpt_reshape(graph, "a_grid", a, 2, grid, &a)); /* read outside the segment */
  if (recompute) assert_ok(context, bpt_graph_recompute_segment(graph, first, a));
  assert_ok(context, bpt_layer_linear(graph, "fc2", a, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &a));
  assert_ok(context, bpt_layer_linear(graph, "fc3", b, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &b));
  assert_ok(context, bpt_mse_loss(graph, "loss", a, b, &n->loss));
  assert_ok(context, bpt_graph_compile(graph, n->loss, BATCH));
  const int64_t dims[2] = {BATCH, FEATURES};
  bpt_tensor *values;
  test_random random;
  test_random_seed(&random, 7);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &values));
  test_random_fill(&random, bpt_tensor_data(values), BATCH * FEATURES, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, n->x, values));
  bpt_tensor_destroy(values);
}

static void net_destroy(net *n) {
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

/* Two SGD steps; the losses and the first step's parameter gradients. */
static void net_train(net *n, float losses[2], float *gradients, int64_t count) {
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.1f;
  bpt_optimizer *optimizer;
  assert_ok(n->context, bpt_optimizer_create(n->graph, &options, &optimizer));
  for (int step = 0; step < 2; step++) {
    assert_ok(n->context, bpt_graph_forward(n->graph));
    assert_ok(n->context, bpt_graph_loss(n->graph, &losses[step]));
    assert_ok(n->context, bpt_graph_backward(n->graph));
    if (step == 0) assert_ok(n->context, bpt_graph_read_gradients(n->graph, gradients, count));
    assert_ok(n->context, bpt_optimizer_step(optimizer));
  }
  bpt_optimizer_destroy(optimizer);
}

static void same_training_as_without_views(bool recompute) {
  net with, without;
  net_build(&with, true, recompute);
  net_build(&without, false, recompute);
  /* The views have their source's buffers, and the plan is the same bytes. */
  assert_ptr_equal(with.viewed->value, with.hidden->value);
  assert_ptr_equal(with.viewed->grad, with.hidden->grad);
  bpt_graph_memory_stats a = {.size = sizeof a}, b = {.size = sizeof b};
  assert_ok(with.context, bpt_graph_memory(with.graph, &a));
  assert_ok(without.context, bpt_graph_memory(without.graph, &b));
  assert_int_equal(a.activation_bytes, b.activation_bytes);
  const int64_t count = bpt_graph_parameter_count(with.graph);
  assert_int_equal(count, bpt_graph_parameter_count(without.graph));
  float *gradients_with = calloc((size_t)count, sizeof(float)), *gradients_without = calloc((size_t)count, sizeof(float));
  assert_non_null(gradients_with);
  assert_non_null(gradients_without);
  float losses_with[2], losses_without[2];
  net_train(&with, losses_with, gradients_with, count);
  net_train(&without, losses_without, gradients_without, count);
  assert_memory_equal(losses_with, losses_without, sizeof losses_with);
  assert_memory_equal(gradients_with, gradients_without, (size_t)count * sizeof(float));
  assert_true(losses_with[1] < losses_with[0]);
  free(gradients_with);
  free(gradients_without);
  net_destroy(&with);
  net_destroy(&without);
}

static void views_train_as_the_graph_without_them(void **state) {
  (void)state;
  same_training_as_without_views(false);
}

/* tanh's output has one reader, a view inside the segment, which fc2 reads from outside: so it is held. */
static void recompute_keeps_a_source_whose_view_is_read_outside(void **state) {
  (void)state;
  same_training_as_without_views(true);
  net n;
  net_build(&n, true, true);
  bpt_node *a;
  assert_ok(n.context, bpt_graph_find_node(n.graph, "a", &a));
  assert_false(a->recomputed);
  net_destroy(&n);
}

/* hidden is read by sigmoid directly and by tanh through two views: its gradient sums both parts. */
static void view_gradients_match_finite_differences(void **state) {
  (void)state;
  net n;
  net_build(&n, true, false);
  test_check_gradients(n.context, n.graph, 1e-2, 2e-4, 2e-2, 0);
  net_destroy(&n);
}

/* A view nothing reads is an output: its source is kept for it, and reading it gives the source's values. */
static void unread_view_is_readable(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  assert_ok(context, bpt_graph_create(context, &graph));
  const int64_t features = FEATURES, grid[2] = {4, 3};
  bpt_node *x, *hidden, *activated, *viewed, *labels, *loss;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc1", x, HIDDEN, BPT_INIT_XAVIER_UNIFORM, &hidden));
  /* Neither backward reads act's value (GELU's reads its input, cross-entropy its saved probabilities), so
   * only the view keeps it past backward. */
  assert_ok(context, bpt_gelu(graph, "act", hidden, &activated));
  assert_ok(context, bpt_reshape(graph, "seen", activated, 2, grid, &viewed));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", activated, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  const int64_t dims[2] = {BATCH, FEATURES}, label_dims[1] = {BATCH}, out_dims[3] = {BATCH, 4, 3},
                flat_dims[2] = {BATCH, HIDDEN};
  bpt_tensor *values, *ids, *seen, *direct;
  test_random random;
  test_random_seed(&random, 9);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &values));
  test_random_fill(&random, bpt_tensor_data(values), BATCH * FEATURES, -1.0f, 1.0f);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &ids));
  memset(bpt_tensor_data(ids), 0, BATCH * sizeof(int32_t));
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  assert_ok(context, bpt_graph_set_input(graph, labels, ids));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph)); /* transient values would now hold gradients */
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, out_dims, &seen));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, flat_dims, &direct));
  assert_ok(context, bpt_graph_read(graph, viewed, seen));
  assert_ok(context, bpt_graph_read(graph, activated, direct));
  assert_memory_equal(bpt_tensor_data(seen), bpt_tensor_data(direct), BATCH * HIDDEN * sizeof(float));
  float sum = 0.0f;
  for (int i = 0; i < BATCH * HIDDEN; i++)
    sum += fabsf(((const float *)bpt_tensor_data(seen))[i]);
  assert_true(sum > 0.0f);
  bpt_tensor_destroy(values);
  bpt_tensor_destroy(ids);
  bpt_tensor_destroy(seen);
  bpt_tensor_destroy(direct);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* Folding a batch norm into its convolution moves the norm onto the convolution's buffer: a view of the norm
 * (the flatten before the classifier) must follow it, or evaluation reads the unfolded norm's stale buffer. */
static void folding_moves_the_views_of_a_norm(void **state) {
  (void)state;
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  assert_ok(context, bpt_graph_create(context, &graph));
  const int64_t image[3] = {2, 5, 5};
  bpt_node *x, *labels, *y, *logits, *loss;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_conv2d(graph, "conv", x, 3, 3, 1, 1, 0, &y));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn", y, &y));
  assert_ok(context, bpt_flatten(graph, "flat", y, &y));
  assert_ok(context, bpt_layer_linear(graph, "fc", y, OUTPUTS, BPT_INIT_XAVIER_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  const int64_t dims[4] = {BATCH, 2, 5, 5}, label_dims[1] = {BATCH}, logit_dims[2] = {BATCH, OUTPUTS};
  bpt_tensor *values, *ids, *before, *after;
  test_random random;
  test_random_seed(&random, 11);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &values));
  test_random_fill(&random, bpt_tensor_data(values), BATCH * 50, -1.0f, 1.0f);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &ids));
  memset(bpt_tensor_data(ids), 0, BATCH * sizeof(int32_t));
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  assert_ok(context, bpt_graph_set_input(graph, labels, ids));
  assert_ok(context, bpt_graph_forward(graph)); /* training mode: running statistics move off 0 and 1 */
  assert_ok(context, bpt_graph_set_training(graph, 0));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &before));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &after));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, before));
  /* Other images through the graph, so that a stale buffer would hold their values, not the first ones'. */
  bpt_tensor *others;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &others));
  test_random_fill(&random, bpt_tensor_data(others), BATCH * 50, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, others));
  assert_ok(context, bpt_graph_forward(graph));
  bpt_tensor_destroy(others);
  int folded = 0;
  assert_ok(context, bpt_graph_fold_batch_norm(graph, &folded));
  assert_int_equal(folded, 1);
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, after));
  const double error = test_relative_error(bpt_tensor_data(after), bpt_tensor_data(before), BATCH * OUTPUTS);
  if (error > 1e-5) fail_msg("folded logits differ by %g (relative)", error);
  bpt_tensor_destroy(values);
  bpt_tensor_destroy(ids);
  bpt_tensor_destroy(before);
  bpt_tensor_destroy(after);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(views_train_as_the_graph_without_them),
      cmocka_unit_test(recompute_keeps_a_source_whose_view_is_read_outside),
      cmocka_unit_test(view_gradients_match_finite_differences),
      cmocka_unit_test(unread_view_is_readable),
      cmocka_unit_test(folding_moves_the_views_of_a_norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
