/* The layout fingerprint of a compiled graph (parameters: name, shape, offset; nodes: op, inputs,
 * attributes), compared across the ranks of a communicator before data-parallel training so that a rank
 * built with another model is named instead of failing later as a truncated message, or not at all. */
#ifndef BPT_CORE_GRAPH_SIGNATURE_H
#define BPT_CORE_GRAPH_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "bptrain/comm.h"
#include "core/graph.h"

/* One line per parameter, then one per node, each "<kind> '<name>': <field>; <field>; ..." and ending in
 * '\n'; the batch dimension is written as "batch" (ranks may compile different batch sizes). Malloc'd
 * into *out (NUL-terminated, *length bytes without the NUL). */
bpt_status bpt_graph_signature_describe(const bpt_graph *graph, char **out, size_t *length);

/* FNV-1a 64 of bytes: what the ranks exchange first. */
uint64_t bpt_graph_signature_hash(const char *bytes, size_t length);

/* Writes "<kind> '<name>': <field> <value here> on <here_label> vs <value there> on <there_label>" for the
 * first line and field where the descriptions differ (or which one goes on longer) into message. */
void bpt_graph_signature_first_difference(const char *here, const char *here_label, const char *there,
                                          const char *there_label, char *message, size_t size);

/* Every rank of comm calls it with its graph: BPT_OK when all describe the same layout; otherwise
 * BPT_ERR_INVALID_ARGUMENT on every rank, naming the first differing rank and its first difference from
 * rank 0. Collective: uses the communicator's timeout. */
bpt_status bpt_graph_signature_check(const bpt_graph *graph, bpt_comm *comm, const char *where);

#endif
