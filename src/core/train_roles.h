/* What the training helper's files share (train.c, train_eval.c): the data, labels and logits nodes found by
 * name or by role, batch tensors shaped for a data set, and the evaluation loop itself. */
#ifndef BPT_CORE_TRAIN_ROLES_H
#define BPT_CORE_TRAIN_ROLES_H

#include "bptrain/train.h"
#include "core/graph.h"

typedef struct bpt_train_nodes {
  bpt_node *data, *labels, *logits;
} bpt_train_nodes;

/* Finds the nodes roles names, or by role where a name is NULL; need_logits 0 skips the logits. Errors name
 * where and what is missing. */
bpt_status bpt_train_find_nodes(bpt_graph *graph, const bpt_train_roles *roles, int need_logits, const char *where,
                                bpt_train_nodes *out);

/* Creates an f32 (batch, sample dims...) tensor and an i32 (batch) tensor for dataset's batches. */
bpt_status bpt_train_batch_tensors(bpt_context *context, const bpt_dataset *dataset, int64_t batch,
                                   bpt_tensor **samples, bpt_tensor **labels);

/* The batch size to use: requested, or the compiled one when 0; errors for negative or above the compiled. */
bpt_status bpt_train_batch_size(const bpt_graph *graph, int64_t requested, const char *where, int64_t *batch);

/* Adds one batch's argmax, top-k and confusion counts: logits (count, classes), labels (count). A label outside
 * [0, classes) is BPT_ERR_FORMAT naming sample first + n. */
bpt_status bpt_train_tally(bpt_context *context, const float *logits, const int32_t *labels, int64_t count,
                           int64_t classes, int top_k, int64_t first, int64_t *correct, int64_t *top_k_correct,
                           int64_t *confusion, const char *where);

#endif
