/* What layer_norm and rms_norm share: both normalise the rows of x's last axis with a per-feature gamma (and,
 * for layer_norm, beta) and one epsilon, and save a fixed number of floats per row for backward. */
#ifndef BPT_CORE_OPS_NORM_ROWS_H
#define BPT_CORE_OPS_NORM_ROWS_H

#include <math.h>

#include "core/checked.h"
#include "core/graph.h"

/* The affine parameters must be unbatched f32 with exactly C values: one scale (and shift) per feature. */
static inline bpt_status bpt_norm_check_affine(bpt_node *node, const bpt_node *parameter, const char *role,
                                               int64_t features) {
  char shape[96];
  if (parameter->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "%s '%s' must be f32", role, parameter->name);
  if (parameter->batched || bpt_node_inner_count(parameter) != features)
    return bpt_node_error(node, BPT_ERR_SHAPE, "%s '%s' has shape %s; expected (%lld), the input's last axis", role,
                          parameter->name, bpt_shape_string(parameter, shape, sizeof shape), (long long)features);
  return BPT_OK;
}

/* The shape rule: y has x's shape; x has a feature axis; inputs 1.. are the affine parameters (gamma, beta) named
 * by roles; float attribute 0, epsilon, is finite and > 0. */
/* layer_norm's and rms_norm's one parameter, float attribute 0. */
static const bpt_param_decl bpt_norm_parameters[] = {{.name = "epsilon",
                                                      .type = BPT_OP_VALUE_FLOAT,
                                                      .slot = 0,
                                                      .default_value = 1e-5,
                                                      .minimum = 0.0,
                                                      .minimum_open = true,
                                                      .maximum = INFINITY}};

static inline bpt_status bpt_norm_infer_shape(bpt_node *node, const char *const *roles) {
  const bpt_node *x = node->inputs[0];
  char shape[96];
  BPT_CHECK(bpt_node_infer_elementwise_shape(node));
  if (x->rank < (x->batched ? 2 : 1))
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has shape %s: no feature axis to normalise over", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  for (int i = 1; i < node->input_count; i++)
    BPT_CHECK(bpt_norm_check_affine(node, node->inputs[i], roles[i - 1], x->dims[x->rank - 1]));
  return BPT_OK;
}

/* floats_per_row floats for every row of the compiled batch; SIZE_MAX (refused by the memory plan) on overflow. */
static inline size_t bpt_norm_saved_bytes(const bpt_node *node, int floats_per_row) {
  int64_t rows;
  const int64_t per_sample = bpt_node_inner_count(node) / node->dims[node->rank - 1];
  if (!bpt_checked_mul(per_sample, node->batched ? node->graph->max_batch : 1, &rows) ||
      rows > (int64_t)(BPT_MAX_BYTES / ((size_t)floats_per_row * sizeof(float))))
    return SIZE_MAX;
  return (size_t)rows * (size_t)floats_per_row * sizeof(float);
}

#endif
