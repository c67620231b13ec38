/* The profiler's hooks into the core, the optimiser and the comm layer. Every hook is guarded by
 * `if (context->profiler)` at the call site, so a context that never profiled pays one branch. */
#ifndef BPT_CORE_PROFILER_H
#define BPT_CORE_PROFILER_H

#include <stdint.h>

#include "bptrain/profiler.h"
#include "core/context.h"
#include "core/op.h"

typedef struct bpt_profiler bpt_profiler;

typedef enum bpt_profile_phase {
  BPT_PROFILE_FORWARD,
  BPT_PROFILE_BACKWARD,
  BPT_PROFILE_OPTIMIZER,
  BPT_PROFILE_COMM,
  BPT_PROFILE_PHASE_COUNT
} bpt_profile_phase;

/* An op table entry whose forward and backward run the node's own op and record its time, bytes and FLOPs
 * (from the op's cost function when it has one, otherwise bytes estimated from the shapes). */
extern const bpt_op_definition bpt_profiled_op;

/* The definition run.c calls for an op: the op's own, or the timing wrapper while the context has a
 * profiler. This is the only cost of the profiler when it is off: one predictable branch per op. */
static inline const bpt_op_definition *bpt_op_to_run(const bpt_context *context, bpt_op_id op) {
  return __builtin_expect(context->profiler != NULL, 0) ? &bpt_profiled_op : bpt_op_get(op);
}

/* Waits for the context's device and returns a timestamp in nanoseconds, for bpt_profiler_record(). */
uint64_t bpt_profiler_begin(bpt_context *context);

/* A timestamp in nanoseconds without waiting for the device: for the comm layer, which runs on its own
 * stream or thread and waits for its own work before recording. */
uint64_t bpt_profiler_now(void);

/* Records a region that began at bpt_profiler_begin() (or bpt_profiler_now() for BPT_PROFILE_COMM): name is
 * the instance ("all-reduce bucket 3"), kind the operation ("sgd", "nccl"); both must outlive the call
 * only. bytes and flops are 0 when unknown. The region ends now; except for BPT_PROFILE_COMM, after waiting
 * for the device. Safe to call from another thread. A BPT_PROFILE_OPTIMIZER region ends the current step.
 * The comm layer's use:
 *   uint64_t start = context->profiler ? bpt_profiler_now() : 0;
 *   ... all-reduce one bucket, wait for it ...
 *   if (context->profiler) bpt_profiler_record(context, BPT_PROFILE_COMM, "bucket 3", "nccl all-reduce",
 *                                              start, bytes, 0.0); */
void bpt_profiler_record(bpt_context *context, bpt_profile_phase phase, const char *name, const char *kind,
                         uint64_t start, double bytes, double flops);

/* Frees the profiler of a context being destroyed. */
void bpt_profiler_destroy(bpt_context *context);

#endif
