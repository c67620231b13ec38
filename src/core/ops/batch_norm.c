/* batch_norm: per-channel normalisation of x (N, C, ...) with trainable gamma, beta (C) and buffers of the
 * running mean and variance (C). Float attributes: momentum (0), epsilon (1). Training mode normalises with
 * the batch's statistics (saving mean and 1/std per channel for backward); evaluation mode with the running
 * ones. A batch norm folded into its convolution (fold.c) shares the convolution's output and does nothing.
 *
 * batch_norm_relu is the same op followed by ReLU, in one node: the separate ReLU's pass over the activations
 * in each direction, and its output buffer, go away. A bit per element (after the statistics in node->saved)
 * records y > 0 for backward. Backends that fuse it (fuses_batch_norm_relu) apply the ReLU inside their
 * normalising pass and mask dy inside their gradient passes; for the others the ReLU runs in place on y, and
 * in backward in place on dy, this node's own gradient, which nothing reads after this node's backward. */
#include "bptrain/cnn.h"
#include "core/graph.h"

enum { FOLDED };

static bpt_status batch_norm_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0], *gamma = node->inputs[1], *beta = node->inputs[2];
  char shape[96];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  if (!x->batched || x->rank < 2)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has shape %s; expected (N, C) or (N, C, H, W)", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  const int64_t channels = x->dims[1];
  if (gamma->batched || beta->batched || bpt_node_inner_count(gamma) != channels ||
      bpt_node_inner_count(beta) != channels)
    return bpt_node_error(node, BPT_ERR_SHAPE, "gamma '%s' and beta '%s' must have %lld values (the input's channels)",
                          gamma->name, beta->name, (long long)channels);
  for (int i = 3; i < 5; i++) {
    const bpt_node *running = node->inputs[i];
    if (running->batched || running->requires_grad || bpt_node_inner_count(running) != channels)
      return bpt_node_error(
          node, BPT_ERR_SHAPE,
          "running statistics '%s' must be a buffer of %lld values made with bpt_graph_nontrainable_parameter()",
          running->name, (long long)channels);
  }
  const float momentum = node->float_attributes[0], epsilon = node->float_attributes[1];
  if (!(momentum > 0.0f && momentum <= 1.0f) || !(epsilon > 0.0f))
    return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT, "momentum %g must be in (0, 1] and epsilon %g > 0",
                          (double)momentum, (double)epsilon);
  node->batched = true;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  return BPT_OK;
}

static bool fused_relu(const bpt_node *node) { return node->op == BPT_OP_BATCH_NORM_RELU; }

static int64_t mask_row_bytes(const bpt_node *node) { return (bpt_node_inner_count(node) / node->dims[1] + 7) / 8; }

/* The statistics, then for batch_norm_relu the mask: the fusing backends' layout (a whole number of bytes per
 * (n, c) row, see bpt_batch_norm_args) holds at least as many bytes as relu_mask_forward's flat one. */
static size_t batch_norm_saved_bytes(const bpt_node *node) {
  size_t bytes = 2 * (size_t)node->dims[1] * sizeof(float);
  if (fused_relu(node)) bytes += (size_t)(node->graph->max_batch * node->dims[1] * mask_row_bytes(node));
  return bytes;
}

static uint8_t *relu_mask(const bpt_node *node) { return (uint8_t *)((float *)node->saved + 2 * node->dims[1]); }

static bool backend_fuses_relu(const bpt_node *node) { return node->graph->backend->vtable->fuses_batch_norm_relu; }

static bpt_batch_norm_args batch_norm_args(const bpt_node *node) {
  return (bpt_batch_norm_args){.batch = node->graph->batch,
                               .channels = node->dims[1],
                               .spatial = bpt_node_inner_count(node) / node->dims[1],
                               .epsilon = node->float_attributes[1],
                               .momentum = node->float_attributes[0],
                               .training = !node->graph->evaluation};
}

static bpt_status batch_norm_forward(bpt_node *node) {
  const int64_t count = bpt_node_count(node);
  if (node->int_attributes[FOLDED])
    return fused_relu(node)
               ? BPT_KERNEL(node, activation_forward, BPT_ACTIVATION_RELU, 0.0f, count, node->value, node->value)
               : BPT_OK;
  bpt_node *x = node->inputs[0], *gamma = node->inputs[1], *beta = node->inputs[2];
  bpt_batch_norm_args args = batch_norm_args(node);
  const bool fused_in_backend = fused_relu(node) && backend_fuses_relu(node);
  if (fused_in_backend) args.relu_mask = relu_mask(node);
  float *saved = node->saved;
  BPT_CHECK(BPT_KERNEL(node, batch_norm_forward, &args, x->value, gamma->value, beta->value, node->inputs[3]->value,
                       node->inputs[4]->value, node->value, saved, saved + args.channels));
  if (!fused_relu(node) || fused_in_backend) return BPT_OK;
  return BPT_KERNEL(node, relu_mask_forward, count, node->value, node->value, relu_mask(node));
}

static bpt_status batch_norm_backward(bpt_node *node) {
  bpt_node *x = node->inputs[0], *gamma = node->inputs[1], *beta = node->inputs[2];
  if (node->graph->evaluation)
    return bpt_node_error(node, BPT_ERR_STATE,
                          "backward after an evaluation-mode forward; call bpt_graph_set_training(graph, 1) first");
  bpt_batch_norm_args args = batch_norm_args(node);
  if (fused_relu(node) && backend_fuses_relu(node)) {
    args.relu_mask = relu_mask(node);
  } else if (fused_relu(node)) {
    BPT_CHECK(
        BPT_KERNEL(node, relu_mask_backward, bpt_node_count(node), relu_mask(node), node->grad, node->grad, true));
  }
  args.assign_input_gradient = x->requires_grad && bpt_node_take_unset_gradient(x);
  const float *saved = node->saved;
  return BPT_KERNEL(node, batch_norm_backward, &args, x->value, node->grad, gamma->value, saved, saved + args.channels,
                    x->requires_grad ? x->grad : NULL, gamma->requires_grad ? gamma->grad : NULL,
                    beta->requires_grad ? beta->grad : NULL);
}

/* Activation memory: backward reads x and gamma (with the saved statistics), never y. */
static bool batch_norm_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input < 2;
}

const bpt_op_definition bpt_op_batch_norm = {.name = "batch_norm",
                                             .infer_shape = batch_norm_infer_shape,
                                             .saved_bytes = batch_norm_saved_bytes,
                                             .forward = batch_norm_forward,
                                             .backward = batch_norm_backward,
                                             .backward_reads_input = batch_norm_reads_input,
                                             .backward_reads_output = bpt_op_reads_no_output,
                                             .overwrites_unset_gradients = true};

const bpt_op_definition bpt_op_batch_norm_relu = {.name = "batch_norm_relu",
                                                  .infer_shape = batch_norm_infer_shape,
                                                  .saved_bytes = batch_norm_saved_bytes,
                                                  .forward = batch_norm_forward,
                                                  .backward = batch_norm_backward,
                                                  .backward_reads_input = batch_norm_reads_input,
                                                  .backward_reads_output = bpt_op_reads_no_output,
                                                  .overwrites_unset_gradients = true};

static bpt_status add_batch_norm(bpt_graph *graph, bpt_op_id op, const char *name, bpt_node *x, bpt_node *gamma,
                                 bpt_node *beta, bpt_node *running_mean, bpt_node *running_variance, float momentum,
                                 float epsilon, bpt_node **out) {
  bpt_node *inputs[5] = {x, gamma, beta, running_mean, running_variance};
  const float attributes[2] = {momentum, epsilon};
  return bpt_graph_add_node_with_attributes(graph, op, name, inputs, 5, NULL, 0, attributes, 2, out);
}

bpt_status bpt_batch_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                          bpt_node *running_mean, bpt_node *running_variance, float momentum, float epsilon,
                          bpt_node **out) {
  return add_batch_norm(graph, BPT_OP_BATCH_NORM, name, x, gamma, beta, running_mean, running_variance, momentum,
                        epsilon, out);
}

bpt_status bpt_batch_norm_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                               bpt_node *running_mean, bpt_node *running_variance, float momentum, float epsilon,
                               bpt_node **out) {
  return add_batch_norm(graph, BPT_OP_BATCH_NORM_RELU, name, x, gamma, beta, running_mean, running_variance, momentum,
                        epsilon, out);
}
