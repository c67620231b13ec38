/* kv_cache_attention: causal multi-head attention of new tokens over every token seen so far, for generation.
 * The node keeps the keys and values of earlier forward passes in its saved buffer (the cache), so a token
 * costs O(T) attention work instead of a whole window's forward: inputs q, k, v (N, Tq, C) for Tq new tokens
 * and their absolute positions (N, Tq) i32, consecutive from positions[n][0]; forward writes k and v into cache
 * rows positions[n][0] .. + Tq - 1 and lets query i attend to rows 0 .. positions[n][0] + i. Position 0 starts a
 * sequence afresh, so nothing needs resetting. Heads split C as scaled_dot_product_attention's do (head h: columns
 * [h D, (h + 1) D)), with the same scale 1/sqrt(D), so weights trained with that op decode with this one.
 * Inference only: there is no backward. Integer attributes: 0 heads, 1 capacity (the most positions). */
#include "bptrain/transformer.h"
#include "core/graph.h"

enum { HEADS, CAPACITY };

static bpt_status kv_cache_attention_infer_shape(bpt_node *node) {
  const bpt_node *q = node->inputs[0], *positions = node->inputs[3];
  const int64_t heads = node->int_attributes[HEADS], capacity = node->int_attributes[CAPACITY];
  char a[96], b[96];
  if (!q->sequence || q->rank != 3 || q->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_SHAPE, "q '%s' must be an f32 sequence (N, T, C), not %s", q->name,
                          bpt_shape_string(q, a, sizeof a));
  for (int i = 1; i < 3; i++) {
    const bpt_node *x = node->inputs[i];
    if (x->rank != 3 || !x->batched || x->dtype != BPT_DTYPE_F32 || x->dims[1] != q->dims[1] ||
        x->dims[2] != q->dims[2])
      return bpt_node_error(node, BPT_ERR_SHAPE, "%s '%s' has shape %s; q '%s' has %s", i == 1 ? "k" : "v", x->name,
                            bpt_shape_string(x, a, sizeof a), q->name, bpt_shape_string(q, b, sizeof b));
  }
  if (positions->dtype != BPT_DTYPE_I32 || positions->rank != 2 || !positions->batched ||
      positions->dims[1] != q->dims[1])
    return bpt_node_error(node, BPT_ERR_SHAPE, "positions '%s' must be i32 (N, %lld), not %s %s", positions->name,
                          (long long)q->dims[1], bpt_dtype_name(positions->dtype),
                          bpt_shape_string(positions, a, sizeof a));
  if (heads < 1 || q->dims[2] % heads != 0)
    return bpt_node_error(node, BPT_ERR_SHAPE, "width %lld is not a multiple of %lld heads", (long long)q->dims[2],
                          (long long)heads);
  if (capacity < q->dims[1])
    return bpt_node_error(node, BPT_ERR_SHAPE, "capacity %lld is less than the %lld tokens of one pass",
                          (long long)capacity, (long long)q->dims[1]);
  node->dtype = BPT_DTYPE_F32;
  node->rank = 3;
  for (int i = 0; i < 3; i++)
    node->dims[i] = q->dims[i];
  node->batched = node->sequence = true;
  return BPT_OK;
}

/* The cache: per sample of the compiled batch, its keys then its values, each (capacity, C) f32. */
static size_t kv_cache_attention_saved_bytes(const bpt_node *node) {
  return 2 * (size_t)node->graph->max_batch * (size_t)node->int_attributes[CAPACITY] * (size_t)node->dims[2] *
         sizeof(float);
}

static bpt_status kv_cache_attention_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status kv_cache_attention_backward(bpt_node *node) {
  return bpt_node_error(node, BPT_ERR_UNSUPPORTED,
                        "kv_cache_attention is for generation only and has no backward; train with "
                        "bpt_scaled_dot_product_attention and load the weights into the generation graph");
}

/* Both are checked against q's shape by the shape rule. */
static const bpt_param_decl kv_cache_attention_parameters[] = {{.name = "heads",
                                                                .type = BPT_OP_VALUE_INT,
                                                                .slot = HEADS,
                                                                .default_value = 1,
                                                                .minimum = -BPT_OP_ANY_INT,
                                                                .maximum = BPT_OP_ANY_INT},
                                                               {.name = "capacity",
                                                                .type = BPT_OP_VALUE_INT,
                                                                .slot = CAPACITY,
                                                                .minimum = -BPT_OP_ANY_INT,
                                                                .maximum = BPT_OP_ANY_INT}};

const bpt_op_definition bpt_op_kv_cache_attention = {.name = "kv_cache_attention",
                                                     BPT_OP_PARAMETERS(kv_cache_attention_parameters),
                                                     .infer_shape = kv_cache_attention_infer_shape,
                                                     .saved_bytes = kv_cache_attention_saved_bytes,
                                                     .forward = kv_cache_attention_forward,
                                                     .backward = kv_cache_attention_backward};

bpt_status bpt_kv_cache_attention(bpt_graph *graph, const char *name, bpt_node *q, bpt_node *k, bpt_node *v,
                                  bpt_node *positions, int64_t heads, int64_t capacity, bpt_node **out) {
  bpt_node *inputs[4] = {q, k, v, positions};
  const int64_t attributes[2] = {heads, capacity};
  if (out) *out = NULL;
  if (capacity < 1 || capacity > (INT64_C(1) << 24))
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_kv_cache_attention '%s': capacity %lld must be in [1, 2^24]", name ? name : "(null)",
                     (long long)capacity);
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_KV_CACHE_ATTENTION, name, inputs, 4, attributes, 2, NULL, 0,
                                            out);
}
