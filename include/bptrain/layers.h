/**
 * @file layers.h
 * @brief Layer helpers that create parameters and ops together: conv2d, batch norm, layer and RMS norm, ResNet basic
 * blocks, and sequential stacks described by a table of bpt_layer_spec.
 */
#ifndef BPTRAIN_LAYERS_H
#define BPTRAIN_LAYERS_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/**
 * Creates "<name>.weight" (out_channels, C / groups, kernel, kernel) with He-normal initialisation and,
 * when @p with_bias, "<name>.bias" (zeros), then a conv2d named @p name with the given stride and padding.
 */
BPT_API bpt_status bpt_layer_conv2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels,
                                    int64_t kernel, int64_t stride, int64_t padding, int with_bias, bpt_node **out);

/** Creates "<name>.gamma" (ones), "<name>.beta" (zeros) and the buffers "<name>.running_mean" (zeros) and
 * "<name>.running_variance" (ones), then a batch norm named @p name with momentum 0.1 and epsilon 1e-5. */
BPT_API bpt_status bpt_layer_batch_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);

/** bpt_layer_batch_norm() followed by ReLU, in one bpt_batch_norm_relu() node named @p name (same parameters). */
BPT_API bpt_status bpt_layer_batch_norm_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);

/** Creates "<name>.weight" (C, ones) and "<name>.bias" (C, zeros) for x's last axis of C values, then a
 * bpt_layer_norm() named @p name with them: PyTorch's nn.LayerNorm(C, eps=epsilon). */
BPT_API bpt_status bpt_layer_layer_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out);

/** Creates "<name>.weight" (C, ones) for x's last axis of C values, then a bpt_rms_norm() named @p name with
 * it: PyTorch's nn.RMSNorm(C, eps=epsilon). */
BPT_API bpt_status bpt_layer_rms_norm(bpt_graph *graph, const char *name, bpt_node *x, float epsilon, bpt_node **out);

/**
 * A ResNet basic block (He et al. 2016): conv3x3(stride)-BN-ReLU-conv3x3-BN, plus a shortcut, then ReLU.
 * The shortcut is the identity when shape is unchanged, else a 1x1 convolution with @p stride followed by
 * batch norm (the "projection" shortcut). Nodes: "<name>.conv1", "<name>.bn1" (batch norm and ReLU in one
 * node), "<name>.conv2", "<name>.bn2", "<name>.shortcut" and "<name>.shortcut_bn" (projection only), and
 * "<name>.add" (the sum and the last ReLU in one node).
 */
BPT_API bpt_status bpt_layer_resnet_basic_block(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels,
                                                int64_t stride, bpt_node **out);

/**
 * Creates "<name>.weight" (vocabulary, dim) initialised N(0, 0.02^2) (BPT_INIT_NORMAL_SMALL), then a
 * bpt_embedding() named @p name looking up @p ids (batched i32 (N) or (N, T)) in it: out (N, T, dim).
 */
BPT_API bpt_status bpt_layer_embedding(bpt_graph *graph, const char *name, bpt_node *ids, int64_t vocabulary,
                                       int64_t dim, bpt_node **out);

/** Kinds of layer in a bpt_layer_spec. Values are fixed; new kinds are appended. */
typedef enum bpt_layer_kind {
  BPT_LAYER_CONV2D = 0,     /**< units output channels, kernel, stride, padding; bias unless followed by BN */
  BPT_LAYER_BATCH_NORM = 1, /**< 2-D or 1-D by the input's rank */
  BPT_LAYER_RELU = 2,
  BPT_LAYER_MAX_POOL = 3, /**< kernel, stride, padding */
  BPT_LAYER_AVG_POOL = 4, /**< kernel, stride, padding */
  BPT_LAYER_GLOBAL_AVG_POOL = 5,
  BPT_LAYER_FLATTEN = 6,
  BPT_LAYER_LINEAR = 7,       /**< units outputs, He-uniform weights, zero bias */
  BPT_LAYER_DROPOUT = 8,      /**< rate */
  BPT_LAYER_RESNET_BLOCK = 9, /**< units output channels, stride */
  BPT_LAYER_TANH = 10,
  BPT_LAYER_SIGMOID = 11
} bpt_layer_kind;

/**
 * One layer of a sequential stack; unused fields are ignored. Start each entry with ::BPT_LAYER, which sets
 * the size field, and name the rest: `{BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 3}`.
 */
typedef struct bpt_layer_spec {
  size_t size;         /**< sizeof(bpt_layer_spec), the same in every entry: the array's stride */
  bpt_layer_kind kind; /**< which layer */
  int64_t units;       /**< output channels or features */
  int64_t kernel;      /**< square kernel or window size */
  int64_t stride;      /**< 0 means 1 for convolutions and blocks, the window size for pooling */
  int64_t padding;     /**< zeros on each side */
  float rate;          /**< dropout probability */
} bpt_layer_spec;

/** Opens a bpt_layer_spec initialiser: sets the size field and the kind. */
#define BPT_LAYER(layer_kind) .size = sizeof(bpt_layer_spec), .kind = (layer_kind)

/** @return a spec of @p kind with its size set and every other field 0. */
BPT_API bpt_layer_spec bpt_layer_spec_default(bpt_layer_kind kind);

/**
 * Builds the layers in order on top of @p x, naming them "<prefix><index>.<kind>" (for example
 * "features3.conv"), and returns the last node. Reads like the architecture's table. A batch norm directly
 * followed by ReLU becomes one bpt_batch_norm_relu() node, named for the batch norm; the ReLU's index then
 * names no node.
 */
BPT_API bpt_status bpt_layer_sequential(bpt_graph *graph, const char *prefix, bpt_node *x, const bpt_layer_spec *layers,
                                        int count, bpt_node **out);

BPT_EXTERN_C_END

#endif
