/**
 * @file parameter_groups.h
 * @brief Parameter groups: per-parameter learning-rate multipliers and weight decay for an optimiser.
 */
#ifndef BPTRAIN_PARAMETER_GROUPS_H
#define BPTRAIN_PARAMETER_GROUPS_H

#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/**
 * Gives @p parameters their own learning-rate multiplier (applied to the optimiser's or schedule's rate) and
 * weight decay. A parameter belongs to the group it was last given to; others use the optimiser's options.
 */
BPT_API bpt_status bpt_optimizer_set_group(bpt_optimizer *optimizer, bpt_node *const *parameters, int count,
                                           float learning_rate_scale, float weight_decay);

/** Sets weight decay 0 on every rank-1 parameter: biases and batch-norm scales and shifts. */
BPT_API bpt_status bpt_optimizer_no_decay_on_vectors(bpt_optimizer *optimizer);

/**
 * GPT-style weight decay: keeps the optimiser's weight decay only on parameters used as the weight (input 1) of a
 * linear, conv2d or matmul node, and sets it to 0 on every other parameter: norm weights, biases, embedding
 * tables and additive position tables. Call after bpt_optimizer_create(); a later bpt_optimizer_set_group() wins.
 */
BPT_API bpt_status bpt_optimizer_decay_only_matrices(bpt_optimizer *optimizer);

BPT_EXTERN_C_END

#endif
