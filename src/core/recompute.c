/* Marking recompute segments (activation recomputation, "gradient checkpointing"). The memory plan
 * (memory_plan.c) and backward (run.c) do the rest; this file only checks that a segment can be recomputed. */
#include "bptrain/memory.h"
#include "core/graph.h"

/* Ops whose forward changes state besides its value: running it twice would change the model. */
static bool forward_has_effects(const bpt_node *node) {
  return node->op == BPT_OP_BATCH_NORM || node->op == BPT_OP_BATCH_NORM_RELU ||
         node->op == BPT_OP_KV_CACHE_ATTENTION;
}

bpt_status bpt_graph_recompute_segment(bpt_graph *graph, bpt_node *first, bpt_node *last) {
  const char *where = "bpt_graph_recompute_segment";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!first || !last || first->graph != graph || last->graph != graph)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: first and last must be nodes of this graph",
                     where);
  if (graph->compiled)
    return bpt_error(graph->context, BPT_ERR_STATE, "%s: the graph is already compiled; mark segments before",
                     where);
  if (first->index > last->index)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: '%s' was created after '%s'", where,
                     first->name, last->name);
  for (int i = first->index; i <= last->index; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->recompute_segment)
      return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: '%s' is already in a recompute segment", where,
                       node->name);
    if (forward_has_effects(node))
      return bpt_error(graph->context, BPT_ERR_UNSUPPORTED,
                       "%s: '%s' (%s) changes state in forward, so it cannot be run again in backward", where,
                       node->name, bpt_op_get(node->op)->name);
  }
  const int segment = ++graph->recompute_segments;
  for (int i = first->index; i <= last->index; i++)
    graph->nodes[i]->recompute_segment = segment;
  return BPT_OK;
}
