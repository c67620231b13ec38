/* Sequence lengths per run (issue 24.1, sequence_length.c): a graph declared for sequences of LENGTH tokens runs
 * any shorter length fed to it, exactly as a graph declared that long: the same loss, logits and parameter
 * gradients bit for bit (the same products on the same shapes), in f32 and under the bf16 policy with 16-bit
 * storage, through a two-block GPT (embeddings of tokens and positions, attention on strided slices, MLP, head,
 * cross-entropy; its blocks kept or recomputed in backward) and through nanoGPT's head split (slices reshaped to heads
 * and permuted for matmul, views whose strides follow the length). Lengths alternate so each run refits the graph; the
 * signature (what checkpoints and data parallelism compare) stays the declared one. What cannot take a shorter sequence
 * is refused with a message naming node and lengths, and the graph then still runs at its declared length. */
#include <stdlib.h>
#include <string.h>

#include "bptrain/precision.h"
#include "core/graph.h"
#include "core/graph_signature.h"
#include "test_support.h"

enum { BATCH = 2, LENGTH = 8, VOCABULARY = 16, WIDTH = 8, HEADS = 2 };
typedef enum { GPT_GRAPH, RECOMPUTED_GPT_GRAPH, SPLIT_GRAPH } graph_kind;

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *tokens, *positions, *labels, *logits, *loss;
} model;

/* nanoGPT's attention: a fused projection sliced into q, k, v, each reshaped to (N, T, H, D) and permuted to
 * (N, H, T, D) for matmul, causal softmax, heads merged back (a copy) and projected. */
static bpt_node *split_attention(model *m, bpt_node *x, int64_t length) {
  bpt_graph *g = m->graph;
  bpt_node *qkv, *part[3], *s, *o;
  const int64_t to_heads[4] = {0, 2, 1, 3}, split[3] = {length, HEADS, WIDTH / HEADS}, merged[2] = {length, WIDTH};
  const char *names[3] = {"q", "k", "v"};
  assert_ok(m->context, bpt_layer_linear(g, "qkv", x, 3 * WIDTH, BPT_INIT_XAVIER_UNIFORM, &qkv));
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "%s_part", names[i]);
    assert_ok(m->context, bpt_slice(g, name, qkv, 2, i * WIDTH, WIDTH, &part[i]));
    snprintf(name, sizeof name, "%s_split", names[i]);
    assert_ok(m->context, bpt_reshape(g, name, part[i], 3, split, &part[i]));
    assert_ok(m->context, bpt_permute(g, names[i], part[i], 4, to_heads, &part[i]));
  }
  assert_ok(m->context, bpt_matmul(g, "scores", part[0], part[1], 0, 1, &s));
  assert_ok(m->context, bpt_softmax(g, "p", s, 1, &s));
  assert_ok(m->context, bpt_matmul(g, "o", s, part[2], 0, 0, &o));
  assert_ok(m->context, bpt_permute(g, "merge", o, 4, to_heads, &o));
  assert_ok(m->context, bpt_reshape(g, "merged", o, 2, merged, &o));
  assert_ok(m->context, bpt_layer_linear(g, "proj", o, WIDTH, BPT_INIT_XAVIER_UNIFORM, &o));
  return o;
}

/* Declared `length` tokens long; positions embed into a table of LENGTH rows whatever the length. */
static void model_build(model *m, graph_kind kind, int64_t length, bool storage16) {
  memset(m, 0, sizeof *m);
  m->context = test_context(7);
  assert_ok(m->context, bpt_graph_create(m->context, &m->graph));
  bpt_graph *g = m->graph;
  if (storage16) {
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = BPT_DTYPE_BF16;
    options.store_activations_16bit = true;
    assert_ok(m->context, bpt_graph_set_precision(g, &options));
  }
  bpt_node *x, *p;
  assert_ok(m->context, bpt_graph_input_sequence(g, "tokens", BPT_DTYPE_I32, length, 0, NULL, &m->tokens));
  assert_ok(m->context, bpt_graph_input_sequence(g, "positions", BPT_DTYPE_I32, length, 0, NULL, &m->positions));
  assert_ok(m->context, bpt_graph_input_sequence(g, "labels", BPT_DTYPE_I32, length, 0, NULL, &m->labels));
  assert_ok(m->context, bpt_layer_embedding(g, "tok", m->tokens, VOCABULARY, WIDTH, &x));
  assert_ok(m->context, bpt_layer_embedding(g, "pos", m->positions, LENGTH, WIDTH, &p));
  assert_ok(m->context, bpt_add(g, "embed", x, p, &x));
  if (kind != SPLIT_GRAPH) {
    bpt_transformer_block_options o = bpt_transformer_block_options_default();
    o.heads = HEADS;
    o.recompute = kind == RECOMPUTED_GPT_GRAPH; /* backward runs each block's forward again, at the run's length */
    assert_ok(m->context, bpt_layer_transformer_block(g, "block0", x, &o, &x));
    assert_ok(m->context, bpt_layer_transformer_block(g, "block1", x, &o, &x));
  } else {
    bpt_node *a = split_attention(m, x, length);
    assert_ok(m->context, bpt_add(g, "residual", x, a, &x));
  }
  assert_ok(m->context, bpt_layer_linear(g, "head", x, VOCABULARY, BPT_INIT_NORMAL_SMALL, &m->logits));
  assert_ok(m->context, bpt_softmax_cross_entropy(g, "loss", m->logits, m->labels, &m->loss));
  assert_ok(m->context, bpt_graph_compile(g, m->loss, BATCH));
}

static void model_destroy(model *m) {
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static void feed(model *m, bpt_node *node, const int32_t *values, int64_t length) {
  const int64_t dims[2] = {BATCH, length};
  bpt_tensor *tensor;
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_I32, 2, dims, &tensor));
  memcpy(bpt_tensor_data(tensor), values, (size_t)(BATCH * length) * sizeof *values);
  assert_ok(m->context, bpt_graph_set_input(m->graph, node, tensor));
  bpt_tensor_destroy(tensor);
}

/* One batch of `length` tokens (its content depends on round), positions 0 .. length - 1. */
static void feed_batch(model *m, int64_t length, int round) {
  int32_t tokens[BATCH * LENGTH], positions[BATCH * LENGTH], labels[BATCH * LENGTH];
  for (int64_t i = 0; i < BATCH * length; i++) {
    tokens[i] = (int32_t)((i * 7 + 3 + round * 5) % VOCABULARY);
    labels[i] = (int32_t)((i * 5 + 1 + round) % VOCABULARY);
    positions[i] = (int32_t)(i % length);
  }
  feed(m, m->tokens, tokens, length);
  feed(m, m->positions, positions, length);
  feed(m, m->labels, labels, length);
}

typedef struct result {
  float loss;
  float *logits, *gradients;
  int64_t logits_dims[3];
  int64_t scores_dims[4]; /* the split graph's attention probabilities (N, H, t, t), as read */
  float *scores;
} result;

/* The split graph's probabilities "p", read into a tensor of their declared shape. */
static void read_scores(model *m, int64_t length, result *r) {
  bpt_node *p;
  if (bpt_graph_find_node(m->graph, "p", &p) != BPT_OK) return; /* not the split graph */
  const int64_t dims[4] = {BATCH, HEADS, LENGTH, LENGTH};
  bpt_tensor *scores;
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 4, dims, &scores));
  assert_ok(m->context, bpt_graph_read(m->graph, p, scores));
  for (int i = 0; i < 4; i++)
    r->scores_dims[i] = bpt_tensor_dim(scores, i);
  const size_t bytes = (size_t)(BATCH * HEADS * length * length) * sizeof *r->scores;
  r->scores = malloc(bytes);
  memcpy(r->scores, bpt_tensor_data(scores), bytes);
  bpt_tensor_destroy(scores);
}

static result step(model *m, int64_t length, int round) {
  result r = {0};
  feed_batch(m, length, round);
  assert_ok(m->context, bpt_graph_forward(m->graph));
  assert_ok(m->context, bpt_graph_loss(m->graph, &r.loss));
  const int64_t dims[3] = {BATCH, LENGTH, VOCABULARY};
  bpt_tensor *logits;
  assert_ok(m->context, bpt_tensor_create(m->context, BPT_DTYPE_F32, 3, dims, &logits));
  assert_ok(m->context, bpt_graph_read(m->graph, m->logits, logits));
  for (int i = 0; i < 3; i++)
    r.logits_dims[i] = bpt_tensor_dim(logits, i);
  r.logits = malloc((size_t)(BATCH * LENGTH * VOCABULARY) * sizeof *r.logits);
  memcpy(r.logits, bpt_tensor_data(logits), (size_t)(BATCH * length * VOCABULARY) * sizeof *r.logits);
  bpt_tensor_destroy(logits);
  read_scores(m, length, &r);
  assert_ok(m->context, bpt_graph_backward(m->graph));
  const int64_t count = bpt_graph_parameter_count(m->graph);
  r.gradients = malloc((size_t)count * sizeof *r.gradients);
  assert_ok(m->context, bpt_graph_read_gradients(m->graph, r.gradients, count));
  return r;
}

static void result_free(result *r) {
  free(r->logits);
  free(r->gradients);
  free(r->scores);
}

static char *signature(model *m) {
  char *text;
  size_t length;
  assert_ok(m->context, bpt_graph_signature_describe(m->graph, &text, &length));
  return text;
}

/* The long graph at each length against a graph declared that long, with the same weights; lengths alternate. */
static void check_lengths(graph_kind kind, bool storage16) {
  model full;
  model_build(&full, kind, LENGTH, storage16);
  const int64_t count = bpt_graph_parameter_count(full.graph);
  float *weights = malloc((size_t)count * sizeof *weights);
  test_random random;
  test_random_seed(&random, 3);
  test_random_fill(&random, weights, count, -0.4f, 0.4f);
  assert_ok(full.context, bpt_graph_write_parameters(full.graph, weights, count));
  char *declared = signature(&full);
  const int64_t lengths[] = {5, LENGTH, 1, 3, 5};
  for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
    const int64_t length = lengths[l];
    model exact;
    model_build(&exact, kind, length, storage16);
    assert_int_equal(bpt_graph_parameter_count(exact.graph), count);
    assert_ok(exact.context, bpt_graph_write_parameters(exact.graph, weights, count));
    result got = step(&full, length, (int)l), want = step(&exact, length, (int)l);
    assert_memory_equal(&got.loss, &want.loss, sizeof got.loss);
    assert_int_equal(got.logits_dims[0], BATCH);
    assert_int_equal(got.logits_dims[1], length); /* read as (N, t, V), as fed */
    assert_int_equal(got.logits_dims[2], VOCABULARY);
    assert_memory_equal(got.logits, want.logits, (size_t)(BATCH * length * VOCABULARY) * sizeof *got.logits);
    assert_memory_equal(got.gradients, want.gradients, (size_t)count * sizeof *got.gradients);
    if (kind == SPLIT_GRAPH) { /* (N, H, t, t): the length shows at two axes, neither of them axis 1 */
      const int64_t scores_dims[4] = {BATCH, HEADS, length, length};
      assert_memory_equal(got.scores_dims, scores_dims, sizeof scores_dims);
      assert_memory_equal(got.scores, want.scores, (size_t)(BATCH * HEADS * length * length) * sizeof *got.scores);
    }
    char *now = signature(&full);
    assert_string_equal(now, declared);
    free(now);
    result_free(&got);
    result_free(&want);
    model_destroy(&exact);
  }
  free(declared);
  free(weights);
  model_destroy(&full);
}

static void gpt_runs_shorter_sequences(void **state) {
  (void)state;
  check_lengths(GPT_GRAPH, false);
}

static void gpt_runs_shorter_sequences_in_16_bits(void **state) {
  (void)state;
  check_lengths(GPT_GRAPH, true);
}

static void recomputed_blocks_run_shorter_sequences(void **state) {
  (void)state;
  check_lengths(RECOMPUTED_GPT_GRAPH, false);
}

static void head_split_views_follow_the_length(void **state) {
  (void)state;
  check_lengths(SPLIT_GRAPH, false);
  check_lengths(SPLIT_GRAPH, true);
}

/* Reshape and permute straight off an f32 sequence input: (N, T, 6) -> (N, T, 2, 3) -> (N, T, 3, 2) -> (N, T, 6),
 * per token (linear), at a shorter length equal to a graph declared that long. */
static bpt_node *input_reshaped(bpt_context *context, bpt_graph *graph, int64_t length) {
  bpt_node *x, *y;
  const int64_t width = 6, split[3] = {length, 2, 3}, swap[4] = {0, 1, 3, 2}, merged[2] = {length, 6};
  assert_ok(context, bpt_graph_input_sequence(graph, "x", BPT_DTYPE_F32, length, 1, &width, &x));
  assert_ok(context, bpt_reshape(graph, "split", x, 3, split, &y));
  assert_ok(context, bpt_permute(graph, "swap", y, 4, swap, &y));
  assert_ok(context, bpt_reshape(graph, "merged", y, 2, merged, &y));
  assert_ok(context, bpt_layer_linear(graph, "per_token", y, 5, BPT_INIT_XAVIER_UNIFORM, &y));
  return y;
}

static void reshaped_inputs_follow_the_length(void **state) {
  (void)state;
  const int64_t short_length = 3;
  bpt_context *context = test_context(7);
  bpt_graph *graphs[2];
  bpt_node *outputs[2];
  for (int g = 0; g < 2; g++) {
    assert_ok(context, bpt_graph_create(context, &graphs[g]));
    outputs[g] = input_reshaped(context, graphs[g], g == 0 ? LENGTH : short_length);
    assert_true(bpt_node_dim(outputs[g], 2) == 5); /* per token: (N, T, 5), not (N, 5) */
    assert_ok(context, bpt_graph_compile(graphs[g], NULL, BATCH));
  }
  const int64_t count = bpt_graph_parameter_count(graphs[0]);
  float weights[6 * 5 + 5];
  assert_int_equal(count, 6 * 5 + 5);
  test_random random;
  test_random_seed(&random, 9);
  test_random_fill(&random, weights, count, -1.0f, 1.0f);
  const int64_t dims[3] = {BATCH, short_length, 6}, out_dims[3] = {BATCH, LENGTH, 5};
  bpt_tensor *x, *y[2];
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &x));
  test_random_fill(&random, bpt_tensor_data(x), BATCH * short_length * 6, -1.0f, 1.0f);
  for (int g = 0; g < 2; g++) {
    bpt_node *input;
    assert_ok(context, bpt_graph_find_node(graphs[g], "x", &input));
    assert_ok(context, bpt_graph_write_parameters(graphs[g], weights, count));
    assert_ok(context, bpt_graph_set_input(graphs[g], input, x));
    assert_ok(context, bpt_graph_forward(graphs[g]));
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, out_dims, &y[g]));
    assert_ok(context, bpt_graph_read(graphs[g], outputs[g], y[g]));
    assert_int_equal(bpt_tensor_dim(y[g], 1), short_length);
  }
  assert_memory_equal(bpt_tensor_data(y[0]), bpt_tensor_data(y[1]), (size_t)(BATCH * short_length * 5) * sizeof(float));
  for (int g = 0; g < 2; g++) {
    bpt_tensor_destroy(y[g]);
    bpt_graph_destroy(graphs[g]);
  }
  bpt_tensor_destroy(x);
  bpt_context_destroy(context);
}

/* Too long, lengths that disagree, and a node whose shape is fixed by the declared length: refused with a
 * message, after which the declared length still runs. */
static void refusals_name_node_and_lengths(void **state) {
  (void)state;
  model m;
  model_build(&m, GPT_GRAPH, LENGTH, false);
  int32_t values[BATCH * (LENGTH + 1)] = {0};
  const int64_t long_dims[2] = {BATCH, LENGTH + 1};
  bpt_tensor *tensor;
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_I32, 2, long_dims, &tensor));
  assert_fails(m.context, BPT_ERR_SHAPE, "up to 8 tokens", bpt_graph_set_input(m.graph, m.tokens, tensor));
  bpt_tensor_destroy(tensor);
  feed(&m, m.tokens, values, 5);
  feed(&m, m.positions, values, 5);
  feed(&m, m.labels, values, 6);
  assert_fails(m.context, BPT_ERR_SHAPE, "were fed 5 and 6", bpt_graph_forward(m.graph));
  result r = step(&m, LENGTH, 0);
  result_free(&r);
  model_destroy(&m);

  /* A learned position table added by broadcasting is as long as the declared sequence. */
  bpt_context *context = test_context(7);
  bpt_graph *graph;
  bpt_node *x, *table, *y;
  const int64_t width = WIDTH, table_dims[2] = {LENGTH, WIDTH};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "x", BPT_DTYPE_F32, LENGTH, 1, &width, &x));
  assert_ok(context, bpt_graph_parameter(graph, "table", 2, table_dims, BPT_INIT_NORMAL_SMALL, &table));
  assert_ok(context, bpt_add(graph, "placed", x, table, &y));
  assert_ok(context, bpt_graph_compile(graph, NULL, BATCH));
  for (int length = 3; length <= LENGTH; length += LENGTH - 3) {
    const int64_t dims[3] = {BATCH, length, WIDTH};
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &tensor));
    assert_ok(context, bpt_graph_set_input(graph, x, tensor));
    bpt_tensor_destroy(tensor);
    const bpt_status status = bpt_graph_forward(graph);
    if (length == LENGTH)
      assert_ok(context, status);
    else
      assert_fails(context, BPT_ERR_SHAPE, "sequence lengths fed: 'x' 3", status);
  }
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpt_runs_shorter_sequences),
      cmocka_unit_test(gpt_runs_shorter_sequences_in_16_bits),
      cmocka_unit_test(recomputed_blocks_run_shorter_sequences),
      cmocka_unit_test(head_split_views_follow_the_length),
      cmocka_unit_test(reshaped_inputs_follow_the_length),
      cmocka_unit_test(refusals_name_node_and_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
