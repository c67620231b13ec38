/* The capability query at compile time: a node the backend has no kernels for is reported by
 * bpt_graph_compile (naming node, op and backend), and with cpu_fallback it runs on the CPU with explicit
 * transfers and trains exactly as on the CPU backend. fpga-sim has no global-pooling kernels (its conv2d, batch
 * norm and max pooling run there, before the fallback's node). */
#include <math.h>
#include <stdlib.h>

#include "core/graph.h"
#include "test_support.h"

enum { BATCH = 4, CHANNELS = 2, SIZE = 6, CLASSES = 3, STEPS = 3 };

static bpt_context *make_context(const char *backend, int cpu_fallback) {
  bpt_context_options options = bpt_context_options_default();
  options.backend = backend;
  options.num_threads = 2;
  options.seed = 11;
  options.cpu_fallback = cpu_fallback;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) fail_msg("%s", bpt_context_last_error(NULL));
  return context;
}

typedef struct network {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *loss;
} network;

/* x (N, 2, 6, 6) -> conv2d c1 -> batch_norm_relu -> max_pool2d -> global_avg_pool -> linear -> cross-entropy. */
static network build(bpt_context *context) {
  network n = {.context = context};
  const int64_t image[3] = {CHANNELS, SIZE, SIZE};
  bpt_node *h;
  assert_ok(context, bpt_graph_create(context, &n.graph));
  assert_ok(context, bpt_graph_input(n.graph, "x", BPT_DTYPE_F32, 3, image, &n.x));
  assert_ok(context, bpt_graph_input(n.graph, "labels", BPT_DTYPE_I32, 0, NULL, &n.labels));
  assert_ok(context, bpt_layer_conv2d(n.graph, "c1", n.x, 4, 3, 1, 1, 1, &h));
  assert_ok(context, bpt_layer_batch_norm_relu(n.graph, "bn1", h, &h));
  assert_ok(context, bpt_max_pool2d(n.graph, "pool", h, 2, 2, 0, &h));
  assert_ok(context, bpt_global_avg_pool(n.graph, "gap", h, &h));
  assert_ok(context, bpt_layer_linear(n.graph, "fc", h, CLASSES, BPT_INIT_XAVIER_UNIFORM, &h));
  assert_ok(context, bpt_softmax_cross_entropy(n.graph, "loss", h, n.labels, &n.loss));
  return n;
}

static void destroy(network *n) {
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

static void unsupported_node_fails_at_compile(void **state) {
  (void)state;
  network n = build(make_context("fpga-sim", 0));
  assert_fails(n.context, BPT_ERR_UNSUPPORTED, "global_avg_pool 'gap': not supported on backend 'fpga-sim'",
               bpt_graph_compile(n.graph, n.loss, BATCH));
  destroy(&n);
}

/* STEPS SGD steps; returns the losses and (in *parameters, malloc'd) the trained parameters. */
static void train(network *n, float losses[STEPS], float **parameters, int64_t *count) {
  bpt_context *context = n->context;
  assert_ok(context, bpt_graph_compile(n->graph, n->loss, BATCH));
  const int64_t x_dims[4] = {BATCH, CHANNELS, SIZE, SIZE}, label_dims[1] = {BATCH};
  bpt_tensor *x, *labels;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, x_dims, &x));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &labels));
  test_random random;
  test_random_seed(&random, 5);
  test_random_fill(&random, bpt_tensor_data(x), BATCH * CHANNELS * SIZE * SIZE, -1.0f, 1.0f);
  for (int i = 0; i < BATCH; i++) ((int32_t *)bpt_tensor_data(labels))[i] = i % CLASSES;
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.5f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(n->graph, &options, &optimizer));
  assert_ok(context, bpt_graph_set_input(n->graph, n->x, x));
  assert_ok(context, bpt_graph_set_input(n->graph, n->labels, labels));
  for (int step = 0; step < STEPS; step++) {
    assert_ok(context, bpt_graph_forward(n->graph));
    assert_ok(context, bpt_graph_loss(n->graph, &losses[step]));
    assert_ok(context, bpt_graph_backward(n->graph));
    assert_ok(context, bpt_optimizer_step(optimizer));
  }
  *count = bpt_graph_parameter_count(n->graph);
  *parameters = malloc((size_t)*count * sizeof **parameters);
  assert_ok(context, bpt_graph_read_parameters(n->graph, *parameters, *count));
  bpt_optimizer_destroy(optimizer);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(labels);
}

static void cpu_fallback_trains_like_the_cpu(void **state) {
  (void)state;
  network cpu = build(make_context("cpu", 0)), fpga = build(make_context("fpga-sim", 1));
  float cpu_losses[STEPS], fpga_losses[STEPS], *cpu_parameters, *fpga_parameters;
  int64_t cpu_count, fpga_count;
  train(&cpu, cpu_losses, &cpu_parameters, &cpu_count);
  train(&fpga, fpga_losses, &fpga_parameters, &fpga_count);

  /* Global pooling ran on the fallback, the rest on fpga-sim. */
  int fallen_back = 0;
  for (int i = 0; i < fpga.graph->node_count; i++) {
    const bpt_node *node = fpga.graph->nodes[i];
    const bool on_cpu = node->kernel_backend != fpga.graph->backend;
    fallen_back += on_cpu;
    if (node->op == BPT_OP_LINEAR || node->op == BPT_OP_SOFTMAX_CROSS_ENTROPY || node->op == BPT_OP_CONV2D ||
        node->op == BPT_OP_MAX_POOL2D || node->op == BPT_OP_BATCH_NORM_RELU)
      assert_false(on_cpu);
  }
  assert_int_equal(fallen_back, 1); /* gap */

  assert_int_equal(fpga_count, cpu_count);
  for (int step = 0; step < STEPS; step++)
    if (!(fabsf(fpga_losses[step] - cpu_losses[step]) <= 1e-5f * (1.0f + fabsf(cpu_losses[step]))))
      fail_msg("step %d: loss %.8g with the fallback, %.8g on the CPU", step, (double)fpga_losses[step],
               (double)cpu_losses[step]);
  assert_true(cpu_losses[STEPS - 1] < cpu_losses[0]);
  for (int64_t i = 0; i < cpu_count; i++)
    if (!(fabsf(fpga_parameters[i] - cpu_parameters[i]) <= 1e-5f * (1.0f + fabsf(cpu_parameters[i]))))
      fail_msg("parameter %lld: %.8g with the fallback, %.8g on the CPU", (long long)i, (double)fpga_parameters[i],
               (double)cpu_parameters[i]);
  free(cpu_parameters);
  free(fpga_parameters);
  destroy(&cpu);
  destroy(&fpga);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unsupported_node_fails_at_compile),
      cmocka_unit_test(cpu_fallback_trains_like_the_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
