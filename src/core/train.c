/* bpt_train(): epochs of shuffled batches through forward, backward, optional clipping and the optimiser step,
 * with a validation pass per epoch, the metrics CSV, early stopping and the caller's callbacks. The loop is the
 * one every example used to spell out; it uses only public calls, so a custom loop can copy it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bptrain/gradients.h"
#include "bptrain/mode.h"
#include "core/optimizer_state.h"
#include "core/train_roles.h"

bpt_train_options bpt_train_options_default(void) {
  return (bpt_train_options){
      .size = sizeof(bpt_train_options), .epochs = 1, .first_epoch = 1, .shuffle = 1, .top_k = 5};
}

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* Everything one bpt_train() call keeps between batches and epochs. */
typedef struct train_run {
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_dataset *train;
  const bpt_train_options *o;
  bpt_train_nodes nodes;
  int64_t batch;
  bpt_tensor *samples, *labels;
  double start;
  bpt_train_result result;
  float *best_parameters; /* restore_best: the best epoch's parameter block */
  float *candidate;       /* restore_best: an improving epoch's parameters, kept only when all are finite */
} train_run;

/* A status-returning callback's failure as bpt_train's caller sees it (issue 30, class 13): the callback's own
 * message when a library call it made left one with the status it returned, else "the NAME callback returned
 * N", never an older, unrelated message; a value that is no bpt_status becomes BPT_ERR_INVALID_ARGUMENT, so the
 * return value and bpt_context_last_status() always agree. */
static bpt_status callback_failed(bpt_context *context, bpt_status status, uint64_t errors_before, const char *name,
                                  int64_t epoch, int64_t batch) {
  char at[64];
  if (batch > 0)
    snprintf(at, sizeof at, "epoch %lld, batch %lld", (long long)epoch, (long long)batch);
  else
    snprintf(at, sizeof at, "epoch %lld", (long long)epoch);
  if ((int)status < (int)BPT_ERR_INVALID_ARGUMENT || (int)status > (int)BPT_ERR_INTERNAL)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_train: the %s callback returned %d at %s, which is not a bpt_status", name, (int)status, at);
  if (context->head.error_count != errors_before && context->head.last_status == status) {
    char own[BPT_ERROR_MESSAGE_SIZE];
    snprintf(own, sizeof own, "%s", context->head.last_error);
    return bpt_error(context, status, "bpt_train: the %s callback failed at %s: %s", name, at, own);
  }
  return bpt_error(context, status, "bpt_train: the %s callback returned %d (%s) at %s", name, (int)status,
                   bpt_status_string(status), at);
}

/* Runs a status-returning callback of bpt_train; on failure returns what callback_failed makes of it. */
#define TRAIN_CALLBACK(context, name, epoch, batch, call)                                                              \
  do {                                                                                                                 \
    const uint64_t errors_before_ = (context)->head.error_count;                                                            \
    const bpt_status callback_status_ = (call);                                                                        \
    if (callback_status_ != BPT_OK)                                                                                    \
      return callback_failed((context), callback_status_, errors_before_, (name), (epoch), (batch));                   \
  } while (0)

/* One pass over the training set; sets *stop when the progress callback asks to stop. */
static bpt_status train_epoch(train_run *run, int64_t epoch, bpt_train_epoch *record, int *stop) {
  const bpt_train_options *o = run->o;
  bpt_graph *graph = run->graph;
  BPT_CHECK(bpt_graph_set_training(graph, 1));
  if (o->shuffle) BPT_CHECK(bpt_dataset_shuffle(run->train, o->seed + (uint64_t)epoch));
  const int64_t batches = bpt_dataset_batch_count(run->train, run->batch);
  bpt_train_progress progress = {.size = sizeof progress,
                                 .epoch = epoch,
                                 .epochs = o->epochs,
                                 .batches = batches,
                                 .total = bpt_dataset_size(run->train)};
  const double epoch_start = seconds_now();
  double loss_sum = 0.0;
  for (int64_t b = 0; b < batches; b++) {
    BPT_CHECK(bpt_dataset_batch(run->train, b, run->batch, run->samples, run->labels));
    if (o->prepare_batch)
      TRAIN_CALLBACK(graph->context, "prepare_batch", epoch, b + 1,
                     o->prepare_batch(o->prepare_batch_data, run->samples, run->labels));
    BPT_CHECK(bpt_graph_set_input(graph, run->nodes.data, run->samples));
    BPT_CHECK(bpt_graph_set_input(graph, run->nodes.labels, run->labels));
    BPT_CHECK(bpt_graph_forward(graph));
    BPT_CHECK(bpt_graph_backward(graph));
    if (o->clip_norm > 0.0f) BPT_CHECK(bpt_graph_clip_gradient_norm(graph, o->clip_norm, NULL));
    const int64_t count = bpt_tensor_dim(run->samples, 0);
    progress.batch = b + 1;
    progress.step = run->result.steps;
    if (o->before_step)
      TRAIN_CALLBACK(graph->context, "before_step", epoch, b + 1, o->before_step(o->before_step_data, graph, &progress));
    BPT_CHECK(bpt_optimizer_step(run->optimizer));
    float loss;
    BPT_CHECK(bpt_graph_loss(graph, &loss));
    run->result.steps++;
    loss_sum += (double)loss * (double)count;
    progress.samples += count;
    progress.step = run->result.steps;
    progress.loss = loss;
    progress.running_loss = b == 0 ? loss : 0.98 * progress.running_loss + 0.02 * loss;
    progress.learning_rate = bpt_optimizer_learning_rate(run->optimizer);
    progress.seconds = seconds_now() - epoch_start;
    progress.samples_per_second = progress.seconds > 0 ? (double)progress.samples / progress.seconds : 0.0;
    if (o->metrics && bpt_train_write_metrics_step(o->metrics, &progress, seconds_now() - run->start) != BPT_OK)
      return bpt_error(graph->context, BPT_ERR_IO, "bpt_train: writing the metrics CSV failed at step %lld",
                       (long long)progress.step);
    if (o->progress && o->progress(o->progress_data, &progress)) {
      *stop = 1;
      break;
    }
  }
  *record = (bpt_train_epoch){.size = sizeof *record,
                              .epoch = epoch,
                              .epochs = o->epochs,
                              .step = run->result.steps,
                              .train_loss = progress.samples ? loss_sum / (double)progress.samples : NAN,
                              .running_loss = progress.running_loss,
                              .validation_loss = NAN,
                              .validation_accuracy = NAN,
                              .validation_top_k_accuracy = NAN,
                              .learning_rate = bpt_optimizer_learning_rate(run->optimizer),
                              .train_seconds = seconds_now() - epoch_start,
                              .improved = 1};
  run->result.train_seconds += record->train_seconds;
  return BPT_OK;
}

static double monitored_value(const bpt_train_epoch *record, bpt_train_monitor monitor) {
  switch (monitor) {
  case BPT_TRAIN_MONITOR_VALIDATION_LOSS: return record->validation_loss;
  case BPT_TRAIN_MONITOR_VALIDATION_ACCURACY: return record->validation_accuracy;
  case BPT_TRAIN_MONITOR_TRAIN_LOSS: return record->train_loss;
  default: return NAN;
  }
}

/* Early stopping's bookkeeping after an epoch; sets *stop after patience epochs without improvement. */
static bpt_status track_best(train_run *run, bpt_train_epoch *record, int *stop) {
  const bpt_train_options *o = run->o;
  if (o->monitor == BPT_TRAIN_MONITOR_NONE) return BPT_OK;
  const double value = monitored_value(record, o->monitor);
  const double best = run->result.best_metric;
  const bool higher_is_better = o->monitor == BPT_TRAIN_MONITOR_VALIDATION_ACCURACY;
  /* A diverged epoch (inf or NaN metric) is never the best, however the comparison would read. */
  bool improved =
      isfinite(value) &&
      (run->result.best_epoch == 0 || (higher_is_better ? value > best + o->min_delta : value < best - o->min_delta));
  if (improved && run->best_parameters) {
    /* A finite metric does not make finite parameters (a NaN weight behind a ReLU that no validation sample
     * reaches): restore_best must never hold, and so never write back, a non-finite value. */
    const int64_t count = bpt_graph_parameter_count(run->graph);
    BPT_CHECK(bpt_graph_read_parameters(run->graph, run->candidate, count));
    for (int64_t i = 0; i < count && improved; i++) improved = isfinite(run->candidate[i]);
    if (improved) {
      float *previous = run->best_parameters;
      run->best_parameters = run->candidate;
      run->candidate = previous;
    }
  }
  record->improved = improved;
  if (improved) {
    run->result.best_epoch = record->epoch;
    run->result.best_metric = value;
  } else if (o->patience > 0 && record->epoch - run->result.best_epoch >= o->patience) {
    *stop = 1;
    run->result.stop = BPT_TRAIN_STOPPED_EARLY;
  }
  record->best_epoch = run->result.best_epoch;
  return BPT_OK;
}

static bpt_status validate(train_run *run, bpt_train_epoch *record) {
  if (run->o->validate) {
    TRAIN_CALLBACK(run->graph->context, "validate", record->epoch, 0,
                   run->o->validate(run->o->validate_data, run->graph, record));
    return BPT_OK;
  }
  if (!run->o->validation) return BPT_OK;
  bpt_eval_options eval = bpt_eval_options_default();
  eval.roles = run->o->roles;
  eval.batch_size = run->batch;
  eval.top_k = run->o->top_k;
  bpt_eval_result measured = {.size = sizeof measured};
  BPT_CHECK(bpt_evaluate(run->graph, run->o->validation, &eval, &measured));
  record->validation_loss = measured.loss;
  record->validation_accuracy = measured.accuracy;
  record->validation_top_k_accuracy = measured.top_k_accuracy;
  return BPT_OK;
}

static bpt_status run_epochs(train_run *run) {
  const bpt_train_options *o = run->o;
  /* Ends on the last epoch rather than counting past it: an epoch-per-call driver may reach INT64_MAX. */
  for (int64_t epoch = o->first_epoch;; epoch++) {
    bpt_train_epoch record;
    int stop = 0;
    BPT_CHECK(train_epoch(run, epoch, &record, &stop));
    if (stop) {
      run->result.stop = BPT_TRAIN_STOPPED_BY_CALLBACK;
      return BPT_OK;
    }
    BPT_CHECK(validate(run, &record));
    BPT_CHECK(track_best(run, &record, &stop));
    record.seconds = seconds_now() - run->start;
    run->result.epochs = epoch;
    run->result.last = record;
    if (o->metrics && bpt_train_write_metrics_epoch(o->metrics, &record) != BPT_OK)
      return bpt_error(run->graph->context, BPT_ERR_IO, "bpt_train: writing the metrics CSV failed at epoch %lld",
                       (long long)epoch);
    if (o->epoch_end && o->epoch_end(o->epoch_data, &record) && !stop) {
      run->result.stop = BPT_TRAIN_STOPPED_BY_CALLBACK;
      return BPT_OK;
    }
    if (stop || epoch == o->epochs) return BPT_OK;
  }
}

static bpt_status check_options(bpt_graph *graph, const bpt_train_options *o, const char *where) {
  bpt_context *context = graph->context;
  if (o->first_epoch < 1 || o->epochs < o->first_epoch)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: epochs %lld to %lld: need 1 <= first_epoch <= epochs",
                     where, (long long)o->first_epoch, (long long)o->epochs);
  if (o->top_k < 1) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: top_k %d must be >= 1", where, o->top_k);
  if (o->monitor < BPT_TRAIN_MONITOR_NONE || o->monitor > BPT_TRAIN_MONITOR_TRAIN_LOSS)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: monitor %d is not a bpt_train_monitor", where,
                     (int)o->monitor);
  if ((o->monitor == BPT_TRAIN_MONITOR_VALIDATION_LOSS || o->monitor == BPT_TRAIN_MONITOR_VALIDATION_ACCURACY) &&
      !o->validation && !o->validate)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: monitoring a validation metric needs a validation set",
                     where);
  if (o->patience < 0 || !(o->min_delta >= 0.0) || !(o->clip_norm >= 0.0f))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: patience, min_delta and clip_norm must be >= 0", where);
  if (o->restore_best && o->monitor == BPT_TRAIN_MONITOR_NONE)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: restore_best needs a monitor", where);
  return BPT_OK;
}

/* A data set that cannot go through the graph fails before the first step: the validation set is first read
 * after a whole epoch of training, which a wrong file would otherwise cost. */
static bpt_status check_data(const bpt_train_nodes *nodes, const bpt_dataset *data, const char *which,
                             const char *where) {
  bpt_context *context = nodes->data->graph->context;
  const int64_t values = bpt_node_inner_count(nodes->data), given = bpt_dataset_sample_size(data);
  if (given != values)
    return bpt_error(context, BPT_ERR_SHAPE, "%s: the %s set has %lld values per sample, input '%s' takes %lld", where,
                     which, (long long)given, nodes->data->name, (long long)values);
  if (nodes->logits && bpt_dataset_class_count(data) > bpt_node_inner_count(nodes->logits))
    return bpt_error(context, BPT_ERR_FORMAT, "%s: the %s set has label %d, outside the %lld classes of logits '%s'",
                     where, which, bpt_dataset_class_count(data) - 1, (long long)bpt_node_inner_count(nodes->logits),
                     nodes->logits->name);
  return BPT_OK;
}

bpt_status bpt_train(bpt_graph *graph, bpt_optimizer *optimizer, bpt_dataset *train, const bpt_train_options *options,
                     bpt_train_result *result) {
  const char *where = "bpt_train";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  bpt_context *context = graph->context;
  bpt_train_options o = bpt_train_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &o, sizeof o, options, options->size, sizeof(bpt_train_options), where));
  if (!optimizer || !train)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", where, optimizer ? "data set" : "optimizer");
  BPT_CHECK(bpt_optimizer_check_owner(optimizer, graph, where));
  train_run run = {.graph = graph, .optimizer = optimizer, .train = train, .o = &o, .start = seconds_now()};
  run.result = (bpt_train_result){.size = sizeof run.result, .best_metric = NAN};
  BPT_CHECK(bpt_train_find_nodes(graph, &o.roles, o.validation != NULL, where, &run.nodes));
  BPT_CHECK(bpt_train_batch_size(graph, o.batch_size, where, &run.batch));
  BPT_CHECK(check_options(graph, &o, where));
  BPT_CHECK(check_data(&run.nodes, train, "training", where));
  if (o.validation) BPT_CHECK(check_data(&run.nodes, o.validation, "validation", where));
  run.result.epochs = o.first_epoch - 1;
  if (o.restore_best) {
    run.best_parameters = bpt_calloc(context, (size_t)bpt_graph_parameter_count(graph), sizeof(float),
                                     "bpt_train: the best epoch's parameters");
    run.candidate = run.best_parameters ? bpt_calloc(context, (size_t)bpt_graph_parameter_count(graph), sizeof(float),
                                                     "bpt_train: a candidate best epoch's parameters")
                                        : NULL;
    if (!run.candidate) {
      free(run.best_parameters);
      return BPT_ERR_OUT_OF_MEMORY;
    }
  }
  if (o.metrics && ftell(o.metrics) == 0 && bpt_train_write_metrics_header(o.metrics) != BPT_OK) {
    free(run.best_parameters);
    free(run.candidate);
    return bpt_error(context, BPT_ERR_IO, "%s: writing the metrics CSV header failed", where);
  }
  bpt_status status = bpt_train_batch_tensors(context, train, run.batch, &run.samples, &run.labels);
  if (status == BPT_OK) status = run_epochs(&run);
  /* Also after the best epoch itself: a callback may have stopped in the middle of a later one. */
  if (status == BPT_OK && run.best_parameters && run.result.best_epoch > 0)
    status = bpt_graph_write_parameters(graph, run.best_parameters, bpt_graph_parameter_count(graph));
  bpt_tensor_destroy(run.samples);
  bpt_tensor_destroy(run.labels);
  free(run.best_parameters);
  free(run.candidate);
  if (status == BPT_OK && result)
    status = bpt_copy_output(context, result, &run.result, sizeof run.result, sizeof(bpt_train_result), where);
  return status;
}
