/* The training helper's lookups: which graph inputs take the samples and the labels and which node holds the
 * class scores, by the caller's names or by their role around the loss, and batch tensors to fill them. */
#include <math.h>
#include <string.h>

#include "core/train_roles.h"

static bpt_status find_named(bpt_graph *graph, const char *name, const char *role, const char *where, bpt_node **out) {
  for (int i = 0; i < graph->node_count; i++)
    if (strcmp(graph->nodes[i]->name, name) == 0) {
      *out = graph->nodes[i];
      return BPT_OK;
    }
  return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: the graph has no node '%s' (named as the %s)", where,
                   name, role);
}

bpt_status bpt_train_find_nodes(bpt_graph *graph, const bpt_train_roles *roles, int need_logits, const char *where,
                                bpt_train_nodes *out) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!graph->compiled) return bpt_error(graph->context, BPT_ERR_STATE, "%s: compile the graph first", where);
  memset(out, 0, sizeof *out);
  const bpt_node *loss = graph->loss;
  if (roles->labels_input) {
    BPT_CHECK(find_named(graph, roles->labels_input, "labels input", where, &out->labels));
  } else if (loss && loss->input_count >= 2 && loss->inputs[1]->op == BPT_OP_INPUT) {
    out->labels = loss->inputs[1];
  }
  if (!out->labels)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: the loss '%s' has no graph input as its labels; name the labels input", where,
                     loss ? loss->name : "(none)");
  if (roles->data_input) {
    BPT_CHECK(find_named(graph, roles->data_input, "data input", where, &out->data));
  } else {
    for (int i = 0; i < graph->node_count; i++) {
      bpt_node *node = graph->nodes[i];
      if (node->op != BPT_OP_INPUT || node == out->labels) continue;
      if (out->data)
        return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                         "%s: the graph has several inputs besides the labels ('%s', '%s'); name the data input", where,
                         out->data->name, node->name);
      out->data = node;
    }
    if (!out->data)
      return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: the graph has no data input", where);
  }
  if (out->data->op != BPT_OP_INPUT || out->labels->op != BPT_OP_INPUT)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: '%s' is not a graph input", where,
                     out->data->op != BPT_OP_INPUT ? out->data->name : out->labels->name);
  if (!need_logits) return BPT_OK;
  if (roles->logits) {
    BPT_CHECK(find_named(graph, roles->logits, "logits", where, &out->logits));
  } else if (loss && loss->input_count >= 1) {
    out->logits = loss->inputs[0];
  }
  if (!out->logits || out->logits->rank != 2 || out->logits->dtype != BPT_DTYPE_F32 || !out->logits->batched)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: the logits '%s' must be f32 (batch, classes); name the logits node", where,
                     out->logits ? out->logits->name : "(none)");
  return BPT_OK;
}

bpt_status bpt_train_batch_tensors(bpt_context *context, const bpt_dataset *dataset, int64_t batch,
                                   bpt_tensor **samples, bpt_tensor **labels) {
  int64_t dims[BPT_MAX_RANK + 1];
  const int rank = bpt_dataset_sample_shape(dataset, dims + 1);
  dims[0] = batch;
  *samples = *labels = NULL;
  bpt_status status = bpt_tensor_create(context, BPT_DTYPE_F32, rank + 1, dims, samples);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, labels);
  if (status != BPT_OK) {
    bpt_tensor_destroy(*samples);
    *samples = NULL;
  }
  return status;
}

bpt_status bpt_train_batch_size(const bpt_graph *graph, int64_t requested, const char *where, int64_t *batch) {
  if (requested < 0 || requested > graph->max_batch)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: batch_size %lld must be in [1, %lld] (the compiled batch), or 0 for the compiled batch",
                     where, (long long)requested, (long long)graph->max_batch);
  *batch = requested ? requested : graph->max_batch;
  return BPT_OK;
}

bpt_status bpt_train_tally(bpt_context *context, const float *logits, const int32_t *labels, int64_t count,
                           int64_t classes, int top_k, int64_t first, int64_t *correct, int64_t *top_k_correct,
                           int64_t *confusion, const char *where) {
  for (int64_t n = 0; n < count; n++) {
    const float *scores = logits + n * classes;
    const int32_t label = labels[n];
    if (label < 0 || label >= classes)
      return bpt_error(context, BPT_ERR_FORMAT, "%s: sample %lld has label %d, outside the %lld classes", where,
                       (long long)(first + n), (int)label, (long long)classes);
    /* The label's rank: classes scoring higher, and equal-scoring classes before it (the argmax convention:
     * the first of equal scores wins), so rank 0 is exactly argmax == label. */
    int64_t rank = 0, best = 0;
    bool finite = true;
    for (int64_t c = 0; c < classes; c++) {
      rank += scores[c] > scores[label] || (c < label && scores[c] == scores[label]);
      if (scores[c] > scores[best]) best = c;
      finite = finite && isfinite(scores[c]);
    }
    /* Every comparison with NaN is false, so NaN logits would rank every label first: a diverged model would
     * score 100%. A sample with a non-finite score is never correct. */
    if (!finite) rank = classes;
    *correct += rank == 0;
    *top_k_correct += rank < top_k;
    if (confusion) confusion[label * classes + best]++;
  }
  return BPT_OK;
}
