/* Activation memory: the ReLU mask kernels (and the residual join's) against a reference, the memory plan's held and
 * transient bytes for a small MLP computed by hand, values whose memory is reused refusing to be read, compressed saved
 * activations (f16, bf16, FP8) giving gradients close to the uncompressed ones with fewer bytes held, and
 * activation gradients sharing memory only between nodes whose backward lifetimes do not overlap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/context.h"
#include "core/graph.h"
#include "test_kernels.h"
#include "test_support.h"

/* The CPU's 1-bit mask kernels: relu with a mask (forward; backward adding and assigning) and add_relu, with the
 * loops of each level the CPU has (AVX-512, AVX2, portable); the count leaves a partial last byte. */
static void relu_mask_kernels_match_reference(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = &context->backend;
  enum { COUNT = 70003 };
  float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y), *dy = malloc(COUNT * sizeof *dy),
        *dx = malloc(COUNT * sizeof *dx);
  uint8_t *mask = malloc((COUNT + 7) / 8);
  test_random random;
  test_random_seed(&random, 2);
  test_random_fill(&random, x, COUNT, -1.0f, 1.0f);
  test_random_fill(&random, dy, COUNT, -1.0f, 1.0f);
  for (bpt_cpu_loops loops = BPT_CPU_LOOPS_PORTABLE; loops <= bpt_cpu_loops_supported(); loops++) {
    ((bpt_cpu_state *)backend->state)->loop_limit = loops;
    for (int i = 0; i < COUNT; i++)
      dx[i] = 0.5f;
    bpt_kernel_node relu = test_activation_node(BPT_OP_RELU, 0.0f, COUNT, x, y, dx, dy);
    relu.saved = mask;
    relu.int_attributes[BPT_RELU_USES_MASK] = 1;
    assert_int_equal(test_kernel_run(backend, &relu, false), BPT_OK);
    assert_int_equal(test_kernel_run(backend, &relu, true), BPT_OK);
    for (int i = 0; i < COUNT; i++) {
      assert_true(y[i] == (x[i] > 0.0f ? x[i] : 0.0f));
      assert_int_equal((mask[i / 8] >> (i % 8)) & 1, x[i] > 0.0f);
      assert_true(dx[i] == (x[i] > 0.0f ? 0.5f + dy[i] : 0.5f)); /* masked-out elements untouched */
    }
    /* Assigning: dx = dy where the mask is set, 0 elsewhere, whatever dx held. */
    relu.inputs[0].beta = 0.0f;
    assert_int_equal(test_kernel_run(backend, &relu, true), BPT_OK);
    for (int i = 0; i < COUNT; i++)
      assert_true(dx[i] == (x[i] > 0.0f ? dy[i] : 0.0f));
    /* The residual join: y = max(x + dy, 0). */
    bpt_kernel_node add_relu = relu;
    add_relu.op = BPT_OP_ADD_RELU;
    add_relu.input_count = 2;
    add_relu.inputs[1] = test_kernel_tensor(BPT_DTYPE_F32, dy, NULL, 1, (const int64_t[]){COUNT});
    assert_int_equal(test_kernel_run(backend, &add_relu, false), BPT_OK);
    for (int i = 0; i < COUNT; i++) {
      const float sum = x[i] + dy[i];
      assert_true(y[i] == (sum > 0.0f ? sum : 0.0f));
      assert_int_equal((mask[i / 8] >> (i % 8)) & 1, sum > 0.0f);
    }
  }
  free(x);
  free(y);
  free(dy);
  free(dx);
  free(mask);
  bpt_context_destroy(context);
}

enum { BATCH = 16, FEATURES = 24, HIDDEN = 40, CLASSES = 5 };

typedef struct mlp {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *z, *h, *logits, *loss;
  bpt_tensor *x_values, *label_values;
} mlp;

static void mlp_create(mlp *m, bpt_dtype compute, bpt_activation_storage storage, int keep_all) {
  m->context = test_context(7);
  bpt_context *context = m->context;
  int64_t features = FEATURES;
  assert_ok(context, bpt_graph_create(context, &m->graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = compute;
  options.loss_scaling = BPT_LOSS_SCALING_NONE;
  options.saved_activation_storage = storage;
  options.keep_all_values = keep_all;
  assert_ok(context, bpt_graph_set_precision(m->graph, &options));
  assert_ok(context, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &m->x));
  assert_ok(context, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
  assert_ok(context, bpt_layer_linear(m->graph, "fc1", m->x, HIDDEN, BPT_INIT_HE_UNIFORM, &m->z));
  assert_ok(context, bpt_relu(m->graph, "relu", m->z, &m->h));
  assert_ok(context, bpt_layer_linear(m->graph, "fc2", m->h, CLASSES, BPT_INIT_HE_UNIFORM, &m->logits));
  assert_ok(context, bpt_softmax_cross_entropy(m->graph, "loss", m->logits, m->labels, &m->loss));
  assert_ok(context, bpt_graph_compile(m->graph, m->loss, BATCH));
  int64_t dims[2] = {BATCH, FEATURES};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &m->x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &m->label_values));
  test_random random;
  test_random_seed(&random, 8);
  test_random_fill(&random, bpt_tensor_data(m->x_values), BATCH * FEATURES, -1.0f, 1.0f);
  int32_t *labels = bpt_tensor_data(m->label_values);
  for (int n = 0; n < BATCH; n++)
    labels[n] = n % CLASSES;
  assert_ok(context, bpt_graph_set_input(m->graph, m->x, m->x_values));
  assert_ok(context, bpt_graph_set_input(m->graph, m->labels, m->label_values));
}

static void mlp_destroy(mlp *m) {
  bpt_tensor_destroy(m->x_values);
  bpt_tensor_destroy(m->label_values);
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

static bpt_graph_memory_stats memory_of(mlp *m) {
  bpt_graph_memory_stats stats = {.size = sizeof stats};
  assert_ok(m->context, bpt_graph_memory(m->graph, &stats));
  return stats;
}

/* Held between forward and backward: the inputs, relu's output (fc2 reads it for its weight gradient), the
 * loss, relu's 1-bit mask and the softmax probabilities. fc1's output (read by nobody in backward now that relu
 * keeps a mask) and the logits (softmax keeps probabilities) are transient and share memory. */
static void plan_holds_only_what_backward_reads(void **state) {
  (void)state;
  mlp m;
  mlp_create(&m, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, 0);
  bpt_graph_memory_stats stats = memory_of(&m);
  size_t held = aligned(BATCH * FEATURES * 4) + aligned(BATCH * 4) + aligned(BATCH * HIDDEN * 4) + aligned(4) +
                aligned(BATCH * HIDDEN / 8) + aligned(BATCH * CLASSES * 4);
  assert_int_equal(stats.max_batch, BATCH);
  assert_int_equal(stats.activation_bytes_held, held);
  /* fc1's output lives from fc1 to relu, the logits from fc2 to the loss: the logits reuse its memory.
   * Gradients, in backward steps of the 10 nodes: the loss [0, 1], the logits [1, 2], relu's [2, 5], fc1's
   * [5, 6]. Each overlaps the next, and the loss's 64 bytes, free from step 2, are too few for relu's, so this
   * short chain shares nothing. */
  assert_int_equal(stats.transient_bytes, aligned(BATCH * HIDDEN * 4));
  assert_int_equal(stats.gradient_bytes, aligned(BATCH * HIDDEN * 4) * 2 + aligned(BATCH * CLASSES * 4) + aligned(4));
  mlp keep;
  mlp_create(&keep, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, 1);
  bpt_graph_memory_stats kept = memory_of(&keep);
  assert_int_equal(kept.transient_bytes, 0);
  assert_int_equal(kept.activation_bytes_held, held + aligned(BATCH * HIDDEN * 4) + aligned(BATCH * CLASSES * 4));
  /* Same gradients either way. */
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *a = malloc((size_t)count * sizeof *a), *b = malloc((size_t)count * sizeof *b);
  assert_ok(m.context, bpt_graph_forward(m.graph));
  assert_ok(m.context, bpt_graph_backward(m.graph));
  assert_ok(keep.context, bpt_graph_forward(keep.graph));
  assert_ok(keep.context, bpt_graph_backward(keep.graph));
  assert_ok(m.context, bpt_graph_read_gradients(m.graph, a, count));
  assert_ok(keep.context, bpt_graph_read_gradients(keep.graph, b, count));
  assert_memory_equal(a, b, (size_t)count * sizeof *a);
  free(a);
  free(b);
  mlp_destroy(&keep);
  mlp_destroy(&m);
}

/* fc1's output shares memory with the logits (its lifetime ended at relu), so reading it is refused with a
 * message that says how to keep it; the logits, a graph output in all but name, stay readable until backward
 * reuses their bytes for gradients. */
static void reused_values_refuse_to_be_read(void **state) {
  (void)state;
  mlp m;
  mlp_create(&m, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, 0);
  assert_ok(m.context, bpt_graph_forward(m.graph));
  int64_t dims[2] = {BATCH, HIDDEN};
  bpt_tensor *tensor;
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_F32, 2, dims, &tensor));
  assert_fails(m.context, BPT_ERR_STATE, "keep_all_values", bpt_graph_read(m.graph, m.z, tensor));
  assert_ok(m.context, bpt_graph_read(m.graph, m.logits, tensor));
  assert_ok(m.context, bpt_graph_read(m.graph, m.h, tensor));
  /* The logits are transient all the same: after backward their bytes hold gradients, until the next forward. */
  assert_ok(m.context, bpt_graph_backward(m.graph));
  assert_fails(m.context, BPT_ERR_STATE, "the value of 'fc2' is not kept after backward",
               bpt_graph_read(m.graph, m.logits, tensor));
  assert_ok(m.context, bpt_graph_read(m.graph, m.h, tensor));
  assert_ok(m.context, bpt_graph_forward(m.graph));
  assert_ok(m.context, bpt_graph_read(m.graph, m.logits, tensor));
  bpt_tensor_destroy(tensor);
  mlp_destroy(&m);
}

/* Compressed saved activations: relu's output is no longer held in f32; fc2 keeps a copy in the storage
 * format instead, and the weight gradient of fc2 stays close to the f32 one. */
static void compressed_saved_activations(void **state) {
  (void)state;
  mlp reference;
  mlp_create(&reference, BPT_DTYPE_F32, BPT_ACTIVATION_STORAGE_COMPUTE, 0);
  size_t reference_held = memory_of(&reference).activation_bytes_held;
  int64_t count = bpt_graph_parameter_count(reference.graph);
  float *expected = malloc((size_t)count * sizeof *expected), *got = malloc((size_t)count * sizeof *got);
  assert_ok(reference.context, bpt_graph_forward(reference.graph));
  assert_ok(reference.context, bpt_graph_backward(reference.graph));
  assert_ok(reference.context, bpt_graph_read_gradients(reference.graph, expected, count));
  struct {
    bpt_activation_storage storage;
    size_t bytes;
    double tolerance;
  } cases[] = {{BPT_ACTIVATION_STORAGE_F16, 2, 2e-3},
               {BPT_ACTIVATION_STORAGE_BF16, 2, 1e-2},
               {BPT_ACTIVATION_STORAGE_FP8, 1, 8e-2}};
  for (size_t c = 0; c < 3; c++) {
    mlp m;
    mlp_create(&m, BPT_DTYPE_F32, cases[c].storage, 0);
    size_t held = memory_of(&m).activation_bytes_held;
    size_t expected_held = reference_held - aligned(BATCH * HIDDEN * 4) + aligned(64 + BATCH * HIDDEN * cases[c].bytes);
    assert_int_equal(held, expected_held);
    assert_ok(m.context, bpt_graph_forward(m.graph));
    assert_ok(m.context, bpt_graph_backward(m.graph));
    assert_ok(m.context, bpt_graph_read_gradients(m.graph, got, count));
    double error = test_relative_error(got, expected, count);
    if (error > cases[c].tolerance || error == 0.0)
      fail_msg("storage %d: gradient relative error %g (tolerance %g)", (int)cases[c].storage, error,
               cases[c].tolerance);
    mlp_destroy(&m);
  }
  free(expected);
  free(got);
  mlp_destroy(&reference);
}

/* Backward step (0 first) at which a node's gradient is first added into: its latest consumer that runs a
 * backward, counted independently of the plan's own bookkeeping. */
/* A small ResNet on 3 random 2-channel images: stem conv (stem channels) + batch norm + ReLU, an identity
 * basic block, a stride-2 block with a projection (wide channels), global average pooling and a linear head. */
enum { RESNET_IMAGES = 3 };
typedef struct resnet_fixture {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *loss;
  bpt_tensor *images, *classes;
} resnet_fixture;

static resnet_fixture resnet_create(uint64_t seed, int64_t size, int64_t stem, int64_t wide) {
  resnet_fixture f = {.context = test_context(seed)};
  bpt_context *context = f.context;
  bpt_node *x, *labels, *y;
  int64_t image[3] = {2, size, size};
  assert_ok(context, bpt_graph_create(context, &f.graph));
  assert_ok(context, bpt_graph_input(f.graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(f.graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  const bpt_layer_spec stem_layers[] = {{BPT_LAYER(BPT_LAYER_CONV2D), .units = stem, .kernel = 3, .padding = 1},
                                        {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
                                        {BPT_LAYER(BPT_LAYER_RELU)}};
  assert_ok(context, bpt_layer_sequential(f.graph, "stem", x, stem_layers, 3, &y));
  assert_ok(context, bpt_layer_resnet_basic_block(f.graph, "block1", y, stem, 1, &y));
  assert_ok(context, bpt_layer_resnet_basic_block(f.graph, "block2", y, wide, 2, &y));
  const bpt_layer_spec head[] = {{BPT_LAYER(BPT_LAYER_GLOBAL_AVG_POOL)}, {BPT_LAYER(BPT_LAYER_LINEAR), .units = 3}};
  assert_ok(context, bpt_layer_sequential(f.graph, "head", y, head, 2, &y));
  assert_ok(context, bpt_softmax_cross_entropy(f.graph, "loss", y, labels, &f.loss));
  assert_ok(context, bpt_graph_compile(f.graph, f.loss, RESNET_IMAGES));
  int64_t dims[4] = {RESNET_IMAGES, 2, size, size};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &f.images));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &f.classes));
  test_random random;
  test_random_seed(&random, seed + 1);
  test_random_fill(&random, bpt_tensor_data(f.images), RESNET_IMAGES * 2 * size * size, -1.0f, 1.0f);
  for (int i = 0; i < RESNET_IMAGES; i++)
    ((int32_t *)bpt_tensor_data(f.classes))[i] = i;
  assert_ok(context, bpt_graph_set_input(f.graph, x, f.images));
  assert_ok(context, bpt_graph_set_input(f.graph, labels, f.classes));
  return f;
}

static void resnet_destroy(resnet_fixture *f) {
  bpt_tensor_destroy(f->images);
  bpt_tensor_destroy(f->classes);
  bpt_graph_destroy(f->graph);
  bpt_context_destroy(f->context);
}

static int first_write_step(const bpt_graph *graph, const bpt_node *node) {
  if (node == graph->loss) return 0;
  int writer = node->index;
  for (int j = node->index + 1; j < graph->node_count; j++) {
    const bpt_node *consumer = graph->nodes[j];
    for (int k = 0; k < consumer->input_count; k++)
      if (consumer->inputs[k] == node && consumer->requires_grad) writer = j;
  }
  return graph->node_count - writer;
}

/* A ResNet stem and two basic blocks (fan-out into the shortcut, a projection, batch norms): every pair of
 * gradients whose bytes overlap must have disjoint backward lifetimes, the region must be well under the sum
 * of the gradients, and the parameter gradients must not depend on the sharing (checked against the same
 * graph run twice, where stale bytes from the first backward would show if a gradient were not cleared). */
static void gradients_share_memory_only_when_lifetimes_are_disjoint(void **state) {
  (void)state;
  resnet_fixture f = resnet_create(3, 9, 4, 6);
  bpt_context *context = f.context;
  bpt_graph *graph = f.graph;
  enum { IMAGES = RESNET_IMAGES };

  size_t total = 0;
  int n = graph->node_count, gradients = 0;
  for (int a = 0; a < n; a++) {
    const bpt_node *p = graph->nodes[a];
    if (!p->requires_grad || p->op == BPT_OP_PARAMETER) continue;
    gradients++;
    size_t bytes = (size_t)bpt_node_inner_count(p) * IMAGES * sizeof(float);
    total += aligned(bytes);
    for (int b = a + 1; b < n; b++) {
      const bpt_node *q = graph->nodes[b];
      if (!q->requires_grad || q->op == BPT_OP_PARAMETER) continue;
      size_t other = (size_t)bpt_node_inner_count(q) * IMAGES * sizeof(float);
      const char *pa = (const char *)p->grad, *qa = (const char *)q->grad;
      bool bytes_overlap = pa < qa + other && qa < pa + bytes;
      /* Live over [first write, own backward] in backward steps. */
      int p_start = first_write_step(graph, p), p_end = n - a, q_start = first_write_step(graph, q), q_end = n - b;
      bool lifetimes_overlap = p_start <= q_end && q_start <= p_end;
      if (bytes_overlap && lifetimes_overlap)
        fail_msg("gradients of '%s' [%d, %d] and '%s' [%d, %d] share bytes while both live", p->name, p_start, p_end,
                 q->name, q_start, q_end);
    }
  }
  bpt_graph_memory_stats stats = {.size = sizeof stats};
  assert_ok(context, bpt_graph_memory(graph, &stats));
  assert_true(gradients > 15);
  if (stats.gradient_bytes * 2 > total)
    fail_msg("gradient region %zu bytes, sum of the gradients %zu: expected sharing to halve it at least",
             stats.gradient_bytes, total);

  int64_t count = bpt_graph_parameter_count(graph);
  float *first = malloc((size_t)count * sizeof *first), *second = malloc((size_t)count * sizeof *second);
  for (int run = 0; run < 2; run++) {
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_graph_read_gradients(graph, run ? second : first, count));
  }
  assert_memory_equal(first, second, (size_t)count * sizeof *first);
  free(first);
  free(second);
  resnet_destroy(&f);
}

/* Backward on the CPU lets the first writer of an activation gradient (batch norm, ReLU, add, a convolution's data
 * gradient) overwrite it instead of clearing it first. With every activation gradient filled with NaN before
 * backward, the parameter gradients must still equal, value for value, those of a backend that clears. The
 * network covers Winograd (16 channels, 14x14), a strided direct convolution, fan-out into a projection and
 * the residual add. */
static void first_writers_overwrite_unset_gradients(void **state) {
  (void)state;
  resnet_fixture f = resnet_create(5, 14, 16, 32);
  bpt_context *context = f.context;
  bpt_graph *graph = f.graph;

  /* The CPU's kernels accept beta 0 (compile time); the clearing run turns that answer off for every node. */
  bool overwrites[64] = {false};
  int overwriting = 0;
  assert_true(graph->node_count <= 64);
  for (int i = 0; i < graph->node_count; i++)
    overwriting += overwrites[i] = graph->nodes[i]->overwrites_gradients;
  assert_true(overwriting > 0);
  int64_t count = bpt_graph_parameter_count(graph);
  float *gradients[2] = {malloc((size_t)count * sizeof(float)), malloc((size_t)count * sizeof(float))};
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < graph->node_count; i++)
      graph->nodes[i]->overwrites_gradients = run ? false : overwrites[i];
    assert_ok(context, bpt_graph_forward(graph));
    for (int i = 0; i < graph->node_count; i++) {
      bpt_node *node = graph->nodes[i];
      if (!node->requires_grad || node->op == BPT_OP_PARAMETER || node == f.loss) continue;
      for (int64_t k = 0; k < bpt_node_count(node); k++)
        node->grad[k] = NAN;
    }
    assert_ok(context, bpt_graph_backward(graph));
    assert_ok(context, bpt_graph_read_gradients(graph, gradients[run], count));
  }
  int nonzero = 0;
  for (int64_t i = 0; i < count; i++) {
    if (!(gradients[0][i] == gradients[1][i]))
      fail_msg("parameter gradient %lld: %g overwriting, %g clearing", (long long)i, (double)gradients[0][i],
               (double)gradients[1][i]);
    nonzero += gradients[0][i] != 0.0f;
  }
  assert_true(nonzero > count / 2);
  free(gradients[0]);
  free(gradients[1]);
  resnet_destroy(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(relu_mask_kernels_match_reference),
      cmocka_unit_test(plan_holds_only_what_backward_reads),
      cmocka_unit_test(reused_values_refuse_to_be_read),
      cmocka_unit_test(compressed_saved_activations),
      cmocka_unit_test(gradients_share_memory_only_when_lifetimes_are_disjoint),
      cmocka_unit_test(first_writers_overwrite_unset_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
