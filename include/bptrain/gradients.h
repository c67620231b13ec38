/**
 * @file gradients.h
 * @brief Operations on parameter gradients between backward and the optimiser step: clipping by global norm or value,
 * and per-parameter norms.
 */
#ifndef BPTRAIN_GRADIENTS_H
#define BPTRAIN_GRADIENTS_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/**
 * Scales all parameter gradients so that their global L2 norm is at most @p max_norm; call between backward
 * and the optimiser step. @param norm receives the norm before clipping, or NULL.
 */
BPT_API bpt_status bpt_graph_clip_gradient_norm(bpt_graph *graph, float max_norm, float *norm);

/** Clamps every parameter gradient to [-limit, limit]. */
BPT_API bpt_status bpt_graph_clip_gradient_value(bpt_graph *graph, float limit);

/** L2 norm of one parameter's gradient from the last backward pass. */
BPT_API bpt_status bpt_graph_gradient_norm(bpt_graph *graph, const bpt_node *parameter, float *norm);

BPT_EXTERN_C_END

#endif
