/* The part of a context that the shared helpers of src/base/ keep: the last message and status, the count
 * of objects holding the context, and where its backend instance is. core's struct bpt_context starts with
 * it (src/core/context.h asserts the offset), so src/base/ reaches it from a bpt_context pointer without
 * knowing the rest of the layout, and src/comm/ and src/backends/ never see either. */
#ifndef BPT_BASE_CONTEXT_HEAD_H
#define BPT_BASE_CONTEXT_HEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/report.h"

typedef struct bpt_context_head {
  char last_error[BPT_ERROR_MESSAGE_SIZE];
  bpt_status last_status;      /* the status that came with last_error */
  uint64_t error_count;        /* messages written so far: tells a callback's own message from an older one */
  int users;                   /* graphs, tensors, data sets and communicators made from it and still alive */
  bool destroyed;              /* bpt_context_destroy ran while users were alive: the last release frees it */
  struct bpt_backend *backend; /* the context's own backend instance */
  void (*free_context)(bpt_context *context); /* core's destructor, called by the last release of a destroyed one */
} bpt_context_head;

/* The head of context, which must be a core context (NULL for NULL). */
static inline bpt_context_head *bpt_context_head_of(bpt_context *context) { return (bpt_context_head *)context; }

#endif
