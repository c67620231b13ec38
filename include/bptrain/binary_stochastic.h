/**
 * @file binary_stochastic.h
 * @brief Binary stochastic neurons and their straight-through gradient estimators.
 */
#ifndef BPTRAIN_BINARY_STOCHASTIC_H
#define BPTRAIN_BINARY_STOCHASTIC_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** The gradient a binary stochastic neuron passes back (straight-through estimators). */
typedef enum bpt_straight_through {
  BPT_STRAIGHT_THROUGH_IDENTITY = 0, /**< dz = da */
  BPT_STRAIGHT_THROUGH_SIGMOID = 1   /**< dz = da * sigmoid'(z) */
} bpt_straight_through;

/**
 * Binary stochastic neuron: a = 1[u < sigmoid(z)] with u ~ U(0, 1) drawn from the graph's seeded
 * generator for every element and forward pass; in deterministic mode a = 1[sigmoid(z) > 0.5].
 */
BPT_API bpt_status bpt_binary_stochastic(bpt_graph *graph, const char *name, bpt_node *z,
                                         bpt_straight_through estimator, bpt_node **out);

BPT_EXTERN_C_END

#endif
