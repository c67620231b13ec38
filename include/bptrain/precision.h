/**
 * @file precision.h
 * @brief A graph's precision policy: the compute dtype, dynamic loss scaling and how saved activations are
 * stored. It includes number_format.h, memory.h, binary_stochastic.h and mode.h, which it held before they
 * had headers of their own.
 *
 * See docs/precision.md for the design: f32 master weights and optimiser state, activations, their
 * gradients and weight copies stored in the compute dtype, casts inserted by the engine.
 */
#ifndef BPTRAIN_PRECISION_H
#define BPTRAIN_PRECISION_H

#include "binary_stochastic.h"
#include "graph.h"
#include "memory.h"
#include "mode.h"
#include "number_format.h"

BPT_EXTERN_C_BEGIN

/** Whether gradients are computed on a scaled loss. */
typedef enum bpt_loss_scaling {
  BPT_LOSS_SCALING_AUTO = 0,   /**< dynamic for an f16 compute dtype, none otherwise */
  BPT_LOSS_SCALING_NONE = 1,   /**< a non-finite loss or gradient makes bpt_optimizer_step() fail */
  BPT_LOSS_SCALING_DYNAMIC = 2 /**< scale the loss; skip steps whose gradients overflow and back off */
} bpt_loss_scaling;

/** How saved activations (a linear layer's input kept for its weight gradient) are stored. */
typedef enum bpt_activation_storage {
  BPT_ACTIVATION_STORAGE_COMPUTE = 0, /**< in the compute dtype (default) */
  BPT_ACTIVATION_STORAGE_F16 = 1,
  BPT_ACTIVATION_STORAGE_BF16 = 2,
  BPT_ACTIVATION_STORAGE_FP8 = 3 /**< FP8 E4M3 with a per-tensor power-of-two scale, set each forward */
} bpt_activation_storage;

/** Options for bpt_graph_set_precision(); get them from bpt_precision_options_default(). */
typedef struct bpt_precision_options {
  size_t size;                 /**< sizeof(bpt_precision_options), set by the default function */
  bpt_dtype compute_dtype;     /**< f32 (default), f16 or bf16 */
  bpt_loss_scaling loss_scaling; /**< default ::BPT_LOSS_SCALING_AUTO */
  float initial_loss_scale;    /**< default 2^16 */
  int64_t growth_interval;     /**< clean steps before the scale doubles; default 2000 */
  float growth_factor;         /**< default 2 */
  float backoff_factor;        /**< applied when a step overflows; default 0.5 */
  bpt_activation_storage saved_activation_storage; /**< default ::BPT_ACTIVATION_STORAGE_COMPUTE */
  /** Non-zero: keep every node's value after forward (bpt_graph_read() works on all of them) instead of
   * reusing the memory of values that backward does not need. Default 0. */
  int keep_all_values;
  /** Positive: under the bf16 policy, activations and their gradients are stored as 2-byte values wherever
   * their producer and consumers take that storage (CPU: linear, relu, softmax_cross_entropy, embedding,
   * layer_norm, rms_norm, softmax, the GELUs, silu, add, mul, batch_norm and the fused attention read and write
   * it directly; convolution, pooling and the other ops that work only through their kernels get it widened
   * into f32 scratch around each call), up to half their memory (bpt_graph_memory()'s activation_bytes); the
   * rest keep f32 buffers rounded in place. Forward values are the same either way; the gradient of a value
   * read by several nodes is summed in bf16 (rounded after each reader's part, as PyTorch's bf16 autograd sums
   * it), so gradients differ by a few bf16 units from the rounding path's single rounding. 0: every
   * activation in f32 buffers rounded in place (the rounding path). Default -1 (any negative value): on where
   * the graph runs on the CPU backend, whose kernels read and write bf16 directly, off elsewhere (CUDA would
   * only widen around f32 kernels). docs/precision.md has the measurements. */
  int store_activations_16bit;
} bpt_precision_options;

/** @return compute in f32, automatic loss scaling (2^16, x2 every 2000 clean steps, x0.5 on overflow). */
BPT_API bpt_precision_options bpt_precision_options_default(void);

/**
 * Sets a graph's precision policy. Call before bpt_graph_compile(). Master weights, their gradients and
 * the optimiser state stay f32; activations, activation gradients, weight copies and parameter gradients are
 * stored in the compute dtype, with the casts inserted by the engine.
 */
BPT_API bpt_status bpt_graph_set_precision(bpt_graph *graph, const bpt_precision_options *options);

/** @return the current loss scale (1 without loss scaling), or 0 for NULL. */
BPT_API float bpt_graph_loss_scale(const bpt_graph *graph);

/** @return how many optimiser steps were skipped because a gradient overflowed under loss scaling. */
BPT_API int64_t bpt_graph_skipped_steps(const bpt_graph *graph);

BPT_EXTERN_C_END

#endif
