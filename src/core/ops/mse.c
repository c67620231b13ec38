/* mse: loss = mean over all elements of (prediction - target)^2. */
#include "core/graph.h"

static bpt_status mse_infer_shape(bpt_node *node) {
  const bpt_node *prediction = node->inputs[0], *target = node->inputs[1];
  if (prediction->dtype != BPT_DTYPE_F32 || target->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "prediction and target must be f32");
  bool same = prediction->batched == target->batched &&
              bpt_node_inner_count(prediction) == bpt_node_inner_count(target);
  if (!same)
    return bpt_node_error(node, BPT_ERR_SHAPE, "prediction '%s' has %lld values per sample, target '%s' has %lld",
                          prediction->name, (long long)bpt_node_inner_count(prediction), target->name,
                          (long long)bpt_node_inner_count(target));
  node->batched = false;
  node->rank = 0;
  return BPT_OK;
}

static bpt_status mse_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status mse_backward(bpt_node *node) { return bpt_node_backward_kernels(node); }

const bpt_op_definition bpt_op_mse = {
    .name = "mse", .infer_shape = mse_infer_shape, .forward = mse_forward, .backward = mse_backward};

bpt_status bpt_mse_loss(bpt_graph *graph, const char *name, bpt_node *prediction, bpt_node *target, bpt_node **out) {
  bpt_node *inputs[2] = {prediction, target};
  return bpt_graph_add_node(graph, BPT_OP_MSE, name, inputs, 2, out);
}
