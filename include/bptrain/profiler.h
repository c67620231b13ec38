/**
 * @file profiler.h
 * @brief An opt-in profiler: per-op forward and backward time (with bytes moved and FLOPs where the op
 * knows them), the optimiser step and communication, per training step; a summary table sorted by time and
 * a Chrome trace file (chrome://tracing or https://ui.perfetto.dev).
 *
 * Off by default, and then it costs one predictable branch per op. When on, each timed region waits for the
 * device to finish (so GPU kernels are timed, not just launched), which slows asynchronous backends.
 * A step ends with each bpt_optimizer_step(); events recorded after it belong to the next step.
 */
#ifndef BPTRAIN_PROFILER_H
#define BPTRAIN_PROFILER_H

#include "context.h"

BPT_EXTERN_C_BEGIN

/**
 * Starts (@p enabled non-zero) or pauses (0) recording on @p context. Pausing keeps what was recorded so it
 * can still be summarised or written; bpt_profiler_reset() drops it.
 */
BPT_API bpt_status bpt_profiler_enable(bpt_context *context, int enabled);

/** @return non-zero while @p context is recording, 0 otherwise or for NULL. */
BPT_API int bpt_profiler_enabled(const bpt_context *context);

/** Drops every recorded event and statistic, keeping the on/off state. */
BPT_API bpt_status bpt_profiler_reset(bpt_context *context);

/**
 * Writes the summary table: one row per (phase, op, node), sorted by total time, then the mean time per step
 * of each phase. Follows snprintf(): writes at most @p size bytes including the terminating NUL (nothing when
 * @p buffer is NULL or @p size is 0) and returns the length of the whole text.
 */
BPT_API size_t bpt_profiler_summary(const bpt_context *context, char *buffer, size_t size);

/**
 * Writes the recorded events as a Chrome trace event file (JSON): one lane per phase and a "step N" span
 * around each training step. Fails with ::BPT_ERR_IO and a message naming @p path when it cannot be written.
 */
BPT_API bpt_status bpt_profiler_write_trace(bpt_context *context, const char *path);

BPT_EXTERN_C_END

#endif
