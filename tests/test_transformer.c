/* The transformer layer helpers from the public API: the block's parameter names, GPT-style decay groups, and
 * generation with a key/value cache (passes of one token or several) equal to the training form's causal
 * attention over the whole window. Per-op
 * values and gradients on every backend are test_backend_ops.c's. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

enum { BATCH = 2, LENGTH = 6, WIDTH = 8, HEADS = 2 };

/* A one-block model on (BATCH, LENGTH) token ids; decode: the cached form, declared LENGTH long like the window
 * so that a pass may feed any number of tokens up to it (sequence_length.c). */
typedef struct tiny_gpt {
  bpt_graph *graph;
  bpt_node *tokens, *positions, *logits;
} tiny_gpt;

static void build(bpt_context *context, tiny_gpt *m, bool decode, int64_t batch) {
  const int64_t length = LENGTH;
  bpt_node *x, *p;
  assert_ok(context, bpt_graph_create(context, &m->graph));
  assert_ok(context, bpt_graph_input_sequence(m->graph, "tokens", BPT_DTYPE_I32, length, 0, NULL, &m->tokens));
  assert_ok(context, bpt_graph_input_sequence(m->graph, "positions", BPT_DTYPE_I32, length, 0, NULL, &m->positions));
  assert_ok(context, bpt_layer_embedding(m->graph, "tok", m->tokens, 16, WIDTH, &x));
  assert_ok(context, bpt_layer_embedding(m->graph, "pos", m->positions, LENGTH, WIDTH, &p));
  assert_ok(context, bpt_add(m->graph, "embed", x, p, &x));
  bpt_transformer_block_options o = bpt_transformer_block_options_default();
  o.heads = HEADS;
  if (decode)
    assert_ok(context, bpt_layer_transformer_block_cached(m->graph, "block0", x, m->positions, LENGTH, &o, &x));
  else
    assert_ok(context, bpt_layer_transformer_block(m->graph, "block0", x, &o, &x));
  assert_ok(context, bpt_layer_linear(m->graph, "head", x, 16, BPT_INIT_NORMAL_SMALL, &m->logits));
  assert_ok(context, bpt_graph_compile(m->graph, NULL, batch));
}

static void set_ids(bpt_context *context, bpt_graph *graph, bpt_node *node, const int32_t *ids, int64_t batch,
                    int64_t length) {
  const int64_t dims[2] = {batch, length};
  bpt_tensor *tensor;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &tensor));
  memcpy(bpt_tensor_data(tensor), ids, (size_t)(batch * length) * sizeof *ids);
  assert_ok(context, bpt_graph_set_input(graph, node, tensor));
  bpt_tensor_destroy(tensor);
}

/* Token by token through the cache, every position's logits equal the whole window's causal forward. */
static void kv_cache_matches_the_window(void **state) {
  (void)state;
  bpt_context *context = test_context(11);
  tiny_gpt window, decoder;
  build(context, &window, false, BATCH);
  build(context, &decoder, true, BATCH);
  const int64_t count = bpt_graph_parameter_count(window.graph);
  assert_int_equal(count, bpt_graph_parameter_count(decoder.graph));
  float *weights = malloc((size_t)count * sizeof *weights);
  test_random random;
  test_random_seed(&random, 5);
  test_random_fill(&random, weights, (size_t)count, -0.5f, 0.5f);
  assert_ok(context, bpt_graph_write_parameters(window.graph, weights, count));
  assert_ok(context, bpt_graph_write_parameters(decoder.graph, weights, count));
  int32_t ids[BATCH * LENGTH], positions[BATCH * LENGTH];
  for (int i = 0; i < BATCH * LENGTH; i++) {
    ids[i] = (int32_t)((i * 7 + 3) % 16);
    positions[i] = i % LENGTH;
  }
  set_ids(context, window.graph, window.tokens, ids, BATCH, LENGTH);
  set_ids(context, window.graph, window.positions, positions, BATCH, LENGTH);
  assert_ok(context, bpt_graph_forward(window.graph));
  const int64_t all_dims[3] = {BATCH, LENGTH, 16};
  bpt_tensor *all, *some;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, all_dims, &all));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, all_dims, &some));
  assert_ok(context, bpt_graph_read(window.graph, window.logits, all));
  const float *expected = bpt_tensor_data(all);
  /* Three times: position 0 starts afresh, so a second sequence through the same cache gives the same values.
   * Round 0 feeds one token a pass; round 1 a 4-token prompt in one pass, then one token a pass; round 2 passes
   * of 2, 3 and 1 tokens. */
  const int passes[3][LENGTH] = {{1, 1, 1, 1, 1, 1}, {4, 1, 1}, {2, 3, 1}};
  for (int round = 0; round < 3; round++)
    for (int t = 0, pass = 0; t < LENGTH; t += passes[round][pass++]) {
      const int count = passes[round][pass];
      int32_t step_ids[BATCH * LENGTH], step_positions[BATCH * LENGTH];
      for (int n = 0; n < BATCH; n++)
        for (int i = 0; i < count; i++) {
          step_ids[n * count + i] = ids[n * LENGTH + t + i];
          step_positions[n * count + i] = t + i;
        }
      set_ids(context, decoder.graph, decoder.tokens, step_ids, BATCH, count);
      set_ids(context, decoder.graph, decoder.positions, step_positions, BATCH, count);
      assert_ok(context, bpt_graph_forward(decoder.graph));
      assert_ok(context, bpt_graph_read(decoder.graph, decoder.logits, some));
      assert_int_equal(bpt_tensor_dim(some, 1), count);
      const float *got = bpt_tensor_data(some);
      for (int n = 0; n < BATCH; n++)
        for (int i = 0; i < count; i++)
          for (int v = 0; v < 16; v++)
            assert_float_equal(got[(n * count + i) * 16 + v], expected[(n * LENGTH + t + i) * 16 + v], 1e-5);
    }
  bpt_tensor_destroy(all);
  bpt_tensor_destroy(some);
  free(weights);
  bpt_graph_destroy(window.graph);
  bpt_graph_destroy(decoder.graph);
  bpt_context_destroy(context);
}

/* Positions past the capacity, or not consecutive within a pass, are refused naming node, sample and position. */
static void kv_cache_refuses_bad_positions(void **state) {
  (void)state;
  bpt_context *context = test_context(11);
  bpt_graph *graph;
  bpt_node *q, *positions, *y;
  const int64_t width = WIDTH;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "q", BPT_DTYPE_F32, 2, 1, &width, &q));
  assert_ok(context, bpt_graph_input_sequence(graph, "positions", BPT_DTYPE_I32, 2, 0, NULL, &positions));
  assert_ok(context, bpt_kv_cache_attention(graph, "cached", q, q, q, positions, HEADS, 4, &y));
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  const int64_t dims[3] = {BATCH, 2, WIDTH};
  bpt_tensor *values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &values));
  memset(bpt_tensor_data(values), 0, (size_t)(BATCH * 2 * WIDTH) * sizeof(float));
  assert_ok(context, bpt_graph_set_input(graph, q, values));
  static const int32_t cases[][BATCH * 2] = {{0, 1, 3, 4}, {0, 1, 2, 2}};
  static const char *const expected[] = {"sample 1, token 1 has position 4", "sample 1, token 1 has position 2"};
  for (int c = 0; c < 2; c++) {
    set_ids(context, graph, positions, cases[c], BATCH, 2);
    assert_int_equal(bpt_graph_forward(graph), BPT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(bpt_context_last_error(context), "'cached'"));
    assert_non_null(strstr(bpt_context_last_error(context), expected[c]));
  }
  const int32_t good[BATCH * 2] = {0, 1, 2, 3};
  set_ids(context, graph, positions, good, BATCH, 2);
  assert_ok(context, bpt_graph_forward(graph));
  bpt_tensor_destroy(values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* The names a user reads in checkpoints and the decay groups: matrices decay, vectors and tables do not. */
static void block_names_and_decay_groups(void **state) {
  (void)state;
  bpt_context *context = test_context(11);
  tiny_gpt m;
  build(context, &m, false, BATCH);
  static const char *const names[] = {"block0.ln1.weight",      "block0.ln1.bias",       "block0.attn.qkv.weight",
                                      "block0.attn.qkv.bias",   "block0.attn.proj.weight", "block0.attn.proj.bias",
                                      "block0.ln2.weight",      "block0.ln2.bias",       "block0.mlp.fc.weight",
                                      "block0.mlp.fc.bias",     "block0.mlp.proj.weight", "block0.mlp.proj.bias"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    bpt_node *node;
    assert_ok(context, bpt_graph_find_node(m.graph, names[i], &node));
  }
  bpt_node *qkv;
  assert_ok(context, bpt_graph_find_node(m.graph, "block0.attn.qkv.weight", &qkv));
  assert_int_equal(bpt_node_dim(qkv, 0), 3 * WIDTH);
  bpt_graph_destroy(m.graph);
  bpt_context_destroy(context);
}

/* One AdamW step from all-ones parameters with weight decay `decay` on matrices only. */
static float *step_with_decay(float decay, int64_t *count) {
  bpt_context *context = test_context(11);
  bpt_graph *graph;
  bpt_node *ids, *labels, *x, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "ids", BPT_DTYPE_I32, 3, 0, NULL, &ids));
  assert_ok(context, bpt_graph_input_sequence(graph, "labels", BPT_DTYPE_I32, 3, 0, NULL, &labels));
  assert_ok(context, bpt_layer_embedding(graph, "tok", ids, 5, 4, &x));
  assert_ok(context, bpt_layer_layer_norm(graph, "ln", x, 1e-5f, &x));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, 5, BPT_INIT_NORMAL_SMALL, &x));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", x, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 1));
  bpt_optimizer_options o = bpt_optimizer_options_default();
  o.kind = BPT_OPTIMIZER_ADAMW;
  o.learning_rate = 0.1f;
  o.weight_decay = decay;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &o, &optimizer));
  assert_ok(context, bpt_optimizer_decay_only_matrices(optimizer));
  *count = bpt_graph_parameter_count(graph);
  float *values = malloc((size_t)*count * sizeof *values);
  for (int64_t i = 0; i < *count; i++)
    values[i] = 1.0f + 0.01f * (float)i;
  assert_ok(context, bpt_graph_write_parameters(graph, values, *count));
  const int32_t tokens[3] = {0, 3, 4}, next[3] = {3, 4, 1};
  set_ids(context, graph, ids, tokens, 1, 3);
  set_ids(context, graph, labels, next, 1, 3);
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  assert_ok(context, bpt_optimizer_step(optimizer));
  assert_ok(context, bpt_graph_read_parameters(graph, values, *count));
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return values;
}

/* AdamW's decay is decoupled from the gradient: with and without it, parameters differ by lr x decay x p, on
 * the linear weight alone (not the embedding table, the norm's weight and bias, or the linear's bias). */
static void decay_only_matrices(void **state) {
  (void)state;
  int64_t count;
  float *plain = step_with_decay(0.0f, &count), *decayed = step_with_decay(0.5f, &count);
  /* Declaration order: tok.weight (5x4), ln.weight (4), ln.bias (4), fc.weight (5x4), fc.bias (5). */
  assert_int_equal(count, 53);
  for (int64_t i = 0; i < count; i++) {
    const bool matrix = i >= 28 && i < 48;
    const float start = 1.0f + 0.01f * (float)i;
    assert_float_equal(plain[i] - decayed[i], matrix ? 0.1f * 0.5f * start : 0.0f, 1e-5);
  }
  free(plain);
  free(decayed);
}

/* Two blocks with loss; recompute: both are recompute segments. dropout exercises the masks' reproduction. */
static bpt_graph *training_graph(bpt_context *context, bool recompute, float dropout, bpt_node **tokens,
                                 bpt_node **labels) {
  bpt_graph *graph;
  bpt_node *x, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "tokens", BPT_DTYPE_I32, LENGTH, 0, NULL, tokens));
  assert_ok(context, bpt_graph_input_sequence(graph, "labels", BPT_DTYPE_I32, LENGTH, 0, NULL, labels));
  assert_ok(context, bpt_layer_embedding(graph, "tok", *tokens, 16, WIDTH, &x));
  bpt_transformer_block_options o = bpt_transformer_block_options_default();
  o.heads = HEADS;
  o.dropout = dropout;
  o.recompute = recompute;
  assert_ok(context, bpt_layer_transformer_block(graph, "block0", x, &o, &x));
  assert_ok(context, bpt_layer_transformer_block(graph, "block1", x, &o, &x));
  assert_ok(context, bpt_layer_linear(graph, "head", x, 16, BPT_INIT_NORMAL_SMALL, &x));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", x, *labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  return graph;
}

/* Recomputed blocks give bit-identical gradients (dropout masks included) from less held memory. */
static void recomputation_is_exact_and_smaller(void **state) {
  (void)state;
  for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
    float *gradients[2] = {NULL, NULL};
    size_t held[2], shared[2];
    int64_t count = 0;
    for (int recompute = 0; recompute < 2; recompute++) {
      bpt_context *context = test_context(11);
      bpt_node *tokens, *labels;
      bpt_graph *graph = training_graph(context, recompute, with_dropout ? 0.2f : 0.0f, &tokens, &labels);
      count = bpt_graph_parameter_count(graph);
      int32_t ids[BATCH * LENGTH], next[BATCH * LENGTH];
      for (int i = 0; i < BATCH * LENGTH; i++) {
        ids[i] = (int32_t)((i * 5 + 1) % 16);
        next[i] = (int32_t)((i * 3 + 2) % 16);
      }
      set_ids(context, graph, tokens, ids, BATCH, LENGTH);
      set_ids(context, graph, labels, next, BATCH, LENGTH);
      assert_ok(context, bpt_graph_forward(graph));
      assert_ok(context, bpt_graph_backward(graph));
      gradients[recompute] = malloc((size_t)count * sizeof(float));
      assert_ok(context, bpt_graph_read_gradients(graph, gradients[recompute], count));
      bpt_graph_memory_stats memory = {.size = sizeof memory};
      assert_ok(context, bpt_graph_memory(graph, &memory));
      held[recompute] = memory.activation_bytes_held;
      shared[recompute] = memory.recompute_bytes;
      bpt_graph_destroy(graph);
      bpt_context_destroy(context);
    }
    assert_memory_equal(gradients[0], gradients[1], (size_t)count * sizeof(float));
    assert_int_equal(shared[0], 0);
    assert_true(shared[1] > 0);
    assert_true(held[1] < held[0]);
    free(gradients[0]);
    free(gradients[1]);
  }
}

/* Segments are checked: not after compile, not overlapping, not in the wrong order. */
static void recompute_segment_refusals(void **state) {
  (void)state;
  bpt_context *context = test_context(11);
  bpt_graph *graph;
  bpt_node *x, *a, *b;
  const int64_t features = 4;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_relu(graph, "a", x, &a));
  assert_ok(context, bpt_relu(graph, "b", a, &b));
  assert_int_equal(bpt_graph_recompute_segment(graph, b, a), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(context), "'b' was created after 'a'"));
  assert_ok(context, bpt_graph_recompute_segment(graph, a, b));
  assert_int_equal(bpt_graph_recompute_segment(graph, b, b), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(bpt_context_last_error(context), "already in a recompute segment"));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(kv_cache_matches_the_window),
      cmocka_unit_test(kv_cache_refuses_bad_positions),
      cmocka_unit_test(block_names_and_decay_groups),
      cmocka_unit_test(decay_only_matrices),
      cmocka_unit_test(recomputation_is_exact_and_smaller),
      cmocka_unit_test(recompute_segment_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
