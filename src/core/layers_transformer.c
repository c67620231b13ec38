/* The pre-LN transformer block (GPT-2's arrangement, Radford et al. 2019): the residual stream x passes each
 * half unnormalised, so gradients reach early blocks through the additions alone, which is what lets deep
 * stacks train without warm-up tricks beyond a short ramp. One fused qkv projection feeds the attention through
 * three slices rather than three linears: one GEMM of 3C columns instead of three of C. */
#include <stdio.h>

#include "bptrain/layers.h"
#include "bptrain/cnn_ops.h"
#include "bptrain/memory.h"
#include "bptrain/transformer.h"
#include "core/graph.h"

#define NAME_SIZE (BPT_NAME_SIZE + 16)

bpt_transformer_block_options bpt_transformer_block_options_default(void) {
  return (bpt_transformer_block_options){.size = sizeof(bpt_transformer_block_options),
                                         .heads = 4,
                                         .mlp_ratio = 4,
                                         .epsilon = 1e-5f,
                                         .dropout = 0.0f,
                                         .causal = 1,
                                         .initializer = BPT_INIT_NORMAL_SMALL,
                                         .recompute = 0};
}

static bpt_status check_block(bpt_graph *graph, const char *name, const bpt_node *x,
                              const bpt_transformer_block_options *o, bpt_node **out) {
  const char *where = "bpt_layer_transformer_block";
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!x || !name || !out)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: x, name and out must be non-NULL", where);
  if (!x->sequence || x->rank != 3)
    return bpt_error(graph->context, BPT_ERR_SHAPE,
                     "%s '%s': input '%s' must be a sequence (N, T, C); declare it with bpt_graph_input_sequence", where,
                     name, x->name);
  if (o->size != sizeof *o)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s '%s': options.size is %zu, not %zu: start from bpt_transformer_block_options_default()", where,
                     name, o->size, sizeof *o);
  if (o->heads < 1 || x->dims[2] % o->heads != 0)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "%s '%s': width %lld is not a multiple of %lld heads", where, name,
                     (long long)x->dims[2], (long long)o->heads);
  if (o->mlp_ratio < 1 || o->mlp_ratio > 64 || !(o->epsilon > 0.0f) || !(o->dropout >= 0.0f && o->dropout < 1.0f))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s '%s': mlp_ratio %lld must be in [1, 64], epsilon %g > 0 and dropout %g in [0, 1)", where, name,
                     (long long)o->mlp_ratio, (double)o->epsilon, (double)o->dropout);
  return BPT_OK;
}

/* "<block>.<part>" into name; the graph refuses names that do not fit its node names, so truncation here only
 * shortens a name that is then reported. */
static const char *part(char *name, const char *block, const char *suffix) {
  snprintf(name, NAME_SIZE, "%s.%s", block, suffix);
  return name;
}

static bpt_status residual_dropout(bpt_graph *graph, char *name, const char *block, const char *suffix, float rate,
                                   bpt_node **y) {
  if (rate == 0.0f) return BPT_OK;
  return bpt_dropout(graph, part(name, block, suffix), *y, rate, y);
}

/* positions non-NULL: the generation form, attending over a key/value cache of `capacity` positions. */
static bpt_status attention_half(bpt_graph *graph, const char *block, bpt_node *x,
                                 const bpt_transformer_block_options *o, bpt_node *positions, int64_t capacity,
                                 bpt_node **out) {
  char name[NAME_SIZE];
  const int64_t width = x->dims[2];
  bpt_node *h, *qkv, *q, *k, *v;
  BPT_CHECK(bpt_layer_layer_norm(graph, part(name, block, "ln1"), x, o->epsilon, &h));
  BPT_CHECK(bpt_layer_linear(graph, part(name, block, "attn.qkv"), h, 3 * width, o->initializer, &qkv));
  BPT_CHECK(bpt_slice(graph, part(name, block, "attn.q"), qkv, 2, 0, width, &q));
  BPT_CHECK(bpt_slice(graph, part(name, block, "attn.k"), qkv, 2, width, width, &k));
  BPT_CHECK(bpt_slice(graph, part(name, block, "attn.v"), qkv, 2, 2 * width, width, &v));
  if (positions)
    BPT_CHECK(bpt_kv_cache_attention(graph, part(name, block, "attn"), q, k, v, positions, o->heads, capacity, &h));
  else
    BPT_CHECK(bpt_scaled_dot_product_attention(graph, part(name, block, "attn"), q, k, v, o->heads, o->causal,
                                               o->dropout, &h));
  BPT_CHECK(bpt_layer_linear(graph, part(name, block, "attn.proj"), h, width, o->initializer, &h));
  BPT_CHECK(residual_dropout(graph, name, block, "attn.dropout", o->dropout, &h));
  return bpt_add(graph, part(name, block, "attn.residual"), x, h, out);
}

static bpt_status mlp_half(bpt_graph *graph, const char *block, bpt_node *x, const bpt_transformer_block_options *o,
                           bpt_node **out) {
  char name[NAME_SIZE];
  const int64_t width = x->dims[2];
  bpt_node *h;
  BPT_CHECK(bpt_layer_layer_norm(graph, part(name, block, "ln2"), x, o->epsilon, &h));
  BPT_CHECK(bpt_layer_linear(graph, part(name, block, "mlp.fc"), h, o->mlp_ratio * width, o->initializer, &h));
  BPT_CHECK(bpt_gelu_tanh(graph, part(name, block, "mlp.gelu"), h, &h));
  BPT_CHECK(bpt_layer_linear(graph, part(name, block, "mlp.proj"), h, width, o->initializer, &h));
  BPT_CHECK(residual_dropout(graph, name, block, "mlp.dropout", o->dropout, &h));
  return bpt_add(graph, part(name, block, "mlp.residual"), x, h, out);
}

static bpt_status build_transformer_block(bpt_graph *graph, const char *name, bpt_node *x,
                                          const bpt_transformer_block_options *options, bpt_node **out) {
  const bpt_transformer_block_options defaults = bpt_transformer_block_options_default();
  const bpt_transformer_block_options *o = options ? options : &defaults;
  BPT_CHECK(check_block(graph, name, x, o, out));
  const int first = graph->node_count;
  bpt_node *y;
  BPT_CHECK(attention_half(graph, name, x, o, NULL, 0, &y));
  BPT_CHECK(mlp_half(graph, name, y, o, out));
  if (!o->recompute) return BPT_OK;
  return bpt_graph_recompute_segment(graph, graph->nodes[first], *out);
}

bpt_status bpt_layer_transformer_block(bpt_graph *graph, const char *name, bpt_node *x,
                                       const bpt_transformer_block_options *options, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_transformer_block(graph, name, x, options, out), out);
}

static bpt_status build_transformer_block_cached(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *positions,
                                                 int64_t capacity, const bpt_transformer_block_options *options,
                                                 bpt_node **out) {
  bpt_transformer_block_options o = options ? *options : bpt_transformer_block_options_default();
  BPT_CHECK(check_block(graph, name, x, &o, out));
  if (!o.causal)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_layer_transformer_block_cached '%s': a key/value cache serves causal attention only", name);
  o.dropout = 0.0f; /* generation runs the evaluation form */
  bpt_node *y;
  BPT_CHECK(attention_half(graph, name, x, &o, positions, capacity, &y));
  return mlp_half(graph, name, y, &o, out);
}

bpt_status bpt_layer_transformer_block_cached(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *positions,
                                              int64_t capacity, const bpt_transformer_block_options *options,
                                              bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark,
                              build_transformer_block_cached(graph, name, x, positions, capacity, options, out), out);
}
