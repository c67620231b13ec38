/* Errors kept for the caller: a status returned with a message written on the context (or, for calls that
 * have no context yet, on this thread), and allocation that reports its own failure. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/context_head.h"

/* Errors from calls that have no context to write to (context creation, a NULL handle). */
static _Thread_local char thread_last_error[BPT_ERROR_MESSAGE_SIZE];
static _Thread_local bpt_status thread_last_status;

bpt_status bpt_error(bpt_context *context, bpt_status status, const char *format, ...) {
  bpt_context_head *head = bpt_context_head_of(context);
  char *buffer = head ? head->last_error : thread_last_error;
  *(head ? &head->last_status : &thread_last_status) = status;
  if (head) head->error_count++;
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(buffer, BPT_ERROR_MESSAGE_SIZE, format, arguments);
  va_end(arguments);
  return status;
}

void *bpt_calloc(bpt_context *context, size_t count, size_t size, const char *what) {
  void *pointer = calloc(count ? count : 1, size ? size : 1);
  if (!pointer)
    bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "out of memory allocating %s (%zu x %zu bytes)", what, count, size);
  return pointer;
}

const char *bpt_context_last_error(const bpt_context *context) {
  return context ? bpt_context_head_of((bpt_context *)context)->last_error : thread_last_error;
}

bpt_status bpt_context_last_status(const bpt_context *context) {
  return context ? bpt_context_head_of((bpt_context *)context)->last_status : thread_last_status;
}
