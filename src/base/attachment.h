/* Lists of objects that hold something of another object's (a graph's backend memory, a communicator's
 * collectives in flight) and may outlive it: the owner of the list, when it is destroyed first, calls each
 * attachment's detach, which lets go of what needs the owner and leaves the object able to fail its other
 * calls with BPT_ERR_STATE and to free its host memory later. Graphs (optimisers, data-parallel handles,
 * speculative trainers) and communicators (data-parallel handles) keep one each. */
#ifndef BPT_BASE_ATTACHMENT_H
#define BPT_BASE_ATTACHMENT_H

#include <stddef.h>

typedef struct bpt_attachment {
  void (*detach)(void *owner);
  void *owner;
  struct bpt_attachment *next;
} bpt_attachment;

static inline void bpt_attach(bpt_attachment **list, bpt_attachment *attachment, void (*detach)(void *owner),
                              void *owner) {
  attachment->detach = detach;
  attachment->owner = owner;
  attachment->next = *list;
  *list = attachment;
}

/* Takes attachment off the list (a no-op when it is not on it). */
static inline void bpt_unattach(bpt_attachment **list, bpt_attachment *attachment) {
  for (bpt_attachment **link = list; *link; link = &(*link)->next)
    if (*link == attachment) {
      *link = attachment->next;
      return;
    }
}

/* Empties the list, calling each detach once it is off the list (a detach may not unattach again). */
static inline void bpt_detach_all(bpt_attachment **list) {
  while (*list) {
    bpt_attachment *attachment = *list;
    *list = attachment->next;
    attachment->detach(attachment->owner);
  }
}

#endif
