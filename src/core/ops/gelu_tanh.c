/* gelu_tanh: y = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), the tanh approximation of GELU (Hendrycks &
 * Gimpel 2016, eq. 2; PyTorch's F.gelu(x, approximate='tanh'), GPT-2's activation), beside gelu's exact erf
 * form. Backward reads x only: dx = beta dx + dy y'(x), and can overwrite an unset gradient (beta 0). The
 * element-wise loops are the backends' kernels. */
#include "core/graph.h"

static bpt_status gelu_tanh_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

static bpt_status gelu_tanh_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status gelu_tanh_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

const bpt_op_definition bpt_op_gelu_tanh = {.name = "gelu_tanh",
                                            .kernels_only = true,
                                            .infer_shape = gelu_tanh_infer_shape,
                                            .forward = gelu_tanh_forward,
                                            .backward = gelu_tanh_backward,
                                            .backward_reads_output = bpt_op_reads_no_output,
                                            .overwrites_unset_gradients = true};

bpt_status bpt_gelu_tanh(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_GELU_TANH, name, &x, 1, out);
}
