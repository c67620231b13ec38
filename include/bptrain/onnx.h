/**
 * @file onnx.h
 * @brief Export of a compiled graph's inference computation as an ONNX model file.
 */
#ifndef BPTRAIN_ONNX_H
#define BPTRAIN_ONNX_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** Options for bpt_graph_export_onnx(); get them from bpt_onnx_export_options_default(). */
typedef struct bpt_onnx_export_options {
  size_t size;      /**< sizeof(bpt_onnx_export_options), set by the default function */
  int64_t opset;    /**< ONNX operator set, 13 to 21 (default 17); Gelu is one node from 20 on, Erf before */
  float input_mean; /**< every f32 input is normalised inside the model as (x - input_mean) / input_std */
  float input_std;  /**< (defaults 0 and 1: no normalisation nodes), as bpt_dataset_set_normalization() */
  int softmax;      /**< non-zero: a softmax_cross_entropy loss exports probabilities, not logits */
} bpt_onnx_export_options;

/** Opset 17, no input normalisation, logits out. */
BPT_API bpt_onnx_export_options bpt_onnx_export_options_default(void);

/**
 * Writes the inference computation of compiled @p graph to @p path as an ONNX model (replacing the file
 * atomically). Evaluation semantics whatever the graph's mode: batch norm on its running statistics (or
 * nothing, when folded into its convolution), dropout as identity. A loss is not exported: the model's
 * output is the loss's prediction (the logits of softmax_cross_entropy, or their softmax with
 * options->softmax), and the label input is dropped. Inputs keep their names and shapes with a dynamic
 * batch dimension "N"; parameters become initialisers under their node names. A model over protobuf's 2 GiB
 * limit keeps every initialiser of 1 KiB or more in ONNX external data, the file "<path>.data" beside it
 * (docs/onnx.md).
 * @return BPT_ERR_UNSUPPORTED for a node whose op has no ONNX equivalent (the message names node and op), for a
 *         model over 2 GiB even without its large initialisers (nothing is written), or when the library was
 *         built without protobuf-c; BPT_ERR_STATE for a graph not compiled;
 *         BPT_ERR_IO when @p path cannot be written
 */
BPT_API bpt_status bpt_graph_export_onnx(bpt_graph *graph, const char *path, const bpt_onnx_export_options *options);

BPT_EXTERN_C_END

#endif
