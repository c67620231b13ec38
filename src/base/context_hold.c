/* Holding a context from outside core: objects made from it (graphs, tensors, data sets, communicators)
 * retain it and release it when destroyed, and backends' own public calls find its backend instance. The
 * destructor itself is core's, reached through the context's head (src/base/context_head.h). */
#include "base/context_head.h"

struct bpt_backend *bpt_context_backend_instance(bpt_context *context) {
  return context ? bpt_context_head_of(context)->backend : NULL;
}

void bpt_context_retain(bpt_context *context) {
  if (context) bpt_context_head_of(context)->users++;
}

void bpt_context_release(bpt_context *context) {
  bpt_context_head *head = bpt_context_head_of(context);
  if (head && --head->users == 0 && head->destroyed) head->free_context(context);
}
