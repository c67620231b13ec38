/* Checkpoints, saving side: the graph's registered buffers and what goes into each section (graph structure,
 * parameters, buffers, generator state, optimiser state, sample order, loop position). Loading is
 * checkpoint_load.c; the container itself is checkpoint_format.c. */
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

float *bpt_checkpoint_buffer_values(const bpt_graph_buffer *buffer) {
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

static void put_tensor_header(bpt_writer *writer, const char *name, int rank, const int64_t *dims) {
  bpt_put_string(writer, name);
  bpt_put_u32(writer, BPT_DTYPE_F32);
  bpt_put_u32(writer, (uint32_t)rank);
  for (int i = 0; i < rank; i++)
    bpt_put_i64(writer, dims[i]);
}

static void write_meta(bpt_writer *writer, const bpt_graph *graph, const bpt_checkpoint_contents *contents) {
  size_t start = bpt_section_begin(writer, BPT_TAG_META, 0);
  bpt_put_u64(writer, graph->context->seed);
  bpt_put_i64(writer, contents->epoch);
  bpt_put_i64(writer, contents->step);
  bpt_put_i64(writer, graph->forward_count);
  bpt_put_i64(writer, graph->max_batch);
  bpt_put_string(writer, graph->backend->vtable->name);
  bpt_section_end(writer, start);
}

/* Format 3: the op's declared parameters by name (stride, padding, rates, slopes, epsilons...), so that a graph
 * that differs only there is refused rather than silently computing something else with the saved weights;
 * then its run-time state by name (linear's FP8 scale, relu's mask choice). */
static void write_node_parameters(bpt_writer *writer, const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  bpt_put_u32(writer, (uint32_t)definition->parameter_count);
  for (int p = 0; p < definition->parameter_count; p++) {
    const bpt_param_decl *parameter = &definition->parameters[p];
    const int length = parameter->length > 0 ? parameter->length : 1;
    bpt_put_string(writer, parameter->name);
    bpt_put_u32(writer, (uint32_t)parameter->type);
    bpt_put_u32(writer, (uint32_t)length);
    for (int e = 0; e < length; e++)
      if (parameter->type == BPT_OP_VALUE_FLOAT)
        bpt_put_f32(writer, node->float_attributes[parameter->slot + e]);
      else
        bpt_put_i64(writer, node->int_attributes[parameter->slot + e]);
  }
  bpt_put_u32(writer, (uint32_t)definition->state_count);
  for (int i = 0; i < definition->state_count; i++) {
    const bpt_state_decl *state = &definition->state[i];
    bpt_put_string(writer, state->name);
    bpt_put_u32(writer, (uint32_t)state->type);
    if (state->type == BPT_OP_VALUE_FLOAT)
      bpt_put_f32(writer, node->float_state[state->slot]);
    else
      bpt_put_i64(writer, node->int_state[state->slot]);
  }
}

static void write_graph(bpt_writer *writer, const bpt_graph *graph) {
  size_t start = bpt_section_begin(writer, BPT_TAG_GRAPH, 0);
  bpt_put_u32(writer, (uint32_t)graph->node_count);
  bpt_put_u32(writer, graph->loss ? (uint32_t)graph->loss->index + 1 : 0);
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    bpt_put_u32(writer, (uint32_t)node->op);
    bpt_put_string(writer, bpt_op_get(node->op)->name);
    bpt_put_string(writer, node->name);
    bpt_put_u32(writer, (uint32_t)node->dtype);
    /* Bit 0 batched, bit 1 a sequence axis (readers before it only read the word). */
    bpt_put_u32(writer, (uint32_t)node->batched | (uint32_t)node->sequence << 1);
    bpt_put_u32(writer, (uint32_t)node->rank);
    /* The batch dimension is the compiled maximum, which may differ between runs; store 0 for it. */
    for (int d = 0; d < node->rank; d++)
      bpt_put_i64(writer, node->batched && d == 0 ? 0 : node->declared_dims[d]);
    bpt_put_u32(writer, (uint32_t)node->input_count);
    for (int k = 0; k < node->input_count; k++)
      bpt_put_u32(writer, (uint32_t)node->inputs[k]->index);
    write_node_parameters(writer, node);
  }
  bpt_section_end(writer, start);
}

static bpt_status write_parameters(bpt_writer *writer, bpt_graph *graph, float *host) {
  BPT_CHECK(download_packed(graph, graph->parameter_block, host));
  size_t start = bpt_section_begin(writer, BPT_TAG_PARAMETERS, 0);
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
  size_t start = bpt_section_begin(writer, BPT_TAG_BUFFERS, 0);
  bpt_put_u32(writer, (uint32_t)graph->buffer_count);
  bpt_backend *backend = graph->backend;
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    float *host = bpt_calloc(graph->context, (size_t)buffer->count, sizeof *host, "checkpoint buffer");
    if (!host) return BPT_ERR_OUT_OF_MEMORY;
    float *values = bpt_checkpoint_buffer_values(buffer);
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
  size_t start = bpt_section_begin(writer, BPT_TAG_RNG, 0);
  bpt_put_u32(writer, 1);
  bpt_put_string(writer, "graph");
  for (int i = 0; i < 4; i++)
    bpt_put_u64(writer, graph->rng.state[i]);
  bpt_section_end(writer, start);
}

/* Optional, so that files of runs without loss scaling, and readers that do not know it, still work. */
static void write_loss_scaler(bpt_writer *writer, const bpt_precision_state *state) {
  size_t start = bpt_section_begin(writer, BPT_TAG_LOSS_SCALER, BPT_SECTION_OPTIONAL);
  bpt_put_f32(writer, state->loss_scale);
  bpt_put_i64(writer, state->clean_steps);
  bpt_put_i64(writer, state->skipped_steps);
  bpt_section_end(writer, start);
}

static bpt_status write_optimizer(bpt_writer *writer, bpt_graph *graph, bpt_optimizer *optimizer, float *host) {
  bpt_optimizer_state view;
  bpt_optimizer_state_view(optimizer, &view);
  const bpt_optimizer_options *o = view.options;
  size_t start = bpt_section_begin(writer, BPT_TAG_OPTIMIZER, 0);
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
  size_t start = bpt_section_begin(writer, BPT_TAG_ORDER, 0);
  bpt_put_i64(writer, size);
  for (int64_t i = 0; i < size; i++)
    bpt_put_i64(writer, order[i]);
  bpt_section_end(writer, start);
}

bpt_status bpt_checkpoint_check_arguments(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents,
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
  BPT_CHECK(bpt_checkpoint_check_arguments(graph, path, contents, &copy, "bpt_checkpoint_save"));
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
