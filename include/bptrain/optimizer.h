/**
 * @file optimizer.h
 * @brief Optimisers that update a compiled graph's parameters from its gradients, through the backend's
 * update kernels.
 */
#ifndef BPTRAIN_OPTIMIZER_H
#define BPTRAIN_OPTIMIZER_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** An optimiser bound to one compiled graph, holding its state (momentum, Adam moments). */
typedef struct bpt_optimizer bpt_optimizer;

/** The update rule. */
typedef enum bpt_optimizer_kind {
  BPT_OPTIMIZER_SGD = 0,  /**< SGD with optional (Nesterov) momentum; weight decay added to the gradient */
  BPT_OPTIMIZER_ADAM = 1, /**< Adam; weight decay added to the gradient (L2) */
  BPT_OPTIMIZER_ADAMW = 2 /**< Adam with decoupled weight decay */
} bpt_optimizer_kind;

/** Options for bpt_optimizer_create(); get them from bpt_optimizer_options_default(). */
typedef struct bpt_optimizer_options {
  size_t size; /**< sizeof(bpt_optimizer_options), set by the default function */
  bpt_optimizer_kind kind; /**< the update rule */
  float learning_rate;     /**< step size, >= 0 */
  float momentum;     /**< SGD only, in [0, 1) */
  int nesterov;       /**< SGD only: non-zero for Nesterov momentum (needs momentum > 0) */
  float weight_decay; /**< >= 0 */
  float beta1;        /**< Adam only, in [0, 1) */
  float beta2;        /**< Adam only, in [0, 1) */
  float epsilon;      /**< Adam only, > 0 */
} bpt_optimizer_options;

/** @return SGD, learning rate 0.01, no momentum or decay; Adam betas 0.9/0.999, epsilon 1e-8. */
BPT_API bpt_optimizer_options bpt_optimizer_options_default(void);

/** Creates an optimiser for a compiled graph with a loss. */
BPT_API bpt_status bpt_optimizer_create(bpt_graph *graph, const bpt_optimizer_options *options,
                                        bpt_optimizer **out);

/** Destroys an optimiser, before or after its graph (see bpt_graph_destroy()). NULL is a no-op. */
BPT_API void bpt_optimizer_destroy(bpt_optimizer *optimizer);

/** Applies one update from the gradients of the last backward pass. */
BPT_API bpt_status bpt_optimizer_step(bpt_optimizer *optimizer);

/** Changes the learning rate used by the following steps (for schedules). */
BPT_API bpt_status bpt_optimizer_set_learning_rate(bpt_optimizer *optimizer, float learning_rate);

/** @return the current learning rate, or 0 for NULL. */
BPT_API float bpt_optimizer_learning_rate(const bpt_optimizer *optimizer);

/** @return the number of steps taken. */
BPT_API int64_t bpt_optimizer_step_count(const bpt_optimizer *optimizer);

BPT_EXTERN_C_END

#endif
