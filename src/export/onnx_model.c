/* bpt_graph_export_onnx: walks a compiled graph in creation order (which is topological) and builds the ONNX
 * model in protobuf-c's generated structs: f32 and i32 inputs with a dynamic batch (f32 ones normalised inside
 * the model when asked), the parameters the exported nodes read as initialisers, each op's nodes from its emitter
 * (onnx_ops.c), and the losses' predictions as outputs. protobuf-c serialises it; the file is replaced
 * atomically, and a model over protobuf's 2 GiB limit keeps its large initialisers in a side file
 * (onnx_external.c). */
#define _POSIX_C_SOURCE 200809L /* lstat, chmod under -std=c11 */
#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bptrain/onnx.h"
#include "core/file_io.h"
#include "export/onnx_external.h"
#include "export/onnx_model.h"

#define WHERE "bpt_graph_export_onnx"
/* Operator sets this exporter's node forms are valid in (Softmax's single axis from 13). */
#define OPSET_MIN 13
#define OPSET_MAX 21

typedef struct arena_block {
  struct arena_block *next;
  max_align_t data[];
} arena_block;

struct onnx_builder {
  bpt_context *context;
  const bpt_graph *graph;
  int64_t opset;
  arena_block *blocks;
  bool out_of_memory;
  const char **values; /* per node index: the ONNX value holding its output */
  const char **user_names; /* every node's name, sorted: what a generated name must not be */
  int user_name_count;
  Onnx__NodeProto **nodes;
  Onnx__TensorProto **initializers;
  Onnx__ValueInfoProto **inputs, **outputs;
  size_t node_count, node_capacity, initializer_count, initializer_capacity, input_count, input_capacity, output_count,
      output_capacity;
};

/* Zeroed memory that lives until the builder is freed; NULL (recorded) when out of memory. */
static void *allocate(onnx_builder *b, size_t count, size_t size) {
  if (b->out_of_memory) return NULL;
  arena_block *block = NULL;
  if (size == 0 || count <= (SIZE_MAX - sizeof *block) / size) block = calloc(1, sizeof *block + count * size);
  if (!block) {
    b->out_of_memory = true;
    return NULL;
  }
  block->next = b->blocks;
  b->blocks = block;
  return block->data;
}

void *onnx_allocate(onnx_builder *b, size_t count, size_t size) { return allocate(b, count, size); }
bpt_context *onnx_context(const onnx_builder *b) { return b->context; }

static void free_builder(onnx_builder *b) {
  while (b->blocks) {
    arena_block *next = b->blocks->next;
    free(b->blocks);
    b->blocks = next;
  }
}

static bpt_status out_of_memory(onnx_builder *b) {
  return bpt_error(b->context, BPT_ERR_OUT_OF_MEMORY, WHERE ": out of memory building the model");
}

static char *copy_string(onnx_builder *b, const char *text) {
  char *copy = allocate(b, strlen(text) + 1, 1);
  if (copy) memcpy(copy, text, strlen(text) + 1);
  return copy;
}

/* Appends item to a pointer array kept in the arena, doubling it when full. */
static bool append(onnx_builder *b, void *array_pointer, size_t *count, size_t *capacity, void *item) {
  void **array;
  memcpy(&array, array_pointer, sizeof array);
  if (*count == *capacity) {
    const size_t grown = *capacity ? 2 * *capacity : 16;
    void **bigger = allocate(b, grown, sizeof *bigger);
    if (!bigger) return false;
    if (*count) memcpy(bigger, array, *count * sizeof *bigger);
    array = bigger;
    *capacity = grown;
    memcpy(array_pointer, &array, sizeof array);
  }
  array[(*count)++] = item;
  return true;
}

const char *onnx_value(const onnx_builder *b, const bpt_node *node) { return b->values[node->index]; }
int64_t onnx_opset(const onnx_builder *b) { return b->opset; }

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool user_name(const onnx_builder *b, const char *name) {
  return b->user_name_count &&
         bsearch(&name, b->user_names, (size_t)b->user_name_count, sizeof *b->user_names, compare_names) != NULL;
}

/* "base/suffix", or "base/suffix#2", "#3", ... when a node of the graph already has that name (issue 30, class
 * 6): a user's node named "x/normalized" made the graph non-SSA, or its initialisers non-unique, and ONNX
 * Runtime then silently used the last duplicate. Generated names never collide with each other: their bases
 * are distinct value names and an emitter's suffixes are distinct and hold no '/'. */
const char *onnx_name(onnx_builder *b, const char *base, const char *suffix) {
  if (!base) return NULL;
  const size_t size = strlen(base) + strlen(suffix) + 2 + 12;
  char *name = allocate(b, size, 1);
  if (!name) return NULL;
  snprintf(name, size, "%s/%s", base, suffix);
  /* At most user_name_count names can be taken, so this ends within that many tries. */
  for (int k = 2; user_name(b, name); k++)
    snprintf(name, size, "%s/%s#%d", base, suffix, k);
  return name;
}

bpt_status onnx_node(onnx_builder *b, const char *op_type, const char *name, const char *const *inputs, int input_count,
                     const char *output, Onnx__NodeProto **out) {
  while (input_count > 0 && !inputs[input_count - 1])
    input_count--;
  Onnx__NodeProto *node = allocate(b, 1, sizeof *node);
  char **input_names = allocate(b, (size_t)input_count + 1, sizeof *input_names);
  char **output_names = allocate(b, 1, sizeof *output_names);
  if (!node || !input_names || !output_names || !name || !output) return out_of_memory(b);
  onnx__node_proto__init(node);
  for (int i = 0; i < input_count; i++) {
    /* An omitted input in the middle is ONNX's empty name. */
    input_names[i] = copy_string(b, inputs[i] ? inputs[i] : "");
    if (!input_names[i]) return out_of_memory(b);
  }
  output_names[0] = copy_string(b, output);
  node->op_type = copy_string(b, op_type);
  node->name = copy_string(b, name);
  node->n_input = (size_t)input_count;
  node->input = input_names;
  node->n_output = 1;
  node->output = output_names;
  if (!output_names[0] || !node->op_type || !node->name ||
      !append(b, &b->nodes, &b->node_count, &b->node_capacity, node))
    return out_of_memory(b);
  if (out) *out = node;
  return BPT_OK;
}

static Onnx__AttributeProto *new_attribute(onnx_builder *b, Onnx__NodeProto *node, const char *name,
                                           Onnx__AttributeProto__AttributeType type) {
  Onnx__AttributeProto *attribute = allocate(b, 1, sizeof *attribute);
  Onnx__AttributeProto **list = allocate(b, node->n_attribute + 1, sizeof *list);
  if (!attribute || !list) return NULL;
  onnx__attribute_proto__init(attribute);
  attribute->name = copy_string(b, name);
  attribute->has_type = 1;
  attribute->type = type;
  if (node->n_attribute) memcpy(list, node->attribute, node->n_attribute * sizeof *list);
  list[node->n_attribute++] = attribute;
  node->attribute = list;
  return attribute->name ? attribute : NULL;
}

bpt_status onnx_attribute_int(onnx_builder *b, Onnx__NodeProto *node, const char *name, int64_t value) {
  Onnx__AttributeProto *attribute = new_attribute(b, node, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!attribute) return out_of_memory(b);
  attribute->has_i = 1;
  attribute->i = value;
  return BPT_OK;
}

bpt_status onnx_attribute_float(onnx_builder *b, Onnx__NodeProto *node, const char *name, float value) {
  Onnx__AttributeProto *attribute = new_attribute(b, node, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!attribute) return out_of_memory(b);
  attribute->has_f = 1;
  attribute->f = value;
  return BPT_OK;
}

bpt_status onnx_attribute_ints(onnx_builder *b, Onnx__NodeProto *node, const char *name, const int64_t *values,
                               int count) {
  Onnx__AttributeProto *attribute = new_attribute(b, node, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *copy = allocate(b, (size_t)count, sizeof *copy);
  if (!attribute || !copy) return out_of_memory(b);
  memcpy(copy, values, (size_t)count * sizeof *copy);
  attribute->n_ints = (size_t)count;
  attribute->ints = copy;
  return BPT_OK;
}

/* A tensor whose values the caller fills into *data (count elements of element_size bytes). */
static Onnx__TensorProto *new_initializer(onnx_builder *b, const char *name, int rank, const int64_t *dims,
                                          int32_t data_type, int64_t count, size_t element_size, void **data) {
  Onnx__TensorProto *tensor = allocate(b, 1, sizeof *tensor);
  int64_t *tensor_dims = allocate(b, (size_t)rank + 1, sizeof *tensor_dims);
  *data = allocate(b, (size_t)count, element_size);
  if (!tensor || !tensor_dims || !*data || !name) return NULL;
  onnx__tensor_proto__init(tensor);
  if (rank) memcpy(tensor_dims, dims, (size_t)rank * sizeof *tensor_dims);
  tensor->name = copy_string(b, name);
  tensor->n_dims = (size_t)rank;
  tensor->dims = tensor_dims;
  tensor->has_data_type = 1;
  tensor->data_type = data_type;
  if (!tensor->name || !append(b, &b->initializers, &b->initializer_count, &b->initializer_capacity, tensor))
    return NULL;
  return tensor;
}

bpt_status onnx_constant_floats(onnx_builder *b, const char *name, int rank, const int64_t *dims, const float *values,
                                int64_t count) {
  void *data;
  Onnx__TensorProto *tensor =
      new_initializer(b, name, rank, dims, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, count, sizeof(float), &data);
  if (!tensor) return out_of_memory(b);
  memcpy(data, values, (size_t)count * sizeof(float));
  tensor->n_float_data = (size_t)count;
  tensor->float_data = data;
  return BPT_OK;
}

bpt_status onnx_constant_ints(onnx_builder *b, const char *name, int rank, const int64_t *dims, const int64_t *values,
                              int64_t count) {
  void *data;
  Onnx__TensorProto *tensor =
      new_initializer(b, name, rank, dims, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, count, sizeof(int64_t), &data);
  if (!tensor) return out_of_memory(b);
  memcpy(data, values, (size_t)count * sizeof(int64_t));
  tensor->n_int64_data = (size_t)count;
  tensor->int64_data = data;
  return BPT_OK;
}

/* A parameter's current values (from the graph's backend) as an initialiser under its own name. They come from
 * the f32 master block: under an f16/bf16 policy node->value is the rounded copy, refreshed only by the next
 * forward, so after an optimiser step it holds the weights from before the step (issue 30, class 4). */
static bpt_status add_parameter(onnx_builder *b, const bpt_node *node) {
  const int64_t count = bpt_node_inner_count(node);
  void *data;
  Onnx__TensorProto *tensor = new_initializer(b, node->name, node->rank, node->dims,
                                              ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, count, sizeof(float), &data);
  if (!tensor) return out_of_memory(b);
  bpt_backend *backend = node->graph->backend;
  const float *master = node->graph->parameter_block + node->param_offset;
  if (backend->vtable->download(backend, data, master, (size_t)count * sizeof(float)) != BPT_OK)
    return bpt_error(b->context, BPT_ERR_DEVICE, WHERE ": reading parameter '%s' from backend '%s' failed", node->name,
                     backend->vtable->name);
  tensor->n_float_data = (size_t)count;
  tensor->float_data = data;
  return BPT_OK;
}

/* An f32 tensor value of node's shape, its batch dimension the symbolic "N". */
static Onnx__ValueInfoProto *value_info(onnx_builder *b, const char *name, const bpt_node *node) {
  Onnx__ValueInfoProto *info = allocate(b, 1, sizeof *info);
  Onnx__TypeProto *type = allocate(b, 1, sizeof *type);
  Onnx__TypeProto__Tensor *tensor = allocate(b, 1, sizeof *tensor);
  Onnx__TensorShapeProto *shape = allocate(b, 1, sizeof *shape);
  Onnx__TensorShapeProto__Dimension **dims = allocate(b, (size_t)node->rank + 1, sizeof *dims);
  if (!info || !type || !tensor || !shape || !dims) return NULL;
  for (int i = 0; i < node->rank; i++) {
    dims[i] = allocate(b, 1, sizeof *dims[i]);
    if (!dims[i]) return NULL;
    onnx__tensor_shape_proto__dimension__init(dims[i]);
    if (i == 0 && node->batched) {
      dims[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dims[i]->dim_param = copy_string(b, "N");
      if (!dims[i]->dim_param) return NULL;
    } else {
      dims[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dims[i]->dim_value = node->dims[i];
    }
  }
  onnx__tensor_shape_proto__init(shape);
  shape->n_dim = (size_t)node->rank;
  shape->dim = dims;
  onnx__type_proto__tensor__init(tensor);
  tensor->has_elem_type = 1;
  tensor->elem_type =
      node->dtype == BPT_DTYPE_I32 ? ONNX__TENSOR_PROTO__DATA_TYPE__INT32 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  tensor->shape = shape;
  onnx__type_proto__init(type);
  type->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  type->tensor_type = tensor;
  onnx__value_info_proto__init(info);
  info->name = copy_string(b, name);
  info->type = type;
  return info->name ? info : NULL;
}

/* A graph input; with normalisation, (x - mean) / std follows an f32 one and node's value is the normalised one.
 * i32 inputs (an embedding's ids) are exported as they are. */
static bpt_status add_input(onnx_builder *b, const bpt_node *node, const bpt_onnx_export_options *options) {
  if (node->dtype != BPT_DTYPE_F32 && node->dtype != BPT_DTYPE_I32)
    return bpt_error(b->context, BPT_ERR_UNSUPPORTED,
                     WHERE ": input '%s' is %s, read by a node that is exported; only f32 and i32 inputs are exported",
                     node->name, bpt_dtype_name(node->dtype));
  Onnx__ValueInfoProto *info = value_info(b, node->name, node);
  if (!info || !append(b, &b->inputs, &b->input_count, &b->input_capacity, info)) return out_of_memory(b);
  if (node->dtype != BPT_DTYPE_F32 || (options->input_mean == 0.0f && options->input_std == 1.0f)) return BPT_OK;
  const char *mean = onnx_name(b, node->name, "mean"), *std = onnx_name(b, node->name, "std");
  const char *centered = onnx_name(b, node->name, "centered"), *normalized = onnx_name(b, node->name, "normalized");
  BPT_CHECK(onnx_constant_floats(b, mean, 0, NULL, &options->input_mean, 1));
  BPT_CHECK(onnx_constant_floats(b, std, 0, NULL, &options->input_std, 1));
  BPT_CHECK(onnx_node(b, "Sub", centered, (const char *[]){node->name, mean}, 2, centered, NULL));
  BPT_CHECK(onnx_node(b, "Div", normalized, (const char *[]){centered, std}, 2, normalized, NULL));
  b->values[node->index] = normalized;
  return BPT_OK;
}

static bool is_loss(const bpt_node *node) { return node->op == BPT_OP_SOFTMAX_CROSS_ENTROPY || node->op == BPT_OP_MSE; }

/* The exported outputs: every node nothing reads, a loss replaced by its prediction (input 0). */
static int find_outputs(const bpt_graph *graph, const bpt_node **outputs, const bpt_node **losses) {
  int count = 0;
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    bool read = node->op == BPT_OP_INPUT || node->op == BPT_OP_PARAMETER;
    for (int j = i + 1; j < graph->node_count && !read; j++)
      for (int k = 0; k < graph->nodes[j]->input_count; k++)
        read = read || graph->nodes[j]->inputs[k] == node;
    if (read) continue;
    const bpt_node *output = is_loss(node) ? node->inputs[0] : node;
    bool listed = false;
    for (int j = 0; j < count; j++)
      listed = listed || outputs[j] == output;
    if (listed) continue;
    losses[count] = is_loss(node) ? node : NULL;
    outputs[count++] = output;
  }
  return count;
}

static bpt_status add_output(onnx_builder *b, const bpt_node *output, const bpt_node *loss,
                             const bpt_onnx_export_options *options) {
  const char *name = onnx_value(b, output);
  if (loss && loss->op == BPT_OP_SOFTMAX_CROSS_ENTROPY && options->softmax) {
    const char *probabilities = onnx_name(b, name, "softmax");
    Onnx__NodeProto *softmax;
    BPT_CHECK(onnx_node(b, "Softmax", probabilities, &name, 1, probabilities, &softmax));
    /* Over the classes, the last axis: 1 for (N, classes), 2 for a sequence's (N, T, classes). */
    BPT_CHECK(onnx_attribute_int(b, softmax, "axis", output->rank - 1));
    name = probabilities;
  }
  Onnx__ValueInfoProto *info = value_info(b, name, output);
  if (!info || !append(b, &b->outputs, &b->output_count, &b->output_capacity, info)) return out_of_memory(b);
  return BPT_OK;
}

/* ONNX's IR version that introduced each operator set: the oldest a reader must understand. */
static int64_t ir_version(int64_t opset) { return opset <= 14 ? 7 : opset <= 18 ? 8 : opset <= 20 ? 9 : 10; }

static bpt_status build(onnx_builder *b, const bpt_onnx_export_options *options, Onnx__ModelProto *model) {
  const bpt_graph *graph = b->graph;
  const int n = graph->node_count;
  const bpt_node **outputs = allocate(b, (size_t)n, sizeof *outputs), **losses = allocate(b, (size_t)n, sizeof *losses);
  bool *needed = allocate(b, (size_t)n, sizeof *needed);
  b->values = allocate(b, (size_t)n, sizeof *b->values);
  if (!outputs || !losses || !needed || !b->values) return out_of_memory(b);
  const int output_count = find_outputs(graph, outputs, losses);
  if (output_count == 0) return bpt_error(b->context, BPT_ERR_INVALID_ARGUMENT, WHERE ": the graph has no output");
  for (int i = 0; i < output_count; i++)
    needed[outputs[i]->index] = true;
  /* Inputs are created before the nodes that read them, so one backward sweep marks every ancestor. */
  for (int i = n - 1; i >= 0; i--)
    for (int j = 0; needed[i] && j < onnx_input_count(graph->nodes[i]); j++)
      needed[graph->nodes[i]->inputs[j]->index] = true;
  for (int i = 0; i < n; i++)
    b->values[i] = graph->nodes[i]->name;
  b->user_names = allocate(b, (size_t)n + 1, sizeof *b->user_names);
  if (!b->user_names) return out_of_memory(b);
  for (int i = 0; i < n; i++)
    b->user_names[i] = graph->nodes[i]->name;
  qsort(b->user_names, (size_t)n, sizeof *b->user_names, compare_names);
  b->user_name_count = n;

  for (int i = 0; i < n; i++) {
    const bpt_node *node = graph->nodes[i];
    if (!needed[i]) continue;
    if (node->op == BPT_OP_INPUT) {
      BPT_CHECK(add_input(b, node, options));
    } else if (node->op == BPT_OP_PARAMETER) {
      BPT_CHECK(add_parameter(b, node));
    } else {
      const onnx_emitter emit = onnx_emitter_for(node->op);
      if (!emit)
        return bpt_error(b->context, BPT_ERR_UNSUPPORTED, WHERE ": node '%s' (op %s) has no ONNX equivalent",
                         node->name, bpt_op_get(node->op)->name);
      BPT_CHECK(emit(b, node));
    }
  }
  for (int i = 0; i < output_count; i++)
    BPT_CHECK(add_output(b, outputs[i], losses[i], options));

  Onnx__GraphProto *onnx_graph = allocate(b, 1, sizeof *onnx_graph);
  Onnx__OperatorSetIdProto *opset = allocate(b, 1, sizeof *opset);
  Onnx__OperatorSetIdProto **opsets = allocate(b, 1, sizeof *opsets);
  if (!onnx_graph || !opset || !opsets) return out_of_memory(b);
  onnx__graph_proto__init(onnx_graph);
  onnx_graph->name = copy_string(b, "bptrain");
  onnx_graph->n_node = b->node_count;
  onnx_graph->node = b->nodes;
  onnx_graph->n_initializer = b->initializer_count;
  onnx_graph->initializer = b->initializers;
  onnx_graph->n_input = b->input_count;
  onnx_graph->input = b->inputs;
  onnx_graph->n_output = b->output_count;
  onnx_graph->output = b->outputs;
  onnx__operator_set_id_proto__init(opset);
  opset->domain = copy_string(b, "");
  opset->has_version = 1;
  opset->version = b->opset;
  opsets[0] = opset;
  onnx__model_proto__init(model);
  model->has_ir_version = 1;
  model->ir_version = ir_version(b->opset);
  model->n_opset_import = 1;
  model->opset_import = opsets;
  model->producer_name = copy_string(b, "libbptrain");
  model->producer_version = copy_string(b, bpt_version());
  model->graph = onnx_graph;
  return b->out_of_memory ? out_of_memory(b) : BPT_OK;
}

/* Both files are written in full beside their paths before either replaces anything, so a failure while
 * writing leaves the old model and its old data together. The data is renamed into place first: a reader
 * never meets the new model without its data. A new data file takes the mode of the model it belongs to, so
 * the weights of a private (0600) model never land in a file others can read (issue 30, class 11). */
static bpt_status write_with_external_data(bpt_context *context, const char *path, const uint8_t *bytes, size_t size,
                                           const char *data_path, const unsigned char *data, size_t data_size) {
  bpt_staged_file model_file, data_file;
  BPT_CHECK(bpt_file_stage(context, path, "ONNX model", bytes, size, &model_file));
  struct stat model_info, data_info;
  const bool inherit = stat(path, &model_info) == 0 && S_ISREG(model_info.st_mode) && lstat(data_path, &data_info) != 0;
  bpt_status status = bpt_file_stage(context, data_path, "ONNX external data", data, data_size, &data_file);
  if (status == BPT_OK && inherit && chmod(data_file.temporary, model_info.st_mode & 0777) != 0) {
    status = bpt_error(context, BPT_ERR_IO, WHERE ": cannot give the external data '%s' the mode %04o of its model",
                       data_path, (unsigned)(model_info.st_mode & 0777));
    bpt_file_discard(&data_file);
  }
  if (status != BPT_OK) {
    bpt_file_discard(&model_file);
    return status;
  }
  status = bpt_file_commit(context, &data_file);
  if (!data_file.renamed) {
    bpt_file_discard(&model_file);
    return status;
  }
  /* The data is in place (its directory sync may have failed): the model follows it, so the two still match. */
  const bpt_status data_status = status;
  status = bpt_file_commit(context, &model_file);
  if (status == BPT_OK) return data_status;
  /* Rare (the model's rename failing just after its data's): say which file changed. */
  char message[1024];
  snprintf(message, sizeof message, "%s", bpt_context_last_error(context));
  return bpt_error(context, status, "%s; its external data '%s' was already replaced", message, data_path);
}

bpt_status bpt_graph_export_onnx(bpt_graph *graph, const char *path, const bpt_onnx_export_options *options) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, WHERE ": graph is NULL");
  bpt_context *context = graph->context;
  if (!path || !path[0]) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, WHERE ": path is NULL or empty");
  bpt_onnx_export_options o = bpt_onnx_export_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &o, sizeof o, options, options->size,
                               offsetof(bpt_onnx_export_options, softmax) + sizeof o.softmax, WHERE));
  if (o.opset < OPSET_MIN || o.opset > OPSET_MAX)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, WHERE ": opset %lld is outside the supported %d to %d",
                     (long long)o.opset, OPSET_MIN, OPSET_MAX);
  if (!isfinite(o.input_mean) || !isfinite(o.input_std) || o.input_std == 0.0f)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     WHERE ": input_mean %g and input_std %g must be finite, input_std non-zero", (double)o.input_mean,
                     (double)o.input_std);
  if (!graph->compiled)
    return bpt_error(context, BPT_ERR_STATE,
                     WHERE ": compile the graph first (its shapes and parameters are exported)");
  BPT_CHECK(bpt_graph_fit_declared_lengths(graph, WHERE)); /* the declared shapes, not a run's shorter ones */

  onnx_builder b = {.context = context, .graph = graph, .opset = o.opset};
  Onnx__ModelProto model;
  bpt_status status = build(&b, &o, &model);
  /* The external data, when the model needs it, is "<path>.data", named in the model by its file name alone:
   * ONNX resolves a location against the model's own directory. */
  char *data_path = allocate(&b, strlen(path) + sizeof ".data", 1);
  if (status == BPT_OK && !data_path) status = out_of_memory(&b);
  unsigned char *data = NULL;
  size_t data_size = 0;
  if (status == BPT_OK) {
    snprintf(data_path, strlen(path) + sizeof ".data", "%s.data", path);
    const char *slash = strrchr(data_path, '/');
    status = onnx_move_to_external_data(&b, &model, slash ? slash + 1 : data_path, &data, &data_size);
  }
  uint8_t *bytes = NULL;
  size_t size = 0;
  if (status == BPT_OK) {
    size = onnx__model_proto__get_packed_size(&model);
    bytes = malloc(size ? size : 1);
    if (!bytes) status = out_of_memory(&b);
    if (status == BPT_OK && onnx__model_proto__pack(&model, bytes) != size)
      status = bpt_error(context, BPT_ERR_INTERNAL, WHERE ": protobuf-c packed a size other than it measured");
  }
  if (status == BPT_OK && !data) status = bpt_file_write_atomically(context, path, "ONNX model", bytes, size);
  if (status == BPT_OK && data)
    status = write_with_external_data(context, path, bytes, size, data_path, data, data_size);
  free(data);
  free(bytes);
  free_builder(&b);
  return status;
}
