/* The graph's view of its gradient block for whoever reduces it during backward (data-parallel training):
 * contiguous ranges of the flat block, ordered by when backward finalises them, each with the position in
 * graph->order after whose backward its values no longer change. The graph hook's NODE_BACKWARD event at
 * that position is the "range is final" moment. */
#ifndef BPT_CORE_GRADIENT_RANGES_H
#define BPT_CORE_GRADIENT_RANGES_H

#include "core/graph.h"

typedef struct bpt_gradient_range {
  int64_t offset, count; /* elements of the gradient block, padding between parameters included */
  int final_position;    /* final once backward has run the node at this position of graph->order */
} bpt_gradient_range;

/* Cuts the gradient block of a compiled graph into ranges in reverse parameter order (the order backward
 * finalises them): the first at most first_bytes, the others at most bytes, each holding at least one
 * parameter. *ranges (free()) gets *count entries, at most one per parameter. */
bpt_status bpt_graph_gradient_ranges(const bpt_graph *graph, size_t first_bytes, size_t bytes,
                                     bpt_gradient_range **ranges, int *count);

#endif
