/* Moving a too-large model's initialisers to ONNX external data (see onnx_external.h): the side file's layout
 * is worked out and its size checked first, then each tensor's values are copied there little-endian and the
 * tensor is pointed at them. */
#include "export/onnx_external.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHERE "bpt_graph_export_onnx"

size_t onnx_protobuf_limit = INT32_MAX;

/* The bytes an initialiser's values take, and their element size (the exporter writes f32 and i64 only). */
static size_t tensor_bytes(const Onnx__TensorProto *tensor, size_t *element_size) {
  if (tensor->n_float_data) {
    *element_size = sizeof(float);
    return tensor->n_float_data * sizeof(float);
  }
  *element_size = sizeof(int64_t);
  return tensor->n_int64_data * sizeof(int64_t);
}

/* Copies count elements of element_size bytes into out in little-endian order, whatever the host's. */
static void copy_little_endian(unsigned char *out, const void *values, size_t count, size_t element_size) {
  const unsigned char *in = values;
  for (size_t i = 0; i < count; i++) {
    uint64_t word = 0;
    if (element_size == 4) {
      uint32_t narrow;
      memcpy(&narrow, in + 4 * i, 4);
      word = narrow;
    } else {
      memcpy(&word, in + 8 * i, 8);
    }
    for (size_t k = 0; k < element_size; k++)
      out[element_size * i + k] = (unsigned char)(word >> (8 * k));
  }
}

static Onnx__StringStringEntryProto *entry(onnx_builder *b, const char *key, const char *value) {
  Onnx__StringStringEntryProto *pair = onnx_allocate(b, 1, sizeof *pair);
  char *key_copy = onnx_allocate(b, strlen(key) + 1, 1), *value_copy = onnx_allocate(b, strlen(value) + 1, 1);
  if (!pair || !key_copy || !value_copy) return NULL;
  onnx__string_string_entry_proto__init(pair);
  memcpy(key_copy, key, strlen(key) + 1);
  memcpy(value_copy, value, strlen(value) + 1);
  pair->key = key_copy;
  pair->value = value_copy;
  return pair;
}

/* Points tensor at length bytes from offset of the side file; its inline values are dropped. */
static bool point_to(onnx_builder *b, Onnx__TensorProto *tensor, const char *location, size_t offset, size_t length) {
  char offset_text[24], length_text[24];
  snprintf(offset_text, sizeof offset_text, "%zu", offset);
  snprintf(length_text, sizeof length_text, "%zu", length);
  Onnx__StringStringEntryProto **entries = onnx_allocate(b, 3, sizeof *entries);
  if (!entries) return false;
  entries[0] = entry(b, "location", location);
  entries[1] = entry(b, "offset", offset_text);
  entries[2] = entry(b, "length", length_text);
  if (!entries[0] || !entries[1] || !entries[2]) return false;
  tensor->n_external_data = 3;
  tensor->external_data = entries;
  tensor->has_data_location = 1;
  tensor->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  tensor->n_float_data = 0;
  tensor->float_data = NULL;
  tensor->n_int64_data = 0;
  tensor->int64_data = NULL;
  return true;
}

bpt_status onnx_move_to_external_data(onnx_builder *b, Onnx__ModelProto *model, const char *location,
                                      unsigned char **data, size_t *data_size) {
  *data = NULL;
  *data_size = 0;
  bpt_context *context = onnx_context(b);
  const size_t packed = onnx__model_proto__get_packed_size(model);
  if (packed <= onnx_protobuf_limit) return BPT_OK;
  Onnx__GraphProto *graph = model->graph;
  /* The layout first: every offset and the total are checked before a byte is copied. */
  size_t total = 0, moved = 0;
  for (size_t i = 0; i < graph->n_initializer; i++) {
    size_t element_size;
    const size_t bytes = tensor_bytes(graph->initializer[i], &element_size);
    if (bytes < ONNX_EXTERNAL_THRESHOLD) continue;
    const size_t padding = (ONNX_EXTERNAL_ALIGNMENT - total % ONNX_EXTERNAL_ALIGNMENT) % ONNX_EXTERNAL_ALIGNMENT;
    if (padding > SIZE_MAX - total || bytes > SIZE_MAX - total - padding)
      return bpt_error(context, BPT_ERR_OUT_OF_MEMORY,
                       WHERE ": the external data of a %zu-byte model does not fit in this process's address space",
                       packed);
    total += padding + bytes;
    moved++;
  }
  unsigned char *side = calloc(total ? total : 1, 1);
  if (!side)
    return bpt_error(context, BPT_ERR_OUT_OF_MEMORY, WHERE ": out of memory for %zu bytes of external data", total);
  size_t offset = 0;
  for (size_t i = 0; i < graph->n_initializer; i++) {
    Onnx__TensorProto *tensor = graph->initializer[i];
    size_t element_size;
    const size_t bytes = tensor_bytes(tensor, &element_size);
    if (bytes < ONNX_EXTERNAL_THRESHOLD) continue;
    offset += (ONNX_EXTERNAL_ALIGNMENT - offset % ONNX_EXTERNAL_ALIGNMENT) % ONNX_EXTERNAL_ALIGNMENT;
    const void *values = tensor->n_float_data ? (const void *)tensor->float_data : (const void *)tensor->int64_data;
    copy_little_endian(side + offset, values, bytes / element_size, element_size);
    if (!point_to(b, tensor, location, offset, bytes)) {
      free(side);
      return bpt_error(context, BPT_ERR_OUT_OF_MEMORY, WHERE ": out of memory building the model");
    }
    offset += bytes;
  }
  const size_t remaining = onnx__model_proto__get_packed_size(model);
  if (remaining > onnx_protobuf_limit) {
    free(side);
    return bpt_error(context, BPT_ERR_UNSUPPORTED,
                     WHERE ": the model packs to %zu bytes, and still to %zu with its %zu initialisers of %d bytes or "
                           "more in external data: over protobuf's limit of %zu bytes; nothing was written",
                     packed, remaining, moved, ONNX_EXTERNAL_THRESHOLD, onnx_protobuf_limit);
  }
  *data = side;
  *data_size = total;
  return BPT_OK;
}
