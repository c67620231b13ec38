/* The ONNX exporter's private builder: a model under construction in protobuf-c's generated structs
 * (onnx.pb-c.h, generated at build time from the official onnx.proto), every piece of it allocated from
 * one arena freed at the end. onnx_model.c walks the graph and writes the file; onnx_ops.c holds one
 * emitter per op, which adds the ONNX nodes that compute that op in evaluation mode. */
#ifndef BPT_EXPORT_ONNX_MODEL_H
#define BPT_EXPORT_ONNX_MODEL_H

#include "core/graph.h"
#include "onnx.pb-c.h"

typedef struct onnx_builder onnx_builder;

/* Adds the ONNX nodes for node (which reads onnx_value(builder, input) for each input and writes the value
 * named onnx_value(builder, node)). Returns a status with a message naming the node on failure. */
typedef bpt_status (*onnx_emitter)(onnx_builder *builder, const bpt_node *node);

/* The emitter of op, NULL for an op without an ONNX equivalent (onnx_ops.c). */
onnx_emitter onnx_emitter_for(bpt_op_id op);
/* How many of node's inputs its ONNX form reads (a folded batch norm reads x only, not its statistics):
 * the exporter writes initialisers for the parameters among them only. */
int onnx_input_count(const bpt_node *node);

/* Zeroed memory owned by the builder, freed with it (NULL when out of memory: the builder has recorded it). */
void *onnx_allocate(onnx_builder *builder, size_t count, size_t size);
/* The context whose last error the export's failures set. */
bpt_context *onnx_context(const onnx_builder *builder);

/* The ONNX value name holding node's output. */
const char *onnx_value(const onnx_builder *builder, const bpt_node *node);
/* The operator set being written. */
int64_t onnx_opset(const onnx_builder *builder);

/* A new name "<base>/<suffix>" for an intermediate value or constant, owned by the builder (NULL when out of
 * memory: the builder has recorded the error, and the next onnx_node call fails with it). */
const char *onnx_name(onnx_builder *builder, const char *base, const char *suffix);
/* Appends a node op_type(inputs) -> output named name; inputs may hold NULL for an omitted optional input
 * (only trailing ones are dropped). *out (may be NULL) receives the node for onnx_attribute_* calls. */
bpt_status onnx_node(onnx_builder *builder, const char *op_type, const char *name, const char *const *inputs,
                     int input_count, const char *output, Onnx__NodeProto **out);
bpt_status onnx_attribute_int(onnx_builder *builder, Onnx__NodeProto *node, const char *name, int64_t value);
bpt_status onnx_attribute_float(onnx_builder *builder, Onnx__NodeProto *node, const char *name, float value);
bpt_status onnx_attribute_ints(onnx_builder *builder, Onnx__NodeProto *node, const char *name, const int64_t *values,
                               int count);
/* Adds a constant initialiser called name: rank dims, count values. */
bpt_status onnx_constant_floats(onnx_builder *builder, const char *name, int rank, const int64_t *dims,
                                const float *values, int64_t count);
bpt_status onnx_constant_ints(onnx_builder *builder, const char *name, int rank, const int64_t *dims,
                              const int64_t *values, int64_t count);

#endif
