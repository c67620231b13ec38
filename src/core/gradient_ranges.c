/* Ordered gradient ranges of a graph (see gradient_ranges.h): the only place that walks the graph's nodes
 * on behalf of data-parallel training. */
#include <stdlib.h>

#include "core/gradient_ranges.h"

/* The smallest position of a node reading the parameter: its gradient is final once that node ran. */
static int final_position(const bpt_graph *graph, const bpt_node *parameter) {
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->order[i];
    for (int j = 0; j < node->input_count; j++)
      if (node->inputs[j] == parameter) return i;
  }
  return graph->node_count; /* unused: final from the start */
}

bpt_status bpt_graph_gradient_ranges(const bpt_graph *graph, size_t first_bytes, size_t bytes,
                                     bpt_gradient_range **ranges, int *count) {
  int parameters = graph->parameter_count;
  *count = 0;
  *ranges = bpt_calloc(graph->context, (size_t)parameters, sizeof **ranges, "gradient ranges");
  if (!*ranges) return BPT_ERR_OUT_OF_MEMORY;
  int p = parameters - 1;
  while (p >= 0) {
    size_t cap = *count == 0 ? first_bytes : bytes;
    int64_t end = p + 1 < parameters ? graph->parameters[p + 1]->param_offset : graph->parameter_elements;
    bpt_gradient_range *range = &(*ranges)[(*count)++];
    range->final_position = graph->node_count;
    do { /* at least one parameter, then more while they fit under the cap */
      int position = final_position(graph, graph->parameters[p]);
      if (position < range->final_position) range->final_position = position;
      range->offset = graph->parameters[p]->param_offset;
      p--;
    } while (p >= 0 && (size_t)(end - graph->parameters[p]->param_offset) * sizeof(float) <= cap);
    range->count = end - range->offset;
  }
  return BPT_OK;
}
