/**
 * @file speculative.h
 * @brief Speculative backpropagation (Park & Suh, IEEE Access 2020): the backward pass of a sample starts
 * from the forward state cached for the previous sample with the same label, concurrently with the sample's
 * own forward pass, and is kept when the two softmax outputs are within a threshold; otherwise the
 * ordinary backward runs. docs/fpga.md gives the exact algorithm.
 *
 * The trainer runs a compiled graph one sample at a time (batch 1) and accumulates gradients over a
 * mini-batch before one optimiser step. The graph must be a chain of linear, activation, conv2d, batch norm
 * (plain or with its ReLU), max/avg pooling and reshape/flatten ops ending in softmax cross-entropy, fed by one
 * f32 input and one i32 label input; every op of the chain must run on the graph's backend (not the CPU
 * fallback), and with threads 2 a chain with convolution, batch norm or pooling needs the cpu backend.
 */
#ifndef BPTRAIN_SPECULATIVE_H
#define BPTRAIN_SPECULATIVE_H

#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/** A speculative trainer bound to one graph and optimiser. */
typedef struct bpt_speculative_trainer bpt_speculative_trainer;

/** How the gate measures the distance between the current and the cached softmax output. */
typedef enum bpt_speculative_distance {
  BPT_SPECULATIVE_MEAN_ABSOLUTE = 0, /**< (1 / classes) sum |p - q| (at most 2 / classes) */
  BPT_SPECULATIVE_L2 = 1             /**< sqrt(sum (p - q)^2) (at most sqrt(2)) */
} bpt_speculative_distance;

/** Options for bpt_speculative_create(); get them from bpt_speculative_options_default(). */
typedef struct bpt_speculative_options {
  size_t size;     /**< sizeof(bpt_speculative_options), set by the default function */
  float threshold; /**< the gate keeps a speculative gradient when distance <= threshold; 0 turns speculation
                        off, which reproduces ordinary per-sample backprop bit for bit */
  bpt_speculative_distance distance; /**< the gate's distance: mean absolute (default) or L2 */
  float final_threshold;  /**< optional linear schedule: the threshold moves from @ref threshold to this value */
  int64_t schedule_steps; /**< ... over this many optimiser steps, then stays; 0 keeps the threshold constant */
  int threads;            /**< 2: speculative backward on a second thread (CPU); 1: one thread. Backends with a
                               time model (fpga-sim) always run on one thread and simulate the overlap */
  float gradient_clip;    /**< > 0: clamp every element of the mean gradient to [-clip, clip] before the step */
} bpt_speculative_options;

/** @return threshold 0 (off), mean absolute distance, no schedule, 2 threads, no clipping. */
BPT_API bpt_speculative_options bpt_speculative_options_default(void);

/**
 * Creates a trainer for @p graph (compiled with a softmax cross-entropy loss; any max_batch) whose data input
 * is @p images and label input @p labels, stepping @p optimizer once per mini-batch. Fails with
 * ::BPT_ERR_UNSUPPORTED naming the node when the graph is not such a chain (an op outside the list, or one
 * that the capability query left to the CPU fallback, as fpga-sim does with convolutions and pooling).
 */
BPT_API bpt_status bpt_speculative_create(bpt_graph *graph, bpt_node *images, bpt_node *labels,
                                          bpt_optimizer *optimizer, const bpt_speculative_options *options,
                                          bpt_speculative_trainer **out);

/**
 * Destroys a trainer (stopping its thread). NULL is a no-op. Any order is safe: a graph destroyed first
 * stops the trainer's thread and frees its device memory, and its calls (like those after its optimiser was
 * destroyed) then fail with ::BPT_ERR_STATE.
 */
BPT_API void bpt_speculative_destroy(bpt_speculative_trainer *trainer);

/**
 * Trains on one mini-batch: every sample runs forward and a speculative or ordinary backward, the mean
 * gradient is clipped if asked, and the optimiser steps once.
 * @param images f32 (N, features...); @param labels i32 (N); @param mean_loss may be NULL
 */
BPT_API bpt_status bpt_speculative_train_batch(bpt_speculative_trainer *trainer, const bpt_tensor *images,
                                               const bpt_tensor *labels, float *mean_loss);

/** Counters since creation or the last reset. */
typedef struct bpt_speculative_counters {
  size_t size;                  /**< set by the caller to sizeof(bpt_speculative_counters) */
  int64_t samples;              /**< samples trained */
  int64_t hits;                 /**< speculative gradient kept */
  int64_t fallbacks;            /**< ordinary backward run (cold + distance misses + speculation off) */
  int64_t cold_fallbacks;       /**< fallbacks because no sample of that label had been seen */
  double mean_distance;         /**< mean gate distance over the samples that had a cached state */
  double main_thread_seconds;   /**< CPU time the calling thread spent training, waits for the worker excluded */
  double worker_thread_seconds; /**< CPU time the worker spent on speculative backwards (2-thread mode) */
} bpt_speculative_counters;

/** Fills @p counters (whose size field the caller sets). */
BPT_API bpt_status bpt_speculative_get_counters(const bpt_speculative_trainer *trainer,
                                                bpt_speculative_counters *counters);

/** Zeroes the counters (the cache stays). */
BPT_API bpt_status bpt_speculative_reset_counters(bpt_speculative_trainer *trainer);

/** Forgets every cached forward state, so the next sample of each label falls back. */
BPT_API bpt_status bpt_speculative_clear_cache(bpt_speculative_trainer *trainer);

/** @return the threshold the next mini-batch will use (after the schedule), or 0 for NULL. */
BPT_API float bpt_speculative_current_threshold(const bpt_speculative_trainer *trainer);

BPT_EXTERN_C_END

#endif
