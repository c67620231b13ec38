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

BPT_EXTERN_C_END

#endif
