/* layer_norm: each row of x (the last axis, C values) normalised to mean 0 and variance 1, then scaled by gamma
 * and shifted by beta (both (C); beta optional): y = (x - mean) / sqrt(var + epsilon) * gamma + beta, with the
 * biased variance and epsilon inside the square root, as PyTorch's F.layer_norm. Float attribute 0 is epsilon.
 * Forward saves, per row, the pair (mean, 1 / sqrt(var + epsilon)) in node->saved: 2 floats per row, rows in
 * memory order. Backward reads x, gamma and the saved pairs (never y) and uses the closed form
 * dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma, xhat = (x - mean) rstd; dgamma = sum over rows
 * of dy xhat, dbeta = sum of dy. Every gradient honours its beta (0: overwrite). */
#include <math.h>
#include <stdio.h>

#include "bptrain/layers.h"
#include "core/graph.h"
#include "core/ops/norm_rows.h"


static bpt_status layer_norm_infer_shape(bpt_node *node) {
  static const char *const roles[] = {"gamma", "beta"};
  return bpt_norm_infer_shape(node, roles);
}

/* The pair (mean, 1 / std) per row. */
static size_t layer_norm_saved_bytes(const bpt_node *node) { return bpt_norm_saved_bytes(node, 2); }

static bpt_status layer_norm_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

static bpt_status layer_norm_backward(bpt_node *node) {
  bool wanted = false;
  for (int i = 0; i < node->input_count; i++)
    wanted = wanted || node->inputs[i]->requires_grad;
  return wanted ? bpt_node_backward_kernels(node) : BPT_OK;
}

/* Backward reads x and gamma with the saved statistics; beta and y are not read. */
static bool layer_norm_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input < 2;
}

/* About 8 flops per element forward (two sums, normalise, scale, shift), 12 backward. */
static void layer_norm_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const double count = (double)bpt_node_count(node);
  *flops = (backward ? 12.0 : 8.0) * count;
  *bytes = 4.0 * (backward ? 3.0 * count : 2.0 * count);
}

const bpt_op_definition bpt_op_layer_norm = {.name = "layer_norm",
                                             .kernels_only = true,
                                             BPT_OP_PARAMETERS(bpt_norm_parameters),
                                             .infer_shape = layer_norm_infer_shape,
                                             .saved_bytes = layer_norm_saved_bytes,
                                             .forward = layer_norm_forward,
                                             .backward = layer_norm_backward,
                                             .cost = layer_norm_cost,
                                             .backward_reads_input = layer_norm_reads_input,
                                             .backward_reads_output = bpt_op_reads_no_output,
                                             .overwrites_unset_gradients = true};

bpt_status bpt_layer_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                          float epsilon, bpt_node **out) {
  bpt_node *inputs[3] = {x, gamma, beta};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_LAYER_NORM, name, inputs, beta ? 3 : 2, NULL, 0, &epsilon, 1,
                                            out);
}

static bpt_status build_layer_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out) {
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_layer_norm: graph is NULL");
  if (!x || !name || !out)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_layer_layer_norm: x, name and out must be non-NULL");
  if (x->rank < (x->batched ? 2 : 1))
    return bpt_error(graph->context, BPT_ERR_SHAPE, "bpt_layer_layer_norm '%s': input '%s' has no feature axis", name,
                     x->name);
  char parameter_name[BPT_NAME_SIZE + 16];
  bpt_node *gamma, *beta;
  const int64_t features = x->dims[x->rank - 1];
  snprintf(parameter_name, sizeof parameter_name, "%s.weight", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &features, BPT_INIT_ONES, &gamma));
  snprintf(parameter_name, sizeof parameter_name, "%s.bias", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &features, BPT_INIT_ZEROS, &beta));
  return bpt_layer_norm(graph, name, x, gamma, beta, epsilon, out);
}

bpt_status bpt_layer_layer_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_layer_norm(graph, name, x, epsilon, out), out);
}
