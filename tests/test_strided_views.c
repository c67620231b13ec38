/* Strided views (issue 24.2, strided_views.c): a permute or slice whose readers all take strides is a view of its
 * input, with no buffer and no copy; with a reader that needs contiguous input it stays a copy. Each graph here
 * trains two SGD steps exactly as the same graph with every permute and slice a copy (graph->strided_views_off,
 * the arithmetic they replace), in fewer activation bytes, with gradients that match finite differences:
 *   - heads: (N, T, C) projections reshaped to (N, T, H, D) and permuted to (N, H, T, D) for matmul (views;
 *     k's permute puts D before T, so matmul reads it with its rows contiguous), softmax, matmul, and permuted
 *     back for a reshape (a copy: reshape needs contiguous input);
 *   - fused: one (N, T, 3C) projection reshaped to (N, T, 3, H, D), permuted to (N, 3, H, T, D) and sliced on
 *     axis 1 into q, k, v (views of a view, offsets into one buffer, read by rank-5 matmuls);
 *   - attention: q, k, v as slices of a fused projection read in place by the attention kernels (views on the
 *     CPU, whose kernels take strided rows), whose backward adds into the one cleared qkv gradient;
 *   - split: nanoGPT's way, a fused projection sliced into q, k, v, each reshaped to (N, T, H, D) (a reshape of a
 *     strided view, which splits the last axis in strides) and permuted for matmul: views all the way;
 *   - swiglu: a fused (N, T, 3C) projection sliced in three, silu(gate) * value + skip (LLaMA's MLP and a
 *     residual), every slice read in place by the CPU's silu, mul and add kernels;
 *   - rows: slices of one projection read in place by layer_norm, rms_norm, gelu_tanh, gelu, sigmoid, tanh and
 *     leaky_relu, and their sum split
 *     into heads and permuted to (N, H, T, D) for softmax over D (rows D apart in a permuted view).
 * Reading a view gives the copy's values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/memory.h"
#include "bptrain/precision.h"
#include "core/graph.h"
#include "test_support.h"

enum { BATCH = 2, TOKENS = 5, CHANNELS = 8, HEADS = 2, WIDTH = 4 };
typedef enum { HEADS_GRAPH, FUSED_GRAPH, ATTENTION_GRAPH, SPLIT_GRAPH, SWIGLU_GRAPH, ROWS_GRAPH } graph_kind;

typedef struct net {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *target, *loss;
  bpt_node *view;   /* a node that is a view when views are on */
  bpt_node *copied; /* a permute that stays a copy (heads) */
} net;

static bpt_node *find(net *n, const char *name) {
  bpt_node *node;
  assert_ok(n->context, bpt_graph_find_node(n->graph, name, &node));
  return node;
}

/* (N, T, C) -> (N, T, H, D) -> axes -> the operand matmul reads. */
static bpt_node *heads_of(net *n, const char *name, bpt_node *x, const int64_t *axes) {
  const int64_t split[3] = {TOKENS, HEADS, WIDTH};
  char reshaped[32];
  snprintf(reshaped, sizeof reshaped, "%s_split", name);
  bpt_node *y;
  assert_ok(n->context, bpt_reshape(n->graph, reshaped, x, 3, split, &y));
  assert_ok(n->context, bpt_permute(n->graph, name, y, 4, axes, &y));
  return y;
}

static void build_heads(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *q, *k, *v, *s, *o;
  const int64_t to_heads[4] = {0, 2, 1, 3}, keys_t[4] = {0, 2, 3, 1}, merged[2] = {TOKENS, CHANNELS};
  assert_ok(n->context, bpt_layer_linear(g, "wq", n->x, CHANNELS, BPT_INIT_XAVIER_UNIFORM, &q));
  assert_ok(n->context, bpt_layer_linear(g, "wk", n->x, CHANNELS, BPT_INIT_XAVIER_UNIFORM, &k));
  assert_ok(n->context, bpt_layer_linear(g, "wv", n->x, CHANNELS, BPT_INIT_XAVIER_UNIFORM, &v));
  q = heads_of(n, "q", q, to_heads);
  k = heads_of(n, "kt", k, keys_t); /* (N, H, D, T) with D the unit step: matmul reads it transposed */
  v = heads_of(n, "v", v, to_heads);
  assert_ok(n->context, bpt_matmul(g, "scores", q, k, 0, 0, &s));
  assert_ok(n->context, bpt_softmax(g, "p", s, 1, &s));
  assert_ok(n->context, bpt_matmul(g, "o", s, v, 0, 0, &o));
  assert_ok(n->context, bpt_permute(g, "merge", o, 4, to_heads, &o));
  assert_ok(n->context, bpt_reshape(g, "merged", o, 2, merged, &o));
  assert_ok(n->context, bpt_mse_loss(g, "loss", o, n->target, &n->loss));
}

static void build_fused(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *qkv, *parts, *q, *k, *v, *s, *o;
  const int64_t split[4] = {TOKENS, 3, HEADS, WIDTH}, order[5] = {0, 2, 3, 1, 4}, merged[2] = {TOKENS, CHANNELS};
  const int64_t back[5] = {0, 1, 3, 2, 4};
  assert_ok(n->context, bpt_layer_linear(g, "wqkv", n->x, 3 * CHANNELS, BPT_INIT_XAVIER_UNIFORM, &qkv));
  assert_ok(n->context, bpt_reshape(g, "split", qkv, 4, split, &parts));
  assert_ok(n->context, bpt_permute(g, "parts", parts, 5, order, &parts)); /* (N, 3, H, T, D) */
  assert_ok(n->context, bpt_slice(g, "q", parts, 1, 0, 1, &q));
  assert_ok(n->context, bpt_slice(g, "k", parts, 1, 1, 1, &k));
  assert_ok(n->context, bpt_slice(g, "v", parts, 1, 2, 1, &v));
  assert_ok(n->context, bpt_matmul(g, "scores", q, k, 0, 1, &s));
  assert_ok(n->context, bpt_softmax(g, "p", s, 0, &s));
  assert_ok(n->context, bpt_matmul(g, "o", s, v, 0, 0, &o)); /* (N, 1, H, T, D) */
  assert_ok(n->context, bpt_permute(g, "merge", o, 5, back, &o));
  assert_ok(n->context, bpt_reshape(g, "merged", o, 2, merged, &o));
  assert_ok(n->context, bpt_mse_loss(g, "loss", o, n->target, &n->loss));
}

static void build_attention(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *qkv, *q, *k, *v, *o;
  assert_ok(n->context, bpt_layer_linear(g, "wqkv", n->x, 3 * CHANNELS, BPT_INIT_XAVIER_UNIFORM, &qkv));
  assert_ok(n->context, bpt_slice(g, "q", qkv, 2, 0, CHANNELS, &q));
  assert_ok(n->context, bpt_slice(g, "k", qkv, 2, CHANNELS, CHANNELS, &k));
  assert_ok(n->context, bpt_slice(g, "v", qkv, 2, 2 * CHANNELS, CHANNELS, &v));
  assert_ok(n->context, bpt_scaled_dot_product_attention(g, "attention", q, k, v, HEADS, 1, 0.0f, &o));
  assert_ok(n->context, bpt_mse_loss(g, "loss", o, n->target, &n->loss));
}

static void build_split(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *qkv, *q, *k, *v, *s, *o;
  const int64_t to_heads[4] = {0, 2, 1, 3}, merged[2] = {TOKENS, CHANNELS};
  assert_ok(n->context, bpt_layer_linear(g, "wqkv", n->x, 3 * CHANNELS, BPT_INIT_XAVIER_UNIFORM, &qkv));
  assert_ok(n->context, bpt_slice(g, "q_part", qkv, 2, 0, CHANNELS, &q));
  assert_ok(n->context, bpt_slice(g, "k_part", qkv, 2, CHANNELS, CHANNELS, &k));
  assert_ok(n->context, bpt_slice(g, "v_part", qkv, 2, 2 * CHANNELS, CHANNELS, &v));
  q = heads_of(n, "q", q, to_heads);
  k = heads_of(n, "k", k, to_heads);
  v = heads_of(n, "v", v, to_heads);
  assert_ok(n->context, bpt_matmul(g, "scores", q, k, 0, 1, &s));
  assert_ok(n->context, bpt_softmax(g, "p", s, 1, &s));
  assert_ok(n->context, bpt_matmul(g, "o", s, v, 0, 0, &o));
  assert_ok(n->context, bpt_permute(g, "merge", o, 4, to_heads, &o));
  assert_ok(n->context, bpt_reshape(g, "merged", o, 2, merged, &o));
  assert_ok(n->context, bpt_mse_loss(g, "loss", o, n->target, &n->loss));
}

static void build_swiglu(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *h, *gate, *value, *skip, *y;
  assert_ok(n->context, bpt_layer_linear(g, "w12", n->x, 3 * CHANNELS, BPT_INIT_XAVIER_UNIFORM, &h));
  assert_ok(n->context, bpt_slice(g, "gate", h, 2, 0, CHANNELS, &gate));
  assert_ok(n->context, bpt_slice(g, "k", h, 2, CHANNELS, CHANNELS, &value)); /* "k": the view the checks read */
  assert_ok(n->context, bpt_slice(g, "skip", h, 2, 2 * CHANNELS, CHANNELS, &skip));
  assert_ok(n->context, bpt_silu(g, "act", gate, &gate));
  assert_ok(n->context, bpt_mul(g, "gated", gate, value, &y));
  assert_ok(n->context, bpt_add(g, "joined", y, skip, &y)); /* add of one shape with a view: on its kernels */
  assert_ok(n->context, bpt_mse_loss(g, "loss", y, n->target, &n->loss));
}

static void build_rows(net *n) {
  bpt_graph *g = n->graph;
  bpt_node *h, *a, *b, *c, *d, *e, *f, *l, *y;
  const int64_t split[3] = {TOKENS, HEADS, WIDTH}, to_heads[4] = {0, 2, 1, 3}, merged[2] = {TOKENS, CHANNELS};
  assert_ok(n->context, bpt_layer_linear(g, "w", n->x, 7 * CHANNELS, BPT_INIT_XAVIER_UNIFORM, &h));
  assert_ok(n->context, bpt_slice(g, "a", h, 2, 0, CHANNELS, &a));
  assert_ok(n->context, bpt_slice(g, "b", h, 2, CHANNELS, CHANNELS, &b));
  assert_ok(n->context, bpt_slice(g, "c", h, 2, 2 * CHANNELS, CHANNELS, &c));
  assert_ok(n->context, bpt_slice(g, "d", h, 2, 3 * CHANNELS, CHANNELS, &d));
  assert_ok(n->context, bpt_slice(g, "e", h, 2, 4 * CHANNELS, CHANNELS, &e));
  assert_ok(n->context, bpt_slice(g, "f", h, 2, 5 * CHANNELS, CHANNELS, &f));
  assert_ok(n->context, bpt_slice(g, "l", h, 2, 6 * CHANNELS, CHANNELS, &l));
  assert_ok(n->context, bpt_layer_layer_norm(g, "ln", a, 1e-5f, &a));
  assert_ok(n->context, bpt_layer_rms_norm(g, "rms", b, 1e-5f, &b));
  assert_ok(n->context, bpt_gelu_tanh(g, "gelu_tanh", c, &c));
  assert_ok(n->context, bpt_gelu(g, "gelu", d, &d));
  assert_ok(n->context, bpt_sigmoid(g, "sigmoid", e, &e));
  assert_ok(n->context, bpt_tanh(g, "tanh", f, &f));
  assert_ok(n->context, bpt_leaky_relu(g, "leaky_relu", l, 0.1f, &l));
  assert_ok(n->context, bpt_add(g, "ab", a, b, &y));
  assert_ok(n->context, bpt_add(g, "abc", y, c, &y));
  assert_ok(n->context, bpt_add(g, "abcd", y, d, &y));
  assert_ok(n->context, bpt_add(g, "abcde", y, e, &y));
  assert_ok(n->context, bpt_add(g, "abcdef", y, f, &y));
  assert_ok(n->context, bpt_add(g, "abcdefl", y, l, &y));
  assert_ok(n->context, bpt_reshape(g, "split", y, 3, split, &y));
  assert_ok(n->context, bpt_permute(g, "k", y, 4, to_heads, &y)); /* (N, H, T, D) */
  assert_ok(n->context, bpt_softmax(g, "p", y, 0, &y));
  assert_ok(n->context, bpt_reshape(g, "merged", y, 2, merged, &y));
  assert_ok(n->context, bpt_mse_loss(g, "loss", y, n->target, &n->loss));
}

static void net_build(net *n, graph_kind kind, bool views, bool storage16) {
  memset(n, 0, sizeof *n);
  n->context = test_context(11);
  assert_ok(n->context, bpt_graph_create(n->context, &n->graph));
  if (storage16) {
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = BPT_DTYPE_BF16;
    options.store_activations_16bit = true;
    assert_ok(n->context, bpt_graph_set_precision(n->graph, &options));
  }
  const int64_t features = CHANNELS;
  assert_ok(n->context, bpt_graph_input_sequence(n->graph, "x", BPT_DTYPE_F32, TOKENS, 1, &features, &n->x));
  assert_ok(n->context, bpt_graph_input_sequence(n->graph, "target", BPT_DTYPE_F32, TOKENS, 1, &features, &n->target));
  if (kind == HEADS_GRAPH) build_heads(n);
  if (kind == FUSED_GRAPH) build_fused(n);
  if (kind == ATTENTION_GRAPH) build_attention(n);
  if (kind == SPLIT_GRAPH) build_split(n);
  if (kind == SWIGLU_GRAPH) build_swiglu(n);
  if (kind == ROWS_GRAPH) build_rows(n);
  n->view = find(n, kind == HEADS_GRAPH ? "kt" : "k");
  n->copied = kind == HEADS_GRAPH || kind == SPLIT_GRAPH ? find(n, "merge") : NULL;
  n->graph->strided_views_off = !views;
  assert_ok(n->context, bpt_graph_compile(n->graph, n->loss, BATCH));
  const int64_t dims[3] = {BATCH, TOKENS, CHANNELS};
  test_random random;
  test_random_seed(&random, 5);
  bpt_node *inputs[2] = {n->x, n->target};
  for (int i = 0; i < 2; i++) {
    bpt_tensor *values;
    assert_ok(n->context, bpt_tensor_create(n->context, BPT_DTYPE_F32, 3, dims, &values));
    test_random_fill(&random, bpt_tensor_data(values), BATCH * TOKENS * CHANNELS, -1.0f, 1.0f);
    assert_ok(n->context, bpt_graph_set_input(n->graph, inputs[i], values));
    bpt_tensor_destroy(values);
  }
}

static void net_destroy(net *n) {
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

/* Two SGD steps; the losses before and after each, the first step's parameter gradients and the view's values
 * after the first forward. The second step's gradients reach the last loss: they are written where the first
 * step's are left over, so a gradient not cleared would show there. */
static void net_train(net *n, float losses[3], float *gradients, int64_t count, float *viewed) {
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.5f;
  bpt_optimizer *optimizer;
  assert_ok(n->context, bpt_optimizer_create(n->graph, &options, &optimizer));
  const int64_t dims[2] = {BATCH, bpt_node_inner_count(n->view)};
  bpt_tensor *read;
  assert_ok(n->context, bpt_tensor_create(n->context, BPT_DTYPE_F32, 2, dims, &read));
  for (int step = 0; step < 3; step++) {
    assert_ok(n->context, bpt_graph_forward(n->graph));
    assert_ok(n->context, bpt_graph_loss(n->graph, &losses[step]));
    if (step == 2) break;
    if (step == 0) {
      assert_ok(n->context, bpt_graph_read(n->graph, n->view, read));
      memcpy(viewed, bpt_tensor_data(read), (size_t)bpt_node_count(n->view) * sizeof *viewed);
    }
    assert_ok(n->context, bpt_graph_backward(n->graph));
    if (step == 0) assert_ok(n->context, bpt_graph_read_gradients(n->graph, gradients, count));
    assert_ok(n->context, bpt_optimizer_step(optimizer));
  }
  bpt_tensor_destroy(read);
  bpt_optimizer_destroy(optimizer);
}

static size_t activation_bytes(const net *n) {
  bpt_graph_memory_stats stats = {.size = sizeof stats};
  assert_ok(n->context, bpt_graph_memory(n->graph, &stats));
  return stats.activation_bytes;
}

static void trains_as_with_copies(graph_kind kind, bool storage16) {
  net with, without;
  net_build(&with, kind, true, storage16);
  net_build(&without, kind, false, storage16);
  assert_null(without.view->view_source);
  if (with.copied) assert_null(with.copied->view_source); /* read by a reshape */
  const bool kernel_readers = kind == ATTENTION_GRAPH || kind == SWIGLU_GRAPH || kind == ROWS_GRAPH;
  assert_non_null(with.view->view_source);
  assert_false(bpt_node_contiguous(with.view));
  assert_null(with.view->kernels);
  /* The row-wise and attention kernels read bf16 storage through strides, so under 16-bit storage their views'
   * source is bf16; matmul reads f32 storage, so its views' source is f32 either way. */
  assert_int_equal(with.view->view_source->storage, kernel_readers && storage16 ? BPT_DTYPE_BF16 : BPT_DTYPE_F32);
  /* The attention's q, k and v copies were three of its values; views of qkv share its bytes. Elsewhere the
   * copies were transient and a view may keep its source instead, so the bytes are not compared. */
  if (kind == ATTENTION_GRAPH) assert_true(activation_bytes(&with) < activation_bytes(&without));
  const int64_t count = bpt_graph_parameter_count(with.graph), viewed = BATCH * bpt_node_inner_count(with.view);
  float *g_with = calloc((size_t)count, sizeof(float)), *g_without = calloc((size_t)count, sizeof(float));
  float *v_with = calloc((size_t)viewed, sizeof(float)), *v_without = calloc((size_t)viewed, sizeof(float));
  assert_true(g_with && g_without && v_with && v_without);
  float losses_with[3], losses_without[3];
  net_train(&with, losses_with, g_with, count, v_with);
  net_train(&without, losses_without, g_without, count, v_without);
  assert_memory_equal(v_with, v_without, (size_t)viewed * sizeof(float));
  assert_memory_equal(losses_with, losses_without, sizeof losses_with);
  assert_memory_equal(g_with, g_without, (size_t)count * sizeof(float));
  assert_true(losses_with[2] < losses_with[1] && losses_with[1] < losses_with[0]);
  free(g_with);
  free(g_without);
  free(v_with);
  free(v_without);
  net_destroy(&with);
  net_destroy(&without);
}

static void heads_train_as_with_copies(void **state) {
  (void)state;
  trains_as_with_copies(HEADS_GRAPH, false);
}

static void fused_slices_train_as_with_copies(void **state) {
  (void)state;
  trains_as_with_copies(FUSED_GRAPH, false);
}

static void split_reshaped_slices_train_as_with_copies(void **state) {
  (void)state;
  trains_as_with_copies(SPLIT_GRAPH, false);
  net n;
  net_build(&n, SPLIT_GRAPH, true, false);
  /* The slice under the reshape is a view too, and the reshape a strided one. */
  assert_non_null(find(&n, "k_part")->view_source);
  assert_false(bpt_node_contiguous(find(&n, "k_split")));
  net_destroy(&n);
}

static void attention_slices_train_as_with_copies(void **state) {
  (void)state;
  trains_as_with_copies(ATTENTION_GRAPH, false);
}

/* silu, mul and add read a slice's rows in place (SwiGLU), as do layer_norm, rms_norm, both gelus, sigmoid, tanh,
 * leaky_relu and softmax: every
 * slice and the permute are views, and no copy pass runs. SwiGLU's gate and value copies were held for
 * backward, so its views save their bytes; in the rows graph a view keeps its source alive where the copies
 * let it go, and the arena packs differently (a few hundred bytes either way), so its bytes are not compared. */
static void row_kernels_read_views_in_place(void **state) {
  (void)state;
  trains_as_with_copies(SWIGLU_GRAPH, false);
  trains_as_with_copies(ROWS_GRAPH, false);
  const char *views[2][8] = {{"gate", "k", "skip", NULL}, {"a", "b", "c", "d", "e", "f", "l", "k"}};
  for (int g = 0; g < 2; g++) {
    net with, without;
    net_build(&with, g ? ROWS_GRAPH : SWIGLU_GRAPH, true, false);
    net_build(&without, g ? ROWS_GRAPH : SWIGLU_GRAPH, false, false);
    for (int i = 0; i < 8 && views[g][i]; i++) {
      assert_non_null(find(&with, views[g][i])->view_source);
      assert_null(find(&without, views[g][i])->view_source);
    }
    if (!g) assert_true(activation_bytes(&with) < activation_bytes(&without));
    net_destroy(&with);
    net_destroy(&without);
  }
}

/* The row-wise kernels' supports ask for rows only of a strided input: a scalar (rank 0, say silu of a loss) is
 * contiguous and runs as before. */
static void scalars_need_no_rows(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *target, *loss, *y;
  const int64_t features = CHANNELS;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &features, &target));
  assert_ok(context, bpt_mse_loss(graph, "mse", x, target, &loss));
  assert_ok(context, bpt_silu(graph, "silu", loss, &y));
  assert_ok(context, bpt_gelu_tanh(graph, "gelu", y, &y));
  assert_ok(context, bpt_graph_compile(graph, y, BATCH));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* Under the bf16 policy with 16-bit storage, views train as copies do: matmul's views read f32 sources, which
 * the rounding path gives the values the copies' storage would hold; the row-wise kernels and attention read
 * their slices of a bf16 source in place. */
static void views_under_16bit_storage_train_as_with_copies(void **state) {
  (void)state;
  for (graph_kind kind = HEADS_GRAPH; kind <= ROWS_GRAPH; kind++)
    trains_as_with_copies(kind, true);
}

static void view_gradients_match_finite_differences(void **state) {
  (void)state;
  for (graph_kind kind = HEADS_GRAPH; kind <= ROWS_GRAPH; kind++) {
    net n;
    net_build(&n, kind, true, false);
    test_check_gradients(n.context, n.graph, 1e-2, 2e-4, 2e-2, 64);
    net_destroy(&n);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(heads_train_as_with_copies),
      cmocka_unit_test(fused_slices_train_as_with_copies),
      cmocka_unit_test(attention_slices_train_as_with_copies),
      cmocka_unit_test(split_reshaped_slices_train_as_with_copies),
      cmocka_unit_test(row_kernels_read_views_in_place),
      cmocka_unit_test(scalars_need_no_rows),
      cmocka_unit_test(views_under_16bit_storage_train_as_with_copies),
      cmocka_unit_test(view_gradients_match_finite_differences),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
