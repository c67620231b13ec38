/**
 * @file train.h
 * @brief The training helper: epochs over a data set with seeded shuffling, evaluation (loss, accuracy, top-k,
 * confusion matrix) in eval mode, progress and per-epoch callbacks, a metrics CSV, early stopping on a
 * validation metric, and a model summary. Everything here is built on the public calls of the other headers;
 * a loop that needs more control spells the same steps out (examples/mnist_mlp.c's history shows how).
 */
#ifndef BPTRAIN_TRAIN_H
#define BPTRAIN_TRAIN_H

#include <stdio.h>

#include "data.h"
#include "optimizer.h"

BPT_EXTERN_C_BEGIN

/** Which inputs and output of a classifier graph the helper uses. A NULL name is found by role: the labels
 * are the loss's second input when that is a graph input, the logits the loss's first input, and the data
 * the one graph input that is not the labels (a graph with several is asked to name it). */
typedef struct bpt_train_roles {
  const char *data_input;   /**< the input fed with the data set's samples (f32), or NULL */
  const char *labels_input; /**< the input fed with its labels (i32), or NULL */
  const char *logits;       /**< the node evaluation reads class scores from, (batch, classes), or NULL */
} bpt_train_roles;

/** How bpt_evaluate() runs; get it from bpt_eval_options_default(). */
typedef struct bpt_eval_options {
  size_t size;           /**< sizeof(bpt_eval_options), set by the default function */
  bpt_train_roles roles; /**< all NULL by default: found by role */
  int64_t batch_size;    /**< 0 (default): the graph's compiled batch */
  int top_k;             /**< k of the top-k accuracy (default 5; clamped to the class count) */
  /** NULL (default), or classes x classes counts the evaluation adds into: row = true label, column =
   * prediction (argmax, the first of equal scores). The caller zeroes it before a fresh count. */
  int64_t *confusion_matrix;
  int64_t confusion_classes; /**< the rows (and columns) of confusion_matrix; must equal the logits' width */
} bpt_eval_options;

/** @return evaluation by role at the compiled batch, top-5, no confusion matrix. */
BPT_API bpt_eval_options bpt_eval_options_default(void);

/** What bpt_evaluate() measured. */
typedef struct bpt_eval_result {
  size_t size;           /**< set by the caller to sizeof(bpt_eval_result); the bytes written on return */
  int64_t samples;       /**< samples evaluated (the data set's size) */
  double loss;           /**< the loss averaged over samples */
  double accuracy;       /**< fraction whose argmax (the first of equal scores) is the label */
  double top_k_accuracy; /**< fraction whose label ranks among the top_k scores (ties: lower class first) */
  int top_k;             /**< the k used */
} bpt_eval_result;

/**
 * Runs a compiled classifier forward over every batch of @p dataset in its current order, in eval mode (batch
 * norm on running statistics, no dropout; the previous mode is restored), and measures loss, accuracy, top-k
 * accuracy and, when asked, a confusion matrix. @p options may be NULL (defaults). A label outside the
 * logits' width fails with ::BPT_ERR_FORMAT naming the sample.
 */
BPT_API bpt_status bpt_evaluate(bpt_graph *graph, bpt_dataset *dataset, const bpt_eval_options *options,
                                bpt_eval_result *result);

/** What a progress callback is told after each optimiser step. */
typedef struct bpt_train_progress {
  size_t size;               /**< sizeof(bpt_train_progress) */
  int64_t epoch;             /**< this epoch (from 1) */
  int64_t epochs;            /**< the last epoch of the run */
  int64_t batch;             /**< batches done in this epoch (from 1) */
  int64_t batches;           /**< batches in an epoch */
  int64_t samples;           /**< samples done in this epoch */
  int64_t total;             /**< the data set's size */
  int64_t step;              /**< optimiser steps taken since bpt_train() began */
  double loss;               /**< this batch's loss */
  double running_loss;       /**< exponentially smoothed loss of this epoch (0.98 old + 0.02 new) */
  double learning_rate;      /**< bpt_optimizer_learning_rate() after the step */
  double seconds;            /**< since this epoch began */
  double samples_per_second; /**< samples / seconds */
} bpt_train_progress;

/** Called after every optimiser step; returning nonzero stops training cleanly after that step. */
typedef int (*bpt_train_progress_fn)(void *data, const bpt_train_progress *progress);

/** Early stopping's and the CSV's choice of what measures an epoch. */
typedef enum bpt_train_monitor {
  BPT_TRAIN_MONITOR_NONE = 0,                /**< no early stopping */
  BPT_TRAIN_MONITOR_VALIDATION_LOSS = 1,     /**< lower is better */
  BPT_TRAIN_MONITOR_VALIDATION_ACCURACY = 2, /**< higher is better */
  BPT_TRAIN_MONITOR_TRAIN_LOSS = 3           /**< lower is better; needs no validation set */
} bpt_train_monitor;

/** What an epoch callback is told after each epoch (and its validation). Unknown values are NaN. */
typedef struct bpt_train_epoch {
  size_t size;                      /**< sizeof(bpt_train_epoch) */
  int64_t epoch;                    /**< this epoch (from 1) */
  int64_t epochs;                   /**< the last epoch of the run */
  int64_t step;                     /**< optimiser steps taken since bpt_train() began */
  double train_loss;                /**< the batch losses averaged over the epoch's samples */
  double running_loss;              /**< the smoothed loss at the epoch's end */
  double validation_loss;           /**< NaN without a validation set */
  double validation_accuracy;       /**< NaN without a validation set */
  double validation_top_k_accuracy; /**< NaN without a validation set */
  double learning_rate;             /**< the rate of the epoch's last step */
  double train_seconds;             /**< this epoch's training pass, evaluation excluded */
  double seconds;                   /**< since bpt_train() began */
  int improved;                     /**< 1 when the monitored metric improved (always 1 without a monitor) */
  int64_t best_epoch;               /**< the best epoch so far (0 without a monitor) */
} bpt_train_epoch;

/** Called after each epoch; returning nonzero stops training cleanly there. */
typedef int (*bpt_train_epoch_fn)(void *data, const bpt_train_epoch *epoch);

/** Called with each training batch after it is filled and before the graph reads it (augmentation). */
typedef bpt_status (*bpt_train_batch_fn)(void *data, bpt_tensor *samples, bpt_tensor *labels);

/** Called after backward (and clipping), before the optimiser step (gradient statistics). */
typedef bpt_status (*bpt_train_step_fn)(void *data, bpt_graph *graph, const bpt_train_progress *progress);

/** Called after each epoch in place of the built-in validation: fills epoch's validation_* fields its own way
 * (a stochastic model averaged over passes, another data pipeline), before early stopping reads them. */
typedef bpt_status (*bpt_train_validate_fn)(void *data, bpt_graph *graph, bpt_train_epoch *epoch);

/** How bpt_train() runs; get it from bpt_train_options_default(). */
typedef struct bpt_train_options {
  size_t size;             /**< sizeof(bpt_train_options), set by the default function */
  bpt_train_roles roles;   /**< all NULL by default: found by role */
  int64_t epochs;          /**< the last epoch to run (default 1) */
  int64_t first_epoch;     /**< the first (default 1): a resumed run, or one driven an epoch per call, starts later */
  int64_t batch_size;      /**< 0 (default): the graph's compiled batch */
  int shuffle;             /**< 1 (default): epoch e (from 1) shuffles with seed + e; 0: the current order */
  uint64_t seed;           /**< default 0 */
  float clip_norm;         /**< > 0: clip the global gradient norm before each step (default 0: off) */
  bpt_dataset *validation; /**< evaluated after each epoch in eval mode, or NULL (default) */
  int top_k;               /**< k of the validation top-k accuracy (default 5) */
  /** Early stopping: stop after @c patience epochs in a row without an improvement larger than
   * @c min_delta of @c monitor (0 patience: never stop, but still track the best epoch). With
   * @c restore_best the parameters of the best epoch (batch-norm running statistics included; optimiser
   * state and the epoch counter are not rolled back) are written back when training ends. */
  bpt_train_monitor monitor;
  int64_t patience;                 /**< default 0 */
  double min_delta;                 /**< default 0 */
  int restore_best;                 /**< default 0 */
  bpt_train_progress_fn progress;   /**< after every step, or NULL */
  void *progress_data;              /**< passed to progress */
  bpt_train_epoch_fn epoch_end;     /**< after every epoch, or NULL */
  void *epoch_data;                 /**< passed to epoch_end */
  bpt_train_batch_fn prepare_batch; /**< on each filled training batch, or NULL */
  void *prepare_batch_data;         /**< passed to prepare_batch */
  bpt_train_step_fn before_step;    /**< after backward, before the step, or NULL */
  void *before_step_data;           /**< passed to before_step */
  bpt_train_validate_fn validate;   /**< replaces the validation pass (then validation may be NULL), or NULL */
  void *validate_data;              /**< passed to validate */
  /** NULL, or a CSV that gets one "step" row per optimiser step and one "epoch" row per epoch
   * (bpt_train_write_metrics_header() names the columns; the header is written first when the file is empty). */
  FILE *metrics;
} bpt_train_options;

/** @return epoch 1 only, at the compiled batch, shuffled with seed 0, no validation, no callbacks. */
BPT_API bpt_train_options bpt_train_options_default(void);

/** Why bpt_train() returned. */
typedef enum bpt_train_stop {
  BPT_TRAIN_COMPLETED = 0,           /**< all epochs ran */
  BPT_TRAIN_STOPPED_BY_CALLBACK = 1, /**< a progress or epoch callback returned nonzero */
  BPT_TRAIN_STOPPED_EARLY = 2        /**< the monitored metric did not improve for patience epochs */
} bpt_train_stop;

/** What bpt_train() did. */
typedef struct bpt_train_result {
  size_t size;          /**< set by the caller to sizeof(bpt_train_result); the bytes written on return */
  bpt_train_stop stop;  /**< why it returned */
  int64_t epochs;       /**< the last epoch completed (first_epoch - 1 when none) */
  int64_t steps;        /**< optimiser steps taken */
  int64_t best_epoch;   /**< the monitored metric's best epoch (0 without a monitor) */
  double best_metric;   /**< its value then (NaN without a monitor) */
  double train_seconds; /**< time in training passes, evaluation excluded */
  bpt_train_epoch last; /**< the last completed epoch's record (epoch 0 when none completed) */
} bpt_train_result;

/**
 * Trains a compiled classifier (or any graph with a data and a labels input) with @p optimizer for
 * epochs options->first_epoch to options->epochs over @p train: each epoch shuffles (seeded), then per batch fills the
 * inputs, runs forward and backward, optionally clips, steps the optimiser (its schedule, if any, sets the rate) and
 * calls the progress callback; after the epoch it evaluates the validation set in eval mode (switching back to training
 * mode for the next epoch), writes the CSV row, applies early stopping and calls the epoch callback.
 * @p options may be NULL (defaults); @p result may be NULL. A failing step returns its status and message.
 * Before the first step, a training or validation set whose samples do not match the data input fails with
 * ::BPT_ERR_SHAPE, and (with a validation set) one holding a label beyond the logits with ::BPT_ERR_FORMAT.
 */
BPT_API bpt_status bpt_train(bpt_graph *graph, bpt_optimizer *optimizer, bpt_dataset *train,
                             const bpt_train_options *options, bpt_train_result *result);

/** Writes the metrics CSV header: kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,
 * learning_rate,seconds (the format the examples and the Python binding share; "test" is the validation set). */
BPT_API bpt_status bpt_train_write_metrics_header(FILE *file);
/** Writes one "step" row (empty accuracy and test columns). */
BPT_API bpt_status bpt_train_write_metrics_step(FILE *file, const bpt_train_progress *progress, double seconds);
/** Writes one "epoch" row (unknown values, NaN, stay empty; train_accuracy is empty). */
BPT_API bpt_status bpt_train_write_metrics_epoch(FILE *file, const bpt_train_epoch *epoch);

/** One row of a model summary: an op node with the parameters it is the first to read. */
typedef struct bpt_layer_summary {
  size_t size;                  /**< set by the caller to sizeof(bpt_layer_summary); the bytes written on return */
  const char *name;             /**< the node's name (valid while the graph lives) */
  const char *op;               /**< its op name */
  int rank;                     /**< of its output, batch included for batched nodes */
  int64_t dims[BPT_MAX_RANK];   /**< output shape at the compiled batch (batch 1 before compile) */
  int64_t trainable_parameters; /**< elements of the trainable parameters it reads first */
  int64_t buffer_parameters;    /**< elements of the non-trainable ones (batch-norm running statistics) */
  size_t activation_bytes;      /**< bytes of its output at the compiled batch (0 for a reshape, a view of its
                                     input's bytes) */
} bpt_layer_summary;

/** Totals of a model summary. */
typedef struct bpt_model_summary {
  size_t size;                  /**< set by the caller to sizeof(bpt_model_summary); the bytes written on return */
  int layers;                   /**< op nodes (inputs and parameters are not layers) */
  int64_t trainable_parameters; /**< elements of all trainable parameters */
  int64_t buffer_parameters;    /**< elements of all non-trainable parameters */
  size_t activation_bytes;      /**< sum of the layers' output bytes at the compiled batch (an upper bound of
                                     what the memory plan holds; see bpt_graph_memory()) */
  int64_t batch;                /**< the batch those bytes are for (1 before compile) */
} bpt_model_summary;

/** Fills @p summary's totals for @p graph (compiled or not). */
BPT_API bpt_status bpt_graph_summary(const bpt_graph *graph, bpt_model_summary *summary);

/** Fills row @p index (0 to summary.layers - 1, creation order) of @p graph's summary. */
BPT_API bpt_status bpt_graph_layer_summary(const bpt_graph *graph, int index, bpt_layer_summary *layer);

/** Writes the summary as a text table into @p buffer (NUL-terminated, truncated to @p size) and returns the
 * length the whole text needs, so a NULL buffer of size 0 asks for it. 0 for a NULL graph. */
BPT_API size_t bpt_graph_summary_text(const bpt_graph *graph, char *buffer, size_t size);

BPT_EXTERN_C_END

#endif
