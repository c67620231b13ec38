/* reshape and flatten: the same values under a new per-sample shape. Integer attribute 0 is the new
 * per-sample rank, 1.. the dims. A view (view_of_input): the node shares its input's value and gradient
 * buffers, so forward and backward move nothing; of a strided view too where strides can express the new
 * shape (strided_views.c), else that input is a copy. */
#include "bptrain/cnn.h"
#include "core/checked.h"
#include "core/graph.h"

/* The new per-sample axis (index into dims) that is x's sequence axis, whole and after the same element count, as
 * declared; -1 when there is none (the sequence merged with other axes or split). */
static int axis_along_sequence(const bpt_node *x, const int64_t *dims, int rank) {
  if (!x->sequence_axis) return -1;
  int64_t before = 1, new_before = 1;
  for (int i = 1; i < x->sequence_axis; i++) before *= x->declared_dims[i];
  for (int k = 0; k < rank && new_before <= before; new_before *= dims[k], k++)
    if (new_before == before && dims[k] == x->declared_dims[x->sequence_axis]) return k;
  return -1;
}

static bpt_status reshape_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  const int64_t rank = node->int_attributes[0];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (!x->batched) return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has no batch dimension", x->name);
  if (rank < 1 || rank > BPT_MAX_RANK - 1)
    return bpt_node_error(node, BPT_ERR_SHAPE, "rank %lld is outside [1, %d]", (long long)rank, BPT_MAX_RANK - 1);
  for (int64_t i = 0; i < rank; i++)
    if (node->int_attributes[1 + i] < 1 || node->int_attributes[1 + i] > BPT_MAX_DIM)
      return bpt_node_error(node, BPT_ERR_SHAPE, "dimension %lld is %lld, must be in [1, 2^31 - 1]", (long long)i,
                            (long long)node->int_attributes[1 + i]);
  /* (N, T, C) -> (N, T, H, D) keeps T a sequence axis: per-token ops still map over it, and a run's shorter
   * sequence (sequence_length.c) is reshaped at its own length. */
  int64_t dims[BPT_MAX_RANK];
  for (int64_t i = 0; i < rank; i++) dims[i] = node->int_attributes[1 + i];
  const int along = axis_along_sequence(x, dims, (int)rank);
  if (along >= 0) dims[along] = x->dims[x->sequence_axis];
  node->sequence = along == 0;
  node->sequence_axis = along >= 0 ? along + 1 : 0;
  /* A product that wraps could equal the input's count: bound it instead. */
  int64_t count;
  if (!bpt_checked_product(dims, (int)rank, BPT_MAX_ELEMENTS, &count))
    return bpt_node_error(node, BPT_ERR_SHAPE, "the new shape has more than 2^40 values per sample; input '%s' has %lld",
                          x->name, (long long)bpt_node_inner_count(x));
  if (count != bpt_node_inner_count(x))
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has %lld values per sample, the new shape %lld", x->name,
                          (long long)bpt_node_inner_count(x), (long long)count);
  node->batched = true;
  node->rank = (int)rank + 1;
  node->dims[0] = x->dims[0];
  for (int64_t i = 0; i < rank; i++) node->dims[1 + i] = dims[i];
  return BPT_OK;
}

/* The values and, in backward, the gradient are already in place: the node's buffers are its input's. */
static bpt_status reshape_forward(bpt_node *node) {
  (void)node;
  return BPT_OK;
}

static bpt_status reshape_backward(bpt_node *node) {
  (void)node;
  return BPT_OK;
}

/* rank per-sample dims in slots 1 .. rank, the rest 0; the shape rule checks them (BPT_ERR_SHAPE). */
static const bpt_param_decl reshape_parameters[] = {
    {.name = "rank", .type = BPT_OP_VALUE_INT, .slot = 0, .minimum = -BPT_OP_ANY_INT, .maximum = BPT_OP_ANY_INT},
    {.name = "dims",
     .type = BPT_OP_VALUE_INT,
     .slot = 1,
     .length = BPT_MAX_RANK - 1,
     .minimum = -BPT_OP_ANY_INT,
     .maximum = BPT_OP_ANY_INT}};

const bpt_op_definition bpt_op_reshape = {.name = "reshape",
                                          BPT_OP_PARAMETERS(reshape_parameters),
                                          .infer_shape = reshape_infer_shape,
                                          .forward = reshape_forward,
                                          .backward = reshape_backward,
                                          .backward_reads_input = bpt_op_reads_no_input,
                                          .backward_reads_output = bpt_op_reads_no_output,
                                          .uses_kernels = bpt_op_uses_no_kernels,
                                          .speculative = BPT_SPECULATIVE_VIEW,
                                          .view_of_input = true};

bpt_status bpt_reshape(bpt_graph *graph, const char *name, bpt_node *x, int rank, const int64_t *dims, bpt_node **out) {
  int64_t attributes[BPT_MAX_RANK] = {rank};
  if (rank < 1 || rank > BPT_MAX_RANK - 1 || !dims)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_reshape: rank %d must be in [1, %d] with non-NULL dims", rank, BPT_MAX_RANK - 1);
  for (int i = 0; i < rank; i++)
    attributes[1 + i] = dims[i];
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_RESHAPE, name, &x, 1, attributes, rank + 1, NULL, 0, out);
}

bpt_status bpt_flatten(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  if (!x) return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_flatten: x is NULL");
  int64_t features = bpt_node_inner_count(x);
  return bpt_reshape(graph, name, x, 1, &features, out);
}
