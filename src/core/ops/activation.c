/* Element-wise activations (ReLU, LeakyReLU, sigmoid, tanh): one shape rule and one kernel pair,
 * told apart by op id; the slope of LeakyReLU is float attribute 0. The relu op definition itself
 * lives in relu.c (it keeps a 1-bit mask for backward); its builder stays here with the others. */
#include <math.h>

#include "backends/kernel_args.h"
#include "core/graph.h"

static bpt_status activation_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

/* The kernels tell the activations apart by op id; LeakyReLU's slope is float attribute 0. */
static bpt_status activation_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status activation_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* leaky_relu's slope (any finite value); sigmoid and tanh have no parameters. */
static const bpt_param_decl leaky_relu_parameters[] = {{.name = "slope",
                                                        .type = BPT_OP_VALUE_FLOAT,
                                                        .slot = BPT_LEAKY_RELU_SLOPE,
                                                        .default_value = 0.01,
                                                        .minimum = -INFINITY,
                                                        .maximum = INFINITY}};

#define BPT_ACTIVATION_OP(op_name, ...)                                                                                \
  const bpt_op_definition bpt_op_##op_name = {.name = #op_name,                                                        \
                                              .infer_shape = activation_infer_shape,                                   \
                                              .forward = activation_forward,                                           \
                                              .backward = activation_backward,                                         \
                                              .speculative = BPT_SPECULATIVE_ELEMENTWISE,                              \
                                              .kernels_only = true,                                                    \
                                              __VA_ARGS__};
BPT_ACTIVATION_OP(leaky_relu, BPT_OP_PARAMETERS(leaky_relu_parameters))
BPT_ACTIVATION_OP(sigmoid, .parameters = NULL)
BPT_ACTIVATION_OP(tanh, .parameters = NULL)

bpt_status bpt_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_RELU, name, &x, 1, out);
}

bpt_status bpt_leaky_relu(bpt_graph *graph, const char *name, bpt_node *x, float slope, bpt_node **out) {
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_LEAKY_RELU, name, &x, 1, NULL, 0, &slope, 1, out);
}

bpt_status bpt_sigmoid(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_SIGMOID, name, &x, 1, out);
}

bpt_status bpt_tanh(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_TANH, name, &x, 1, out);
}
