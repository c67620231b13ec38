/* binary_stochastic: a = 1[u < sigmoid(z)], u ~ U(0, 1) per element and forward pass, or 1[z > 0] in the
 * graph's deterministic mode; backward is a straight-through estimator (int attribute 0): identity,
 * dz = da, or sigmoid-adjusted, dz = da * sigmoid'(z) (Bengio, Leonard & Courville 2013, section 4). */
#include "bptrain/precision.h"
#include "core/graph.h"
#include "base/number_format.h"

static bpt_status binary_stochastic_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

/* A stream per node and forward pass, so two neurons never share uniforms. */
static uint64_t node_seed(const bpt_node *node) {
  uint64_t high = bpt_number_format_random_bits(node->graph->forward_seed, (uint64_t)node->index);
  uint64_t low = bpt_number_format_random_bits(node->graph->forward_seed ^ UINT64_C(0xa0761d6478bd642f),
                                               (uint64_t)node->index);
  return high << 32 | low;
}

static bpt_status binary_stochastic_forward(bpt_node *node) {
  bpt_kernel_node description;
  bpt_node_describe(node, &description);
  description.seed = node_seed(node);
  return bpt_node_run_forward_kernels(node, &description);
}

static bpt_status binary_stochastic_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

static bool binary_stochastic_backward_reads_input(const bpt_node *node, int input) {
  (void)input;
  return node->int_attributes[0] == BPT_STRAIGHT_THROUGH_SIGMOID;
}

static const char *const estimator_names[] = {"identity", "sigmoid"};
static const bpt_param_decl binary_stochastic_parameters[] = {{.name = "estimator",
                                                               .type = BPT_OP_VALUE_ENUM,
                                                               .slot = 0,
                                                               .maximum = BPT_STRAIGHT_THROUGH_SIGMOID,
                                                               .enum_names = estimator_names}};

const bpt_op_definition bpt_op_binary_stochastic = {.name = "binary_stochastic",
                                                    BPT_OP_PARAMETERS(binary_stochastic_parameters),
                                                    .infer_shape = binary_stochastic_infer_shape,
                                                    .forward = binary_stochastic_forward,
                                                    .backward = binary_stochastic_backward,
                                                    .backward_reads_input = binary_stochastic_backward_reads_input,
                                                    .backward_reads_output = bpt_op_reads_no_output};

bpt_status bpt_binary_stochastic(bpt_graph *graph, const char *name, bpt_node *z, bpt_straight_through estimator,
                                 bpt_node **out) {
  const int64_t attributes[1] = {(int64_t)estimator};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_BINARY_STOCHASTIC, name, &z, 1, attributes, 1, NULL, 0, out);
}
