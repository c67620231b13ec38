/* bpt_evaluate(): a classifier's loss, accuracy, top-k accuracy and confusion matrix over a data set, run in
 * eval mode so that batch norm uses its running statistics and dropout passes values through. */
#include <math.h>

#include "bptrain/mode.h"
#include "core/train_roles.h"

bpt_eval_options bpt_eval_options_default(void) {
  return (bpt_eval_options){.size = sizeof(bpt_eval_options), .top_k = 5};
}

static bpt_status evaluate_batches(bpt_graph *graph, bpt_dataset *dataset, const bpt_train_nodes *nodes, int64_t batch,
                                   int top_k, int64_t *confusion, bpt_eval_result *out, const char *where) {
  bpt_context *context = graph->context;
  const int64_t classes = nodes->logits->dims[1];
  const int64_t logit_dims[2] = {batch, classes};
  bpt_tensor *samples = NULL, *labels = NULL, *logits = NULL;
  bpt_status status = bpt_train_batch_tensors(context, dataset, batch, &samples, &labels);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &logits);
  int64_t correct = 0, top_k_correct = 0, seen = 0;
  double loss_sum = 0.0;
  const int64_t batches = bpt_dataset_batch_count(dataset, batch);
  for (int64_t b = 0; status == BPT_OK && b < batches; b++) {
    float loss = 0.0f;
    status = bpt_dataset_batch(dataset, b, batch, samples, labels);
    if (status == BPT_OK) status = bpt_graph_set_input(graph, nodes->data, samples);
    if (status == BPT_OK) status = bpt_graph_set_input(graph, nodes->labels, labels);
    if (status == BPT_OK) status = bpt_graph_forward(graph);
    if (status == BPT_OK) status = bpt_graph_loss(graph, &loss);
    if (status == BPT_OK) status = bpt_graph_read(graph, nodes->logits, logits);
    if (status != BPT_OK) break;
    const int64_t count = bpt_tensor_dim(labels, 0);
    status = bpt_train_tally(context, bpt_tensor_data(logits), bpt_tensor_data(labels), count, classes, top_k, seen,
                             &correct, &top_k_correct, confusion, where);
    loss_sum += (double)loss * (double)count;
    seen += count;
  }
  bpt_tensor_destroy(samples);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(logits);
  if (status != BPT_OK) return status;
  *out = (bpt_eval_result){.size = sizeof *out, .samples = seen, .top_k = top_k};
  out->loss = seen ? loss_sum / (double)seen : NAN;
  out->accuracy = seen ? (double)correct / (double)seen : NAN;
  out->top_k_accuracy = seen ? (double)top_k_correct / (double)seen : NAN;
  return BPT_OK;
}

bpt_status bpt_evaluate(bpt_graph *graph, bpt_dataset *dataset, const bpt_eval_options *options,
                        bpt_eval_result *result) {
  const char *where = "bpt_evaluate";
  bpt_context *context = graph ? graph->context : NULL;
  bpt_eval_options o = bpt_eval_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &o, sizeof o, options, options->size, sizeof(bpt_eval_options), where));
  if (!dataset || !result)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where, dataset ? "result" : "data set");
  bpt_train_nodes nodes;
  BPT_CHECK(bpt_train_find_nodes(graph, &o.roles, 1, where, &nodes));
  int64_t batch;
  BPT_CHECK(bpt_train_batch_size(graph, o.batch_size, where, &batch));
  const int64_t classes = nodes.logits->dims[1];
  if (o.top_k < 1) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: top_k %d must be >= 1", where, o.top_k);
  const int top_k = o.top_k > classes ? (int)classes : o.top_k;
  if (o.confusion_matrix && o.confusion_classes != classes)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: confusion_classes is %lld, the logits '%s' have %lld classes", where,
                     (long long)o.confusion_classes, nodes.logits->name, (long long)classes);
  const int was_training = bpt_graph_is_training(graph);
  BPT_CHECK(bpt_graph_set_training(graph, 0));
  bpt_eval_result measured;
  bpt_status status = evaluate_batches(graph, dataset, &nodes, batch, top_k, o.confusion_matrix, &measured, where);
  const bpt_status restored = bpt_graph_set_training(graph, was_training);
  if (status == BPT_OK) status = restored;
  if (status != BPT_OK) return status;
  return bpt_copy_output(context, result, &measured, sizeof measured, sizeof(bpt_eval_result), where);
}
