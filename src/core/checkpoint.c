/* Checkpoints: what goes into each section (graph structure, parameters, buffers, generator state, optimiser
 * state, sample order, loop position), and a load that decodes and checks everything on the host before it
 * touches the graph, so a refused file changes nothing. The container itself is checkpoint_format.c. */
#include "bptrain/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/data/dataset_order.h"
#include "core/graph.h"
#include "core/optimizer_state.h"
#include "core/precision.h"

enum {
  TAG_META = BPT_TAG('M', 'E', 'T', 'A'),
  TAG_GRAPH = BPT_TAG('G', 'R', 'P', 'H'),
  TAG_PARAMETERS = BPT_TAG('P', 'A', 'R', 'M'),
  TAG_BUFFERS = BPT_TAG('B', 'U', 'F', 'S'),
  TAG_RNG = BPT_TAG('R', 'N', 'G', ' '),
  TAG_OPTIMIZER = BPT_TAG('O', 'P', 'T', 'M'),
  TAG_ORDER = BPT_TAG('D', 'O', 'R', 'D'),
  /* The dynamic loss scaler (scale, steps since its last change, skipped steps), when the graph has one. */
  TAG_LOSS_SCALER = BPT_TAG('L', 'S', 'C', 'L'),
};

static const char *const optimizer_kind_names[] = {"sgd", "adam", "adamw"};

bpt_checkpoint_contents bpt_checkpoint_contents_default(void) {
  bpt_checkpoint_contents contents;
  memset(&contents, 0, sizeof contents);
  contents.size = sizeof contents;
  return contents;
}

static bpt_status add_buffer(bpt_graph *graph, const char *name, float *values, const bpt_node *owner,
                             size_t byte_offset, int64_t count) {
  if (!graph || !name || (!values && !owner) || count < 1)
    return bpt_error(graph ? graph->context : NULL, BPT_ERR_INTERNAL, "bpt_graph_register_buffer: bad arguments");
  if (strlen(name) >= BPT_NAME_SIZE)
    return bpt_error(graph->context, BPT_ERR_INTERNAL, "buffer '%.20s...': name too long", name);
  if (owner && owner->graph != graph)
    return bpt_error(graph->context, BPT_ERR_INTERNAL, "buffer '%s': node '%s' belongs to another graph", name,
                     owner->name);
  bpt_graph_buffer *buffer = NULL;
  for (int i = 0; i < graph->buffer_count; i++)
    if (strcmp(graph->buffers[i].name, name) == 0) buffer = &graph->buffers[i];
  if (!buffer) {
    if (graph->buffer_count == graph->buffer_capacity) {
      int capacity = graph->buffer_capacity ? 2 * graph->buffer_capacity : 8;
      bpt_graph_buffer *buffers = realloc(graph->buffers, (size_t)capacity * sizeof *buffers);
      if (!buffers) return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "buffer '%s': out of memory", name);
      graph->buffers = buffers;
      graph->buffer_capacity = capacity;
    }
    buffer = &graph->buffers[graph->buffer_count++];
    snprintf(buffer->name, sizeof buffer->name, "%s", name);
  }
  buffer->values = values;
  buffer->owner = owner;
  buffer->byte_offset = byte_offset;
  buffer->count = count;
  return BPT_OK;
}

bpt_status bpt_graph_register_buffer(bpt_graph *graph, const char *name, float *values, int64_t count) {
  return add_buffer(graph, name, values, NULL, 0, count);
}

bpt_status bpt_graph_register_node_buffer(bpt_graph *graph, const char *name, const bpt_node *owner, size_t byte_offset,
                                          int64_t count) {
  if (!owner) return bpt_error(graph ? graph->context : NULL, BPT_ERR_INTERNAL, "buffer: owner node is NULL");
  return add_buffer(graph, name, NULL, owner, byte_offset, count);
}

/* Where a buffer's values are now (a node's saved memory exists only after compile). */
static float *buffer_values(const bpt_graph_buffer *buffer) {
  if (!buffer->owner) return buffer->values;
  const bpt_op_definition *definition = bpt_op_get(buffer->owner->op);
  size_t available = definition->saved_bytes ? definition->saved_bytes(buffer->owner) : 0;
  bool fits =
      buffer->byte_offset <= available && (size_t)buffer->count <= (available - buffer->byte_offset) / sizeof(float);
  return buffer->owner->saved && fits ? (float *)((char *)buffer->owner->saved + buffer->byte_offset) : NULL;
}

void bpt_graph_free_buffers(bpt_graph *graph) {
  free(graph->buffers);
  graph->buffers = NULL;
  graph->buffer_count = graph->buffer_capacity = 0;
}

/* ---- saving ---- */

/* Downloads a block laid out like the parameter block into packed order (no alignment padding). */
static bpt_status download_packed(bpt_graph *graph, const float *block, float *packed) {
  bpt_backend *backend = graph->backend;
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    const bpt_node *node = graph->parameters[p];
    int64_t count = bpt_node_inner_count(node);
    if (backend->vtable->download(backend, packed + at, block + node->param_offset, (size_t)count * sizeof(float)) !=
        BPT_OK)
      return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_checkpoint_save: reading parameters");
    at += count;
  }
  return BPT_OK;
}

static bpt_status upload_packed(bpt_graph *graph, float *block, const float *packed) {
  bpt_backend *backend = graph->backend;
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    const bpt_node *node = graph->parameters[p];
    int64_t count = bpt_node_inner_count(node);
    if (backend->vtable->upload(backend, block + node->param_offset, packed + at, (size_t)count * sizeof(float)) !=
        BPT_OK)
      return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_checkpoint_load: writing parameters");
    at += count;
  }
  return BPT_OK;
}

static void put_tensor_header(bpt_writer *writer, const char *name, int rank, const int64_t *dims) {
  bpt_put_string(writer, name);
  bpt_put_u32(writer, BPT_DTYPE_F32);
  bpt_put_u32(writer, (uint32_t)rank);
  for (int i = 0; i < rank; i++)
    bpt_put_i64(writer, dims[i]);
}

static void write_meta(bpt_writer *writer, const bpt_graph *graph, const bpt_checkpoint_contents *contents) {
  size_t start = bpt_section_begin(writer, TAG_META, 0);
  bpt_put_u64(writer, graph->context->seed);
  bpt_put_i64(writer, contents->epoch);
  bpt_put_i64(writer, contents->step);
  bpt_put_i64(writer, graph->forward_count);
  bpt_put_i64(writer, graph->max_batch);
  bpt_put_string(writer, graph->backend->vtable->name);
  bpt_section_end(writer, start);
}

/* Attributes that the library sets itself (state, not configuration): linear's float slot 0 holds the FP8
 * scale of the last forward's saved activation; relu's integer slot 0 says whether compile chose the
 * backend's mask kernels, which depends on the backend, not the model. They are stored as 0 and not compared. */
static bool attribute_is_state(bpt_op_id op, int float_index) { return op == BPT_OP_LINEAR && float_index == 0; }
static bool int_attribute_is_state(bpt_op_id op, int index) { return op == BPT_OP_RELU && index == 0; }

static void write_graph(bpt_writer *writer, const bpt_graph *graph) {
  size_t start = bpt_section_begin(writer, TAG_GRAPH, 0);
  bpt_put_u32(writer, (uint32_t)graph->node_count);
  bpt_put_u32(writer, graph->loss ? (uint32_t)graph->loss->index + 1 : 0);
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    bpt_put_u32(writer, (uint32_t)node->op);
    bpt_put_string(writer, bpt_op_get(node->op)->name);
    bpt_put_string(writer, node->name);
    bpt_put_u32(writer, (uint32_t)node->dtype);
    bpt_put_u32(writer, node->batched);
    bpt_put_u32(writer, (uint32_t)node->rank);
    /* The batch dimension is the compiled maximum, which may differ between runs; store 0 for it. */
    for (int d = 0; d < node->rank; d++)
      bpt_put_i64(writer, node->batched && d == 0 ? 0 : node->dims[d]);
    bpt_put_u32(writer, (uint32_t)node->input_count);
    for (int k = 0; k < node->input_count; k++)
      bpt_put_u32(writer, (uint32_t)node->inputs[k]->index);
    /* Format 2: the op's attributes (stride, padding, rates, slopes, epsilons...), so that a graph that differs
     * only there is refused rather than silently computing something else with the saved weights. */
    bpt_put_u32(writer, BPT_MAX_INT_ATTRIBUTES);
    for (int a = 0; a < BPT_MAX_INT_ATTRIBUTES; a++)
      bpt_put_i64(writer, int_attribute_is_state(node->op, a) ? 0 : node->int_attributes[a]);
    bpt_put_u32(writer, BPT_MAX_FLOAT_ATTRIBUTES);
    for (int a = 0; a < BPT_MAX_FLOAT_ATTRIBUTES; a++)
      bpt_put_f32(writer, attribute_is_state(node->op, a) ? 0.0f : node->float_attributes[a]);
  }
  bpt_section_end(writer, start);
}

static bpt_status write_parameters(bpt_writer *writer, bpt_graph *graph, float *host) {
  BPT_CHECK(download_packed(graph, graph->parameter_block, host));
  size_t start = bpt_section_begin(writer, TAG_PARAMETERS, 0);
  bpt_put_u32(writer, (uint32_t)graph->parameter_count);
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    const bpt_node *node = graph->parameters[p];
    put_tensor_header(writer, node->name, node->rank, node->dims);
    bpt_put_f32_array(writer, host + at, bpt_node_inner_count(node));
    at += bpt_node_inner_count(node);
  }
  bpt_section_end(writer, start);
  return BPT_OK;
}

static bpt_status write_buffers(bpt_writer *writer, bpt_graph *graph) {
  size_t start = bpt_section_begin(writer, TAG_BUFFERS, 0);
  bpt_put_u32(writer, (uint32_t)graph->buffer_count);
  bpt_backend *backend = graph->backend;
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    float *host = bpt_calloc(graph->context, (size_t)buffer->count, sizeof *host, "checkpoint buffer");
    if (!host) return BPT_ERR_OUT_OF_MEMORY;
    float *values = buffer_values(buffer);
    if (!values || backend->vtable->download(backend, host, values, (size_t)buffer->count * sizeof *host) != BPT_OK) {
      free(host);
      return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_checkpoint_save: reading buffers");
    }
    put_tensor_header(writer, buffer->name, 1, &buffer->count);
    bpt_put_f32_array(writer, host, buffer->count);
    free(host);
  }
  bpt_section_end(writer, start);
  return BPT_OK;
}

static void write_rng(bpt_writer *writer, const bpt_graph *graph) {
  size_t start = bpt_section_begin(writer, TAG_RNG, 0);
  bpt_put_u32(writer, 1);
  bpt_put_string(writer, "graph");
  for (int i = 0; i < 4; i++)
    bpt_put_u64(writer, graph->rng.state[i]);
  bpt_section_end(writer, start);
}

/* Optional, so that files of runs without loss scaling, and readers that do not know it, still work. */
static void write_loss_scaler(bpt_writer *writer, const bpt_precision_state *state) {
  size_t start = bpt_section_begin(writer, TAG_LOSS_SCALER, BPT_SECTION_OPTIONAL);
  bpt_put_f32(writer, state->loss_scale);
  bpt_put_i64(writer, state->clean_steps);
  bpt_put_i64(writer, state->skipped_steps);
  bpt_section_end(writer, start);
}

static bpt_status write_optimizer(bpt_writer *writer, bpt_graph *graph, bpt_optimizer *optimizer, float *host) {
  bpt_optimizer_state view;
  bpt_optimizer_state_view(optimizer, &view);
  const bpt_optimizer_options *o = view.options;
  size_t start = bpt_section_begin(writer, TAG_OPTIMIZER, 0);
  bpt_put_u32(writer, (uint32_t)o->kind);
  bpt_put_f32(writer, o->learning_rate);
  bpt_put_f32(writer, o->momentum);
  bpt_put_u32(writer, o->nesterov != 0);
  bpt_put_f32(writer, o->weight_decay);
  bpt_put_f32(writer, o->beta1);
  bpt_put_f32(writer, o->beta2);
  bpt_put_f32(writer, o->epsilon);
  bpt_put_i64(writer, *view.steps);
  int64_t count = bpt_graph_parameter_count(graph);
  for (int b = 0; b < 2; b++) {
    bpt_put_u32(writer, view.buffers[b] != NULL);
    if (!view.buffers[b]) continue;
    BPT_CHECK(download_packed(graph, view.buffers[b], host));
    bpt_put_i64(writer, count);
    bpt_put_f32_array(writer, host, count);
  }
  bpt_section_end(writer, start);
  return BPT_OK;
}

static void write_order(bpt_writer *writer, bpt_dataset *dataset) {
  int64_t size;
  const int64_t *order = bpt_dataset_order_view(dataset, &size);
  size_t start = bpt_section_begin(writer, TAG_ORDER, 0);
  bpt_put_i64(writer, size);
  for (int64_t i = 0; i < size; i++)
    bpt_put_i64(writer, order[i]);
  bpt_section_end(writer, start);
}

static bpt_status check_arguments(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents,
                                  bpt_checkpoint_contents *copy, const char *where) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!path || !path[0]) return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: path is NULL or empty", where);
  if (!graph->compiled) return bpt_error(graph->context, BPT_ERR_STATE, "%s: compile the graph first", where);
  *copy = bpt_checkpoint_contents_default();
  if (contents)
    BPT_CHECK(bpt_copy_options(graph->context, copy, sizeof *copy, contents, contents->size,
                               offsetof(bpt_checkpoint_contents, step) + sizeof copy->step, where));
  if (copy->optimizer) {
    bpt_optimizer_state view;
    bpt_optimizer_state_view(copy->optimizer, &view);
    if (view.graph != graph)
      return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: the optimizer belongs to another graph", where);
  }
  return BPT_OK;
}

bpt_status bpt_checkpoint_save(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents) {
  bpt_checkpoint_contents copy;
  BPT_CHECK(check_arguments(graph, path, contents, &copy, "bpt_checkpoint_save"));
  int64_t count = bpt_graph_parameter_count(graph);
  float *host = bpt_calloc(graph->context, (size_t)(count ? count : 1), sizeof *host, "checkpoint staging buffer");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_writer writer = {0};
  bpt_writer_start(&writer);
  uint32_t sections = 4;
  write_meta(&writer, graph, &copy);
  write_graph(&writer, graph);
  bpt_status status = write_parameters(&writer, graph, host);
  write_rng(&writer, graph);
  if (status == BPT_OK && graph->buffer_count > 0) {
    status = write_buffers(&writer, graph);
    sections++;
  }
  if (status == BPT_OK && copy.optimizer) {
    status = write_optimizer(&writer, graph, copy.optimizer, host);
    sections++;
  }
  if (status == BPT_OK && copy.dataset) {
    write_order(&writer, copy.dataset);
    sections++;
  }
  if (status == BPT_OK && graph->precision && graph->precision->scaling) {
    write_loss_scaler(&writer, graph->precision);
    sections++;
  }
  bpt_writer_finish(&writer, sections);
  free(host);
  if (status == BPT_OK && writer.failed)
    status = bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_checkpoint_save '%s': out of memory", path);
  if (status == BPT_OK) status = bpt_write_file_atomically(graph->context, path, writer.bytes, writer.size);
  bpt_writer_free(&writer);
  return status;
}

/* ---- loading ---- */

/* Everything a file says, decoded and checked against the graph, before any of it is applied. */
typedef struct decoded {
  uint64_t seed;
  int64_t epoch, step, forward_count;
  float *parameters; /* packed */
  float **buffers;   /* one per graph buffer */
  bpt_rng rng;
  bool has_rng;
  bpt_optimizer_options optimizer_options;
  int64_t optimizer_steps;
  float *optimizer_buffers[2];
  int64_t *order;
  bool has_loss_scaler;
  float loss_scale;
  int64_t clean_steps, skipped_steps;
} decoded;

static void free_decoded(decoded *d, int buffer_count) {
  free(d->parameters);
  for (int i = 0; d->buffers && i < buffer_count; i++)
    free(d->buffers[i]);
  free(d->buffers);
  free(d->optimizer_buffers[0]);
  free(d->optimizer_buffers[1]);
  free(d->order);
}

typedef struct loader {
  bpt_graph *graph;
  bpt_context *context;
  char where[200]; /* "checkpoint 'path' (libbptrain 0.1.0)" */
} loader;

static bpt_status truncated(const loader *l, const char *section) {
  return bpt_error(l->context, BPT_ERR_FORMAT, "%s: section '%s' is truncated or malformed", l->where, section);
}

static bpt_status read_meta(const loader *l, bpt_reader *r, decoded *d) {
  int64_t max_batch;
  char backend[BPT_NAME_SIZE];
  if (!bpt_get_u64(r, &d->seed) || !bpt_get_i64(r, &d->epoch) || !bpt_get_i64(r, &d->step) ||
      !bpt_get_i64(r, &d->forward_count) || !bpt_get_i64(r, &max_batch) || !bpt_get_string(r, backend, sizeof backend))
    return truncated(l, "META");
  if (d->forward_count < 0) return truncated(l, "META");
  return BPT_OK;
}

static const char *file_op_name(uint32_t op, const char *stored) {
  return stored[0] ? stored : bpt_op_get((bpt_op_id)op) ? bpt_op_get((bpt_op_id)op)->name : "?";
}

/* Compares a node's saved op attributes with this graph's, bit for bit (so -0 and 0, or two NaNs, are told
 * apart the same way the saving graph would have computed with them). */
static bpt_status read_attributes(const loader *l, bpt_reader *r, int index, const bpt_node *node,
                                  const char *op_name) {
  uint32_t int_count, float_count;
  if (!bpt_get_u32(r, &int_count) || int_count > BPT_MAX_INT_ATTRIBUTES) return truncated(l, "GRPH");
  for (uint32_t a = 0; a < int_count; a++) {
    int64_t value;
    if (!bpt_get_i64(r, &value)) return truncated(l, "GRPH");
    if (!int_attribute_is_state(node->op, (int)a) && value != node->int_attributes[a])
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s', has different op attributes in the file and in this graph: integer "
                       "attribute %u is %lld in the file, %lld here",
                       l->where, index, op_name, node->name, a, (long long)value, (long long)node->int_attributes[a]);
  }
  if (!bpt_get_u32(r, &float_count) || float_count > BPT_MAX_FLOAT_ATTRIBUTES) return truncated(l, "GRPH");
  for (uint32_t a = 0; a < float_count; a++) {
    float value;
    if (!bpt_get_f32(r, &value)) return truncated(l, "GRPH");
    float ours = attribute_is_state(node->op, (int)a) ? 0.0f : node->float_attributes[a];
    if (memcmp(&value, &ours, sizeof value) != 0)
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s', has different op attributes in the file and in this graph: float "
                       "attribute %u is %.9g in the file, %.9g here",
                       l->where, index, op_name, node->name, a, (double)value, (double)ours);
  }
  /* Slots a file does not list (fewer than this library keeps) must be unused here. */
  for (uint32_t a = int_count; a < BPT_MAX_INT_ATTRIBUTES; a++)
    if (!int_attribute_is_state(node->op, (int)a) && node->int_attributes[a] != 0)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node %d, %s '%s': integer attribute %u is not in the file",
                       l->where, index, op_name, node->name, a);
  for (uint32_t a = float_count; a < BPT_MAX_FLOAT_ATTRIBUTES; a++)
    if (!attribute_is_state(node->op, (int)a) && node->float_attributes[a] != 0.0f)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node %d, %s '%s': float attribute %u is not in the file",
                       l->where, index, op_name, node->name, a);
  return BPT_OK;
}

static bpt_status read_graph(const loader *l, bpt_reader *r) {
  const bpt_graph *graph = l->graph;
  uint32_t count, loss;
  if (!bpt_get_u32(r, &count) || !bpt_get_u32(r, &loss)) return truncated(l, "GRPH");
  if (count != (uint32_t)graph->node_count)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the saved graph has %u nodes, this graph has %d", l->where, count,
                     graph->node_count);
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    const char *op_name = bpt_op_get(node->op)->name;
    char stored_op[BPT_NAME_SIZE], name[BPT_NAME_SIZE];
    uint32_t op, dtype, batched, rank, inputs;
    if (!bpt_get_u32(r, &op) || !bpt_get_string(r, stored_op, sizeof stored_op) ||
        !bpt_get_string(r, name, sizeof name) || !bpt_get_u32(r, &dtype) || !bpt_get_u32(r, &batched) ||
        !bpt_get_u32(r, &rank) || rank > BPT_MAX_RANK)
      return truncated(l, "GRPH");
    if (op != (uint32_t)node->op || strcmp(name, node->name) != 0)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node %d is %s '%s' in the file but %s '%s' in this graph",
                       l->where, i, file_op_name(op, stored_op), name, op_name, node->name);
    if (dtype != (uint32_t)node->dtype)
      return bpt_error(l->context, BPT_ERR_DTYPE, "%s: %s '%s' is %s in the file but %s in this graph", l->where,
                       op_name, name, bpt_dtype_name((bpt_dtype)dtype), bpt_dtype_name(node->dtype));
    int64_t dims[BPT_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++)
      if (!bpt_get_i64(r, &dims[d])) return truncated(l, "GRPH");
    bool same = rank == (uint32_t)node->rank && (batched != 0) == node->batched;
    for (uint32_t d = 0; same && d < rank; d++)
      same = (node->batched && d == 0) || dims[d] == node->dims[d];
    if (!same) {
      char theirs[96] = "", ours[96];
      size_t used = 0;
      for (uint32_t d = 0; d < rank && used < sizeof theirs; d++)
        used += (size_t)snprintf(theirs + used, sizeof theirs - used, d ? "x%lld" : "%lld",
                                 batched && d == 0 ? (long long)node->graph->max_batch : (long long)dims[d]);
      if (rank == 0) snprintf(theirs, sizeof theirs, "scalar");
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: %s '%s' has shape %s%s in the file but %s%s in this graph",
                       l->where, op_name, name, theirs, batched ? " (batched)" : "",
                       bpt_shape_string(node, ours, sizeof ours), node->batched ? " (batched)" : "");
    }
    if (!bpt_get_u32(r, &inputs) || inputs > BPT_MAX_INPUTS) return truncated(l, "GRPH");
    bool same_inputs = inputs == (uint32_t)node->input_count;
    for (uint32_t k = 0; k < inputs; k++) {
      uint32_t input;
      if (!bpt_get_u32(r, &input)) return truncated(l, "GRPH");
      same_inputs = same_inputs && input == (uint32_t)node->inputs[k]->index;
    }
    if (!same_inputs)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: %s '%s' takes different inputs in the file and in this graph",
                       l->where, op_name, name);
    BPT_CHECK(read_attributes(l, r, i, node, op_name));
  }
  uint32_t our_loss = graph->loss ? (uint32_t)graph->loss->index + 1 : 0;
  if (loss != our_loss)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the saved graph's loss is node %lld, this graph's is node %lld",
                     l->where, (long long)loss - 1, (long long)our_loss - 1);
  if (bpt_reader_left(r) != 0) return truncated(l, "GRPH");
  return BPT_OK;
}

/* Reads one named f32 tensor into values, checking it against the expected name and shape. */
static bpt_status read_tensor(const loader *l, bpt_reader *r, const char *section, const char *what,
                              const char *expected_name, int expected_rank, const int64_t *expected_dims,
                              float *values) {
  char name[BPT_NAME_SIZE];
  uint32_t dtype, rank;
  if (!bpt_get_string(r, name, sizeof name) || !bpt_get_u32(r, &dtype) || !bpt_get_u32(r, &rank) || rank > BPT_MAX_RANK)
    return truncated(l, section);
  int64_t dims[BPT_MAX_RANK];
  for (uint32_t d = 0; d < rank; d++)
    if (!bpt_get_i64(r, &dims[d])) return truncated(l, section);
  if (strcmp(name, expected_name) != 0)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the file has %s '%s' where this graph has '%s'", l->where, what,
                     name, expected_name);
  if (dtype != BPT_DTYPE_F32)
    return bpt_error(l->context, BPT_ERR_DTYPE, "%s: %s '%s' is %s in the file, expected f32", l->where, what, name,
                     bpt_dtype_name((bpt_dtype)dtype));
  bool same = rank == (uint32_t)expected_rank;
  for (uint32_t d = 0; same && d < rank; d++)
    same = dims[d] == expected_dims[d];
  if (!same)
    return bpt_error(l->context, BPT_ERR_SHAPE,
                     "%s: %s '%s' has a different shape in the file (rank %u, first "
                     "dimension %lld) than in this graph (rank %d, first dimension %lld)",
                     l->where, what, name, rank, rank ? (long long)dims[0] : 0LL, expected_rank,
                     (long long)expected_dims[0]);
  int64_t count = 1;
  for (int d = 0; d < expected_rank; d++)
    count *= expected_dims[d];
  if (!bpt_get_f32_array(r, values, count)) return truncated(l, section);
  return BPT_OK;
}

static bpt_status read_parameters(const loader *l, bpt_reader *r, decoded *d) {
  const bpt_graph *graph = l->graph;
  uint32_t count;
  if (!bpt_get_u32(r, &count)) return truncated(l, "PARM");
  if (count != (uint32_t)graph->parameter_count)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the file has %u parameters, this graph has %d", l->where, count,
                     graph->parameter_count);
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    const bpt_node *node = graph->parameters[p];
    BPT_CHECK(read_tensor(l, r, "PARM", "parameter", node->name, node->rank, node->dims, d->parameters + at));
    at += bpt_node_inner_count(node);
  }
  if (bpt_reader_left(r) != 0) return truncated(l, "PARM");
  return BPT_OK;
}

static bpt_status read_buffers(const loader *l, bpt_reader *r, decoded *d) {
  const bpt_graph *graph = l->graph;
  uint32_t count;
  if (!bpt_get_u32(r, &count)) return truncated(l, "BUFS");
  if (count != (uint32_t)graph->buffer_count)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the file has %u buffers, this graph has %d", l->where, count,
                     graph->buffer_count);
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    d->buffers[i] = bpt_calloc(l->context, (size_t)buffer->count, sizeof(float), "checkpoint buffer");
    if (!d->buffers[i]) return BPT_ERR_OUT_OF_MEMORY;
    BPT_CHECK(read_tensor(l, r, "BUFS", "buffer", buffer->name, 1, &buffer->count, d->buffers[i]));
  }
  if (bpt_reader_left(r) != 0) return truncated(l, "BUFS");
  return BPT_OK;
}

static bpt_status read_rng(const loader *l, bpt_reader *r, decoded *d) {
  uint32_t count;
  char name[BPT_NAME_SIZE];
  if (!bpt_get_u32(r, &count)) return truncated(l, "RNG ");
  for (uint32_t i = 0; i < count; i++) {
    uint64_t state[4];
    if (!bpt_get_string(r, name, sizeof name) || !bpt_get_u64(r, &state[0]) || !bpt_get_u64(r, &state[1]) ||
        !bpt_get_u64(r, &state[2]) || !bpt_get_u64(r, &state[3]))
      return truncated(l, "RNG ");
    if (strcmp(name, "graph") != 0)
      return bpt_error(l->context, BPT_ERR_FORMAT, "%s: unknown random generator '%s'", l->where, name);
    /* xoshiro's all-zero state is a fixed point; no generator ever reaches it. */
    if ((state[0] | state[1] | state[2] | state[3]) == 0) return truncated(l, "RNG ");
    memcpy(d->rng.state, state, sizeof state);
    d->has_rng = true;
  }
  if (bpt_reader_left(r) != 0) return truncated(l, "RNG ");
  return BPT_OK;
}

static bpt_status differs(const loader *l, const char *option, double file, double ours) {
  return bpt_error(l->context, BPT_ERR_INVALID_ARGUMENT, "%s: the saved optimizer has %s %g, this one %g", l->where,
                   option, file, ours);
}

static bpt_status read_optimizer(const loader *l, bpt_reader *r, bpt_optimizer *optimizer, decoded *d) {
  bpt_optimizer_state view;
  bpt_optimizer_state_view(optimizer, &view);
  const bpt_optimizer_options *ours = view.options;
  bpt_optimizer_options *file = &d->optimizer_options;
  uint32_t kind, nesterov;
  if (!bpt_get_u32(r, &kind) || !bpt_get_f32(r, &file->learning_rate) || !bpt_get_f32(r, &file->momentum) ||
      !bpt_get_u32(r, &nesterov) || !bpt_get_f32(r, &file->weight_decay) || !bpt_get_f32(r, &file->beta1) ||
      !bpt_get_f32(r, &file->beta2) || !bpt_get_f32(r, &file->epsilon) || !bpt_get_i64(r, &d->optimizer_steps))
    return truncated(l, "OPTM");
  if (kind != (uint32_t)ours->kind)
    return bpt_error(l->context, BPT_ERR_INVALID_ARGUMENT, "%s: the saved optimizer is %s, this one is %s", l->where,
                     kind < 3 ? optimizer_kind_names[kind] : "unknown", optimizer_kind_names[ours->kind]);
  /* The learning rate is restored (schedules change it); the rest defines the update rule and must agree. The
   * saved values pass the very check bpt_optimizer_create applies, so whatever was accepted there loads here. */
  file->size = sizeof *file;
  file->kind = ours->kind;
  file->nesterov = nesterov != 0;
  BPT_CHECK(bpt_optimizer_options_check(l->context, file, l->where));
  if (!bpt_optimizer_steps_valid(d->optimizer_steps))
    return bpt_error(l->context, BPT_ERR_FORMAT, "%s: the saved optimizer step count %lld is negative", l->where,
                     (long long)d->optimizer_steps);
  if (file->momentum != ours->momentum) return differs(l, "momentum", file->momentum, ours->momentum);
  if ((nesterov != 0) != (ours->nesterov != 0)) return differs(l, "nesterov", nesterov != 0, ours->nesterov != 0);
  if (file->weight_decay != ours->weight_decay)
    return differs(l, "weight_decay", file->weight_decay, ours->weight_decay);
  if (ours->kind != BPT_OPTIMIZER_SGD) {
    if (file->beta1 != ours->beta1) return differs(l, "beta1", file->beta1, ours->beta1);
    if (file->beta2 != ours->beta2) return differs(l, "beta2", file->beta2, ours->beta2);
    if (file->epsilon != ours->epsilon) return differs(l, "epsilon", file->epsilon, ours->epsilon);
  }
  int64_t count = bpt_graph_parameter_count(l->graph);
  for (int b = 0; b < 2; b++) {
    uint32_t present;
    int64_t stored;
    if (!bpt_get_u32(r, &present)) return truncated(l, "OPTM");
    if ((present != 0) != (view.buffers[b] != NULL))
      return bpt_error(l->context, BPT_ERR_INVALID_ARGUMENT, "%s: the saved optimizer %s state buffer %d", l->where,
                       present ? "has" : "lacks", b);
    if (!present) continue;
    if (!bpt_get_i64(r, &stored)) return truncated(l, "OPTM");
    if (stored != count)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: optimizer state %d has %lld values, the graph %lld parameters",
                       l->where, b, (long long)stored, (long long)count);
    d->optimizer_buffers[b] = bpt_calloc(l->context, (size_t)(count ? count : 1), sizeof(float), "optimizer state");
    if (!d->optimizer_buffers[b]) return BPT_ERR_OUT_OF_MEMORY;
    if (!bpt_get_f32_array(r, d->optimizer_buffers[b], count)) return truncated(l, "OPTM");
  }
  if (bpt_reader_left(r) != 0) return truncated(l, "OPTM");
  return BPT_OK;
}

static bpt_status read_order(const loader *l, bpt_reader *r, bpt_dataset *dataset, decoded *d) {
  int64_t size, stored;
  bpt_dataset_order_view(dataset, &size);
  if (!bpt_get_i64(r, &stored)) return truncated(l, "DORD");
  if (stored != size)
    return bpt_error(l->context, BPT_ERR_SHAPE, "%s: the saved sample order covers %lld samples, the data set has %lld",
                     l->where, (long long)stored, (long long)size);
  if (bpt_reader_left(r) != (size_t)size * 8) return truncated(l, "DORD");
  d->order = bpt_calloc(l->context, (size_t)(size ? size : 1), sizeof *d->order, "sample order");
  unsigned char *seen = bpt_calloc(l->context, (size_t)(size ? size : 1), 1, "sample order check");
  bpt_status status = d->order && seen ? BPT_OK : BPT_ERR_OUT_OF_MEMORY;
  /* Batches index samples through the order: it must be a permutation, or a bad file reads out of bounds. */
  for (int64_t i = 0; status == BPT_OK && i < size; i++) {
    bpt_get_i64(r, &d->order[i]);
    if (d->order[i] < 0 || d->order[i] >= size || seen[d->order[i]])
      status = bpt_error(l->context, BPT_ERR_FORMAT, "%s: the saved sample order is not a permutation (entry %lld)",
                         l->where, (long long)i);
    else
      seen[d->order[i]] = 1;
  }
  free(seen);
  return status;
}

static bpt_status read_loss_scaler(const loader *l, bpt_reader *r, decoded *d) {
  if (!bpt_get_f32(r, &d->loss_scale) || !bpt_get_i64(r, &d->clean_steps) || !bpt_get_i64(r, &d->skipped_steps) ||
      bpt_reader_left(r) != 0)
    return truncated(l, "LSCL");
  /* The same rule the scaler's creation obeys (precision.c). */
  BPT_CHECK(bpt_precision_check_scaler(l->context, d->loss_scale, d->clean_steps, d->skipped_steps, l->where));
  d->has_loss_scaler = true;
  return BPT_OK;
}

static bpt_status find_sections(const loader *l, bpt_section *sections, int count, bpt_section **found,
                                const uint32_t *tags, int tag_count) {
  char name[5];
  for (int i = 0; i < count; i++) {
    int known = -1;
    for (int t = 0; t < tag_count; t++)
      if (sections[i].tag == tags[t]) known = t;
    if (known < 0) {
      if (sections[i].flags & BPT_SECTION_OPTIONAL) continue;
      return bpt_error(l->context, BPT_ERR_FORMAT,
                       "%s: required section '%s' is unknown to libbptrain %s (written by a newer version?)", l->where,
                       bpt_tag_name(sections[i].tag, name), bpt_version());
    }
    if (found[known])
      return bpt_error(l->context, BPT_ERR_FORMAT, "%s: section '%s' appears twice", l->where,
                       bpt_tag_name(sections[i].tag, name));
    found[known] = &sections[i];
  }
  return BPT_OK;
}

static bpt_status missing(const loader *l, const char *what) {
  return bpt_error(l->context, BPT_ERR_FORMAT, "%s: the file holds no %s", l->where, what);
}

static bpt_status decode(const loader *l, bpt_section *sections, int count, const bpt_checkpoint_contents *contents,
                         decoded *d) {
  enum { META, GRAPH, PARAMETERS, BUFFERS, RNG, OPTIMIZER, ORDER, LOSS_SCALER, KINDS };
  const uint32_t tags[KINDS] = {TAG_META, TAG_GRAPH,     TAG_PARAMETERS, TAG_BUFFERS,
                                TAG_RNG,  TAG_OPTIMIZER, TAG_ORDER,      TAG_LOSS_SCALER};
  bpt_section *found[KINDS] = {0};
  BPT_CHECK(find_sections(l, sections, count, found, tags, KINDS));
  if (!found[META]) return missing(l, "META section");
  if (!found[GRAPH]) return missing(l, "graph structure (GRPH section)");
  if (!found[PARAMETERS]) return missing(l, "parameters (PARM section)");
  BPT_CHECK(read_meta(l, &found[META]->payload, d));
  BPT_CHECK(read_graph(l, &found[GRAPH]->payload));
  int64_t parameters = bpt_graph_parameter_count(l->graph);
  d->parameters = bpt_calloc(l->context, (size_t)(parameters ? parameters : 1), sizeof(float), "checkpoint parameters");
  if (!d->parameters) return BPT_ERR_OUT_OF_MEMORY;
  BPT_CHECK(read_parameters(l, &found[PARAMETERS]->payload, d));
  if (l->graph->buffer_count > 0 || found[BUFFERS]) {
    if (!found[BUFFERS]) return missing(l, "buffers (BUFS section) though this graph has some");
    d->buffers = bpt_calloc(l->context, (size_t)(l->graph->buffer_count + 1), sizeof *d->buffers, "buffer list");
    if (!d->buffers) return BPT_ERR_OUT_OF_MEMORY;
    BPT_CHECK(read_buffers(l, &found[BUFFERS]->payload, d));
  }
  if (found[RNG]) BPT_CHECK(read_rng(l, &found[RNG]->payload, d));
  if (found[LOSS_SCALER]) BPT_CHECK(read_loss_scaler(l, &found[LOSS_SCALER]->payload, d));
  if (contents->optimizer) {
    if (!found[OPTIMIZER]) return missing(l, "optimizer state (OPTM section), but an optimizer was given");
    BPT_CHECK(read_optimizer(l, &found[OPTIMIZER]->payload, contents->optimizer, d));
  }
  if (contents->dataset) {
    if (!found[ORDER]) return missing(l, "sample order (DORD section), but a data set was given");
    BPT_CHECK(read_order(l, &found[ORDER]->payload, contents->dataset, d));
  }
  return BPT_OK;
}

static bpt_status apply(const loader *l, const bpt_checkpoint_contents *contents, decoded *d) {
  bpt_graph *graph = l->graph;
  bpt_backend *backend = graph->backend;
  BPT_CHECK(upload_packed(graph, graph->parameter_block, d->parameters));
  for (int i = 0; d->buffers && i < graph->buffer_count; i++)
    if (!buffer_values(&graph->buffers[i]) ||
        backend->vtable->upload(backend, buffer_values(&graph->buffers[i]), d->buffers[i],
                                (size_t)graph->buffers[i].count * sizeof(float)) != BPT_OK)
      return bpt_backend_error(l->context, BPT_ERR_DEVICE, "bpt_checkpoint_load: writing buffers");
  if (d->has_rng) graph->rng = d->rng;
  graph->dropout_seed = d->seed; /* with the step count below, a resumed run draws the same dropout masks */
  graph->forward_count = d->forward_count;
  graph->forward_done = graph->backward_done = false;
  if (contents->optimizer) {
    bpt_optimizer_state view;
    bpt_optimizer_state_view(contents->optimizer, &view);
    for (int b = 0; b < 2; b++)
      if (view.buffers[b]) BPT_CHECK(upload_packed(graph, view.buffers[b], d->optimizer_buffers[b]));
    *view.steps = d->optimizer_steps;
    view.options->learning_rate = d->optimizer_options.learning_rate;
    /* Dropout's masks follow the optimiser step count (fixed between two steps, so accumulated
     * micro-batches share one mask); the graph's counter advances with the optimiser's. */
    graph->random_step = (uint64_t)d->optimizer_steps;
  }
  /* A graph without dynamic scaling (an f32 evaluation of an f16 run, say) has no use for the saved scaler;
   * one whose file has none (an older file) keeps its initial scale. */
  if (d->has_loss_scaler && graph->precision && graph->precision->scaling)
    BPT_CHECK(bpt_precision_restore_scaler(graph, d->loss_scale, d->clean_steps, d->skipped_steps));
  if (contents->dataset) {
    int64_t size;
    int64_t *order = bpt_dataset_order_view(contents->dataset, &size);
    memcpy(order, d->order, (size_t)size * sizeof *order);
  }
  return BPT_OK;
}

bpt_status bpt_checkpoint_load_memory(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents) {
  bpt_checkpoint_contents copy;
  BPT_CHECK(check_arguments(graph, what, contents, &copy, "bpt_checkpoint_load"));
  loader l = {.graph = graph, .context = graph->context};
  uint32_t version;
  bpt_section *sections;
  int count;
  BPT_CHECK(bpt_checkpoint_split(graph->context, bytes, size, what, &version, &sections, &count));
  snprintf(l.where, sizeof l.where, "checkpoint '%.120s' (libbptrain %u.%u.%u)", what, version / 10000,
           version / 100 % 100, version % 100);
  decoded d;
  memset(&d, 0, sizeof d);
  bpt_status status = decode(&l, sections, count, &copy, &d);
  if (status == BPT_OK) status = apply(&l, &copy, &d);
  free_decoded(&d, graph->buffer_count);
  free(sections);
  if (status == BPT_OK && contents && contents->size >= offsetof(bpt_checkpoint_contents, step) + sizeof copy.step) {
    contents->epoch = d.epoch;
    contents->step = d.step;
  }
  return status;
}

bpt_status bpt_checkpoint_load(bpt_graph *graph, const char *path, bpt_checkpoint_contents *contents) {
  bpt_checkpoint_contents copy;
  BPT_CHECK(check_arguments(graph, path, contents, &copy, "bpt_checkpoint_load"));
  unsigned char *bytes;
  size_t size;
  BPT_CHECK(bpt_read_whole_file(graph->context, path, &bytes, &size));
  bpt_status status = bpt_checkpoint_load_memory(graph, bytes, size, path, contents);
  free(bytes);
  return status;
}
