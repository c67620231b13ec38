/* scaled_dot_product_attention: F.scaled_dot_product_attention over heads packed in the channels. q (N, Tq, C),
 * k and v (N, Tk, C), C = heads D; head h is columns [h D, (h + 1) D) of every token, so no permute surrounds
 * it. Per (n, h): S = Q K^T / sqrt(D), P = softmax(S) over keys (causal: key j hidden from query i where
 * j > i + (Tk - Tq), bottom-right aligned; a query with no visible key gives 0), O = dropout(P) V.
 * Fused (FlashAttention-2's method, Dao 2023): forward keeps only the log-sum-exp L_i = m_i + log sum_j
 * exp(S_ij - m_i) per (n, h, i) in node->saved, (N, heads, Tq) floats, +inf for a query with no visible key;
 * backward recomputes P = exp(S - L) block by block and, with D_i = sum_d dO_id O_id,
 *   dV = P~^T dO, dP = (dO V^T) * M, dS = P * (dP - D_i), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D),
 * where M is the dropout mask (0 or 1 / (1 - p)) and P~ = P * M. No Tq x Tk matrix outlives a kernel call.
 * Integer attributes: 0 heads, 1 causal; float attribute 0 the dropout probability. Dropout runs in training
 * only (the evaluation and deterministic modes skip it); its mask hashes the element's (n, h, i, j) with a seed
 * from the context's seed, the node and the graph's random step, as dropout.c does, so backward redraws the
 * forward's mask and every backend draws the same one. */
#include "core/graph.h"

enum { ATTENTION_HEADS = 0, ATTENTION_CAUSAL = 1 };
enum { ATTENTION_DROPOUT = 0 };

static bpt_status attention_infer_shape(bpt_node *node) {
  const bpt_node *q = node->inputs[0], *k = node->inputs[1], *v = node->inputs[2];
  const int64_t heads = node->int_attributes[ATTENTION_HEADS];
  char shape_q[96], shape_k[96], shape_v[96];
  for (int i = 0; i < 3; i++) {
    const bpt_node *x = node->inputs[i];
    if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
    if (!x->batched || x->rank != 3)
      return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' (%s) must be a batched (N, T, C) value", x->name,
                            bpt_shape_string(x, shape_q, sizeof shape_q));
  }
  bpt_shape_string(q, shape_q, sizeof shape_q);
  bpt_shape_string(k, shape_k, sizeof shape_k);
  bpt_shape_string(v, shape_v, sizeof shape_v);
  if (k->dims[1] != v->dims[1] || k->dims[2] != v->dims[2] || q->dims[2] != k->dims[2])
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "q '%s' (%s), k '%s' (%s) and v '%s' (%s): k and v must have one shape (N, Tk, C) and q "
                          "the same C",
                          q->name, shape_q, k->name, shape_k, v->name, shape_v);
  if (heads < 1 || q->dims[2] % heads != 0)
    return bpt_node_error(node, BPT_ERR_SHAPE, "%lld heads do not divide the %lld channels of q '%s' (%s)",
                          (long long)heads, (long long)q->dims[2], q->name, shape_q);
  node->batched = true;
  node->sequence = q->sequence;
  node->rank = 3;
  for (int i = 0; i < 3; i++)
    node->dims[i] = q->dims[i];
  return BPT_OK;
}

/* The log-sum-exp of every (n, h, query). */
static size_t attention_saved_bytes(const bpt_node *node) {
  return (size_t)node->graph->max_batch * (size_t)node->int_attributes[ATTENTION_HEADS] * (size_t)node->dims[1] *
         sizeof(float);
}

/* The description both passes hand the kernels: the same seed (no optimiser step runs between them) and the
 * dropout probability in force, 0 in the evaluation and deterministic modes. */
static void describe(const bpt_node *node, bpt_kernel_node *description) {
  const bpt_graph *graph = node->graph;
  bpt_node_describe(node, description);
  description->seed = graph->dropout_seed * 0x9e3779b97f4a7c15ULL + (uint64_t)node->index * 0xd1b54a32d192ed03ULL +
                      graph->random_step * 0x8cb92ba72f3d8dd7ULL;
  if (graph->evaluation || graph->deterministic) description->float_attributes[ATTENTION_DROPOUT] = 0.0f;
}

static bpt_status attention_forward(bpt_node *node) {
  bpt_kernel_node description;
  describe(node, &description);
  return bpt_node_run_forward_kernels(node, &description);
}

static bpt_status attention_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad && !node->inputs[1]->requires_grad && !node->inputs[2]->requires_grad)
    return BPT_OK;
  bpt_kernel_node description;
  describe(node, &description);
  return bpt_node_run_backward_kernels(node, &description);
}

/* Forward: Q K^T and P V, 2 Tq Tk D flops each per (n, h); backward recomputes S and adds dO V^T, dV, dQ and dK:
 * five products. Causal masking skips about half of them; the estimate ignores that. */
static void attention_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const bpt_node *q = node->inputs[0], *k = node->inputs[1];
  const double products =
      2.0 * (double)node->graph->batch * (double)q->dims[1] * (double)k->dims[1] * (double)q->dims[2];
  const double values = (double)(bpt_node_count(q) + 2 * bpt_node_count(k) + bpt_node_count(node));
  *flops = (backward ? 5.0 : 2.0) * products;
  *bytes = 4.0 * (backward ? 2.0 * values : values);
}

/* heads is checked against q's channels by the shape rule. */
static const bpt_param_decl attention_parameters[] = {
    {.name = "heads",
     .type = BPT_OP_VALUE_INT,
     .slot = ATTENTION_HEADS,
     .default_value = 1,
     .minimum = -BPT_OP_ANY_INT,
     .maximum = BPT_OP_ANY_INT},
    {.name = "causal", .type = BPT_OP_VALUE_BOOL, .slot = ATTENTION_CAUSAL, .maximum = 1},
    {.name = "dropout_probability",
     .type = BPT_OP_VALUE_FLOAT,
     .slot = ATTENTION_DROPOUT,
     .minimum = 0.0,
     .maximum = 1.0,
     .maximum_open = true}};

const bpt_op_definition bpt_op_scaled_dot_product_attention = {.name = "scaled_dot_product_attention",
                                                               .kernels_only = true,
                                                               BPT_OP_PARAMETERS(attention_parameters),
                                                               .infer_shape = attention_infer_shape,
                                                               .saved_bytes = attention_saved_bytes,
                                                               .forward = attention_forward,
                                                               .backward = attention_backward,
                                                               .cost = attention_cost,
                                                               .overwrites_unset_gradients = true};

bpt_status bpt_scaled_dot_product_attention(bpt_graph *graph, const char *name, bpt_node *q, bpt_node *k, bpt_node *v,
                                            int64_t heads, int causal, float dropout, bpt_node **out) {
  bpt_node *inputs[3] = {q, k, v};
  const int64_t attributes[2] = {heads, causal != 0};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, name, inputs, 3, attributes, 2,
                                            &dropout, 1, out);
}
