/* Storage dtype through whole models: under the bf16 policy with 16-bit storage, the activations of ops whose
 * kernels take f32 only (convolution) are stored as bf16 and widened into f32 scratch around each kernel call
 * (kernel_call.c), and those whose kernels read and write bf16 themselves (batch norm, pooling, layer norm,
 * attention, GELU, sigmoid, embedding, add, slice copies) stage their rows or planes through f32. A small CNN and a
 * small transformer train two SGD steps each way, with 16-bit storage and with every activation in f32 rounded
 * in place (the rounding path), and must agree: the same bf16 values go into the same f32 arithmetic, so only
 * f32 round-off may part them, far below one bf16 unit, which a stale, skipped or doubled widening or staging
 * would exceed by far. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/memory.h"
#include "bptrain/transformer.h"
#include "core/graph.h"
#include "core/precision.h"
#include "test_support.h"

enum { IMAGES = 4, CHANNELS = 3, SIDE = 8, CLASSES = 5, TOKENS = 6, VOCABULARY = 11, DIM = 16, STEPS = 2 };

typedef struct model {
  bpt_node *inputs[3]; /* images and labels, or tokens, positions and targets */
  int input_count;
  bpt_node *watched[4]; /* nodes whose storage the test checks */
  bpt_node *fan_out; /* a value read by two nodes */
  bpt_node *logits, *loss;
} model;

typedef struct outcome {
  float losses[STEPS];
  float *gradients; /* after the first backward */
  int64_t parameter_count;
  bpt_dtype storage[4], fan_out_storage;
  int64_t activation_bytes;
} outcome;

/* conv - BN+ReLU - max pool - conv - BN - x sigmoid(x) - avg pool - global pool - linear, cross-entropy. */
static void build_cnn(bpt_context *context, bpt_graph *graph, model *m) {
  const int64_t image[3] = {CHANNELS, SIDE, SIDE};
  bpt_node *y;
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &m->inputs[0]));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->inputs[1]));
  m->input_count = 2;
  assert_ok(context, bpt_layer_conv2d(graph, "conv1", m->inputs[0], 4, 3, 1, 1, 1, &y));
  m->watched[0] = y;
  assert_ok(context, bpt_layer_batch_norm_relu(graph, "bn1", y, &y));
  m->watched[1] = y;
  assert_ok(context, bpt_max_pool2d(graph, "pool1", y, 2, 2, 0, &y));
  m->watched[2] = y;
  assert_ok(context, bpt_layer_conv2d(graph, "conv2", y, 6, 3, 1, 1, 0, &y));
  bpt_node *normed;
  assert_ok(context, bpt_layer_batch_norm(graph, "bn2", y, &normed));
  assert_ok(context, bpt_sigmoid(graph, "sigmoid", normed, &y));
  assert_ok(context, bpt_mul(graph, "gate", normed, y, &y)); /* normed has two readers */
  assert_ok(context, bpt_avg_pool2d(graph, "pool2", y, 2, 2, 0, &y));
  m->watched[3] = y;
  m->fan_out = normed;
  assert_ok(context, bpt_global_avg_pool(graph, "gap", y, &y));
  assert_ok(context, bpt_layer_linear(graph, "fc", y, CLASSES, BPT_INIT_HE_UNIFORM, &m->logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", m->logits, m->inputs[1], &m->loss));
}

/* Token and position embeddings, one pre-LN transformer block (a recompute segment or not), a final layer norm
 * and a linear head. */
static void build_transformer(bpt_context *context, bpt_graph *graph, bool recompute, model *m) {
  bpt_node *x, *position;
  assert_ok(context, bpt_graph_input_sequence(graph, "tokens", BPT_DTYPE_I32, TOKENS, 0, NULL, &m->inputs[0]));
  assert_ok(context, bpt_graph_input_sequence(graph, "positions", BPT_DTYPE_I32, TOKENS, 0, NULL, &m->inputs[1]));
  assert_ok(context, bpt_graph_input_sequence(graph, "targets", BPT_DTYPE_I32, TOKENS, 0, NULL, &m->inputs[2]));
  m->input_count = 3;
  assert_ok(context, bpt_layer_embedding(graph, "tok", m->inputs[0], VOCABULARY, DIM, &x));
  assert_ok(context, bpt_layer_embedding(graph, "pos", m->inputs[1], TOKENS, DIM, &position));
  assert_ok(context, bpt_add(graph, "embed", x, position, &x));
  m->fan_out = x; /* the residual stream: read by the first layer norm and the residual add */
  bpt_transformer_block_options block = bpt_transformer_block_options_default();
  block.heads = 2;
  block.recompute = recompute;
  assert_ok(context, bpt_layer_transformer_block(graph, "block", x, &block, &x));
  assert_ok(context, bpt_graph_find_node(graph, "block.ln1", &m->watched[0]));
  assert_ok(context, bpt_graph_find_node(graph, "block.attn", &m->watched[1]));
  assert_ok(context, bpt_graph_find_node(graph, "block.mlp.gelu", &m->watched[2]));
  assert_ok(context, bpt_layer_layer_norm(graph, "ln_f", x, 1e-5f, &x));
  m->watched[3] = x;
  assert_ok(context, bpt_layer_linear(graph, "head", x, VOCABULARY, BPT_INIT_NORMAL_SMALL, &x));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", x, m->inputs[2], &m->loss));
}

static void fill_inputs(bpt_context *context, bpt_graph *graph, const model *m, bool cnn) {
  test_random random;
  test_random_seed(&random, 3);
  for (int i = 0; i < m->input_count; i++) {
    bpt_node *input = m->inputs[i];
    const int64_t per_sample = bpt_node_inner_count(input), count = IMAGES * per_sample;
    int64_t dims[BPT_MAX_RANK] = {IMAGES};
    for (int d = 1; d < input->rank; d++)
      dims[d] = input->dims[d];
    bpt_tensor *tensor;
    assert_ok(context, bpt_tensor_create(context, input->dtype, input->rank, dims, &tensor));
    if (input->dtype == BPT_DTYPE_F32) {
      test_random_fill(&random, bpt_tensor_data(tensor), count, -1.0f, 1.0f);
    } else {
      int32_t *ids = bpt_tensor_data(tensor);
      const int64_t range = cnn ? CLASSES : i == 1 ? TOKENS : VOCABULARY;
      for (int64_t j = 0; j < count; j++)
        ids[j] = (int32_t)(i == 1 ? j % TOKENS : (j * 7 + i) % range);
    }
    assert_ok(context, bpt_graph_set_input(graph, input, tensor));
    bpt_tensor_destroy(tensor);
  }
}

/* A graph under the bf16 policy, with 16-bit storage or the rounding path; single_reader keeps values with
 * several readers in f32 (storage.c), where the two paths round their gradients differently. */
static bpt_graph *bf16_graph(bpt_context *context, bool store_16bit, bool single_reader) {
  bpt_graph *graph;
  assert_ok(context, bpt_graph_create(context, &graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_BF16;
  options.store_activations_16bit = store_16bit;
  assert_ok(context, bpt_graph_set_precision(graph, &options));
  graph->precision->single_reader_storage = single_reader;
  return graph;
}

static void train(bool cnn, bool recompute, bool store_16bit, bool single_reader, outcome *out) {
  memset(out, 0, sizeof *out);
  bpt_context *context = test_context(21);
  bpt_graph *graph = bf16_graph(context, store_16bit, single_reader);
  model m = {.input_count = 0};
  if (cnn)
    build_cnn(context, graph, &m);
  else
    build_transformer(context, graph, recompute, &m);
  for (int i = 0; i < 4; i++)
    assert_non_null(m.watched[i]);
  assert_ok(context, bpt_graph_compile(graph, m.loss, IMAGES));
  for (int i = 0; i < 4; i++)
    out->storage[i] = m.watched[i]->storage;
  out->fan_out_storage = m.fan_out ? m.fan_out->storage : BPT_DTYPE_F32;
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  assert_ok(context, bpt_graph_memory(graph, &memory));
  out->activation_bytes = memory.activation_bytes;
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.1f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  fill_inputs(context, graph, &m, cnn);
  out->parameter_count = bpt_graph_parameter_count(graph);
  out->gradients = calloc((size_t)out->parameter_count, sizeof *out->gradients);
  assert_non_null(out->gradients);
  for (int step = 0; step < STEPS; step++) {
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_loss(graph, &out->losses[step]));
    assert_ok(context, bpt_graph_backward(graph));
    if (step == 0) assert_ok(context, bpt_graph_read_gradients(graph, out->gradients, out->parameter_count));
    assert_ok(context, bpt_optimizer_step(optimizer));
  }
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void check_agreement(bool cnn, bool recompute) {
  outcome stored, rounded;
  train(cnn, recompute, true, true, &stored);
  train(cnn, recompute, false, true, &rounded);
  for (int i = 0; i < 4; i++) {
    if (stored.storage[i] != BPT_DTYPE_BF16)
      fail_msg("watched node %d is stored as %s", i, bpt_dtype_name(stored.storage[i]));
    assert_int_equal(rounded.storage[i], BPT_DTYPE_F32);
  }
  assert_int_equal(stored.fan_out_storage, BPT_DTYPE_F32);
  assert_true(stored.activation_bytes < rounded.activation_bytes);
  for (int step = 0; step < STEPS; step++)
    if (fabsf(stored.losses[step] - rounded.losses[step]) > 1e-6f * fabsf(rounded.losses[step]))
      fail_msg("step %d: loss %.9g with 16-bit storage, %.9g on the rounding path", step, stored.losses[step],
               rounded.losses[step]);
  const double error = test_relative_error(stored.gradients, rounded.gradients, stored.parameter_count);
  if (error > 1e-6) fail_msg("gradients differ by %g (relative)", error);
  free(stored.gradients);
  free(rounded.gradients);
}

/* A value with two readers (the CNN's bn2 output, read by the sigmoid and the gate; the transformer's residual
 * stream, read by a layer norm and a same-shape add, which takes its kernels under 16-bit storage) is stored as
 * bf16 by default, and each reader's backward rounds its part of the gradient into it: forward is the rounding
 * path's to f32 round-off, the gradients to a few bf16 units (one reader's part lost, or added twice, is tens
 * of percent). */
static void value_with_two_readers_is_stored_bf16(bool cnn) {
  outcome shared, single, rounded;
  train(cnn, false, true, false, &shared);
  train(cnn, false, true, true, &single);
  train(cnn, false, false, false, &rounded);
  assert_int_equal(shared.fan_out_storage, BPT_DTYPE_BF16);
  assert_true(shared.activation_bytes < single.activation_bytes);
  if (fabsf(shared.losses[0] - rounded.losses[0]) > 1e-6f * fabsf(rounded.losses[0]))
    fail_msg("first loss %.9g with 16-bit storage, %.9g on the rounding path", shared.losses[0], rounded.losses[0]);
  const double error = test_relative_error(shared.gradients, rounded.gradients, shared.parameter_count);
  print_message("gradients differ by %g (relative) from the rounding path\n", error);
  if (error > 2e-2) fail_msg("gradients differ by %g (relative)", error);
  free(shared.gradients);
  free(single.gradients);
  free(rounded.gradients);
}

static void cnn_value_with_two_readers_is_stored_bf16(void **state) {
  (void)state;
  value_with_two_readers_is_stored_bf16(true);
}

static void transformer_residual_stream_is_stored_bf16(void **state) {
  (void)state;
  value_with_two_readers_is_stored_bf16(false);
}

static void cnn_widened_storage_matches_rounding_path(void **state) {
  (void)state;
  check_agreement(true, false);
}

static void transformer_widened_storage_matches_rounding_path(void **state) {
  (void)state;
  check_agreement(false, false);
}

/* The block's forward runs again in backward: the widened calls write the same bf16 values the second time. */
static void recomputed_transformer_widened_storage_matches_rounding_path(void **state) {
  (void)state;
  check_agreement(false, true);
}

/* Folding batch norms into the convolutions under the bf16 policy (with and without 16-bit storage) keeps the
 * evaluation logits to bf16 accuracy: the folded weights go to the f32 masters, which the next forward rounds
 * into the copies it reads; written into the copies, they would be overwritten by the unfolded masters while
 * the folded norms do nothing. A norm whose storage differs from its convolution's is not folded. */
static void folding_under_the_bf16_policy_keeps_the_logits(void **state) {
  (void)state;
  for (int store = 0; store < 2; store++) {
    bpt_context *context = test_context(21);
    bpt_graph *graph = bf16_graph(context, store, false);
    model m = {.input_count = 0};
    build_cnn(context, graph, &m);
    assert_ok(context, bpt_graph_compile(graph, m.loss, IMAGES));
    fill_inputs(context, graph, &m, true);
    assert_ok(context, bpt_graph_forward(graph)); /* training mode: running statistics move off 0 and 1 */
    assert_ok(context, bpt_graph_set_training(graph, 0));
    const int64_t dims[2] = {IMAGES, CLASSES};
    bpt_tensor *before, *after;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &before));
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &after));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_read(graph, m.logits, before));
    int folded = 0;
    assert_ok(context, bpt_graph_fold_batch_norm(graph, &folded));
    assert_int_equal(folded, 2);
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_read(graph, m.logits, after));
    const double error = test_relative_error(bpt_tensor_data(after), bpt_tensor_data(before), IMAGES * CLASSES);
    if (error > 0.01) fail_msg("storage %d: folded logits differ by %g (relative)", store, error);
    bpt_tensor_destroy(before);
    bpt_tensor_destroy(after);
    bpt_graph_destroy(graph);
    bpt_context_destroy(context);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cnn_widened_storage_matches_rounding_path),
      cmocka_unit_test(transformer_widened_storage_matches_rounding_path),
      cmocka_unit_test(recomputed_transformer_widened_storage_matches_rounding_path),
      cmocka_unit_test(cnn_value_with_two_readers_is_stored_bf16),
      cmocka_unit_test(transformer_residual_stream_is_stored_bf16),
      cmocka_unit_test(folding_under_the_bf16_policy_keeps_the_logits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
