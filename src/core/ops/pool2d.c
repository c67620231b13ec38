/* max_pool2d and avg_pool2d over NCHW: one shape rule and one kernel pair, told apart by op id.
 * Integer attributes: kernel (0, 1), stride (2, 3), padding (4, 5). Max pooling keeps the winning index of
 * every output (int32, in node->saved) so backward routes each gradient to exactly one input. */
#include "backends/kernel_args.h"
#include "bptrain/cnn.h"
#include "core/checked.h"
#include "core/graph.h"

enum {
  KERNEL_H = BPT_POOL2D_KERNEL_H,
  KERNEL_W = BPT_POOL2D_KERNEL_W,
  STRIDE_H = BPT_POOL2D_STRIDE_H,
  STRIDE_W = BPT_POOL2D_STRIDE_W,
  PADDING_H = BPT_POOL2D_PADDING_H,
  PADDING_W = BPT_POOL2D_PADDING_W
};

/* The shape rule also bounds each padding by half its kernel. */
#define POOL2D_PARAMETER(text, index, low)                                                                             \
  {                                                                                                                    \
    .name = text, .type = BPT_OP_VALUE_INT, .slot = index, .default_value = low, .minimum = low,                       \
    .maximum = BPT_MAX_DIM                                                                                             \
  }
static const bpt_param_decl pool2d_parameters[] = {
    POOL2D_PARAMETER("kernel_height", KERNEL_H, 1),   POOL2D_PARAMETER("kernel_width", KERNEL_W, 1),
    POOL2D_PARAMETER("stride_height", STRIDE_H, 1),   POOL2D_PARAMETER("stride_width", STRIDE_W, 1),
    POOL2D_PARAMETER("padding_height", PADDING_H, 0), POOL2D_PARAMETER("padding_width", PADDING_W, 0)};

static bpt_status pool2d_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  const int64_t *a = node->int_attributes;
  char shape[96];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (!x->batched || x->rank != 4)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has shape %s; expected (N, C, H, W)", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  /* Each attribute at most BPT_MAX_DIM first, so that the sums below stay far inside int64_t. */
  if (a[KERNEL_H] < 1 || a[KERNEL_W] < 1 || a[STRIDE_H] < 1 || a[STRIDE_W] < 1 || a[PADDING_H] < 0 ||
      a[PADDING_W] < 0 || a[KERNEL_H] > BPT_MAX_DIM || a[KERNEL_W] > BPT_MAX_DIM || a[STRIDE_H] > BPT_MAX_DIM ||
      a[STRIDE_W] > BPT_MAX_DIM || a[PADDING_H] > a[KERNEL_H] / 2 || a[PADDING_W] > a[KERNEL_W] / 2)
    return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT,
                          "kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld: kernel and stride must be in "
                          "[1, 2^31 - 1], padding in [0, kernel / 2]",
                          (long long)a[KERNEL_H], (long long)a[KERNEL_W], (long long)a[STRIDE_H],
                          (long long)a[STRIDE_W], (long long)a[PADDING_H], (long long)a[PADDING_W]);
  const int64_t height = x->dims[2] + 2 * a[PADDING_H] - a[KERNEL_H],
                width = x->dims[3] + 2 * a[PADDING_W] - a[KERNEL_W];
  if (height < 0 || width < 0)
    return bpt_node_error(node, BPT_ERR_SHAPE, "a %lldx%lld window does not fit the %lldx%lld input",
                          (long long)a[KERNEL_H], (long long)a[KERNEL_W], (long long)x->dims[2], (long long)x->dims[3]);
  /* Max pooling keeps each winner's index in its input plane as int32. */
  if (x->dims[2] * x->dims[3] > BPT_MAX_DIM || x->dims[2] + 2 * a[PADDING_H] > BPT_MAX_DIM ||
      x->dims[3] + 2 * a[PADDING_W] > BPT_MAX_DIM)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "the %lldx%lld input plane (padding %lldx%lld) exceeds the pooling kernels' 2^31 - 1 limit",
                          (long long)x->dims[2], (long long)x->dims[3], (long long)a[PADDING_H],
                          (long long)a[PADDING_W]);
  node->batched = true;
  node->rank = 4;
  node->dims[0] = x->dims[0];
  node->dims[1] = x->dims[1];
  node->dims[2] = height / a[STRIDE_H] + 1;
  node->dims[3] = width / a[STRIDE_W] + 1;
  return BPT_OK;
}

static size_t max_pool2d_saved_bytes(const bpt_node *node) {
  return (size_t)bpt_node_inner_count(node) * (size_t)node->graph->max_batch * sizeof(int32_t);
}

static bpt_status pool2d_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status pool2d_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Speculative backprop reads sample 0's int32 winner per output, at the start of saved. */
static size_t max_pool2d_sample_saved_bytes(const bpt_node *node) {
  return (size_t)bpt_node_inner_count(node) * sizeof(int32_t);
}

const bpt_op_definition bpt_op_max_pool2d = {.name = "max_pool2d",
                                             .kernels_only = true,
                                             BPT_OP_PARAMETERS(pool2d_parameters),
                                             .infer_shape = pool2d_infer_shape,
                                             .saved_bytes = max_pool2d_saved_bytes,
                                             .forward = pool2d_forward,
                                             .backward = pool2d_backward,
                                             .backward_reads_input = bpt_op_reads_no_input,
                                             .backward_reads_output = bpt_op_reads_no_output,
                                             .speculative = BPT_SPECULATIVE_KERNELS,
                                             .speculative_saved_bytes = max_pool2d_sample_saved_bytes};
const bpt_op_definition bpt_op_avg_pool2d = {.name = "avg_pool2d",
                                             .kernels_only = true,
                                             BPT_OP_PARAMETERS(pool2d_parameters),
                                             .infer_shape = pool2d_infer_shape,
                                             .forward = pool2d_forward,
                                             .backward = pool2d_backward,
                                             .backward_reads_input = bpt_op_reads_no_input,
                                             .backward_reads_output = bpt_op_reads_no_output,
                                             .speculative = BPT_SPECULATIVE_KERNELS};

static bpt_status add_pool(bpt_graph *graph, bpt_op_id op, const char *name, bpt_node *x, int64_t kernel,
                           int64_t stride, int64_t padding, bpt_node **out) {
  const int64_t attributes[] = {kernel, kernel, stride, stride, padding, padding};
  return bpt_graph_add_node_with_attributes(graph, op, name, &x, 1, attributes, 6, NULL, 0, out);
}

bpt_status bpt_max_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                          int64_t padding, bpt_node **out) {
  return add_pool(graph, BPT_OP_MAX_POOL2D, name, x, kernel, stride, padding, out);
}

bpt_status bpt_avg_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                          int64_t padding, bpt_node **out) {
  return add_pool(graph, BPT_OP_AVG_POOL2D, name, x, kernel, stride, padding, out);
}
