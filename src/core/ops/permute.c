/* permute: the axes of x in a new order, y.dims[i] = x.dims[axes[i]] over the whole shape, the batch staying
 * axis 0: (N, T, H, D) -> (N, H, T, D) splits attention heads, the inverse order merges them. A strided view
 * (the input's strides in the new order) where every reader takes strides, such as matmul; otherwise a copy,
 * shown in the profile as this node (strided_views.c). The copy's backward routes dy back through the inverse
 * order; every dx element has exactly one source, so nothing is summed. Integer attribute 0 is the rank, 1.. the
 * axes. */
#include "core/graph.h"

static bpt_status permute_infer_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  const int64_t rank = node->int_attributes[0];
  const int64_t *axes = node->int_attributes + 1;
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (rank != x->rank)
    return bpt_node_error(node, BPT_ERR_SHAPE, "%lld axes given for input '%s' of rank %d (the batch counts as axis 0)",
                          (long long)rank, x->name, x->rank);
  bool seen[BPT_MAX_RANK] = {false};
  for (int i = 0; i < x->rank; i++) {
    if (axes[i] < 0 || axes[i] >= x->rank || seen[axes[i]])
      return bpt_node_error(node, BPT_ERR_SHAPE, "axes must be a permutation of 0..%d; axis %d is %lld", x->rank - 1, i,
                            (long long)axes[i]);
    seen[axes[i]] = true;
    node->dims[i] = x->dims[axes[i]];
  }
  if (x->batched && axes[0] != 0)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' is batched: its batch (axis 0) must stay axis 0", x->name);
  node->rank = x->rank;
  node->batched = x->batched;
  for (int i = 1; i < x->rank; i++)
    if (x->sequence_axis && axes[i] == x->sequence_axis) node->sequence_axis = i;
  node->sequence = node->sequence_axis == 1;
  return BPT_OK;
}

static void permute_strided_view(const bpt_node *node, const int64_t *input_strides, int64_t *strides,
                                 int64_t *offset) {
  for (int i = 0; i < node->rank; i++) strides[i] = input_strides[node->int_attributes[1 + i]];
  *offset = 0;
}

/* A view moves nothing; a copy runs the kernels. */
static bool permute_uses_kernels(const bpt_node *node) { return !node->view_source; }

static bpt_status permute_forward(bpt_node *node) {
  return node->view_source ? BPT_OK : bpt_node_forward_kernels(node);
}

static bpt_status permute_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad || node->view_source) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* rank axes in slots 1 .. rank, the rest 0; the shape rule checks them against the input. */
static const bpt_param_decl permute_parameters[] = {
    {.name = "rank", .type = BPT_OP_VALUE_INT, .slot = 0, .minimum = -BPT_OP_ANY_INT, .maximum = BPT_OP_ANY_INT},
    {.name = "axes",
     .type = BPT_OP_VALUE_INT,
     .slot = 1,
     .length = BPT_MAX_RANK,
     .minimum = -BPT_OP_ANY_INT,
     .maximum = BPT_OP_ANY_INT}};

const bpt_op_definition bpt_op_permute = {.name = "permute",
                                          .kernels_only = true,
                                          BPT_OP_PARAMETERS(permute_parameters),
                                          .infer_shape = permute_infer_shape,
                                          .forward = permute_forward,
                                          .backward = permute_backward,
                                          .backward_reads_input = bpt_op_reads_no_input,
                                          .backward_reads_output = bpt_op_reads_no_output,
                                          .uses_kernels = permute_uses_kernels,
                                          .overwrites_unset_gradients = true,
                                          .strided_view = permute_strided_view};

bpt_status bpt_permute(bpt_graph *graph, const char *name, bpt_node *x, int rank, const int64_t *axes, bpt_node **out) {
  int64_t attributes[BPT_MAX_RANK + 1] = {rank};
  if (out) *out = NULL;
  if (rank < 1 || rank > BPT_MAX_RANK || !axes)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_permute: rank %d must be in [1, %d] with non-NULL axes", rank, BPT_MAX_RANK);
  for (int i = 0; i < rank; i++)
    attributes[1 + i] = axes[i];
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_PERMUTE, name, &x, 1, attributes, rank + 1, NULL, 0, out);
}
