/* Internal checkpoint entry points: loading from memory (the fuzz target and the file loader share it)
 * and releasing the graph's buffer list. */
#ifndef BPT_CORE_CHECKPOINT_H
#define BPT_CORE_CHECKPOINT_H

#include "bptrain/checkpoint.h"

/* Loads a checkpoint already in memory; `what` names it in messages. Same contract as bpt_checkpoint_load. */
bpt_status bpt_checkpoint_load_memory(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents);
/* Frees the list behind bpt_graph_register_buffer (called by bpt_graph_destroy). */
void bpt_graph_free_buffers(bpt_graph *graph);

#endif
