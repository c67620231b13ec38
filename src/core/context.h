/* The context's private layout and the error helpers every core file uses to report
 * "what failed and where" (SQLite-style: a status returned, a message kept on the context). */
#ifndef BPT_CORE_CONTEXT_H
#define BPT_CORE_CONTEXT_H

#include <stdbool.h>

#include "backends/backend.h"
#include "base/report.h"
#include "bptrain/context.h"
#include "core/rng.h"

struct bpt_context {
  bpt_backend backend;
  int num_threads;
  uint64_t seed;
  bool cpu_fallback; /* bpt_context_options.cpu_fallback */
  char backend_name[32];
  char last_error[BPT_ERROR_MESSAGE_SIZE];
  bpt_status last_status; /* the status that came with last_error */
  uint64_t error_count;   /* messages written so far: tells a callback's own message from an older one */
  int users;              /* graphs, tensors, data sets and communicators made from it and still alive */
  bool destroyed;         /* bpt_context_destroy ran while users were alive: the last one frees it */
  /* profiler: NULL until bpt_profiler_enable(); the hot paths test only this pointer (core/profiler.h). */
  struct bpt_profiler *profiler;
};

/* Turns a failed backend call into a context error prefixed with where it happened. */
bpt_status bpt_backend_error(bpt_context *context, bpt_status status, const char *where);

#endif
