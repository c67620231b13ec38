/* The reporting helpers every room of the library shares (core, backends' public APIs, comm): a status
 * returned with a message kept on the context, checked allocation, and copying of size-tagged structs
 * between the caller's layout and ours. It sits outside src/core/ so that src/comm/ and src/backends/
 * can report errors without seeing the context's layout. Defined in src/base/: report.c (messages,
 * allocation), struct_copy.c (size-tagged structs) and context_hold.c (retain, release, backend instance). */
#ifndef BPT_BASE_REPORT_H
#define BPT_BASE_REPORT_H

#include <stddef.h>

#include "bptrain/context.h"

struct bpt_backend;

/* Bytes of the message kept per context (and per thread, for calls without one). */
#define BPT_ERROR_MESSAGE_SIZE 512

/* Records a printf-style message and status on context (or, when NULL, on this thread) and returns
 * status. bpt_context_last_error() and bpt_context_last_status() read them back. */
bpt_status bpt_error(bpt_context *context, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Allocation that records BPT_ERR_OUT_OF_MEMORY on failure; free with free(). */
void *bpt_calloc(bpt_context *context, size_t count, size_t size, const char *what);

/* Copies a caller's option struct of size their_size into a default-initialised struct of our_size, so
 * callers compiled against older, smaller structs keep working. Every such struct has a size_t size
 * first; minimum_size is the size of the struct's first public version. */
bpt_status bpt_copy_options(bpt_context *context, void *ours, size_t our_size, const void *theirs, size_t their_size,
                            size_t minimum_size, const char *what);

/* The other direction, for structs the library fills (reports, statistics): the caller sets the size
 * field (the first member) to the sizeof it was compiled with; min(that, our_size) bytes of ours are
 * copied, so nothing past an older caller's struct is written, and the size field then holds the number
 * of bytes written. A size below minimum_size (or absurdly large) is BPT_ERR_INVALID_ARGUMENT. */
bpt_status bpt_copy_output(bpt_context *context, void *theirs, const void *ours, size_t our_size, size_t minimum_size,
                           const char *what);

/* The backend instance a context runs on, for backends' own public calls (such as bpt_fpga_configure),
 * which must check that the context is theirs without knowing the context's layout. NULL for NULL. */
struct bpt_backend *bpt_context_backend_instance(bpt_context *context);

/* Objects made from a context hold it: retain at creation, release when destroyed. A context destroyed
 * while held is freed by its last release. */
void bpt_context_retain(bpt_context *context);
void bpt_context_release(bpt_context *context);

#define BPT_CHECK(expression)                                                                                          \
  do {                                                                                                                 \
    bpt_status check_status_ = (expression);                                                                           \
    if (check_status_ != BPT_OK) return check_status_;                                                                 \
  } while (0)

#endif
