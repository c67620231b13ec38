/* dropout: inverted dropout in training mode, identity in evaluation mode. Float attribute 0 is the drop
 * probability. The mask derives from the context's seed, the node's index and the graph's random step,
 * which each optimiser step advances: forwards between two steps (a finite-difference check, a second look
 * at the activations) see the same mask, and equal seeds replay equal runs. The mask (0 or 1 / (1 - p)) is
 * kept in node->saved for backward. */
#include "bptrain/cnn.h"
#include "core/graph.h"

static bpt_status dropout_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (!x->batched) return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has no batch dimension", x->name);
  node->batched = true;
  node->sequence = x->sequence;
  node->sequence_axis = x->sequence_axis;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  return BPT_OK;
}

static size_t dropout_saved_bytes(const bpt_node *node) {
  return (size_t)bpt_node_inner_count(node) * (size_t)node->graph->max_batch * sizeof(float);
}

static bpt_status dropout_forward(bpt_node *node) {
  bpt_backend *backend = node->graph->backend;
  const int64_t count = bpt_node_count(node);
  if (node->graph->evaluation) {
    if (backend->vtable->copy(backend, node->value, node->inputs[0]->value, (size_t)count * sizeof(float)) != BPT_OK)
      return bpt_kernel_result(node, BPT_ERR_DEVICE, "copy");
    return BPT_OK;
  }
  uint64_t seed = node->graph->dropout_seed * 0x9e3779b97f4a7c15ULL + (uint64_t)node->index * 0xd1b54a32d192ed03ULL +
                  node->graph->random_step * 0x8cb92ba72f3d8dd7ULL;
  bpt_kernel_node description;
  bpt_node_describe(node, &description);
  description.seed = seed;
  return bpt_node_run_forward_kernels(node, &description);
}

static bpt_status dropout_backward(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  if (!x->requires_grad) return BPT_OK;
  const int64_t count = bpt_node_count(node);
  if (node->graph->evaluation) return BPT_KERNEL(node, add_scaled, count, 1.0f, node->grad, x->grad);
  return bpt_node_backward_kernels(node);
}

static const bpt_param_decl dropout_parameters[] = {{.name = "probability",
                                                     .type = BPT_OP_VALUE_FLOAT,
                                                     .slot = 0,
                                                     .default_value = 0.5,
                                                     .minimum = 0.0,
                                                     .maximum = 1.0,
                                                     .maximum_open = true}};

const bpt_op_definition bpt_op_dropout = {.name = "dropout",
                                          BPT_OP_PARAMETERS(dropout_parameters),
                                          .infer_shape = dropout_infer_shape,
                                          .saved_bytes = dropout_saved_bytes,
                                          .forward = dropout_forward,
                                          .backward = dropout_backward,
                                          .backward_reads_input = bpt_op_reads_no_input,
                                          .backward_reads_output = bpt_op_reads_no_output};

bpt_status bpt_dropout(bpt_graph *graph, const char *name, bpt_node *x, float probability, bpt_node **out) {
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_DROPOUT, name, &x, 1, NULL, 0, &probability, 1, out);
}
