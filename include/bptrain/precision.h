/**
 * @file precision.h
 * @brief Narrow number formats (f16, bf16, FP8 E4M3/E5M2), mixed-precision training with dynamic loss
 * scaling, binary stochastic neurons, and the activation memory a graph holds.
 *
 * See docs/precision.md for the design: f32 master weights and optimiser state, activations, their
 * gradients and weight copies stored in the compute dtype, casts inserted by the engine.
 */
#ifndef BPTRAIN_PRECISION_H
#define BPTRAIN_PRECISION_H

#include "graph.h"

BPT_EXTERN_C_BEGIN

/** How a value between two representable numbers is rounded. */
typedef enum bpt_rounding {
  BPT_ROUND_NEAREST_EVEN = 0, /**< IEEE round to nearest, ties to even */
  BPT_ROUND_STOCHASTIC = 1    /**< up with probability equal to the distance from the lower neighbour, in ulps */
} bpt_rounding;

/** Options for bpt_convert(); get them from bpt_convert_options_default(). */
typedef struct bpt_convert_options {
  size_t size;           /**< sizeof(bpt_convert_options), set by the default function */
  bpt_rounding rounding; /**< default ::BPT_ROUND_NEAREST_EVEN */
  /** Non-zero: values beyond the largest finite number (and infinities) become that number. Zero
   * (default): they become infinity, or NaN for E4M3, which has no infinity. */
  int saturate;
  /** Every value is multiplied by scale before it is encoded, and after it is decoded: the per-tensor
   * scale factor of FP8 (see bpt_fp8_scale()). Default 1. */
  float scale;
  uint64_t seed; /**< picks the random stream for stochastic rounding; equal seeds give equal results */
} bpt_convert_options;

/** @return round to nearest even, no saturation, scale 1, seed 0. */
BPT_API bpt_convert_options bpt_convert_options_default(void);

/**
 * Converts @p count host values between any two of f32, f16, bf16, FP8 E4M3 and FP8 E5M2. Narrow formats are
 * stored as their bit patterns (uint16_t for f16 and bf16, uint8_t for FP8). Conversions between two narrow
 * formats go through f32, which holds every narrow value exactly.
 * @param options NULL for the defaults
 */
BPT_API bpt_status bpt_convert(bpt_context *context, const bpt_convert_options *options, int64_t count,
                               bpt_dtype source_dtype, const void *source, bpt_dtype destination_dtype,
                               void *destination);

/** @return the largest finite value of a floating-point dtype (65504 for f16, 448 for E4M3...), or 0. */
BPT_API float bpt_dtype_max_finite(bpt_dtype dtype);

/**
 * Computes a per-tensor scale factor for FP8: the largest power of two s such that max |values| * s does
 * not exceed the format's largest finite value (1 for an all-zero tensor). Powers of two keep the scaling
 * itself exact. Encode with scale s and decode with scale 1 / s.
 */
BPT_API bpt_status bpt_fp8_scale(bpt_context *context, bpt_dtype dtype, const float *values, int64_t count,
                                 float *scale);

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

/**
 * Chooses stochastic (0, the default: training) or deterministic (non-zero: evaluation) behaviour for the
 * graph's stochastic ops: a binary stochastic neuron then outputs 1[sigmoid(z) > 0.5].
 */
BPT_API bpt_status bpt_graph_set_deterministic(bpt_graph *graph, int deterministic);

/** Memory a compiled graph holds, for its compiled (largest) batch. */
typedef struct bpt_graph_memory_stats {
  size_t size;                   /**< set to sizeof(bpt_graph_memory_stats) by the caller */
  int64_t max_batch;             /**< the batch the figures below are for */
  size_t activation_bytes_held;  /**< values and op buffers kept from forward until backward */
  size_t transient_bytes;        /**< memory reused by values that only forward needs */
  size_t gradient_bytes;         /**< activation gradients, shared by backward lifetime; the same bytes as the
                                      transient values, so the two overlap rather than add */
  size_t parameter_bytes;        /**< master parameters, their gradients and compute-dtype weight copies */
  size_t input_bytes;            /**< the part of activation_bytes_held that is graph inputs */
} bpt_graph_memory_stats;

/** Fills @p stats (whose size field the caller sets) for a compiled graph. */
BPT_API bpt_status bpt_graph_memory(const bpt_graph *graph, bpt_graph_memory_stats *stats);

/** The gradient a binary stochastic neuron passes back (straight-through estimators). */
typedef enum bpt_straight_through {
  BPT_STRAIGHT_THROUGH_IDENTITY = 0, /**< dz = da */
  BPT_STRAIGHT_THROUGH_SIGMOID = 1   /**< dz = da * sigmoid'(z) */
} bpt_straight_through;

/**
 * Binary stochastic neuron: a = 1[u < sigmoid(z)] with u ~ U(0, 1) drawn from the graph's seeded
 * generator for every element and forward pass; in deterministic mode a = 1[sigmoid(z) > 0.5].
 */
BPT_API bpt_status bpt_binary_stochastic(bpt_graph *graph, const char *name, bpt_node *z,
                                         bpt_straight_through estimator, bpt_node **out);

BPT_EXTERN_C_END

#endif
