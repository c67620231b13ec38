/* gelu: y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), the exact form (Hendrycks & Gimpel 2016, eq. 1; PyTorch's
 * default), not the tanh approximation. Backward reads x only: dx = beta dx + dy (Phi(x) + x phi(x)), and
 * can overwrite an unset gradient (beta 0). The element-wise loops are the backends' kernels. */
#include "core/graph.h"

static bpt_status gelu_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

static bpt_status gelu_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status gelu_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

const bpt_op_definition bpt_op_gelu = {.name = "gelu",
                                       .kernels_only = true,
                                       .infer_shape = gelu_infer_shape,
                                       .forward = gelu_forward,
                                       .backward = gelu_backward,
                                       .backward_reads_output = bpt_op_reads_no_output,
                                       .overwrites_unset_gradients = true};

bpt_status bpt_gelu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_GELU, name, &x, 1, out);
}
