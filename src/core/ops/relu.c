/* relu: y = max(x, 0). Backward only needs to know where x was positive, so the forward keeps one bit per
 * element in node->saved and neither x nor y has to stay in memory for backward (32x less than an f32 copy);
 * the backward skips masked-out elements. On a backend whose relu kernels keep no mask (fpga-sim), x is read. */
#include "backends/kernel_args.h"
#include "core/graph.h"

enum { USES_MASK }; /* int state 0, handed to the kernels as their attribute BPT_RELU_USES_MASK */

/* relu has no parameters. Whether it keeps the mask is chosen at compile from the backend (configure), so a
 * checkpoint records it but a load does not impose it on another backend. */
static const bpt_state_decl relu_state[] = {{.name = "uses_mask",
                                             .type = BPT_OP_VALUE_BOOL,
                                             .slot = USES_MASK,
                                             .kernel_slot = BPT_RELU_USES_MASK,
                                             .restored = false}};

static bool uses_mask(const bpt_node *node) { return node->int_state[USES_MASK] != 0; }

/* The mask where the backend's kernels keep one, reading x otherwise (fpga-sim). */
static void relu_configure(bpt_node *node) {
  node->int_state[USES_MASK] = 1;
  if (!bpt_node_supported_on(node, node->graph->backend)) node->int_state[USES_MASK] = 0;
}

static bpt_status relu_infer_shape(bpt_node *node) { return bpt_node_infer_elementwise_shape(node); }

static size_t relu_saved_bytes(const bpt_node *node) {
  if (!node->requires_grad || !uses_mask(node)) return 0;
  int64_t count = bpt_node_inner_count(node) * (node->batched ? node->graph->max_batch : 1);
  return (size_t)(count + 7) / 8;
}

static bpt_status relu_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status relu_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

static bool relu_backward_reads_input(const bpt_node *node, int input) {
  (void)input;
  return !uses_mask(node);
}

static bool relu_backward_reads_output(const bpt_node *node) {
  (void)node;
  return false;
}

const bpt_op_definition bpt_op_relu = {.name = "relu",
                                       BPT_OP_STATE(relu_state),
                                       .infer_shape = relu_infer_shape,
                                       .saved_bytes = relu_saved_bytes,
                                       .forward = relu_forward,
                                       .backward = relu_backward,
                                       .backward_reads_input = relu_backward_reads_input,
                                       .backward_reads_output = relu_backward_reads_output,
                                       .overwrites_unset_gradients = true,
                                       .speculative = BPT_SPECULATIVE_ELEMENTWISE,
                                       .configure = relu_configure};
