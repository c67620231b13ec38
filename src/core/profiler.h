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

/* Runs one op's forward or backward function and records its time, bytes and FLOPs (from the op's cost
 * function when it has one, otherwise bytes estimated from the shapes). */
bpt_status bpt_profiler_run_op(bpt_node *node, bpt_status (*run)(bpt_node *node), bpt_profile_phase phase);

/* Waits for the context's device and returns a timestamp in nanoseconds, for bpt_profiler_record(). */
uint64_t bpt_profiler_begin(bpt_context *context);

/* Records a region that began at bpt_profiler_begin(): name is the instance ("all-reduce bucket 3"), kind
 * the operation ("sgd", "nccl"); both must outlive the call only. bytes and flops are 0 when unknown.
 * A BPT_PROFILE_OPTIMIZER region ends the current step. */
void bpt_profiler_record(bpt_context *context, bpt_profile_phase phase, const char *name, const char *kind,
                         uint64_t start, double bytes, double flops);

/* Frees the profiler of a context being destroyed. */
void bpt_profiler_destroy(bpt_context *context);

#endif
