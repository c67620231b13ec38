/* embedding: out[n, t, :] = table[ids[n, t], :], ids i32 (N, T) (a sequence, or any batched (N, K)) or (N),
 * table (V, C) unbatched f32; out (N, T, C) keeps the batch and the sequence mark of the ids (PyTorch's
 * F.embedding). An id outside [0, V) fails the forward with a message naming the position and the value.
 * Backward scatter-adds dy into the rows of dtable the ids name; the kernels add in token order (no atomics),
 * so a repeated id's row gets the same sum on every run and thread count. The ids get no gradient. */
#include "core/graph.h"

static bpt_status embedding_infer_shape(bpt_node *node) {
  const bpt_node *ids = node->inputs[0], *table = node->inputs[1];
  char shape[64];
  if (ids->dtype != BPT_DTYPE_I32 || !ids->batched || ids->rank > 2)
    return bpt_node_error(node, BPT_ERR_DTYPE, "ids '%s' must be batched i32 (N) or (N, T), not %s %s", ids->name,
                          bpt_dtype_name(ids->dtype), bpt_shape_string(ids, shape, sizeof shape));
  if (table->dtype != BPT_DTYPE_F32 || table->batched || table->rank != 2)
    return bpt_node_error(node, BPT_ERR_SHAPE, "table '%s' must be an unbatched f32 (vocabulary, dim) value, not %s",
                          table->name, bpt_shape_string(table, shape, sizeof shape));
  node->rank = ids->rank + 1;
  for (int i = 0; i < ids->rank; i++)
    node->dims[i] = ids->dims[i];
  node->dims[ids->rank] = table->dims[1];
  node->batched = true;
  node->sequence = ids->sequence;
  return BPT_OK;
}

static bpt_status embedding_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status embedding_backward(bpt_node *node) {
  if (!node->inputs[1]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Backward reads the ids (which rows to add into), neither the table nor the output. */
static bool embedding_backward_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input == 0;
}

/* Forward reads one id and writes one row per token; backward reads dy and adds into the rows. */
static void embedding_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const double count = (double)bpt_node_count(node), tokens = (double)bpt_node_count(node->inputs[0]);
  *flops = backward ? count : 0.0;
  *bytes = 4.0 * (tokens + (backward ? 3.0 : 2.0) * count);
}

const bpt_op_definition bpt_op_embedding = {.name = "embedding",
                                            .kernels_only = true,
                                            .infer_shape = embedding_infer_shape,
                                            .forward = embedding_forward,
                                            .backward = embedding_backward,
                                            .cost = embedding_cost,
                                            .backward_reads_input = embedding_backward_reads_input,
                                            .backward_reads_output = bpt_op_reads_no_output};

bpt_status bpt_embedding(bpt_graph *graph, const char *name, bpt_node *ids, bpt_node *table, bpt_node **out) {
  bpt_node *inputs[2] = {ids, table};
  return bpt_graph_add_node(graph, BPT_OP_EMBEDDING, name, inputs, 2, out);
}
