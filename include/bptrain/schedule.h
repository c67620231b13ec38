/**
 * @file schedule.h
 * @brief Learning-rate schedules (constant, step, cosine, with linear warm-up) and attaching one to an optimiser.
 */
#ifndef BPTRAIN_SCHEDULE_H
#define BPTRAIN_SCHEDULE_H

#include "optimizer.h"

BPT_EXTERN_C_BEGIN

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
  float gamma;                 /**< STEP: decay factor, finite and > 0 (above 1 the rate grows; a rate past
                                    FLT_MAX fails with ::BPT_ERR_NUMERIC) */
  int64_t total_steps;         /**< COSINE: length of the annealing, counted after warm-up */
  float minimum_learning_rate; /**< COSINE: the floor */
} bpt_schedule_options;

/** @return a constant schedule at 0.1 without warm-up (step_size 1, gamma 0.1, warm-up factor 0). */
BPT_API bpt_schedule_options bpt_schedule_options_default(void);

/**
 * Computes the learning rate at @p step (>= 0) into @p learning_rate. An error's message goes to
 * bpt_context_last_error(@p context), or to bpt_context_last_error(NULL) when @p context is NULL.
 */
BPT_API bpt_status bpt_schedule_learning_rate(bpt_context *context, const bpt_schedule_options *schedule, int64_t step,
                                              float *learning_rate);

/** Makes bpt_optimizer_step() set the learning rate from @p schedule at its step count before each update. */
BPT_API bpt_status bpt_optimizer_set_schedule(bpt_optimizer *optimizer, const bpt_schedule_options *schedule);

BPT_EXTERN_C_END

#endif
