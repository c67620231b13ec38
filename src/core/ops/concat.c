/* concat: y = the inputs joined along one axis, counted with the batch as axis 0 (which cannot be joined), in
 * input order; every other axis must agree. Up to BPT_MAX_INPUTS (5) inputs, all batched or all not; y keeps
 * input 0's batch and sequence marks (joining along the sequence axis gives a longer sequence). A copy (values
 * carry no strides yet). Backward hands each input its part of dy (overwriting an unset gradient, else adding);
 * an input given twice gets both parts, the second added to the first. Integer attribute 0: the axis. */
#include "core/graph.h"

static bpt_status concat_infer_shape(bpt_node *node) {
  const bpt_node *first = node->inputs[0];
  const int64_t axis = node->int_attributes[0];
  char shape[64], other[64];
  if (axis < 0 || axis >= first->rank)
    return bpt_node_error(node, BPT_ERR_SHAPE, "axis %lld is outside input '%s' (%s) of rank %d (the batch is axis 0)",
                          (long long)axis, first->name, bpt_shape_string(first, shape, sizeof shape), first->rank);
  if (first->batched && axis == 0)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "input '%s' is batched: values cannot be joined along the batch (axis 0)", first->name);
  int64_t extent = 0;
  for (int i = 0; i < node->input_count; i++) {
    const bpt_node *x = node->inputs[i];
    if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
    bool same = x->rank == first->rank && x->batched == first->batched;
    for (int d = 0; same && d < x->rank; d++)
      same = d == axis || x->dims[d] == first->dims[d];
    if (!same)
      return bpt_node_error(node, BPT_ERR_SHAPE, "inputs '%s' (%s) and '%s' (%s) differ in an axis other than %lld",
                            first->name, bpt_shape_string(first, shape, sizeof shape), x->name,
                            bpt_shape_string(x, other, sizeof other), (long long)axis);
    extent += x->dims[axis]; /* at most 5 dims of at most BPT_MAX_DIM: no overflow; check_shape bounds the sum */
  }
  node->rank = first->rank;
  for (int d = 0; d < first->rank; d++)
    node->dims[d] = first->dims[d];
  node->dims[axis] = extent;
  node->batched = first->batched;
  node->sequence = first->sequence;
  return BPT_OK;
}

static bpt_status concat_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status concat_backward(bpt_node *node) {
  bool any = false;
  for (int i = 0; i < node->input_count; i++)
    any |= node->inputs[i]->requires_grad;
  return any ? bpt_node_backward_kernels(node) : BPT_OK;
}

/* The axis is checked against the inputs' rank by the shape rule. */
static const bpt_param_decl concat_parameters[] = {
    {.name = "axis", .type = BPT_OP_VALUE_INT, .slot = 0, .minimum = -BPT_OP_ANY_INT, .maximum = BPT_OP_ANY_INT}};

const bpt_op_definition bpt_op_concat = {.name = "concat",
                                         .kernels_only = true,
                                         BPT_OP_PARAMETERS(concat_parameters),
                                         .infer_shape = concat_infer_shape,
                                         .forward = concat_forward,
                                         .backward = concat_backward,
                                         .backward_reads_input = bpt_op_reads_no_input,
                                         .backward_reads_output = bpt_op_reads_no_output,
                                         .overwrites_unset_gradients = true};

bpt_status bpt_concat(bpt_graph *graph, const char *name, int count, bpt_node *const *inputs, int axis,
                      bpt_node **out) {
  if (out) *out = NULL;
  if (count < 1 || count > BPT_MAX_INPUTS || !inputs)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT,
                     "concat '%s': %d inputs given; between 1 and %d, in a non-NULL array", name ? name : "", count,
                     BPT_MAX_INPUTS);
  const int64_t attributes[1] = {axis};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_CONCAT, name, inputs, count, attributes, 1, NULL, 0, out);
}
