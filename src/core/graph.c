/* Building a graph: creation, inputs, parameters, generic node creation and node queries.
 * Ops add their nodes through bpt_graph_add_node(); compile.c and run.c take it from there. */
#include "core/graph.h"
#include "core/precision.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/checkpoint.h"

bpt_status bpt_graph_create(bpt_context *context, bpt_graph **out) {
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_create: out is NULL");
  *out = NULL;
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_create: context is NULL");
  bpt_graph *graph = bpt_calloc(context, 1, sizeof *graph, "graph");
  if (!graph) return BPT_ERR_OUT_OF_MEMORY;
  graph->context = context;
  graph->backend = &context->backend;
  bpt_context_retain(context);
  *out = graph;
  return BPT_OK;
}

/* Optimisers and data-parallel handles may outlive the graph: they let go of it first (data parallel waits
 * for its in-flight all-reduces, which read the gradient block), then the memory goes. */
void bpt_graph_destroy(bpt_graph *graph) {
  if (!graph) return;
  bpt_detach_all(&graph->attachments);
  bpt_graph_release_memory(graph);
  bpt_graph_free_buffers(graph);
  bpt_precision_destroy(graph);
  for (int i = 0; i < graph->node_count; i++) free(graph->nodes[i]);
  free(graph->nodes);
  bpt_context_release(graph->context);
  free(graph);
}

void bpt_graph_discard_nodes(bpt_graph *graph, int mark) {
  if (!graph || mark < 0 || mark >= graph->node_count) return;
  int kept = 0;
  for (int i = 0; i < graph->buffer_count; i++)
    if (!graph->buffers[i].owner || graph->buffers[i].owner->index < mark) graph->buffers[kept++] = graph->buffers[i];
  graph->buffer_count = kept;
  for (int i = graph->node_count - 1; i >= mark; i--)
    free(graph->nodes[i]);
  graph->node_count = mark;
}

static bool name_taken(const bpt_graph *graph, const char *name) {
  for (int i = 0; i < graph->node_count; i++)
    if (strcmp(graph->nodes[i]->name, name) == 0) return true;
  return false;
}

/* A NULL input is most often the output of a builder call that failed and whose status was not checked: its
 * message, still the context's last error, says why, so it is repeated here. */
static bpt_status null_input_error(bpt_graph *graph, const char *op, const char *name, int index) {
  char earlier[BPT_ERROR_MESSAGE_SIZE];
  snprintf(earlier, sizeof earlier, "%s", bpt_context_last_error(graph->context));
  if (!earlier[0])
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s '%.63s': input %d is NULL", op, name, index);
  return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                   "%s '%.63s': input %d is NULL (did an earlier builder fail? the last error was: %s)", op, name,
                   index, earlier);
}

bpt_status bpt_graph_add_node(bpt_graph *graph, bpt_op_id op, const char *name, bpt_node *const *inputs,
                              int input_count, bpt_node **out) {
  return bpt_graph_add_node_with_attributes(graph, op, name, inputs, input_count, NULL, 0, NULL, 0, out);
}

bpt_status bpt_graph_add_node_with_attributes(bpt_graph *graph, bpt_op_id op, const char *name,
                                              bpt_node *const *inputs, int input_count, const int64_t *int_attributes,
                                              int int_count, const float *float_attributes, int float_count,
                                              bpt_node **out) {
  const bpt_op_definition *definition = bpt_op_get(op);
  if (int_count > BPT_MAX_INT_ATTRIBUTES || float_count > BPT_MAX_FLOAT_ATTRIBUTES)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INTERNAL, "%s: %d integer and %d float attributes",
                     definition->name, int_count, float_count);
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", definition->name);
  bpt_context *context = graph->context;
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: out is NULL", definition->name);
  if (graph->compiled)
    return bpt_error(context, BPT_ERR_STATE, "%s '%s': the graph is already compiled; nodes cannot be added",
                     definition->name, name ? name : "");
  if (input_count > bpt_op_max_inputs(op) || input_count > BPT_MAX_INPUTS)
    return bpt_error(context, BPT_ERR_INTERNAL, "%s: %d inputs", definition->name, input_count);
  char generated[BPT_NAME_SIZE];
  if (!name || !name[0]) {
    snprintf(generated, sizeof generated, "%s_%d", definition->name, graph->node_count);
    name = generated;
  }
  for (int i = 0; i < input_count; i++) {
    if (!inputs[i]) return null_input_error(graph, definition->name, name, i);
    if (inputs[i]->graph != graph)
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s '%s': input '%s' belongs to another graph",
                       definition->name, name, inputs[i]->name);
  }
  if (strlen(name) >= BPT_NAME_SIZE)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: name '%.20s...' is longer than %d characters",
                     definition->name, name, BPT_NAME_SIZE - 1);
  if (name_taken(graph, name))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: a node named '%s' already exists", definition->name,
                     name);
  if (graph->node_count == graph->node_capacity) {
    int capacity = graph->node_capacity ? graph->node_capacity * 2 : 32;
    bpt_node **nodes = realloc(graph->nodes, (size_t)capacity * sizeof *nodes);
    if (!nodes) return bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "%s: out of memory", definition->name);
    graph->nodes = nodes;
    graph->node_capacity = capacity;
  }
  bpt_node *node = bpt_calloc(context, 1, sizeof *node, "node");
  if (!node) return BPT_ERR_OUT_OF_MEMORY;
  node->graph = graph;
  node->index = graph->node_count;
  node->op = op;
  snprintf(node->name, sizeof node->name, "%s", name);
  node->input_count = input_count;
  for (int i = 0; i < input_count; i++) {
    node->inputs[i] = inputs[i];
    if (inputs[i]->requires_grad) node->requires_grad = true;
  }
  /* Declared parameters past what the builder passes take their defaults; then every one is checked. */
  for (int p = 0; p < definition->parameter_count; p++) {
    const bpt_param_decl *parameter = &definition->parameters[p];
    for (int e = 0; e < (parameter->length > 0 ? parameter->length : 1); e++) {
      const int slot = parameter->slot + e;
      if (parameter->type == BPT_OP_VALUE_FLOAT && slot >= float_count)
        node->float_attributes[slot] = (float)parameter->default_value;
      else if (parameter->type != BPT_OP_VALUE_FLOAT && slot >= int_count)
        node->int_attributes[slot] = (int64_t)parameter->default_value;
    }
  }
  for (int i = 0; i < int_count; i++) node->int_attributes[i] = int_attributes[i];
  for (int i = 0; i < float_count; i++) node->float_attributes[i] = float_attributes[i];
  node->dtype = BPT_DTYPE_F32;
  bpt_status checked = bpt_node_check_parameters(node);
  if (checked != BPT_OK) {
    free(node);
    return checked;
  }
  if (definition->infer_shape) {
    bpt_status status = bpt_node_infer_shape(node);
    if (status == BPT_OK) status = bpt_node_check_shape(node);
    if (status != BPT_OK) {
      free(node);
      return status;
    }
  }
  if (definition->view_of_input) node->view_source = bpt_node_buffer_owner(node->inputs[0]);
  memcpy(node->declared_dims, node->dims, sizeof node->dims);
  graph->nodes[graph->node_count++] = node;
  *out = node;
  return BPT_OK;
}

static bpt_status check_dims(bpt_graph *graph, const char *what, const char *name, int rank, const int64_t *dims,
                             int minimum_rank, int maximum_rank) {
  if (rank < minimum_rank || rank > maximum_rank)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "%s '%s': rank %d is outside [%d, %d]", what, name ? name : "",
                     rank, minimum_rank, maximum_rank);
  if (rank > 0 && !dims)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s '%s': dims is NULL", what, name ? name : "");
  for (int i = 0; i < rank; i++)
    if (dims[i] < 1 || dims[i] > BPT_MAX_DIM)
      return bpt_error(graph->context, BPT_ERR_SHAPE, "%s '%s': dimension %d is %lld, must be in [1, 2^31 - 1]", what,
                       name ? name : "", i, (long long)dims[i]);
  /* Bound the element count so that later size arithmetic cannot overflow. */
  int64_t count;
  if (!bpt_checked_product(dims, rank, BPT_MAX_ELEMENTS, &count))
    return bpt_error(graph->context, BPT_ERR_SHAPE, "%s '%s': more than 2^40 elements", what, name ? name : "");
  return BPT_OK;
}

bpt_status bpt_node_infer_shape(bpt_node *node) {
  node->sequence_axis = 0;
  BPT_CHECK(bpt_op_get(node->op)->infer_shape(node));
  if (node->sequence) node->sequence_axis = 1;
  return BPT_OK;
}

bpt_status bpt_node_infer_elementwise_shape(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  if (x->dtype != BPT_DTYPE_F32) return bpt_node_error(node, BPT_ERR_DTYPE, "input '%s' must be f32", x->name);
  node->batched = x->batched;
  node->sequence = x->sequence;
  node->sequence_axis = x->sequence_axis;
  node->rank = x->rank;
  for (int i = 0; i < x->rank; i++)
    node->dims[i] = x->dims[i];
  return BPT_OK;
}

static bpt_status broadcast_mismatch(bpt_node *node, const bpt_node *a, const bpt_node *b, const char *why) {
  char shape_a[96], shape_b[96];
  return bpt_node_error(node, BPT_ERR_SHAPE, "inputs '%s' (%s) and '%s' (%s) do not broadcast: %s", a->name,
                        bpt_shape_string(a, shape_a, sizeof shape_a), b->name,
                        bpt_shape_string(b, shape_b, sizeof shape_b), why);
}

bpt_status bpt_node_infer_broadcast_shape(bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  if (a->dtype != BPT_DTYPE_F32 || b->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "inputs '%s' and '%s' must be f32", a->name, b->name);
  /* wide: the operand with more axes (the batched one when only one is). */
  const bpt_node *wide = a->rank > b->rank || (a->rank == b->rank && a->batched) ? a : b;
  const bpt_node *narrow = wide == a ? b : a;
  if (a->batched && b->batched && a->rank != b->rank)
    return broadcast_mismatch(node, a, b, "batched inputs must have the same rank, so that their batches align");
  if (narrow->batched && !wide->batched)
    return broadcast_mismatch(node, a, b, "the unbatched input has more axes than the batched one");
  const int offset = wide->rank - narrow->rank;
  for (int i = 0; i < wide->rank; i++) {
    const int j = i - offset; /* narrow's axis aligned with wide's axis i, if any */
    const bool wide_batch = i == 0 && wide->batched, narrow_batch = j == 0 && narrow->batched;
    int64_t dim = wide->dims[i];
    if (j >= 0 && !(wide_batch && narrow_batch)) {
      const int64_t other = narrow->dims[j];
      if (wide_batch && other != 1)
        return broadcast_mismatch(node, a, b, "an unbatched input's axis against the batch must be 1");
      if (!wide_batch && dim != other && dim != 1 && other != 1)
        return broadcast_mismatch(node, a, b, "axes differ and neither is 1");
      if (!wide_batch && dim == 1) dim = other;
    }
    node->dims[i] = dim;
  }
  node->rank = wide->rank;
  node->batched = wide->batched;
  node->sequence = a->sequence || b->sequence;
  const bpt_node *along = a->sequence_axis ? a : b;
  node->sequence_axis = along->sequence_axis ? along->sequence_axis + node->rank - along->rank : 0;
  return BPT_OK;
}

bool bpt_node_broadcasts(const bpt_node *node, const bpt_node *input) {
  if (input->rank != node->rank || input->batched != node->batched) return true;
  for (int i = input->batched ? 1 : 0; i < input->rank; i++)
    if (input->dims[i] != node->dims[i]) return true;
  return false;
}

bpt_status bpt_node_check_shape(const bpt_node *node) {
  char shape[96];
  const int first = node->batched ? 1 : 0;
  for (int i = first; i < node->rank; i++)
    if (node->dims[i] < 1 || node->dims[i] > BPT_MAX_DIM)
      return bpt_node_error(node, BPT_ERR_SHAPE, "dimension %d of the output would be %lld, outside [1, 2^31 - 1]", i,
                            (long long)node->dims[i]);
  int64_t count;
  if (!bpt_checked_product(node->dims + first, node->rank - first, BPT_MAX_ELEMENTS, &count))
    return bpt_node_error(node, BPT_ERR_SHAPE, "the output (%s) would hold more than 2^40 values per sample",
                          bpt_shape_string(node, shape, sizeof shape));
  return BPT_OK;
}

bpt_status bpt_graph_input(bpt_graph *graph, const char *name, bpt_dtype dtype, int rank, const int64_t *dims,
                           bpt_node **out) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_input: graph is NULL");
  BPT_CHECK(check_dims(graph, "input", name, rank, dims, 0, BPT_MAX_RANK - 1));
  if (dtype != BPT_DTYPE_F32 && dtype != BPT_DTYPE_I32)
    return bpt_error(graph->context, BPT_ERR_DTYPE, "input '%s': dtype %s is not accepted (f32 or i32)",
                     name ? name : "", bpt_dtype_name(dtype));
  BPT_CHECK(bpt_graph_add_node(graph, BPT_OP_INPUT, name, NULL, 0, out));
  bpt_node *node = *out;
  node->dtype = dtype;
  node->batched = true;
  node->rank = rank + 1;
  node->dims[0] = 1;
  for (int i = 0; i < rank; i++) node->dims[i + 1] = dims[i];
  memcpy(node->declared_dims, node->dims, sizeof node->dims);
  return BPT_OK;
}

bpt_status bpt_graph_input_sequence(bpt_graph *graph, const char *name, bpt_dtype dtype, int64_t length, int rank,
                                    const int64_t *dims, bpt_node **out) {
  if (out) *out = NULL;
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_input_sequence: graph is NULL");
  if (length < 1 || length > BPT_MAX_DIM)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "input '%s': sequence length %lld is outside [1, 2^31 - 1]",
                     name ? name : "", (long long)length);
  if (rank < 0 || rank > BPT_MAX_RANK - 2)
    return bpt_error(graph->context, BPT_ERR_SHAPE, "input '%s': per-token rank %d is outside [0, %d]",
                     name ? name : "", rank, BPT_MAX_RANK - 2);
  if (rank > 0 && !dims)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "input '%s': dims is NULL", name ? name : "");
  int64_t sample[BPT_MAX_RANK] = {length};
  for (int i = 0; i < rank; i++) sample[i + 1] = dims[i];
  BPT_CHECK(bpt_graph_input(graph, name, dtype, rank + 1, sample, out));
  (*out)->sequence = true;
  (*out)->sequence_axis = 1;
  return BPT_OK;
}

bpt_status bpt_graph_parameter(bpt_graph *graph, const char *name, int rank, const int64_t *dims,
                               bpt_initializer initializer, bpt_node **out) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_parameter: graph is NULL");
  BPT_CHECK(check_dims(graph, "parameter", name, rank, dims, 1, BPT_MAX_RANK));
  if ((unsigned)initializer > (unsigned)BPT_INIT_NORMAL_SMALL)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "parameter '%s': unknown initializer %d",
                     name ? name : "", (int)initializer);
  BPT_CHECK(bpt_graph_add_node(graph, BPT_OP_PARAMETER, name, NULL, 0, out));
  bpt_node *node = *out;
  node->rank = rank;
  for (int i = 0; i < rank; i++) node->dims[i] = dims[i];
  memcpy(node->declared_dims, node->dims, sizeof node->dims);
  node->requires_grad = true;
  node->initializer = initializer;
  return BPT_OK;
}

static bpt_status build_linear(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_features,
                               bpt_initializer initializer, bpt_node **out) {
  if (out) *out = NULL; /* a failed layer leaves NULL, which the next builder reports with this error */
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_linear: graph is NULL");
  if (!x || !name || !out)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_layer_linear: x, name and out must be non-NULL");
  if (graph->compiled)
    return bpt_error(graph->context, BPT_ERR_STATE,
                     "bpt_layer_linear '%s': the graph is already compiled; layers cannot be added", name);
  char parameter_name[BPT_NAME_SIZE + 8];
  bpt_node *weight, *bias;
  int64_t in_features = bpt_node_features(x);
  int64_t weight_dims[2] = {out_features, in_features};
  snprintf(parameter_name, sizeof parameter_name, "%s.weight", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 2, weight_dims, initializer, &weight));
  snprintf(parameter_name, sizeof parameter_name, "%s.bias", name);
  BPT_CHECK(bpt_graph_parameter(graph, parameter_name, 1, &out_features, BPT_INIT_ZEROS, &bias));
  return bpt_linear(graph, name, x, weight, bias, out);
}

bpt_status bpt_layer_linear(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_features,
                            bpt_initializer initializer, bpt_node **out) {
  const int mark = bpt_graph_mark(graph);
  return bpt_graph_keep_if_ok(graph, mark, build_linear(graph, name, x, out_features, initializer, out), out);
}

int64_t bpt_node_inner_count(const bpt_node *node) {
  int64_t count = 1;
  for (int i = node->batched ? 1 : 0; i < node->rank; i++) count *= node->dims[i];
  return count;
}

int64_t bpt_node_features(const bpt_node *node) {
  int64_t count = 1;
  for (int i = bpt_node_leading_axes(node); i < node->rank; i++) count *= node->dims[i];
  return count;
}

int64_t bpt_node_count(const bpt_node *node) {
  return node->batched ? node->graph->batch * bpt_node_inner_count(node) : bpt_node_inner_count(node);
}

bpt_status bpt_node_error(const bpt_node *node, bpt_status status, const char *format, ...) {
  char message[BPT_ERROR_MESSAGE_SIZE];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  return bpt_error(node->graph->context, status, "%s '%s': %s", bpt_op_get(node->op)->name, node->name, message);
}

bpt_status bpt_kernel_result(const bpt_node *node, bpt_status status, const char *kernel) {
  if (status == BPT_OK) return BPT_OK;
  return bpt_node_error(node, status, "kernel '%s' failed on backend '%s': %s", kernel,
                        node->graph->backend->vtable->name, node->graph->backend->error_message);
}

static const char *shape_string(const bpt_node *node, const int64_t *dims, char *buffer, size_t size) {
  size_t used = 0;
  buffer[0] = 0;
  /* The batch axis is written N: its size is the run's, not the shape's. */
  for (int i = 0; i < node->rank && used < size; i++) {
    const int written = i == 0 && node->batched ? snprintf(buffer + used, size - used, "N")
                                                : snprintf(buffer + used, size - used, i ? "x%lld" : "%lld",
                                                           (long long)dims[i]);
    used += written > 0 ? (size_t)written : 0;
  }
  if (node->rank == 0) snprintf(buffer, size, "scalar");
  return buffer;
}

const char *bpt_shape_string(const bpt_node *node, char *buffer, size_t size) {
  return shape_string(node, node->dims, buffer, size);
}

const char *bpt_declared_shape_string(const bpt_node *node, char *buffer, size_t size) {
  return shape_string(node, node->declared_dims, buffer, size);
}

bpt_status bpt_graph_find_node(bpt_graph *graph, const char *name, bpt_node **out) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_find_node: graph is NULL");
  if (!name || !out) return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_find_node: NULL argument");
  for (int i = 0; i < graph->node_count; i++)
    if (strcmp(graph->nodes[i]->name, name) == 0) {
      *out = graph->nodes[i];
      return BPT_OK;
    }
  *out = NULL;
  return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_find_node: no node named '%s'", name);
}

const char *bpt_node_name(const bpt_node *node) { return node ? node->name : ""; }
int bpt_node_rank(const bpt_node *node) { return node ? node->rank : 0; }
int64_t bpt_node_dim(const bpt_node *node, int axis) {
  return node && axis >= 0 && axis < node->rank ? node->declared_dims[axis] : 0;
}
