/* rms_norm: each row of x (the last axis, C values) divided by its root mean square, then scaled by gamma (C):
 * y = x / sqrt(mean(x^2) + epsilon) * gamma, epsilon inside the square root, as PyTorch's F.rms_norm (Zhang &
 * Sennrich 2019, without a shift). Float attribute 0 is epsilon. Forward saves 1 / sqrt(mean(x^2) + epsilon)
 * per row in node->saved (1 float per row, rows in memory order). Backward reads x, gamma and the saved values
 * (never y): dx = rstd (g - xhat mean(g xhat)) with g = dy gamma, xhat = x rstd; dgamma = sum over rows of
 * dy xhat. Both gradients honour their beta (0: overwrite). */
#include <math.h>
#include <stdio.h>

#include "bptrain/layers.h"
#include "core/graph.h"
#include "core/ops/norm_rows.h"


static bpt_status rms_norm_infer_shape(bpt_node *node) {
  static const char *const roles[] = {"gamma"};
  return bpt_norm_infer_shape(node, roles);
}

/* 1 / rms per row. */
static size_t rms_norm_saved_bytes(const bpt_node *node) { return bpt_norm_saved_bytes(node, 1); }

static bpt_status rms_norm_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status rms_norm_backward(bpt_node *node) {
  if (!node->inputs[0]->requires_grad && !node->inputs[1]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* About 5 flops per element forward (squares, sum, scale twice), 9 backward. */
static void rms_norm_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const double count = (double)bpt_node_count(node);
  *flops = (backward ? 9.0 : 5.0) * count;
  *bytes = 4.0 * (backward ? 3.0 * count : 2.0 * count);
}

const bpt_op_definition bpt_op_rms_norm = {.name = "rms_norm",
                                           .kernels_only = true,
                                           BPT_OP_PARAMETERS(bpt_norm_parameters),
                                           .infer_shape = rms_norm_infer_shape,
                                           .saved_bytes = rms_norm_saved_bytes,
                                           .forward = rms_norm_forward,
                                           .backward = rms_norm_backward,
                                           .cost = rms_norm_cost,
                                           .backward_reads_output = bpt_op_reads_no_output,
                                           .overwrites_unset_gradients = true};

bpt_status bpt_rms_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, float epsilon,
                        bpt_node **out) {
  bpt_node *inputs[2] = {x, gamma};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_RMS_NORM, name, inputs, 2, NULL, 0, &epsilon, 1, out);
}

static bpt_status build_rms_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out) {
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_rms_norm: graph is NULL");
  if (!x || !name || !out)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_rms_norm: x, name and out must be non-NULL");
  if (x->rank < (x->batched ? 2 : 1))
    return bpt_error(graph->context, BPT_ERR_SHAPE, "bpt_layer_rms_norm '%s': input '%s' has no feature axis", name,
                     x->name);
  char parameter_name[BPT_NAME_SIZE + 16];
  bpt_node *gamma;
  const int64_t features = x->dims[x->rank - 1];
  snprintf(parameter_name, sizeof parameter_name, "%s.weight", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &features, BPT_INIT_ONES, &gamma));
  return bpt_rms_norm(graph, name, x, gamma, epsilon, out);
}

bpt_status bpt_layer_rms_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_rms_norm(graph, name, x, epsilon, out), out);
}
