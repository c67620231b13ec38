/**
 * @file mode.h
 * @brief How a graph runs its mode-dependent ops: training or evaluation (batch norm, dropout), stochastic or
 * deterministic (binary stochastic neurons).
 */
#ifndef BPTRAIN_MODE_H
#define BPTRAIN_MODE_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** Switches batch norm and dropout between training (non-zero, the default) and evaluation mode. */
BPT_API bpt_status bpt_graph_set_training(bpt_graph *graph, int training);

/** @return 1 in training mode, 0 in evaluation mode (or for NULL). */
BPT_API int bpt_graph_is_training(const bpt_graph *graph);

/**
 * Chooses stochastic (0, the default: training) or deterministic (non-zero: evaluation) behaviour for the
 * graph's stochastic ops: a binary stochastic neuron then outputs 1[sigmoid(z) > 0.5].
 */
BPT_API bpt_status bpt_graph_set_deterministic(bpt_graph *graph, int deterministic);

BPT_EXTERN_C_END

#endif
