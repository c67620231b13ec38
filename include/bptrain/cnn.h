/**
 * @file cnn.h
 * @brief Convolutional networks and the training toolkit they need: conv2d, batch norm, pooling, residual
 * add, reshape and dropout ops; train/eval mode; layer helpers (sequential stacks, ResNet basic blocks);
 * batch-norm folding; learning-rate schedules, parameter groups, gradient clipping and statistics.
 *
 * Images are NCHW: (batch, channels, height, width). Declare an image input with per-sample dims
 * {channels, height, width}; a data set's (28, 28) images feed a {1, 28, 28} input as they are.
 */
#ifndef BPTRAIN_CNN_H
#define BPTRAIN_CNN_H

#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/* ---- Ops ----------------------------------------------------------------------------------------------- */

/** Geometry of a convolution; get it from bpt_conv2d_options_default() (stride 1, no padding, dilation 1,
 * one group) and change what you need. */
typedef struct bpt_conv2d_options {
  size_t size;             /**< sizeof(bpt_conv2d_options), set by the default function */
  int64_t stride_height;   /**< >= 1 */
  int64_t stride_width;    /**< >= 1 */
  int64_t padding_height;  /**< >= 0, zeros added on both sides */
  int64_t padding_width;   /**< >= 0, zeros added on both sides */
  int64_t dilation_height; /**< >= 1 */
  int64_t dilation_width;  /**< >= 1 */
  int64_t groups;          /**< >= 1, divides both channel counts */
} bpt_conv2d_options;

/** @return stride 1, padding 0, dilation 1, groups 1. */
BPT_API bpt_conv2d_options bpt_conv2d_options_default(void);

/**
 * 2-D convolution (cross-correlation, as in every framework).
 * @param x (N, C, H, W)
 * @param weight (O, C / groups, kh, kw)
 * @param bias (O) or NULL
 * @param options NULL for the defaults
 * Output (N, O, OH, OW) with OH = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1, likewise OW.
 */
BPT_API bpt_status bpt_conv2d(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *weight, bpt_node *bias,
                              const bpt_conv2d_options *options, bpt_node **out);

/**
 * Batch normalisation per channel: over (N, H, W) for (N, C, H, W) input (2-D), over N for (N, C) (1-D).
 * In training mode it normalises with the batch's statistics and updates the running statistics
 * (running = (1 - momentum) running + momentum batch, unbiased variance); in evaluation mode it uses them.
 * @param gamma, beta (C) trainable scale and shift
 * @param running_mean, running_variance (C) buffers from bpt_graph_nontrainable_parameter(), initialised to zeros and
 * ones
 * @param momentum in (0, 1], typically 0.1; @param epsilon > 0, typically 1e-5
 */
BPT_API bpt_status bpt_batch_norm(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                                  bpt_node *running_mean, bpt_node *running_variance, float momentum, float epsilon,
                                  bpt_node **out);

/**
 * Batch norm followed by ReLU in one node: y = max(batch_norm(x), 0), with bpt_batch_norm()'s parameters. It
 * saves the separate ReLU's pass over the activations in forward and in backward, and its buffers; backward
 * keeps one bit per value (y > 0).
 */
BPT_API bpt_status bpt_batch_norm_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma,
                                       bpt_node *beta, bpt_node *running_mean, bpt_node *running_variance,
                                       float momentum, float epsilon, bpt_node **out);

/** Max pooling over (N, C, H, W) windows; padding never wins. Ties go to the first value in the window. */
BPT_API bpt_status bpt_max_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                                  int64_t padding, bpt_node **out);

/** Average pooling over (N, C, H, W) windows, dividing by the full window (zero padding counted). */
BPT_API bpt_status bpt_avg_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                                  int64_t padding, bpt_node **out);

/** Mean over each channel's plane: (N, C, H, W) to (N, C). */
BPT_API bpt_status bpt_global_avg_pool(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);

/** Element-wise a + b of two nodes of the same shape (residual connections). */
BPT_API bpt_status bpt_add(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out);

/** Element-wise max(a + b, 0) in one node: the join of a ResNet basic block and its ReLU. */
BPT_API bpt_status bpt_add_relu(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out);

/** Same values, new per-sample shape (@p rank dims, batch implied) with the same number of elements. */
BPT_API bpt_status bpt_reshape(bpt_graph *graph, const char *name, bpt_node *x, int rank, const int64_t *dims,
                               bpt_node **out);

/** (N, ...) to (N, features). */
BPT_API bpt_status bpt_flatten(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);

/**
 * Inverted dropout: in training mode each value is zeroed with probability @p probability and the rest are
 * scaled by 1 / (1 - probability); in evaluation mode values pass unchanged. Masks derive from the
 * context's seed, the node and the graph's random step, which every optimiser step advances (forwards
 * between two steps see the same mask), so equal seeds give equal runs.
 */
BPT_API bpt_status bpt_dropout(bpt_graph *graph, const char *name, bpt_node *x, float probability, bpt_node **out);

/**
 * Declares a non-trainable f32 parameter (a "buffer", such as batch-norm running statistics): it lives in
 * the flat parameter block, so bpt_graph_read_parameters() and checkpoints include it, but it has no
 * gradient and optimisers never change it.
 */
BPT_API bpt_status bpt_graph_nontrainable_parameter(bpt_graph *graph, const char *name, int rank, const int64_t *dims,
                                                    bpt_initializer initializer, bpt_node **out);

/* ---- Train and eval mode ------------------------------------------------------------------------------- */

/** Switches batch norm and dropout between training (non-zero, the default) and evaluation mode. */
BPT_API bpt_status bpt_graph_set_training(bpt_graph *graph, int training);

/** @return 1 in training mode, 0 in evaluation mode (or for NULL). */
BPT_API int bpt_graph_is_training(const bpt_graph *graph);

/* ---- Layer helpers ------------------------------------------------------------------------------------- */

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

/**
 * A ResNet basic block (He et al. 2016): conv3x3(stride)-BN-ReLU-conv3x3-BN, plus a shortcut, then ReLU.
 * The shortcut is the identity when shape is unchanged, else a 1x1 convolution with @p stride followed by
 * batch norm (the "projection" shortcut). Nodes: "<name>.conv1", "<name>.bn1" (batch norm and ReLU in one
 * node), "<name>.conv2", "<name>.bn2", "<name>.shortcut" and "<name>.shortcut_bn" (projection only), and
 * "<name>.add" (the sum and the last ReLU in one node).
 */
BPT_API bpt_status bpt_layer_resnet_basic_block(bpt_graph *graph, const char *name, bpt_node *x, int64_t out_channels,
                                                int64_t stride, bpt_node **out);

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

/** One layer of a sequential stack; unused fields are ignored (designated initialisers read best). */
typedef struct bpt_layer_spec {
  bpt_layer_kind kind; /**< which layer */
  int64_t units;       /**< output channels or features */
  int64_t kernel;      /**< square kernel or window size */
  int64_t stride;      /**< 0 means 1 for convolutions and blocks, the window size for pooling */
  int64_t padding;     /**< zeros on each side */
  float rate;          /**< dropout probability */
} bpt_layer_spec;

/**
 * Builds the layers in order on top of @p x, naming them "<prefix><index>.<kind>" (for example
 * "features3.conv"), and returns the last node. Reads like the architecture's table. A batch norm directly
 * followed by ReLU becomes one bpt_batch_norm_relu() node, named for the batch norm; the ReLU's index then
 * names no node.
 */
BPT_API bpt_status bpt_layer_sequential(bpt_graph *graph, const char *prefix, bpt_node *x, const bpt_layer_spec *layers,
                                        int count, bpt_node **out);

/* ---- Inference folding --------------------------------------------------------------------------------- */

/**
 * Folds every batch norm whose input is a convolution used by nothing else into that convolution:
 * w' = w gamma / sqrt(var + eps), b' = (b - mean) gamma / sqrt(var + eps) + beta. The graph is switched to
 * evaluation mode and becomes inference-only (backward fails). Parameters are rewritten in place, so save
 * them before folding if you want to keep training.
 * @param folded_count where the number of folded batch norms is written, or NULL
 */
BPT_API bpt_status bpt_graph_fold_batch_norm(bpt_graph *graph, int *folded_count);

/* ---- Learning-rate schedules --------------------------------------------------------------------------- */

/** Schedule shapes. */
typedef enum bpt_schedule_kind {
  BPT_SCHEDULE_CONSTANT = 0,
  BPT_SCHEDULE_STEP = 1,  /**< lr = base gamma^floor(step / step_size) */
  BPT_SCHEDULE_COSINE = 2 /**< lr = min + (base - min) (1 + cos(pi t / T)) / 2 over total_steps, then min */
} bpt_schedule_kind;

/** A learning-rate schedule; get it from bpt_schedule_options_default(). Steps count from 0. */
typedef struct bpt_schedule_options {
  size_t size;                 /**< sizeof(bpt_schedule_options), set by the default function */
  bpt_schedule_kind kind;      /**< the shape after warm-up */
  float base_learning_rate;    /**< the rate after warm-up, before any decay */
  int64_t warmup_steps;        /**< linear warm-up from warmup_start_factor * base to base over these steps */
  float warmup_start_factor;   /**< in [0, 1] */
  int64_t step_size;           /**< STEP: steps between decays (counted after warm-up) */
  float gamma;                 /**< STEP: decay factor */
  int64_t total_steps;         /**< COSINE: length of the annealing, counted after warm-up */
  float minimum_learning_rate; /**< COSINE: the floor */
} bpt_schedule_options;

/** @return a constant schedule at 0.1 without warm-up (step_size 1, gamma 0.1, warm-up factor 0). */
BPT_API bpt_schedule_options bpt_schedule_options_default(void);

/** Computes the learning rate at @p step (>= 0) into @p learning_rate. */
BPT_API bpt_status bpt_schedule_learning_rate(const bpt_schedule_options *schedule, int64_t step, float *learning_rate);

/** Makes bpt_optimizer_step() set the learning rate from @p schedule at its step count before each update. */
BPT_API bpt_status bpt_optimizer_set_schedule(bpt_optimizer *optimizer, const bpt_schedule_options *schedule);

/* ---- Parameter groups ---------------------------------------------------------------------------------- */

/**
 * Gives @p parameters their own learning-rate multiplier (applied to the optimiser's or schedule's rate) and
 * weight decay. A parameter belongs to the group it was last given to; others use the optimiser's options.
 */
BPT_API bpt_status bpt_optimizer_set_group(bpt_optimizer *optimizer, bpt_node *const *parameters, int count,
                                           float learning_rate_scale, float weight_decay);

/** Sets weight decay 0 on every rank-1 parameter: biases and batch-norm scales and shifts. */
BPT_API bpt_status bpt_optimizer_no_decay_on_vectors(bpt_optimizer *optimizer);

/* ---- Gradient clipping and statistics ------------------------------------------------------------------ */

/**
 * Scales all parameter gradients so that their global L2 norm is at most @p max_norm; call between backward
 * and the optimiser step. @param norm receives the norm before clipping, or NULL.
 */
BPT_API bpt_status bpt_graph_clip_gradient_norm(bpt_graph *graph, float max_norm, float *norm);

/** Clamps every parameter gradient to [-limit, limit]. */
BPT_API bpt_status bpt_graph_clip_gradient_value(bpt_graph *graph, float limit);

/** @return the number of parameters (buffers included) of a compiled graph. */
BPT_API int bpt_graph_parameter_node_count(const bpt_graph *graph);

/** @return parameter @p index in declaration order, or NULL. */
BPT_API bpt_node *bpt_graph_parameter_node(const bpt_graph *graph, int index);

/** @return 1 for a trainable parameter, 0 for buffers and non-parameters. */
BPT_API int bpt_node_is_trainable(const bpt_node *node);

/** @return the number of nodes in the graph (inputs, parameters and ops), or 0 for NULL. */
BPT_API int bpt_graph_node_count(const bpt_graph *graph);

/** @return node @p index in creation order (a topological order), or NULL. */
BPT_API bpt_node *bpt_graph_node(const bpt_graph *graph, int index);

/** @return the node's op name ("conv2d", "relu", "parameter", ...), or "" for NULL. */
BPT_API const char *bpt_node_op_name(const bpt_node *node);

/** L2 norm of one parameter's gradient from the last backward pass. */
BPT_API bpt_status bpt_graph_gradient_norm(bpt_graph *graph, const bpt_node *parameter, float *norm);

/** Statistics of a node's values from the last forward pass (per layer: dead ReLUs show as zeros). */
typedef struct bpt_value_statistics {
  double mean;               /**< mean of the values */
  double standard_deviation; /**< population standard deviation */
  double zero_fraction;      /**< fraction of values exactly 0 */
  int64_t count;             /**< number of values (batch included) */
} bpt_value_statistics;

/** Computes statistics of @p node's values for the current batch. */
BPT_API bpt_status bpt_graph_value_statistics(bpt_graph *graph, const bpt_node *node, bpt_value_statistics *statistics);

BPT_EXTERN_C_END

#endif
