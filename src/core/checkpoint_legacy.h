/* The parameter files that came before checkpoints: the C examples' "BPTPARAM" and the Python binding's
 * "BPTPARM1" (magic, i64 count, count f32 values in declaration order; no names, no shapes). */
#ifndef BPT_CORE_CHECKPOINT_LEGACY_H
#define BPT_CORE_CHECKPOINT_LEGACY_H

#include <stdbool.h>
#include <stddef.h>

#include "bptrain/checkpoint.h"

/* The file starts with one of the two magics. */
bool bpt_checkpoint_is_legacy(const unsigned char *bytes, size_t size);
/* "an old BPTPARAM parameter file (...)": what an old file whose first 8 bytes are `bytes` is. */
const char *bpt_checkpoint_legacy_kind(const unsigned char *bytes);

/* Strict: BPT_ERR_FORMAT saying what the file is and how to convert it. Not strict: loads the values into the
 * graph's parameters in declaration order when the counts agree (BPT_ERR_SHAPE otherwise), and the report's
 * entries say it was by position. */
bpt_status bpt_checkpoint_load_legacy(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents, bool strict, bpt_checkpoint_report **report);

#endif
