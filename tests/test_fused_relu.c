/* Fused ReLU ops (batch_norm_relu, add_relu) against the separate ops they replace. One small network is
 * built twice from the same seed: with batch norm, add and ReLU as separate nodes, and with the fused nodes.
 * The fused graph runs on the CPU table as it is (ReLU inside the batch-norm and add kernels, with the loops
 * of each level the CPU has: AVX-512, AVX2, portable) and on a copy that fuses nothing, the path backends
 * without fused kernels take (ReLU in place on y and on dy). Plane sizes are chosen so that a row's mask bits
 * do not fill whole bytes (25 values: 16 and then 9 for the AVX-512 loops, 3 x 8 and 1 for the AVX2 ones, and 1-D batch
 * norm). */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "core/graph.h"
#include "test_support.h"

enum { IMAGES = 4, CHANNELS = 8, HEIGHT = 5, WIDTH = 5, CLASSES = 3 };

typedef struct network {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *loss, *logits;
  bpt_tensor *images, *classes;
} network;

/* conv - BN - ReLU - conv - BN - (+ the first ReLU's output) - ReLU - global pool - 1-D BN - ReLU - linear. */
static network network_create(bool fused) {
  network m = {.context = test_context(17)};
  bpt_context *context = m.context;
  bpt_node *x, *labels, *first, *y;
  int64_t image[3] = {2, HEIGHT, WIDTH};
  assert_ok(context, bpt_graph_create(context, &m.graph));
  bpt_graph *graph = m.graph;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  assert_ok(context, bpt_layer_conv2d(graph, "conv1", x, CHANNELS, 3, 1, 1, 0, &y));
  if (fused) {
    assert_ok(context, bpt_layer_batch_norm_relu(graph, "bn1", y, &first));
  } else {
    assert_ok(context, bpt_layer_batch_norm(graph, "bn1", y, &y));
    assert_ok(context, bpt_relu(graph, "relu1", y, &first));
  }
  assert_ok(context, bpt_layer_conv2d(graph, "conv2", first, CHANNELS, 3, 1, 1, 0, &y));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn2", y, &y));
  if (fused) {
    assert_ok(context, bpt_add_relu(graph, "add", y, first, &y));
  } else {
    assert_ok(context, bpt_add(graph, "add", y, first, &y));
    assert_ok(context, bpt_relu(graph, "relu2", y, &y));
  }
  assert_ok(context, bpt_global_avg_pool(graph, "pool", y, &y));
  if (fused) {
    assert_ok(context, bpt_layer_batch_norm_relu(graph, "bn3", y, &y));
  } else {
    assert_ok(context, bpt_layer_batch_norm(graph, "bn3", y, &y));
    assert_ok(context, bpt_relu(graph, "relu3", y, &y));
  }
  assert_ok(context, bpt_layer_linear(graph, "fc", y, CLASSES, BPT_INIT_HE_UNIFORM, &m.logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", m.logits, labels, &m.loss));
  assert_ok(context, bpt_graph_compile(graph, m.loss, IMAGES));

  /* Shifted betas put some channels mostly below zero, so the ReLUs cut a real share of the values. */
  int64_t count = bpt_graph_parameter_count(graph);
  float *parameters = malloc((size_t)count * sizeof *parameters);
  assert_ok(context, bpt_graph_read_parameters(graph, parameters, count));
  test_random random;
  test_random_seed(&random, 5);
  for (int64_t i = 0; i < count; i++)
    if (parameters[i] == 0.0f) parameters[i] = test_random_uniform(&random, -0.8f, 0.8f);
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
  free(parameters);

  int64_t dims[4] = {IMAGES, 2, HEIGHT, WIDTH};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &m.images));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &m.classes));
  test_random_fill(&random, bpt_tensor_data(m.images), IMAGES * 2 * HEIGHT * WIDTH, -1.0f, 1.0f);
  for (int i = 0; i < IMAGES; i++)
    ((int32_t *)bpt_tensor_data(m.classes))[i] = i % CLASSES;
  assert_ok(context, bpt_graph_set_input(graph, x, m.images));
  assert_ok(context, bpt_graph_set_input(graph, labels, m.classes));
  return m;
}

static void network_destroy(network *m) {
  bpt_tensor_destroy(m->images);
  bpt_tensor_destroy(m->classes);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

/* Logits, then parameter gradients, of one training step; activation gradients start as NaN, so a fused
 * op that adds into a gradient it should overwrite (or leaves part of it unwritten) shows. */
static float *training_step(network *m, int64_t *count) {
  const int64_t parameters = bpt_graph_parameter_count(m->graph), logits = IMAGES * CLASSES;
  float *result = malloc((size_t)(logits + parameters) * sizeof *result);
  assert_ok(m->context, bpt_graph_forward(m->graph));
  int64_t dims[2] = {IMAGES, CLASSES};
  bpt_tensor *values;
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, dims, &values));
  assert_ok(m->context, bpt_graph_read(m->graph, m->logits, values));
  for (int64_t i = 0; i < logits; i++)
    result[i] = ((const float *)bpt_tensor_data(values))[i];
  bpt_tensor_destroy(values);
  for (int i = 0; i < m->graph->node_count; i++) {
    bpt_node *node = m->graph->nodes[i];
    if (!node->requires_grad || node->op == BPT_OP_PARAMETER || node == m->loss) continue;
    for (int64_t k = 0; k < bpt_node_count(node); k++)
      node->grad[k] = NAN;
  }
  assert_ok(m->context, bpt_graph_backward(m->graph));
  assert_ok(m->context, bpt_graph_read_gradients(m->graph, result + logits, parameters));
  *count = logits + parameters;
  return result;
}

static void assert_close(const float *got, const float *expected, int64_t count, const char *what) {
  int nonzero = 0;
  for (int64_t i = 0; i < count; i++) {
    const double tolerance = 1e-5 + 1e-4 * fabs((double)expected[i]);
    if (!(fabs((double)got[i] - (double)expected[i]) <= tolerance))
      fail_msg("%s: value %lld is %.9g, separate ops give %.9g", what, (long long)i, (double)got[i],
               (double)expected[i]);
    nonzero += expected[i] != 0.0f;
  }
  assert_true(nonzero > count / 2);
}

/* The CPU's fused kernels, with each level of loops the CPU has, match batch norm, add and ReLU as separate
 * nodes. (The CUDA backend's batch_norm_relu and add_relu kernels run the ReLU in place instead; they are
 * compared with the CPU where a device is present.) */
static void fused_ops_match_separate_ops(void **state) {
  (void)state;
  network separate = network_create(false), fused = network_create(true);
  int64_t count, fused_count;
  float *expected = training_step(&separate, &count);

  bpt_cpu_state *cpu = fused.context->backend.state;
  static const char *const runs[] = {"", "fused kernels, portable loops", "fused kernels, AVX2 loops",
                                     "fused kernels, AVX-512 loops"};
  for (bpt_cpu_loops loops = BPT_CPU_LOOPS_PORTABLE; loops <= bpt_cpu_loops_supported(); loops++) {
    cpu->loop_limit = loops;
    float *got = training_step(&fused, &fused_count);
    assert_int_equal(fused_count, count);
    assert_close(got, expected, count, runs[loops]);
    free(got);
  }
  cpu->loop_limit = BPT_CPU_LOOPS_AVX512;

  /* The fused graph's ReLUs zero a share of the values: the test is not passing through an inactive ReLU. */
  const bpt_node *add = NULL;
  for (int i = 0; i < fused.graph->node_count; i++)
    if (fused.graph->nodes[i]->op == BPT_OP_ADD_RELU) add = fused.graph->nodes[i];
  assert_non_null(add);
  assert_ok(fused.context, bpt_graph_forward(fused.graph));
  int64_t zeros = 0;
  for (int64_t k = 0; k < bpt_node_count(add); k++)
    zeros += ((const float *)add->value)[k] == 0.0f;
  assert_true(zeros > bpt_node_count(add) / 10 && zeros < bpt_node_count(add) * 9 / 10);

  free(expected);
  network_destroy(&separate);
  network_destroy(&fused);
}

/* Evaluation mode, then folding batch norms into their convolutions: a folded batch_norm_relu still applies
 * its ReLU. */
static void fused_ops_evaluate_and_fold(void **state) {
  (void)state;
  network separate = network_create(false), fused = network_create(true);
  network *both[2] = {&separate, &fused};
  float logits[3][IMAGES * CLASSES];
  int64_t dims[2] = {IMAGES, CLASSES};
  for (int i = 0; i < 3; i++) {
    network *m = both[i > 0];
    if (i < 2) {
      /* A training step first, so the running statistics differ from their initial values. */
      assert_ok(m->context, bpt_graph_forward(m->graph));
      assert_ok(m->context, bpt_graph_set_training(m->graph, 0));
    } else {
      int folded = 0;
      assert_ok(m->context, bpt_graph_fold_batch_norm(m->graph, &folded));
      assert_int_equal(folded, 2);
    }
    assert_ok(m->context, bpt_graph_forward(m->graph));
    bpt_tensor *values;
    assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 2, dims, &values));
    assert_ok(m->context, bpt_graph_read(m->graph, m->logits, values));
    for (int k = 0; k < IMAGES * CLASSES; k++)
      logits[i][k] = ((const float *)bpt_tensor_data(values))[k];
    bpt_tensor_destroy(values);
  }
  assert_close(logits[1], logits[0], IMAGES * CLASSES, "fused ops in evaluation mode");
  assert_close(logits[2], logits[0], IMAGES * CLASSES, "fused ops folded");
  network_destroy(&separate);
  network_destroy(&fused);
}

/* A sequential batch norm followed by ReLU becomes one fused node named for the batch norm. */
static void sequential_fuses_batch_norm_and_relu(void **state) {
  (void)state;
  bpt_context *context = test_context(3);
  bpt_graph *graph;
  bpt_node *x, *y;
  int64_t image[3] = {1, 5, 5};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  const bpt_layer_spec layers[] = {{BPT_LAYER(BPT_LAYER_CONV2D), .units = 4, .kernel = 3, .padding = 1},
                                   {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
                                   {BPT_LAYER(BPT_LAYER_RELU)},
                                   {BPT_LAYER(BPT_LAYER_BATCH_NORM)}};
  assert_ok(context, bpt_layer_sequential(graph, "stem", x, layers, 4, &y));
  const bpt_node *fused = NULL, *last = y;
  for (int i = 0; i < graph->node_count; i++) {
    assert_int_not_equal(graph->nodes[i]->op, BPT_OP_RELU);
    if (graph->nodes[i]->op == BPT_OP_BATCH_NORM_RELU) fused = graph->nodes[i];
  }
  assert_non_null(fused);
  assert_string_equal(fused->name, "stem1.bn");
  assert_int_equal(last->op, BPT_OP_BATCH_NORM);
  assert_string_equal(last->name, "stem3.bn");
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fused_ops_match_separate_ops),
      cmocka_unit_test(fused_ops_evaluate_and_fold),
      cmocka_unit_test(sequential_fuses_batch_norm_and_relu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
