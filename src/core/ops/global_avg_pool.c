/* global_avg_pool: (N, C, H, W) -> (N, C), the mean of each channel's plane. It runs as an average pool
 * whose window is the whole plane: backends register their pooling kernels for it too. */
#include "bptrain/cnn.h"
#include "core/checked.h"
#include "core/graph.h"

static bpt_status global_avg_pool_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  char shape[96];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (!x->batched || x->rank != 4)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has shape %s; expected (N, C, H, W)", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  /* Its window is the whole plane: the pooling kernels take plane sizes that fit int32. */
  if (x->dims[2] * x->dims[3] > BPT_MAX_DIM)
    return bpt_node_error(node, BPT_ERR_SHAPE, "the %lldx%lld input plane exceeds the pooling kernels' 2^31 - 1 limit",
                          (long long)x->dims[2], (long long)x->dims[3]);
  node->batched = true;
  node->rank = 2;
  node->dims[0] = x->dims[0];
  node->dims[1] = x->dims[1];
  return BPT_OK;
}

static bpt_status global_avg_pool_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status global_avg_pool_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

const bpt_op_definition bpt_op_global_avg_pool = {.name = "global_avg_pool",
                                                  .kernels_only = true,
                                                  .infer_shape = global_avg_pool_infer_shape,
                                                  .forward = global_avg_pool_forward,
                                                  .backward = global_avg_pool_backward,
                                                  .backward_reads_input = bpt_op_reads_no_input,
                                                  .backward_reads_output = bpt_op_reads_no_output};

bpt_status bpt_global_avg_pool(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out) {
  return bpt_graph_add_node(graph, BPT_OP_GLOBAL_AVG_POOL, name, &x, 1, out);
}
