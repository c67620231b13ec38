/* Checkpoints, loading side: decodes every section and matches the file's parameters and buffers to the
 * graph's by name and shape (checkpoint_match.c), checks it all on the host, and only then applies what
 * matched, so a refused file changes nothing. Old BPTPARAM / BPTPARM1 parameter files are checkpoint_legacy.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint.h"
#include "core/checkpoint_legacy.h"
#include "core/checkpoint_match.h"
#include "core/data/dataset_order.h"
#include "core/optimizer_state.h"
#include "core/precision.h"

static const char *const optimizer_kind_names[] = {"sgd", "adam", "adamw"};

/* Everything a file says, decoded and checked against the graph, before any of it is applied. */
typedef struct decoded {
  uint64_t seed;
  int64_t epoch, step, forward_count;
  float *parameters; /* the graph's packing; only matched parameters are filled */
  float **buffers;   /* one per graph buffer; NULL where the file has none for it */
  bpt_rng rng;
  bool has_rng;
  bool has_optimizer;
  bpt_optimizer_options optimizer_options;
  int64_t optimizer_steps;
  float *optimizer_buffers[2]; /* the file's packing: its PARM tensors in order */
  int64_t *order;
  bool has_loss_scaler;
  float loss_scale;
  int64_t clean_steps, skipped_steps;
  /* Run-time state to restore (format 3), by node index: BPT_MAX_NODE_STATE int slots then as many float ones. */
  double *state;
  unsigned char *state_present;
} decoded;

typedef struct loader {
  bpt_graph *graph;
  bpt_context *context;
  char where[200]; /* "checkpoint 'path' (libbptrain 0.1.0)" */
  bool strict;
  uint32_t format; /* BPT_CHECKPOINT_FORMAT_SLOTS or BPT_CHECKPOINT_FORMAT_VERSION */
  bpt_match parameters, buffers;
  bpt_match_item *parameter_items, *buffer_items;
  int64_t *packed_at; /* each graph parameter's first value in the graph's packing */
} loader;

static void free_decoded(decoded *d, int buffer_count) {
  free(d->parameters);
  for (int i = 0; d->buffers && i < buffer_count; i++)
    free(d->buffers[i]);
  free(d->buffers);
  free(d->optimizer_buffers[0]);
  free(d->optimizer_buffers[1]);
  free(d->order);
  free(d->state);
  free(d->state_present);
}

static bpt_status loader_init(loader *l) {
  bpt_graph *graph = l->graph;
  l->parameter_items = bpt_calloc(l->context, (size_t)graph->parameter_count + 1, sizeof *l->parameter_items,
                                  "checkpoint parameter list");
  l->buffer_items =
      bpt_calloc(l->context, (size_t)graph->buffer_count + 1, sizeof *l->buffer_items, "checkpoint buffer list");
  l->packed_at = bpt_calloc(l->context, (size_t)graph->parameter_count + 1, sizeof *l->packed_at, "checkpoint offsets");
  if (!l->parameter_items || !l->buffer_items || !l->packed_at) return BPT_ERR_OUT_OF_MEMORY;
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    const bpt_node *node = graph->parameters[p];
    l->parameter_items[p] = (bpt_match_item){
        .name = node->name, .rank = node->rank, .dims = node->dims, .count = bpt_node_inner_count(node)};
    l->packed_at[p] = at;
    at += l->parameter_items[p].count;
  }
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    l->buffer_items[i] =
        (bpt_match_item){.name = buffer->name, .rank = 1, .dims = &buffer->count, .count = buffer->count};
  }
  BPT_CHECK(
      bpt_match_init(l->context, &l->parameters, "parameter", "PARM", l->parameter_items, graph->parameter_count));
  return bpt_match_init(l->context, &l->buffers, "buffer", "BUFS", l->buffer_items, graph->buffer_count);
}

static void loader_free(loader *l) {
  bpt_match_free(&l->parameters);
  bpt_match_free(&l->buffers);
  free(l->parameter_items);
  free(l->buffer_items);
  free(l->packed_at);
}

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

/* The declared parameter in a slot of node's op, for messages about format 2 files; "?" when none. */
static const char *slot_parameter(const bpt_node *node, bool floating, uint32_t slot) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  for (int p = 0; p < definition->parameter_count; p++) {
    const bpt_param_decl *parameter = &definition->parameters[p];
    const int length = parameter->length > 0 ? parameter->length : 1;
    if ((parameter->type == BPT_OP_VALUE_FLOAT) == floating && (int)slot >= parameter->slot &&
        (int)slot < parameter->slot + length)
      return parameter->name;
  }
  return "?";
}

/* Format 2: reads a node's saved op attribute slots and, when node is given, compares them with this graph's bit
 * for bit (so -0 and 0, or two NaNs, are told apart the same way the saving graph would have computed with
 * them). The state slots of that format were stored as 0, and hold no parameter now, so they compare equal. */
static bpt_status read_attributes(const loader *l, bpt_reader *r, int index, const bpt_node *node,
                                  const char *op_name) {
  uint32_t int_count, float_count;
  if (!bpt_get_u32(r, &int_count) || int_count > BPT_MAX_INT_ATTRIBUTES) return truncated(l, "GRPH");
  for (uint32_t a = 0; a < int_count; a++) {
    int64_t value;
    if (!bpt_get_i64(r, &value)) return truncated(l, "GRPH");
    if (node && value != node->int_attributes[a])
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s', has different op attributes in the file and in this graph: integer "
                       "attribute %u (parameter '%s') is %lld in the file, %lld here",
                       l->where, index, op_name, node->name, a, slot_parameter(node, false, a), (long long)value,
                       (long long)node->int_attributes[a]);
  }
  if (!bpt_get_u32(r, &float_count) || float_count > BPT_MAX_FLOAT_ATTRIBUTES) return truncated(l, "GRPH");
  for (uint32_t a = 0; a < float_count; a++) {
    float value;
    if (!bpt_get_f32(r, &value)) return truncated(l, "GRPH");
    if (!node) continue;
    float ours = node->float_attributes[a];
    if (memcmp(&value, &ours, sizeof value) != 0)
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s', has different op attributes in the file and in this graph: float "
                       "attribute %u (parameter '%s') is %.9g in the file, %.9g here",
                       l->where, index, op_name, node->name, a, slot_parameter(node, true, a), (double)value,
                       (double)ours);
  }
  if (!node) return BPT_OK;
  /* Slots a file does not list (fewer than this library keeps) must be unused here. */
  for (uint32_t a = int_count; a < BPT_MAX_INT_ATTRIBUTES; a++)
    if (node->int_attributes[a] != 0)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node %d, %s '%s': integer attribute %u is not in the file",
                       l->where, index, op_name, node->name, a);
  for (uint32_t a = float_count; a < BPT_MAX_FLOAT_ATTRIBUTES; a++)
    if (node->float_attributes[a] != 0.0f)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node %d, %s '%s': float attribute %u is not in the file",
                       l->where, index, op_name, node->name, a);
  return BPT_OK;
}

static const bpt_node *node_named(const bpt_graph *graph, const char *name) {
  for (int i = 0; i < graph->node_count; i++)
    if (strcmp(graph->nodes[i]->name, name) == 0) return graph->nodes[i];
  return NULL;
}

enum { MAX_NAMED = 64 }; /* parameters or state entries one node may list: a bound for hostile files */

static void value_text(bpt_op_value_type type, int64_t integer, float real, char *buffer, size_t size) {
  if (type == BPT_OP_VALUE_FLOAT)
    snprintf(buffer, size, "%.9g", (double)real);
  else
    snprintf(buffer, size, "%lld", (long long)integer);
}

/* Reads one saved value of type; false when truncated. */
static bool get_value(bpt_reader *r, uint32_t type, int64_t *integer, float *real) {
  *integer = 0, *real = 0.0f;
  return type == BPT_OP_VALUE_FLOAT ? bpt_get_f32(r, real) : bpt_get_i64(r, integer);
}

/* Format 3: a node's parameters and state by name. With node (strict), every saved parameter must be one the op
 * declares here, of the same type and length, holding the same value bit for bit, and every declared parameter
 * the file lacks (an op that gained one) must hold its default. With state_node, the state entries the op
 * declares as restored are kept in d for apply(); others (and names this library does not know) are skipped. */
static bpt_status read_named(const loader *l, bpt_reader *r, int index, const bpt_node *node,
                             const bpt_node *state_node, decoded *d) {
  const char *op_name = node ? bpt_op_get(node->op)->name : "";
  uint32_t count;
  if (!bpt_get_u32(r, &count) || count > MAX_NAMED) return truncated(l, "GRPH");
  uint64_t seen = 0;
  for (uint32_t i = 0; i < count; i++) {
    char name[BPT_NAME_SIZE];
    uint32_t type, length;
    if (!bpt_get_string(r, name, sizeof name) || !bpt_get_u32(r, &type) || type > BPT_OP_VALUE_ENUM ||
        !bpt_get_u32(r, &length) || length < 1 || length > BPT_MAX_INT_ATTRIBUTES)
      return truncated(l, "GRPH");
    const bpt_param_decl *parameter = node ? bpt_node_find_parameter(node, name) : NULL;
    if (node && !parameter)
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s': the file has op parameter '%s', which %s does not have here", l->where,
                       index, op_name, node->name, name, op_name);
    const int declared_length = parameter && parameter->length > 0 ? parameter->length : 1;
    if (parameter && ((uint32_t)parameter->type != type || (uint32_t)declared_length != length))
      return bpt_error(l->context, BPT_ERR_SHAPE,
                       "%s: node %d, %s '%s': op parameter '%s' has another type or length in the file", l->where,
                       index, op_name, node->name, name);
    const ptrdiff_t position = parameter ? parameter - bpt_op_get(node->op)->parameters : 64;
    if (position < 64) seen |= UINT64_C(1) << position;
    for (uint32_t e = 0; e < length; e++) {
      int64_t integer;
      float real;
      if (!get_value(r, type, &integer, &real)) return truncated(l, "GRPH");
      if (!parameter) continue;
      const int slot = parameter->slot + (int)e;
      const int64_t our_integer = type == BPT_OP_VALUE_FLOAT ? 0 : node->int_attributes[slot];
      const float our_real = type == BPT_OP_VALUE_FLOAT ? node->float_attributes[slot] : 0.0f;
      if (integer != our_integer || memcmp(&real, &our_real, sizeof real) != 0) {
        char file_text[48], our_text[48], element[16] = "";
        value_text(parameter->type, integer, real, file_text, sizeof file_text);
        value_text(parameter->type, our_integer, our_real, our_text, sizeof our_text);
        if (length > 1) snprintf(element, sizeof element, "[%u]", e);
        return bpt_error(l->context, BPT_ERR_SHAPE,
                         "%s: node %d, %s '%s', has different op attributes in the file and in this graph: %s%s is %s "
                         "in the file, %s here",
                         l->where, index, op_name, node->name, name, element, file_text, our_text);
      }
    }
  }
  const bpt_op_definition *definition = node ? bpt_op_get(node->op) : NULL;
  for (int p = 0; definition && p < definition->parameter_count && p < 64; p++) {
    const bpt_param_decl *parameter = &definition->parameters[p];
    if (seen >> p & 1) continue;
    const double expected = parameter->type == BPT_OP_VALUE_FLOAT ? (double)(float)parameter->default_value
                                                                  : (double)(int64_t)parameter->default_value;
    for (int e = 0; e < (parameter->length > 0 ? parameter->length : 1); e++)
      if (bpt_node_parameter_value(node, parameter, e) != expected)
        return bpt_error(l->context, BPT_ERR_SHAPE,
                         "%s: node %d, %s '%s': op parameter '%s' is not in the file and is not its default here",
                         l->where, index, op_name, node->name, parameter->name);
  }
  if (!bpt_get_u32(r, &count) || count > MAX_NAMED) return truncated(l, "GRPH");
  for (uint32_t i = 0; i < count; i++) {
    char name[BPT_NAME_SIZE];
    uint32_t type;
    int64_t integer;
    float real;
    if (!bpt_get_string(r, name, sizeof name) || !bpt_get_u32(r, &type) || type > BPT_OP_VALUE_ENUM ||
        !get_value(r, type, &integer, &real))
      return truncated(l, "GRPH");
    const bpt_state_decl *state = state_node ? bpt_node_find_state(state_node, name) : NULL;
    if (!state || !state->restored || (uint32_t)state->type != type) continue;
    const size_t at = (size_t)state_node->index * 2 * BPT_MAX_NODE_STATE +
                      (type == BPT_OP_VALUE_FLOAT ? BPT_MAX_NODE_STATE : 0) + (size_t)state->slot;
    d->state[at] = type == BPT_OP_VALUE_FLOAT ? (double)real : (double)integer;
    d->state_present[at] = 1;
  }
  return BPT_OK;
}

/* Decodes GRPH. With compare (strict loads), a node of this graph with the name of a saved one must have the
 * same op and op attributes: a graph that differs only there (another stride, another dropout rate) would
 * otherwise compute something else with the saved weights. Nodes on one side only (an inference graph has no
 * labels or loss) and the wiring are not compared; the parameters are matched by name and shape instead. */
static bpt_status read_graph(const loader *l, bpt_reader r, bool compare, decoded *d) {
  uint32_t count, loss;
  if (!bpt_get_u32(&r, &count) || !bpt_get_u32(&r, &loss) || loss > count) return truncated(l, "GRPH");
  for (uint32_t i = 0; i < count; i++) {
    char stored_op[BPT_NAME_SIZE], name[BPT_NAME_SIZE];
    uint32_t op, dtype, batched, rank, inputs;
    if (!bpt_get_u32(&r, &op) || !bpt_get_string(&r, stored_op, sizeof stored_op) ||
        !bpt_get_string(&r, name, sizeof name) || !bpt_get_u32(&r, &dtype) || !bpt_get_u32(&r, &batched) ||
        !bpt_get_u32(&r, &rank) || rank > BPT_MAX_RANK)
      return truncated(l, "GRPH");
    for (uint32_t d = 0; d < rank; d++) {
      int64_t dim;
      if (!bpt_get_i64(&r, &dim)) return truncated(l, "GRPH");
    }
    if (!bpt_get_u32(&r, &inputs) || inputs > BPT_MAX_INPUTS) return truncated(l, "GRPH");
    for (uint32_t k = 0; k < inputs; k++) {
      uint32_t input;
      if (!bpt_get_u32(&r, &input) || input >= count) return truncated(l, "GRPH");
    }
    const bpt_node *node = compare ? node_named(l->graph, name) : NULL;
    if (node && op != (uint32_t)node->op)
      return bpt_error(l->context, BPT_ERR_SHAPE, "%s: node '%s' is %s in the file but %s in this graph", l->where,
                       name, file_op_name(op, stored_op), bpt_op_get(node->op)->name);
    if (l->format == BPT_CHECKPOINT_FORMAT_SLOTS) {
      BPT_CHECK(read_attributes(l, &r, (int)i, node, node ? bpt_op_get(node->op)->name : ""));
    } else {
      /* State is taken in the first pass (strict or not) from the node of this name, when it is the same op. */
      const bpt_node *named = compare ? NULL : node_named(l->graph, name);
      BPT_CHECK(read_named(l, &r, (int)i, node, named && (uint32_t)named->op == op ? named : NULL, d));
    }
  }
  if (bpt_reader_left(&r) != 0) return truncated(l, "GRPH");
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

/* The state buffers hold one value per saved parameter value, packed in PARM's order: apply() takes each
 * loaded parameter's range by the name matching found, so a graph with other layers gets its own ones'. */
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
  int64_t count = l->parameters.file_values;
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
      return bpt_error(l->context, BPT_ERR_FORMAT,
                       "%s: optimizer state %d has %lld values, the file's parameters %lld (file corrupt)", l->where, b,
                       (long long)stored, (long long)count);
    d->optimizer_buffers[b] = bpt_calloc(l->context, (size_t)(count ? count : 1), sizeof(float), "optimizer state");
    if (!d->optimizer_buffers[b]) return BPT_ERR_OUT_OF_MEMORY;
    if (!bpt_get_f32_array(r, d->optimizer_buffers[b], count)) return truncated(l, "OPTM");
  }
  if (bpt_reader_left(r) != 0) return truncated(l, "OPTM");
  d->has_optimizer = true;
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

/* Decodes the values of what matched into d (the graph's packing for parameters, one array per buffer). */
static bpt_status decode_values(loader *l, decoded *d) {
  const bpt_graph *graph = l->graph;
  int64_t parameters = bpt_graph_parameter_count(graph);
  d->parameters = bpt_calloc(l->context, (size_t)(parameters ? parameters : 1), sizeof(float), "checkpoint parameters");
  d->buffers = bpt_calloc(l->context, (size_t)graph->buffer_count + 1, sizeof *d->buffers, "buffer list");
  if (!d->parameters || !d->buffers) return BPT_ERR_OUT_OF_MEMORY;
  for (int p = 0; p < graph->parameter_count; p++)
    if (l->parameter_items[p].match >= 0)
      bpt_match_values(&l->parameters, l->parameter_items[p].match, d->parameters + l->packed_at[p]);
  for (int i = 0; i < graph->buffer_count; i++) {
    if (l->buffer_items[i].match < 0) continue;
    d->buffers[i] = bpt_calloc(l->context, (size_t)graph->buffers[i].count, sizeof(float), "checkpoint buffer");
    if (!d->buffers[i]) return BPT_ERR_OUT_OF_MEMORY;
    bpt_match_values(&l->buffers, l->buffer_items[i].match, d->buffers[i]);
  }
  return BPT_OK;
}

static bpt_status decode(loader *l, bpt_section *sections, int count, const bpt_checkpoint_contents *contents,
                         decoded *d) {
  enum { META, GRAPH, PARAMETERS, BUFFERS, RNG, OPTIMIZER, ORDER, LOSS_SCALER, KINDS };
  const uint32_t tags[KINDS] = {BPT_TAG_META, BPT_TAG_GRAPH,     BPT_TAG_PARAMETERS, BPT_TAG_BUFFERS,
                                BPT_TAG_RNG,  BPT_TAG_OPTIMIZER, BPT_TAG_ORDER,      BPT_TAG_LOSS_SCALER};
  bpt_section *found[KINDS] = {0};
  BPT_CHECK(find_sections(l, sections, count, found, tags, KINDS));
  if (!found[META]) return missing(l, "META section");
  if (!found[GRAPH]) return missing(l, "graph structure (GRPH section)");
  if (!found[PARAMETERS]) return missing(l, "parameters (PARM section)");
  /* First everything that can make the file malformed, then (strict) what makes it another model's. */
  BPT_CHECK(read_meta(l, &found[META]->payload, d));
  const size_t state_slots = ((size_t)l->graph->node_count + 1) * 2 * BPT_MAX_NODE_STATE;
  d->state = bpt_calloc(l->context, state_slots, sizeof *d->state, "checkpoint node state");
  d->state_present = bpt_calloc(l->context, state_slots, 1, "checkpoint node state");
  if (!d->state || !d->state_present) return BPT_ERR_OUT_OF_MEMORY;
  BPT_CHECK(read_graph(l, found[GRAPH]->payload, false, d));
  BPT_CHECK(bpt_match_read(l->context, l->where, &l->parameters, found[PARAMETERS]->payload));
  if (found[BUFFERS]) BPT_CHECK(bpt_match_read(l->context, l->where, &l->buffers, found[BUFFERS]->payload));
  if (found[RNG]) BPT_CHECK(read_rng(l, &found[RNG]->payload, d));
  if (found[LOSS_SCALER]) BPT_CHECK(read_loss_scaler(l, &found[LOSS_SCALER]->payload, d));
  if (l->strict) {
    BPT_CHECK(bpt_match_check_strict(l->context, l->where, &l->parameters));
    BPT_CHECK(bpt_match_check_strict(l->context, l->where, &l->buffers));
    BPT_CHECK(read_graph(l, found[GRAPH]->payload, true, d));
  }
  BPT_CHECK(decode_values(l, d));
  /* Not strict, a file without optimiser state leaves the optimiser as it is (a model from elsewhere). */
  if (contents->optimizer && (found[OPTIMIZER] || l->strict)) {
    if (!found[OPTIMIZER]) return missing(l, "optimizer state (OPTM section), but an optimizer was given");
    BPT_CHECK(read_optimizer(l, &found[OPTIMIZER]->payload, contents->optimizer, d));
  }
  if (contents->dataset) {
    if (!found[ORDER]) return missing(l, "sample order (DORD section), but a data set was given");
    BPT_CHECK(read_order(l, &found[ORDER]->payload, contents->dataset, d));
  }
  return BPT_OK;
}

static bpt_status upload(const loader *l, float *device, const float *host, int64_t count, const char *what) {
  bpt_backend *backend = l->graph->backend;
  if (!device || backend->vtable->upload(backend, device, host, (size_t)count * sizeof(float)) != BPT_OK)
    return bpt_backend_error(l->context, BPT_ERR_DEVICE, what);
  return BPT_OK;
}

static bpt_status apply(const loader *l, const bpt_checkpoint_contents *contents, decoded *d) {
  bpt_graph *graph = l->graph;
  for (int p = 0; p < graph->parameter_count; p++)
    if (l->parameter_items[p].match >= 0)
      BPT_CHECK(upload(l, graph->parameter_block + graph->parameters[p]->param_offset, d->parameters + l->packed_at[p],
                       l->parameter_items[p].count, "bpt_checkpoint_load: writing parameters"));
  for (int i = 0; i < graph->buffer_count; i++)
    if (d->buffers[i])
      BPT_CHECK(upload(l, bpt_checkpoint_buffer_values(&graph->buffers[i]), d->buffers[i], graph->buffers[i].count,
                       "bpt_checkpoint_load: writing buffers"));
  for (int n = 0; n < graph->node_count; n++)
    for (int k = 0; k < 2 * BPT_MAX_NODE_STATE; k++) {
      const size_t at = (size_t)n * 2 * BPT_MAX_NODE_STATE + (size_t)k;
      if (!d->state_present[at]) continue;
      if (k < BPT_MAX_NODE_STATE)
        graph->nodes[n]->int_state[k] = (int64_t)d->state[at];
      else
        graph->nodes[n]->float_state[k - BPT_MAX_NODE_STATE] = (float)d->state[at];
    }
  if (d->has_rng) graph->rng = d->rng;
  graph->dropout_seed = d->seed; /* with the step count below, a resumed run draws the same dropout masks */
  graph->forward_count = d->forward_count;
  graph->forward_done = graph->backward_done = false;
  if (d->has_optimizer) {
    bpt_optimizer_state view;
    bpt_optimizer_state_view(contents->optimizer, &view);
    for (int b = 0; b < 2; b++)
      for (int p = 0; view.buffers[b] && p < graph->parameter_count; p++) {
        int64_t match = l->parameter_items[p].match;
        if (match < 0) continue;
        BPT_CHECK(upload(l, view.buffers[b] + graph->parameters[p]->param_offset,
                         d->optimizer_buffers[b] + l->parameters.tensors[match].packed_at, l->parameter_items[p].count,
                         "bpt_checkpoint_load: writing optimizer state"));
      }
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

bpt_checkpoint_load_options bpt_checkpoint_load_options_default(void) {
  bpt_checkpoint_load_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.strict = 1;
  return options;
}

static bpt_status copy_load_options(bpt_graph *graph, const bpt_checkpoint_load_options *options,
                                    bpt_checkpoint_load_options *copy) {
  *copy = bpt_checkpoint_load_options_default();
  if (!options) return BPT_OK;
  return bpt_copy_options(graph->context, copy, sizeof *copy, options, options->size,
                          offsetof(bpt_checkpoint_load_options, strict) + sizeof copy->strict,
                          "bpt_checkpoint_load_with_options");
}

static bpt_status load_checkpoint(loader *l, const unsigned char *bytes, size_t size, const char *what,
                                  bpt_checkpoint_contents *copy, bpt_checkpoint_report **report) {
  uint32_t version;
  bpt_section *sections;
  int count;
  BPT_CHECK(bpt_checkpoint_split(l->context, bytes, size, what, &version, &sections, &count));
  l->format = bpt_checkpoint_format_of(bytes);
  snprintf(l->where, sizeof l->where, "checkpoint '%.120s' (libbptrain %u.%u.%u)", what, version / 10000,
           version / 100 % 100, version % 100);
  decoded d;
  memset(&d, 0, sizeof d);
  bpt_status status = loader_init(l);
  if (status == BPT_OK) status = decode(l, sections, count, copy, &d);
  /* The report is built before anything changes, so that running out of memory for it refuses the load. */
  bpt_checkpoint_report *built = NULL;
  if (status == BPT_OK && report) {
    built = bpt_checkpoint_report_create(l->context);
    status = built ? bpt_match_report(l->context, &l->parameters, built) : BPT_ERR_OUT_OF_MEMORY;
    if (status == BPT_OK) status = bpt_match_report(l->context, &l->buffers, built);
  }
  if (status == BPT_OK) status = apply(l, copy, &d);
  if (status == BPT_OK) {
    copy->epoch = d.epoch;
    copy->step = d.step;
    if (report) *report = built;
  } else {
    bpt_checkpoint_report_destroy(built);
  }
  free_decoded(&d, l->graph->buffer_count);
  loader_free(l);
  free(sections);
  return status;
}

bpt_status bpt_checkpoint_load_memory_with_options(bpt_graph *graph, const unsigned char *bytes, size_t size,
                                                   const char *what, bpt_checkpoint_contents *contents,
                                                   const bpt_checkpoint_load_options *options,
                                                   bpt_checkpoint_report **report) {
  if (report) *report = NULL;
  bpt_checkpoint_contents copy;
  bpt_checkpoint_load_options chosen;
  BPT_CHECK(bpt_checkpoint_check_arguments(graph, what, contents, &copy, "bpt_checkpoint_load"));
  BPT_CHECK(copy_load_options(graph, options, &chosen));
  loader l = {.graph = graph, .context = graph->context, .strict = chosen.strict != 0};
  bpt_status status = bpt_checkpoint_is_legacy(bytes, size)
                          ? bpt_checkpoint_load_legacy(graph, bytes, size, what, &copy, l.strict, report)
                          : load_checkpoint(&l, bytes, size, what, &copy, report);
  if (status == BPT_OK && contents && contents->size >= offsetof(bpt_checkpoint_contents, step) + sizeof copy.step) {
    contents->epoch = copy.epoch;
    contents->step = copy.step;
  }
  return status;
}

bpt_status bpt_checkpoint_load_memory(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents) {
  return bpt_checkpoint_load_memory_with_options(graph, bytes, size, what, contents, NULL, NULL);
}

bpt_status bpt_checkpoint_load_with_options(bpt_graph *graph, const char *path, bpt_checkpoint_contents *contents,
                                            const bpt_checkpoint_load_options *options,
                                            bpt_checkpoint_report **report) {
  if (report) *report = NULL;
  bpt_checkpoint_contents copy;
  BPT_CHECK(bpt_checkpoint_check_arguments(graph, path, contents, &copy, "bpt_checkpoint_load"));
  unsigned char *bytes;
  size_t size;
  BPT_CHECK(bpt_read_whole_file(graph->context, path, &bytes, &size));
  bpt_status status = bpt_checkpoint_load_memory_with_options(graph, bytes, size, path, contents, options, report);
  free(bytes);
  return status;
}

bpt_status bpt_checkpoint_load(bpt_graph *graph, const char *path, bpt_checkpoint_contents *contents) {
  return bpt_checkpoint_load_with_options(graph, path, contents, NULL, NULL);
}
