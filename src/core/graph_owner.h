/* One thread at a time inside a graph's forward, backward or optimiser step (issue 30, "two threads driving
 * one graph"). Two passes sharing one activation arena and gradient block silently mix (NaN parameters, a
 * message blaming the inputs); a compare-and-swap on entry, a store on exit, costs far less than any op. */
#ifndef BPT_CORE_GRAPH_OWNER_H
#define BPT_CORE_GRAPH_OWNER_H

#include "base/report.h"
#include "core/graph.h"

/* Marks graph as running `where`; BPT_ERR_STATE naming both calls when another thread is inside one. */
static inline bpt_status bpt_graph_enter(bpt_graph *graph, const char *where) {
  const char *running = NULL;
  if (__builtin_expect(atomic_compare_exchange_strong_explicit(&graph->running, &running, where,
                                                               memory_order_acquire, memory_order_relaxed),
                       1))
    return BPT_OK;
  return bpt_error(graph->context, BPT_ERR_STATE,
                   "%s: another thread is inside %s on this graph; a graph, its optimizer and its trainer must be "
                   "driven by one thread at a time (or serialised by the caller)",
                   where, running);
}

/* Ends what bpt_graph_enter began; returns status so a call can end with `return bpt_graph_leave(g, s)`. */
static inline bpt_status bpt_graph_leave(bpt_graph *graph, bpt_status status) {
  atomic_store_explicit(&graph->running, NULL, memory_order_release);
  return status;
}

#endif
