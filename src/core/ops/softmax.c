/* softmax: y = exp(x - max) / sum exp(x - max) over the last axis (PyTorch's F.softmax(x, dim=-1)). Integer
 * attribute 0 is the causal flag: element (i, j) of the last two axes (Tq, Tk) is masked (y = 0) where
 * j > i + (Tk - Tq), the bottom-right alignment of attention over a cache of past keys; a row with every
 * element masked (or every element -inf) is all zeros, not NaN. Backward reads y only:
 *   dx = beta dx + y (dy - sum_j dy_j y_j),
 * exact for masked elements too (their y is 0), and can overwrite an unset gradient. */
#include "core/graph.h"

enum { SOFTMAX_CAUSAL = 0 };

static bpt_status softmax_infer_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  char shape[96];
  BPT_CHECK(bpt_node_infer_elementwise_shape(node));
  const int per_sample = x->rank - (x->batched ? 1 : 0);
  /* Normalising over the batch would mix samples; a mask's rows are per-sample positions, not samples. */
  if (per_sample < 1)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' (%s) has no per-sample axis to normalise over", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  if (node->int_attributes[SOFTMAX_CAUSAL] && per_sample < 2)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "a causal mask needs two per-sample axes (rows, columns); input '%s' is %s", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  return BPT_OK;
}

static bpt_status softmax_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status softmax_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Forward: max, exp, sum, scale (about 4 flops and one exp per element); backward: dot and update (4). */
static void softmax_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const double count = (double)bpt_node_count(node);
  *flops = 4.0 * count;
  *bytes = 4.0 * (backward ? 3.0 * count : 2.0 * count);
}

static const bpt_param_decl softmax_parameters[] = {
    {.name = "causal", .type = BPT_OP_VALUE_BOOL, .slot = SOFTMAX_CAUSAL, .maximum = 1}};

const bpt_op_definition bpt_op_softmax = {.name = "softmax",
                                          .kernels_only = true,
                                          BPT_OP_PARAMETERS(softmax_parameters),
                                          .infer_shape = softmax_infer_shape,
                                          .forward = softmax_forward,
                                          .backward = softmax_backward,
                                          .backward_reads_input = bpt_op_reads_no_input,
                                          .cost = softmax_cost,
                                          .overwrites_unset_gradients = true};

bpt_status bpt_softmax(bpt_graph *graph, const char *name, bpt_node *x, int causal, bpt_node **out) {
  const int64_t attributes[1] = {causal != 0};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_SOFTMAX, name, &x, 1, attributes, 1, NULL, 0, out);
}
