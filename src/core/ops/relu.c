/* relu: y = max(x, 0). Backward only needs to know where x was positive, so the forward keeps one bit per
 * element in node->saved and neither x nor y has to stay in memory for backward (32x less than an f32 copy);
 * the backward skips masked-out elements. Backends without the mask kernels fall back to reading x. */
#include "core/graph.h"

static bool has_mask_kernels(const bpt_node *node) {
  const bpt_backend_vtable *vtable = node->graph->backend->vtable;
  return vtable->relu_mask_forward && vtable->relu_mask_backward;
}

static bpt_status relu_infer_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  node->batched = x->batched;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  return BPT_OK;
}

static size_t relu_saved_bytes(const bpt_node *node) {
  if (!node->requires_grad || !has_mask_kernels(node)) return 0;
  int64_t count = bpt_node_inner_count(node) * (node->batched ? node->graph->max_batch : 1);
  return (size_t)(count + 7) / 8;
}

static bpt_status relu_forward(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  if (node->saved) return BPT_KERNEL(node, relu_mask_forward, bpt_node_count(node), x->value, node->value, node->saved);
  return BPT_KERNEL(node, activation_forward, BPT_ACTIVATION_RELU, 0.0f, bpt_node_count(node), x->value, node->value);
}

static bpt_status relu_backward(bpt_node *node) {
  bpt_node *x = node->inputs[0];
  if (!x->requires_grad) return BPT_OK;
  if (node->saved)
    return BPT_KERNEL(node, relu_mask_backward, bpt_node_count(node), node->saved, node->grad, x->grad,
                      bpt_node_take_unset_gradient(x));
  BPT_CHECK(bpt_node_clear_unset_gradient(x));
  return BPT_KERNEL(node, activation_backward, BPT_ACTIVATION_RELU, 0.0f, bpt_node_count(node), x->value, node->value,
                    node->grad, x->grad);
}

static bool relu_backward_reads_input(const bpt_node *node, int input) {
  (void)input;
  return !has_mask_kernels(node);
}

static bool relu_backward_reads_output(const bpt_node *node) {
  (void)node;
  return false;
}

const bpt_op_definition bpt_op_relu = {.name = "relu",
                                       .infer_shape = relu_infer_shape,
                                       .saved_bytes = relu_saved_bytes,
                                       .forward = relu_forward,
                                       .backward = relu_backward,
                                       .backward_reads_input = relu_backward_reads_input,
                                       .backward_reads_output = relu_backward_reads_output,
                                       .overwrites_unset_gradients = true};
