/* Internal checkpoint entry points and what saving (checkpoint.c) and loading (checkpoint_load.c) share: the
 * section tags, where a registered buffer's values are, which op attributes are state rather than
 * configuration, and loading from memory (the fuzz target and the file loader share it). */
#ifndef BPT_CORE_CHECKPOINT_H
#define BPT_CORE_CHECKPOINT_H

#include <stdbool.h>

#include "bptrain/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/graph.h"

enum {
  BPT_TAG_META = BPT_TAG('M', 'E', 'T', 'A'),
  BPT_TAG_GRAPH = BPT_TAG('G', 'R', 'P', 'H'),
  BPT_TAG_PARAMETERS = BPT_TAG('P', 'A', 'R', 'M'),
  BPT_TAG_BUFFERS = BPT_TAG('B', 'U', 'F', 'S'),
  BPT_TAG_RNG = BPT_TAG('R', 'N', 'G', ' '),
  BPT_TAG_OPTIMIZER = BPT_TAG('O', 'P', 'T', 'M'),
  BPT_TAG_ORDER = BPT_TAG('D', 'O', 'R', 'D'),
  /* The dynamic loss scaler (scale, steps since its last change, skipped steps), when the graph has one. */
  BPT_TAG_LOSS_SCALER = BPT_TAG('L', 'S', 'C', 'L'),
};

/* Op parameters and run-time state are saved by name through each op's declaration (bpt_param_decl,
 * bpt_state_decl; format 3). Format 2 files saved every attribute slot, with the state slots of that time
 * (linear's float 0, the FP8 scale; relu's int 0, the mask choice) stored as 0: those slots hold no parameter
 * now, so the slot-by-slot comparison of a format 2 file needs no exception. */

/* Where a registered buffer's values are now (a node's saved memory exists only after compile); NULL if not yet. */
float *bpt_checkpoint_buffer_values(const bpt_graph_buffer *buffer);

/* Loads a checkpoint already in memory; `what` names it in messages. Same contract as
 * bpt_checkpoint_load_with_options (options NULL: strict; report NULL: none). */
bpt_status bpt_checkpoint_load_memory_with_options(bpt_graph *graph, const unsigned char *bytes, size_t size,
                                                   const char *what, bpt_checkpoint_contents *contents,
                                                   const bpt_checkpoint_load_options *options,
                                                   bpt_checkpoint_report **report);
/* The strict load from memory. */
bpt_status bpt_checkpoint_load_memory(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents);
/* The arguments every save and load checks; copies contents into *copy (defaults when NULL). */
bpt_status bpt_checkpoint_check_arguments(bpt_graph *graph, const char *path, const bpt_checkpoint_contents *contents,
                                          bpt_checkpoint_contents *copy, const char *where);
/* Frees the list behind bpt_graph_register_buffer (called by bpt_graph_destroy). */
void bpt_graph_free_buffers(bpt_graph *graph);

#endif
