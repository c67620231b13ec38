/* slice: y = x[..., start:start + length, ...] along one axis, counted with the batch as axis 0 (which cannot be
 * sliced). A strided view (the input's strides, start steps further on) where every reader takes strides, such as
 * matmul and the CPU's attention kernels; otherwise a copy, shown in the profile as this node (strided_views.c).
 * The attention block splits a fused qkv projection (N, T, 3C) into q, k and v with three of them. y keeps x's batch and sequence
 * marks (slicing the sequence axis gives a shorter sequence). Backward writes dy into the matching part of dx;
 * with beta 0 (dx unset) the rows outside the slice get 0. Integer attributes: axis, start, length. */
#include "core/graph.h"

enum { SLICE_AXIS, SLICE_START, SLICE_LENGTH };

static bpt_status slice_infer_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  const int64_t axis = node->int_attributes[SLICE_AXIS], start = node->int_attributes[SLICE_START],
                length = node->int_attributes[SLICE_LENGTH];
  char shape[64];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (axis < 0 || axis >= x->rank)
    return bpt_node_error(node, BPT_ERR_SHAPE, "axis %lld is outside input '%s' (%s) of rank %d (the batch is axis 0)",
                          (long long)axis, x->name, bpt_shape_string(x, shape, sizeof shape), x->rank);
  if (x->batched && axis == 0)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' is batched: its batch (axis 0) cannot be sliced", x->name);
  /* start <= dims - length rather than start + length <= dims: no overflow for any int64 the caller passes. */
  if (start < 0 || length < 1 || start > x->dims[axis] - length)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "[%lld, %lld + %lld) is not a non-empty range inside axis %lld of input '%s' (%s)",
                          (long long)start, (long long)start, (long long)length, (long long)axis, x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  node->dims[axis] = length;
  node->batched = x->batched;
  node->sequence = x->sequence;
  node->sequence_axis = x->sequence_axis;
  return BPT_OK;
}

static void slice_strided_view(const bpt_node *node, const int64_t *input_strides, int64_t *strides,
                               int64_t *offset) {
  for (int i = 0; i < node->rank; i++) strides[i] = input_strides[i];
  *offset = node->int_attributes[SLICE_START] * input_strides[node->int_attributes[SLICE_AXIS]];
}

/* A view moves nothing; a copy runs the kernels. */
static bool slice_uses_kernels(const bpt_node *node) { return !node->view_source; }

static bpt_status slice_forward(bpt_node *node) {
  return node->view_source ? BPT_OK : bpt_node_forward_kernels(node);
}

static bpt_status slice_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad || node->view_source) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Checked against the input's shape by the shape rule. */
static const bpt_param_decl slice_parameters[] = {{.name = "axis",
                                                   .type = BPT_OP_VALUE_INT,
                                                   .slot = SLICE_AXIS,
                                                   .minimum = -BPT_OP_ANY_INT,
                                                   .maximum = BPT_OP_ANY_INT},
                                                  {.name = "start",
                                                   .type = BPT_OP_VALUE_INT,
                                                   .slot = SLICE_START,
                                                   .minimum = -BPT_OP_ANY_INT,
                                                   .maximum = BPT_OP_ANY_INT},
                                                  {.name = "length",
                                                   .type = BPT_OP_VALUE_INT,
                                                   .slot = SLICE_LENGTH,
                                                   .minimum = -BPT_OP_ANY_INT,
                                                   .maximum = BPT_OP_ANY_INT}};

const bpt_op_definition bpt_op_slice = {.name = "slice",
                                        .kernels_only = true,
                                        BPT_OP_PARAMETERS(slice_parameters),
                                        .infer_shape = slice_infer_shape,
                                        .forward = slice_forward,
                                        .backward = slice_backward,
                                        .backward_reads_input = bpt_op_reads_no_input,
                                        .backward_reads_output = bpt_op_reads_no_output,
                                        .uses_kernels = slice_uses_kernels,
                                        .overwrites_unset_gradients = true,
                                        .strided_view = slice_strided_view};

bpt_status bpt_slice(bpt_graph *graph, const char *name, bpt_node *x, int axis, int64_t start, int64_t length,
                     bpt_node **out) {
  const int64_t attributes[3] = {axis, start, length};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_SLICE, name, &x, 1, attributes, 3, NULL, 0, out);
}
