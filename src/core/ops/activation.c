/* Element-wise activations (ReLU, LeakyReLU, sigmoid, tanh): one shape rule and one kernel pair,
 * told apart by bpt_activation; the slope of LeakyReLU is float attribute 0. The relu op definition itself
 * lives in relu.c (it keeps a 1-bit mask for backward); its builder stays here with the others. */
#include <math.h>

#include "core/graph.h"

static bpt_activation activation_kind(const bpt_node *node) {
  switch (node->op) {
  case BPT_OP_LEAKY_RELU: return BPT_ACTIVATION_LEAKY_RELU;
  case BPT_OP_SIGMOID: return BPT_ACTIVATION_SIGMOID;
  case BPT_OP_TANH: return BPT_ACTIVATION_TANH;
  default: return BPT_ACTIVATION_RELU;
  }
}

static bpt_status activation_infer_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  node->batched = x->batched;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++) node->dims[i] = x->dims[i];
  return BPT_OK;
}

static bpt_status activation_forward(bpt_node *node) {
  return BPT_KERNEL(node, activation_forward, activation_kind(node), node->float_attributes[0], bpt_node_count(node),
                    node->inputs[0]->value, node->value);
}

static bpt_status activation_backward(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  if (!x->requires_grad) return BPT_OK;
  return BPT_KERNEL(node, activation_backward, activation_kind(node), node->float_attributes[0], bpt_node_count(node),
                    x->value, node->value, node->grad, x->grad);
}

#define BPT_ACTIVATION_OP(op_name)                                                               \
  const bpt_op_definition bpt_op_##op_name = {.name = #op_name,                                  \
                                              .infer_shape = activation_infer_shape,             \
                                              .forward = activation_forward,                     \
                                              .backward = activation_backward};
BPT_ACTIVATION_OP(leaky_relu)
BPT_ACTIVATION_OP(sigmoid)
BPT_ACTIVATION_OP(tanh)

bpt_status bpt_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_RELU, name, &x, 1, out);
}

bpt_status bpt_leaky_relu(bpt_graph *graph, const char *name, bpt_node *x, float slope, bpt_node **out) {
  if (graph && !isfinite(slope))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "leaky_relu '%s': slope %g must be finite",
                     name ? name : "", (double)slope);
  BPT_CHECK(bpt_graph_add_node(graph, BPT_OP_LEAKY_RELU, name, &x, 1, out));
  (*out)->float_attributes[0] = slope;
  return BPT_OK;
}

bpt_status bpt_sigmoid(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_SIGMOID, name, &x, 1, out);
}

bpt_status bpt_tanh(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_TANH, name, &x, 1, out);
}
