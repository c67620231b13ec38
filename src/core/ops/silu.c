/* silu: y = x sigmoid(x) = x / (1 + e^-x), the sigmoid-weighted linear unit (Elfwing et al. 2018; Swish with
 * beta 1; PyTorch's F.silu), the gate of SwiGLU MLPs. Backward reads x only: dx = beta dx + dy s (1 + x (1 - s))
 * with s = sigmoid(x), and can overwrite an unset gradient (beta 0). The element-wise loops are the backends'
 * kernels. */
#include "core/graph.h"

static bpt_status silu_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

static bpt_status silu_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status silu_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

const bpt_op_definition bpt_op_silu = {.name = "silu",
                                       .kernels_only = true,
                                       .infer_shape = silu_infer_shape,
                                       .forward = silu_forward,
                                       .backward = silu_backward,
                                       .backward_reads_output = bpt_op_reads_no_output,
                                       .overwrites_unset_gradients = true};

bpt_status bpt_silu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_SILU, name, &x, 1, out);
}
