/**
 * @file cnn_ops.h
 * @brief Ops of convolutional networks: conv2d, batch norm (with fused ReLU), pooling, residual add, reshape, dropout,
 * and non-trainable parameters (buffers).
 *
 * Images are NCHW: (batch, channels, height, width). Declare an image input with per-sample dims
 * {channels, height, width}; a data set's (28, 28) images feed a {1, 28, 28} input as they are.
 */
#ifndef BPTRAIN_CNN_OPS_H
#define BPTRAIN_CNN_OPS_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

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
BPT_API bpt_status bpt_batch_norm_relu(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *gamma, bpt_node *beta,
                                       bpt_node *running_mean, bpt_node *running_variance, float momentum,
                                       float epsilon, bpt_node **out);

/** Max pooling over (N, C, H, W) windows; padding never wins. Ties go to the first value in the window. */
BPT_API bpt_status bpt_max_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                                  int64_t padding, bpt_node **out);

/** Average pooling over (N, C, H, W) windows, dividing by the full window (zero padding counted). */
BPT_API bpt_status bpt_avg_pool2d(bpt_graph *graph, const char *name, bpt_node *x, int64_t kernel, int64_t stride,
                                  int64_t padding, bpt_node **out);

/** Mean over each channel's plane: (N, C, H, W) to (N, C). */
BPT_API bpt_status bpt_global_avg_pool(bpt_graph *graph, const char *name, bpt_node *x, bpt_node **out);

/**
 * Element-wise a + b (residual connections, a bias or a position table added to every sample), with NumPy
 * broadcasting: shapes aligned at the last axis, each pair of axes equal or one of them 1. The batch stays the
 * first axis: an unbatched operand spans at most the per-sample axes (or has a 1 against the batch), and two
 * batched operands have the same rank. Inputs of one shape run on every backend; broadcasting runs on the
 * backends whose kernels have it (the CPU), elsewhere it is a compile-time ::BPT_ERR_UNSUPPORTED or the CPU
 * fallback.
 */
BPT_API bpt_status bpt_add(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out);

/** Element-wise max(a + b, 0) in one node: the join of a ResNet basic block and its ReLU. */
BPT_API bpt_status bpt_add_relu(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, bpt_node **out);

/** Same values, new per-sample shape (@p rank dims, batch implied) with the same number of elements. A view:
 * the result shares @p x's memory (value and gradient), so it costs no copy and no activation bytes. */
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

BPT_EXTERN_C_END

#endif
