/* mul: y = a * b element-wise with NumPy broadcasting (a gate, a per-channel scale, a mask). Backward:
 * da += dy * b and db += dy * a, each summed over the axes that input was repeated along. Both inputs are
 * read in backward, so neither value may share memory with later nodes. Runs on the op's kernels. */
#include "core/graph.h"

static bpt_status mul_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status mul_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad && !node->inputs[1]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* 1 flop per output forward; backward 2 per output and input gradient (multiply, add). */
static void mul_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const double count = (double)bpt_node_count(node);
  const double a = (double)bpt_node_count(node->inputs[0]), b = (double)bpt_node_count(node->inputs[1]);
  *flops = backward ? 4.0 * count : count;
  *bytes = 4.0 * (backward ? 2.0 * (a + b) + count : a + b + count);
}

const bpt_op_definition bpt_op_mul = {.name = "mul",
                                      .kernels_only = true,
                                      .infer_shape = bpt_node_infer_broadcast_shape,
                                      .forward = mul_forward,
                                      .backward = mul_backward,
                                      .backward_reads_output = bpt_op_reads_no_output,
                                      .cost = mul_cost,
                                      .overwrites_unset_gradients = true};

bpt_status bpt_mul(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out) {
  bpt_node *inputs[2] = {a, b};
  return bpt_graph_add_node(graph, BPT_OP_MUL, name, inputs, 2, out);
}
