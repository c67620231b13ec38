/* The model summary: one row per op node with its output shape, the parameters it is the first to read
 * (trainable and buffers apart) and its output bytes at the compiled batch, plus totals and a text table. */
#include <stdarg.h>
#include <stdio.h>

#include "bptrain/introspection.h"
#include "bptrain/train.h"
#include "core/graph.h"

static bool is_layer(const bpt_node *node) { return node->op != BPT_OP_INPUT && node->op != BPT_OP_PARAMETER; }

static int64_t summary_batch(const bpt_graph *graph) { return graph->compiled ? graph->max_batch : 1; }

/* Elements of node at batch and its declared (longest) sequence (dims[0] holds the batch for batched nodes only
 * once compiled). */
static int64_t elements_at(const bpt_node *node, int64_t batch) {
  int64_t count = node->batched ? batch : 1;
  for (int axis = node->batched ? 1 : 0; axis < node->rank; axis++)
    count *= node->declared_dims[axis];
  return count;
}

/* True when no node before `node` (one of parameter's readers) reads parameter: each parameter is counted once, at its
 * first reader. */
static bool first_reader(const bpt_graph *graph, const bpt_node *node, const bpt_node *parameter) {
  for (int i = 0; i < node->index; i++) {
    const bpt_node *earlier = graph->nodes[i];
    for (int k = 0; k < earlier->input_count; k++)
      if (earlier->inputs[k] == parameter) return false;
  }
  return true;
}

static void fill_row(const bpt_graph *graph, const bpt_node *node, bpt_layer_summary *row) {
  const int64_t batch = summary_batch(graph);
  *row = (bpt_layer_summary){.size = sizeof *row, .name = node->name, .op = bpt_node_op_name(node), .rank = node->rank};
  for (int axis = 0; axis < node->rank; axis++)
    row->dims[axis] = node->declared_dims[axis];
  if (node->batched && node->rank > 0) row->dims[0] = batch;
  for (int k = 0; k < node->input_count; k++) {
    const bpt_node *input = node->inputs[k];
    bool repeated = false;
    for (int j = 0; j < k; j++)
      repeated |= node->inputs[j] == input;
    if (!input || input->op != BPT_OP_PARAMETER || repeated || !first_reader(graph, node, input)) continue;
    if (input->requires_grad)
      row->trainable_parameters += elements_at(input, 1);
    else
      row->buffer_parameters += elements_at(input, 1);
  }
  /* A view (reshape) holds its input's bytes, counted there. */
  row->activation_bytes = node->view_source ? 0 : (size_t)elements_at(node, batch) * bpt_dtype_size(node->dtype);
}

bpt_status bpt_graph_summary(const bpt_graph *graph, bpt_model_summary *summary) {
  const char *where = "bpt_graph_summary";
  if (!graph || !summary)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where,
                     graph ? "summary" : "graph");
  bpt_model_summary totals = {.size = sizeof totals, .batch = summary_batch(graph)};
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->op == BPT_OP_PARAMETER) {
      if (node->requires_grad)
        totals.trainable_parameters += elements_at(node, 1);
      else
        totals.buffer_parameters += elements_at(node, 1);
    } else if (is_layer(node)) {
      bpt_layer_summary row;
      fill_row(graph, node, &row);
      totals.layers++;
      totals.activation_bytes += row.activation_bytes;
    }
  }
  return bpt_copy_output(graph->context, summary, &totals, sizeof totals, sizeof(bpt_model_summary), where);
}

bpt_status bpt_graph_layer_summary(const bpt_graph *graph, int index, bpt_layer_summary *layer) {
  const char *where = "bpt_graph_layer_summary";
  if (!graph || !layer)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where,
                     graph ? "layer" : "graph");
  int seen = 0;
  for (int i = 0; i < graph->node_count; i++) {
    if (!is_layer(graph->nodes[i]) || seen++ != index) continue;
    bpt_layer_summary row;
    fill_row(graph, graph->nodes[i], &row);
    return bpt_copy_output(graph->context, layer, &row, sizeof row, sizeof(bpt_layer_summary), where);
  }
  return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: index %d is not in [0, %d) (the graph's layers)",
                   where, index, seen);
}

/* Appends to a bounded buffer and counts what the whole text needs (snprintf's convention). */
typedef struct text {
  char *buffer;
  size_t size, length;
} text;

static void append(text *t, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void append(text *t, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  const size_t room = t->length < t->size ? t->size - t->length : 0;
  const int written = vsnprintf(room ? t->buffer + t->length : NULL, room, format, arguments);
  va_end(arguments);
  if (written > 0) t->length += (size_t)written;
}

size_t bpt_graph_summary_text(const bpt_graph *graph, char *buffer, size_t size) {
  if (!graph) return 0;
  text t = {.buffer = buffer, .size = buffer ? size : 0};
  if (t.size) buffer[0] = 0;
  bpt_model_summary totals = {.size = sizeof totals};
  if (bpt_graph_summary(graph, &totals) != BPT_OK) return 0;
  append(&t, "%-32s %-22s %-18s %12s %10s %14s  %s\n", "layer", "op", "output", "trainable", "buffers", "activation B",
         "parameters");
  int next_node = 0;
  for (int i = 0; i < totals.layers; i++) {
    bpt_layer_summary row = {.size = sizeof row};
    if (bpt_graph_layer_summary(graph, i, &row) != BPT_OK) return 0;
    while (next_node < graph->node_count && !is_layer(graph->nodes[next_node]))
      next_node++;
    char parameters[256] = "";
    if (next_node < graph->node_count)
      bpt_node_parameters_string(graph->nodes[next_node++], parameters, sizeof parameters);
    char shape[64] = "";
    size_t used = 0;
    for (int axis = 0; axis < row.rank && used < sizeof shape; axis++)
      used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", axis ? "x" : "", (long long)row.dims[axis]);
    append(&t, "%-32s %-22s %-18s %12lld %10lld %14zu  %s\n", row.name, row.op, row.rank ? shape : "scalar",
           (long long)row.trainable_parameters, (long long)row.buffer_parameters, row.activation_bytes, parameters);
  }
  append(&t, "total: %lld trainable parameters, %lld buffer values, %zu activation bytes at batch %lld\n",
         (long long)totals.trainable_parameters, (long long)totals.buffer_parameters, totals.activation_bytes,
         (long long)totals.batch);
  return t.length;
}
