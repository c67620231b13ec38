/* ONNX external data (issue 30, class 6): protobuf's parsers refuse a message over 2 GiB, so a larger model
 * keeps its bigger initialisers in a side file beside the .onnx, in ONNX's external-data format (TensorProto's
 * data_location EXTERNAL with "location", "offset" and "length" entries). onnx_model.c builds the model, then
 * asks this file to move the data out when the packed model would not fit. */
#ifndef BPT_EXPORT_ONNX_EXTERNAL_H
#define BPT_EXPORT_ONNX_EXTERNAL_H

#include <stddef.h>

#include "export/onnx_model.h"

/* An initialiser of at least this many bytes moves to the side file; smaller ones stay inline (the threshold of
 * ONNX's own convert_model_to_external_data). */
#define ONNX_EXTERNAL_THRESHOLD 1024
/* Each tensor in the side file starts at a multiple of this, the page size the spec asks for so that a reader
 * can map the file instead of copying it. */
#define ONNX_EXTERNAL_ALIGNMENT 4096

/* The largest packed model written as one file: 2^31 - 1 bytes, since protobuf's parsers count a message's
 * size in an int. A variable rather than a constant only so that a test can lower it and drive a small model
 * through the external-data path (test_onnx_external.c); nothing else writes it. */
extern size_t onnx_protobuf_limit;

/* When model packs to more than onnx_protobuf_limit bytes: moves every initialiser of at least
 * ONNX_EXTERNAL_THRESHOLD bytes into *data (malloc'ed, *data_size bytes: each tensor's values little-endian at
 * a multiple of ONNX_EXTERNAL_ALIGNMENT, zeros between) and points the tensor there under location, a file
 * name relative to the model's directory. When the model fits, *data is NULL and nothing changes. Fails with
 * BPT_ERR_UNSUPPORTED naming the sizes and the limit when the model still would not fit (a graph of very many
 * nodes or small constants), and BPT_ERR_OUT_OF_MEMORY; *data is then NULL. */
bpt_status onnx_move_to_external_data(onnx_builder *builder, Onnx__ModelProto *model, const char *location,
                                      unsigned char **data, size_t *data_size);

#endif
