/* A view of an optimiser's private state for checkpoints (the struct stays private to optimizer.c):
 * pointers into the optimiser, so a checkpoint load can restore moments, step count and learning rate. */
#ifndef BPT_CORE_OPTIMIZER_STATE_H
#define BPT_CORE_OPTIMIZER_STATE_H

#include <stdbool.h>

#include "bptrain/optimizer.h"
#include "core/context.h"

typedef struct bpt_optimizer_state {
  bpt_graph *graph;
  bpt_optimizer_options *options;
  int64_t *steps;
  float *buffers[2]; /* device, laid out like the parameter block; NULL when the rule needs none
                        (SGD: velocity, none; Adam: first and second moments) */
} bpt_optimizer_state;

/* The one validation rule for optimiser options: bpt_optimizer_create applies it to what the caller gives, the
 * checkpoint loader to what a file holds, so every value one accepts the other accepts (issue 18, class 2). */
bpt_status bpt_optimizer_options_check(bpt_context *context, const bpt_optimizer_options *options, const char *where);
/* Step counts a saved optimiser may have: any count the optimiser can reach, 0 and up. */
static inline bool bpt_optimizer_steps_valid(int64_t steps) { return steps >= 0; }

void bpt_optimizer_state_view(bpt_optimizer *optimizer, bpt_optimizer_state *view);

/* BPT_ERR_INVALID_ARGUMENT naming `where` unless optimizer was made for graph: another graph's optimiser
 * would step that graph's parameters with its stale gradients and leave this one untouched (issue 30,
 * class 5); BPT_ERR_STATE when the optimiser's graph was destroyed. */
bpt_status bpt_optimizer_check_owner(const bpt_optimizer *optimizer, const bpt_graph *graph, const char *where);

#endif
