/* The context's private layout and the error helpers every core file uses to report
 * "what failed and where" (SQLite-style: a status returned, a message kept on the context). */
#ifndef BPT_CORE_CONTEXT_H
#define BPT_CORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "base/context_head.h"
#include "base/report.h"
#include "bptrain/context.h"
#include "core/rng.h"

/* head first: src/base/ reaches it through the bpt_context pointer (context_head.h). */
struct bpt_context {
  bpt_context_head head;
  bpt_backend backend;
  int num_threads;
  uint64_t seed;
  bool cpu_fallback; /* bpt_context_options.cpu_fallback */
  char backend_name[32];
  /* profiler: NULL until bpt_profiler_enable(); the hot paths test only this pointer (core/profiler.h). */
  struct bpt_profiler *profiler;
};

_Static_assert(offsetof(struct bpt_context, head) == 0, "src/base/ finds the head at the context's address");

/* Turns a failed backend call into a context error prefixed with where it happened. */
bpt_status bpt_backend_error(bpt_context *context, bpt_status status, const char *where);

#endif
