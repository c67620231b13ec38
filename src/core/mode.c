/* Graph features the convolutional ops need: buffers (non-trainable parameters such as batch-norm running
 * statistics), the train/eval switch, and read-only introspection of parameters and nodes. */
#include "bptrain/cnn.h"
#include "core/graph.h"

bpt_status bpt_graph_nontrainable_parameter(bpt_graph *graph, const char *name, int rank, const int64_t *dims,
                                            bpt_initializer initializer, bpt_node **out) {
  BPT_CHECK(bpt_graph_parameter(graph, name, rank, dims, initializer, out));
  /* No gradient flows into a buffer, so optimisers, clipping and gradient checks leave it alone. */
  (*out)->requires_grad = false;
  return BPT_OK;
}

bpt_status bpt_graph_set_training(bpt_graph *graph, int training) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_training: graph is NULL");
  if (graph->folded && training)
    return bpt_error(graph->context, BPT_ERR_STATE,
                     "bpt_graph_set_training: batch norms were folded into convolutions; the graph is inference-only");
  graph->evaluation = !training;
  graph->forward_done = false;
  graph->backward_done = false;
  return BPT_OK;
}

int bpt_graph_is_training(const bpt_graph *graph) { return graph && !graph->evaluation; }

int bpt_graph_parameter_node_count(const bpt_graph *graph) {
  return graph && graph->compiled ? graph->parameter_count : 0;
}

bpt_node *bpt_graph_parameter_node(const bpt_graph *graph, int index) {
  if (!graph || !graph->compiled || index < 0 || index >= graph->parameter_count) return NULL;
  return graph->parameters[index];
}

int bpt_node_is_trainable(const bpt_node *node) { return node && node->op == BPT_OP_PARAMETER && node->requires_grad; }

int bpt_graph_node_count(const bpt_graph *graph) { return graph ? graph->node_count : 0; }

bpt_node *bpt_graph_node(const bpt_graph *graph, int index) {
  return graph && index >= 0 && index < graph->node_count ? graph->nodes[index] : NULL;
}

const char *bpt_node_op_name(const bpt_node *node) { return node ? bpt_op_get(node->op)->name : ""; }
