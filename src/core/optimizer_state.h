/* A view of an optimiser's private state for checkpoints (the struct stays private to optimizer.c):
 * pointers into the optimiser, so a checkpoint load can restore moments, step count and learning rate. */
#ifndef BPT_CORE_OPTIMIZER_STATE_H
#define BPT_CORE_OPTIMIZER_STATE_H

#include "bptrain/optimizer.h"

typedef struct bpt_optimizer_state {
  bpt_graph *graph;
  bpt_optimizer_options *options;
  int64_t *steps;
  float *buffers[2]; /* device, laid out like the parameter block; NULL when the rule needs none
                        (SGD: velocity, none; Adam: first and second moments) */
} bpt_optimizer_state;

void bpt_optimizer_state_view(bpt_optimizer *optimizer, bpt_optimizer_state *view);

#endif
