/* add: y = a + b, the join of a residual connection, with NumPy broadcasting (a bias or a position table
 * added to every sample). Backward passes dy to both inputs unchanged, summed over the axes an input was
 * repeated along; a node that also feeds another consumer sums both gradients because every backward after
 * the first writer accumulates. Inputs of one shape run on shared primitives (every backend has them);
 * broadcasting runs on the op's kernels, and so does one shape under 16-bit storage where the backend has
 * them, so that a residual stream can be stored as bf16 (storage.c), or with a strided view for an input
 * (the CPU's kernels read a slice's rows in place).
 *
 * add_relu: y = max(a + b, 0), the join of a ResNet basic block, in one node: the forward keeps one bit per
 * element (y > 0, the relu mask's layout) in node->saved, and backward passes dy through it to both inputs,
 * so neither the sum nor a separate ReLU's buffers exist. add runs on shared primitives; add_relu on its
 * kernels. */
#include "bptrain/cnn.h"
#include "core/graph.h"
#include "core/precision.h"

/* add_relu's rule: one shape (its mask kernels know no broadcasting). */
static bpt_status add_relu_infer_shape(bpt_node *node) {
  bpt_node *a = node->inputs[0], *b = node->inputs[1];
  char shape_a[96], shape_b[96];
  if (a->dtype != BPT_DTYPE_F32 || b->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "inputs '%s' and '%s' must be f32", a->name, b->name);
  bool same = a->batched == b->batched && a->rank == b->rank;
  for (int i = a->batched ? 1 : 0; same && i < a->rank; i++)
    same = a->dims[i] == b->dims[i];
  if (!same)
    return bpt_node_error(node, BPT_ERR_SHAPE, "inputs '%s' (%s) and '%s' (%s) differ in shape", a->name,
                          bpt_shape_string(a, shape_a, sizeof shape_a), b->name,
                          bpt_shape_string(b, shape_b, sizeof shape_b));
  node->batched = a->batched;
  node->sequence = a->sequence;
  node->rank = a->rank;
  for (int i = 0; i < a->rank; i++)
    node->dims[i] = a->dims[i];
  return BPT_OK;
}

static bool add_broadcasts(const bpt_node *node) {
  return bpt_node_broadcasts(node, node->inputs[0]) || bpt_node_broadcasts(node, node->inputs[1]);
}

static bool add_uses_kernels(const bpt_node *node) {
  if (add_broadcasts(node)) return true;
  /* A strided view read in place (strided_views.c let it be one because the kernels take it). */
  if (!bpt_node_contiguous(node->inputs[0]) || !bpt_node_contiguous(node->inputs[1])) return true;
  /* Where the backend has none (CUDA today), the shared primitives and f32 storage stay. */
  return bpt_precision_stores_16bit(node->graph) && bpt_node_supported_on(node, node->graph->backend);
}

/* node->kernels: chosen at compile where add_uses_kernels said so. */
static bpt_status add_forward(bpt_node *node) {
  if (node->kernels) return bpt_node_forward_kernels(node);
  bpt_backend *backend = node->graph->backend;
  int64_t count = bpt_node_count(node);
  if (backend->vtable->copy(backend, node->value, node->inputs[0]->value, (size_t)count * sizeof(float)) != BPT_OK)
    return bpt_kernel_result(node, BPT_ERR_DEVICE, "copy");
  return BPT_KERNEL(node, add_scaled, count, 1.0f, node->inputs[1]->value, node->value);
}

/* An input gradient left unset for this node (see op.h) gets a copy of dy; otherwise dy is added. */
static bpt_status add_backward(bpt_node *node) {
  if (node->kernels) {
    if (!node->inputs[0]->requires_grad && !node->inputs[1]->requires_grad) return BPT_OK;
    return bpt_node_backward_kernels(node);
  }
  int64_t count = bpt_node_count(node);
  bpt_backend *backend = node->graph->backend;
  for (int i = 0; i < 2; i++) {
    bpt_node *input = node->inputs[i];
    if (!input->requires_grad) continue;
    if (!bpt_node_take_unset_gradient(input)) {
      BPT_CHECK(BPT_KERNEL(node, add_scaled, count, 1.0f, node->grad, input->grad));
    } else if (backend->vtable->copy(backend, input->grad, node->grad, (size_t)count * sizeof(float)) != BPT_OK) {
      return bpt_kernel_result(node, BPT_ERR_DEVICE, "copy");
    }
  }
  return BPT_OK;
}

/* kernels_only: where it has kernels, it touches its tensors through them alone. */
const bpt_op_definition bpt_op_add = {.name = "add",
                                      .kernels_only = true,
                                      .infer_shape = bpt_node_infer_broadcast_shape,
                                      .forward = add_forward,
                                      .backward = add_backward,
                                      .backward_reads_input = bpt_op_reads_no_input,
                                      .backward_reads_output = bpt_op_reads_no_output,
                                      .overwrites_unset_gradients = true,
                                      .uses_kernels = add_uses_kernels};

static size_t add_relu_saved_bytes(const bpt_node *node) {
  return (size_t)(bpt_node_inner_count(node) * (node->batched ? node->graph->max_batch : 1) + 7) / 8;
}

static bpt_status add_relu_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status add_relu_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad && !node->inputs[1]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

const bpt_op_definition bpt_op_add_relu = {.name = "add_relu",
                                           .kernels_only = true,
                                           .infer_shape = add_relu_infer_shape,
                                           .saved_bytes = add_relu_saved_bytes,
                                           .forward = add_relu_forward,
                                           .backward = add_relu_backward,
                                           .backward_reads_input = bpt_op_reads_no_input,
                                           .backward_reads_output = bpt_op_reads_no_output,
                                           .overwrites_unset_gradients = true};

bpt_status bpt_add(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out) {
  bpt_node *inputs[2] = {a, b};
  return bpt_graph_add_node(graph, BPT_OP_ADD, name, inputs, 2, out);
}

bpt_status bpt_add_relu(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out) {
  bpt_node *inputs[2] = {a, b};
  return bpt_graph_add_node(graph, BPT_OP_ADD_RELU, name, inputs, 2, out);
}
