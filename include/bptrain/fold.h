/**
 * @file fold.h
 * @brief Inference folding: batch norms merged into the convolutions before them.
 */
#ifndef BPTRAIN_FOLD_H
#define BPTRAIN_FOLD_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/**
 * Folds every batch norm whose input is a convolution used by nothing else into that convolution:
 * w' = w gamma / sqrt(var + eps), b' = (b - mean) gamma / sqrt(var + eps) + beta. The graph is switched to
 * evaluation mode and becomes inference-only (backward fails). Parameters are rewritten in place, so save
 * them before folding if you want to keep training.
 * @param folded_count where the number of folded batch norms is written, or NULL
 */
BPT_API bpt_status bpt_graph_fold_batch_norm(bpt_graph *graph, int *folded_count);

BPT_EXTERN_C_END

#endif
