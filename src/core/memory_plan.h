/* The activation memory plan: which node values backward needs (held from forward until backward) and
 * which only forward needs (transient: they share one region, reused as soon as their last consumer ran). */
#ifndef BPT_CORE_MEMORY_PLAN_H
#define BPT_CORE_MEMORY_PLAN_H

#include "core/graph.h"

#define BPT_NO_OFFSET SIZE_MAX

typedef struct bpt_memory_plan {
  size_t *value_offset, *grad_offset, *saved_offset; /* per node index, into the arena; BPT_NO_OFFSET for none */
  size_t arena_bytes;
  size_t held_bytes;      /* held values and saved buffers */
  size_t transient_bytes; /* the shared region */
  size_t gradient_bytes;  /* activation gradients */
  size_t input_bytes;     /* held values that are graph inputs */
  size_t recompute_bytes; /* the region recomputed values share (the largest segment's) */
} bpt_memory_plan;

/* Plans every non-parameter node of a graph whose dims are fixed for max_batch. With keep_all, or without a
 * loss, every value is held. Sets each transient node's value_reused_by. */
bpt_status bpt_memory_plan_build(bpt_graph *graph, bool keep_all, bpt_memory_plan *plan);
void bpt_memory_plan_free(bpt_memory_plan *plan);

#endif
