/* batch_norm: per-channel normalisation of x (N, C, ...) with trainable gamma, beta (C) and buffers of the
 * running mean and variance (C). Float attributes: momentum (0), epsilon (1). Training mode normalises with
 * the batch's statistics (saving mean and 1/std per channel for backward); evaluation mode with the running
 * ones. A batch norm folded into its convolution (fold.c) shares the convolution's output and does nothing.
 *
 * batch_norm_relu is the same op followed by ReLU, in one node: the separate ReLU's pass over the activations
 * in each direction, and its output buffer, go away. A bit per element (after the statistics in node->saved)
 * records y > 0 for backward. Its kernels decide how: the CPU applies the ReLU inside its normalising pass and
 * masks dy inside its gradient passes; CUDA runs the ReLU in place on y, and in backward in place on dy, this
 * node's own gradient, which nothing reads after this node's backward. A folded batch_norm_relu's kernels
 * apply the ReLU to the convolution's output. */
#include <math.h>

#include "backends/kernel_args.h"
#include "bptrain/cnn.h"
#include "core/graph.h"

enum { FOLDED = BPT_BATCH_NORM_FOLDED };

/* folded is set by bpt_graph_fold (fold.c), not by the builder: a folded node computes nothing of its own. */
static const bpt_param_decl batch_norm_parameters[] = {
    {.name = "momentum",
     .type = BPT_OP_VALUE_FLOAT,
     .slot = BPT_BATCH_NORM_MOMENTUM,
     .default_value = 0.1,
     .minimum = 0.0,
     .minimum_open = true,
     .maximum = 1.0},
    {.name = "epsilon",
     .type = BPT_OP_VALUE_FLOAT,
     .slot = BPT_BATCH_NORM_EPSILON,
     .default_value = 1e-5,
     .minimum = 0.0,
     .minimum_open = true,
     .maximum = INFINITY},
    {.name = "folded", .type = BPT_OP_VALUE_BOOL, .slot = FOLDED, .maximum = 1}};

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
  node->batched = true;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  return BPT_OK;
}

static bool fused_relu(const bpt_node *node) { return node->op == BPT_OP_BATCH_NORM_RELU; }

static int64_t mask_row_bytes(const bpt_node *node) { return (bpt_node_inner_count(node) / node->dims[1] + 7) / 8; }

/* The statistics, then for batch_norm_relu the mask: the fused layout (a whole number of bytes per (n, c) row,
 * see bpt_batch_norm_args) holds at least as many bytes as the relu mask's flat one. */
static size_t batch_norm_saved_bytes(const bpt_node *node) {
  size_t bytes = 2 * (size_t)node->dims[1] * sizeof(float);
  if (fused_relu(node)) bytes += (size_t)(node->graph->max_batch * node->dims[1] * mask_row_bytes(node));
  return bytes;
}

static bpt_status batch_norm_forward(bpt_node *node) {
  if (node->int_attributes[FOLDED] && !fused_relu(node)) return BPT_OK;
  return bpt_node_forward_kernels(node);
}

static bpt_status batch_norm_backward(bpt_node *node) {
  if (node->graph->evaluation)
    return bpt_node_error(node, BPT_ERR_STATE,
                          "backward after an evaluation-mode forward; call bpt_graph_set_training(graph, 1) first");
  return bpt_node_backward_kernels(node);
}

/* Activation memory: backward reads x and gamma (with the saved statistics), never y. */
static bool batch_norm_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input < 2;
}

/* What a backward of sample 0 alone reads from saved (speculative backprop): the mean and 1 / std per channel,
 * then for batch_norm_relu the ReLU mask's rows of sample 0, a whole number of bytes per channel. */
static size_t batch_norm_sample_saved_bytes(const bpt_node *node) { return 2 * (size_t)node->dims[1] * sizeof(float); }
static size_t batch_norm_relu_sample_saved_bytes(const bpt_node *node) {
  const size_t channels = (size_t)node->dims[1];
  return batch_norm_sample_saved_bytes(node) + channels * (((size_t)bpt_node_inner_count(node) / channels + 7) / 8);
}

const bpt_op_definition bpt_op_batch_norm = {.name = "batch_norm",
                                             .kernels_only = true,
                                             BPT_OP_PARAMETERS(batch_norm_parameters),
                                             .infer_shape = batch_norm_infer_shape,
                                             .saved_bytes = batch_norm_saved_bytes,
                                             .forward = batch_norm_forward,
                                             .backward = batch_norm_backward,
                                             .backward_reads_input = batch_norm_reads_input,
                                             .backward_reads_output = bpt_op_reads_no_output,
                                             .overwrites_unset_gradients = true,
                                             .speculative = BPT_SPECULATIVE_KERNELS,
                                             .speculative_saved_bytes = batch_norm_sample_saved_bytes};

const bpt_op_definition bpt_op_batch_norm_relu = {.name = "batch_norm_relu",
                                                  .kernels_only = true,
                                                  BPT_OP_PARAMETERS(batch_norm_parameters),
                                                  .infer_shape = batch_norm_infer_shape,
                                                  .saved_bytes = batch_norm_saved_bytes,
                                                  .forward = batch_norm_forward,
                                                  .backward = batch_norm_backward,
                                                  .backward_reads_input = batch_norm_reads_input,
                                                  .backward_reads_output = bpt_op_reads_no_output,
                                                  .overwrites_unset_gradients = true,
                                                  .speculative = BPT_SPECULATIVE_KERNELS,
                                                  .speculative_saved_bytes = batch_norm_relu_sample_saved_bytes};

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
