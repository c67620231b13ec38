/* The context's private layout and the error helpers every core file uses to report
 * "what failed and where" (SQLite-style: a status returned, a message kept on the context). */
#ifndef BPT_CORE_CONTEXT_H
#define BPT_CORE_CONTEXT_H

#include "backends/backend.h"
#include "bptrain/context.h"
#include "core/rng.h"

#define BPT_ERROR_MESSAGE_SIZE 512

struct bpt_context {
  bpt_backend backend;
  int num_threads;
  uint64_t seed;
  bool cpu_fallback; /* bpt_context_options.cpu_fallback */
  char backend_name[32];
  char last_error[BPT_ERROR_MESSAGE_SIZE];
  /* profiler: NULL until bpt_profiler_enable(); the hot paths test only this pointer (core/profiler.h). */
  struct bpt_profiler *profiler;
};

/* Records a printf-style message on context (or, when NULL, on this thread) and returns status. */
bpt_status bpt_error(bpt_context *context, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Turns a failed backend call into a context error prefixed with where it happened. */
bpt_status bpt_backend_error(bpt_context *context, bpt_status status, const char *where);

/* Allocation that records BPT_ERR_OUT_OF_MEMORY on failure; free with free(). */
void *bpt_calloc(bpt_context *context, size_t count, size_t size, const char *what);

/* Copies a caller's option struct of size option_size into a default-initialised struct of
 * our_size, so callers compiled against older, smaller structs keep working. */
bpt_status bpt_copy_options(bpt_context *context, void *ours, size_t our_size, const void *theirs,
                            size_t their_size, size_t minimum_size, const char *what);

#define BPT_CHECK(expression)                 \
  do {                                        \
    bpt_status check_status_ = (expression);  \
    if (check_status_ != BPT_OK) return check_status_; \
  } while (0)

#endif
