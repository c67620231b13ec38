/* The training helper (bpt_train, bpt_evaluate, the metrics CSV and the model summary) against hand-computed
 * values: accuracy, top-k and a confusion matrix on a graph whose logits are its input bytes, seeded epochs
 * that repeat exactly, early stopping on a planted flat metric, a progress callback that stops, CSV rows, and
 * parameter counts of a small MLP and a conv net counted by hand. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* An IDX image file of count 1 x width byte images and its label file. */
static bpt_dataset *make_dataset(bpt_context *context, const char *name, const unsigned char *pixels, int count,
                                 int width, const unsigned char *labels) {
  unsigned char images[16 + 1024], label_bytes[8 + 256];
  const unsigned char image_header[16] = {0, 0, 0x08, 3, 0, 0, 0, (unsigned char)count,
                                          0, 0, 0,    1, 0, 0, 0, (unsigned char)width};
  const unsigned char label_header[8] = {0, 0, 0x08, 1, 0, 0, 0, (unsigned char)count};
  memcpy(images, image_header, 16);
  memcpy(images + 16, pixels, (size_t)(count * width));
  memcpy(label_bytes, label_header, 8);
  memcpy(label_bytes + 8, labels, (size_t)count);
  char image_name[64], label_name[64];
  snprintf(image_name, sizeof image_name, "%s-images", name);
  snprintf(label_name, sizeof label_name, "%s-labels", name);
  char image_path[1024];
  snprintf(image_path, sizeof image_path, "%s", test_write_file(image_name, images, 16 + (size_t)(count * width)));
  const char *label_path = test_write_file(label_name, label_bytes, 8 + (size_t)count);
  bpt_dataset *dataset = NULL;
  assert_ok(context, bpt_dataset_load_idx(context, image_path, label_path, &dataset));
  return dataset;
}

/* logits = 255 W x with W the identity: the logits are the sample's bytes. */
static const unsigned char known_pixels[6 * 3] = {9, 1, 5, 1, 9, 5, 3, 3, 7, 4, 4, 0, 0, 2, 8, 6, 2, 1};
static const unsigned char known_labels[6] = {0, 2, 1, 0, 2, 1};

static bpt_graph *identity_classifier(bpt_context *context, int64_t batch) {
  bpt_graph *graph = NULL;
  bpt_node *x, *y, *weight, *logits, *loss;
  const int64_t features = 3, weight_dims[2] = {3, 3};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "pixels", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "classes", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(context, bpt_graph_parameter(graph, "w", 2, weight_dims, BPT_INIT_ZEROS, &weight));
  assert_ok(context, bpt_linear(graph, "scores", x, weight, NULL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, y, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, batch));
  const float identity[9] = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  assert_ok(context, bpt_graph_write_parameters(graph, identity, 9));
  return graph;
}

static void evaluation_matches_hand_counts(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_dataset *dataset = make_dataset(context, "known", known_pixels, 6, 3, known_labels);
  bpt_graph *graph = identity_classifier(context, 4); /* 6 samples: a full and a partial batch */
  int64_t confusion[9] = {0};
  bpt_eval_options options = bpt_eval_options_default();
  options.top_k = 2;
  options.confusion_matrix = confusion;
  options.confusion_classes = 3;
  bpt_eval_result result = {.size = sizeof result};
  assert_ok(context, bpt_graph_set_training(graph, 1));
  assert_ok(context, bpt_evaluate(graph, dataset, &options, &result));
  assert_int_equal(bpt_graph_is_training(graph), 1); /* the mode is restored */
  assert_int_equal(result.samples, 6);
  /* Argmax right for samples 0, 3 (a tie, the first wins) and 4; sample 2's label ties with a lower class and
   * ranks third, the others rank second. */
  assert_float_equal(result.accuracy, 3.0 / 6.0, 1e-12);
  assert_float_equal(result.top_k_accuracy, 5.0 / 6.0, 1e-12);
  assert_int_equal(result.top_k, 2);
  const int64_t expected[9] = {2, 0, 0, 1, 0, 1, 0, 1, 1}; /* row: label, column: prediction */
  for (int i = 0; i < 9; i++)
    assert_int_equal(confusion[i], expected[i]);
  double loss = 0.0;
  for (int n = 0; n < 6; n++) {
    const unsigned char *l = known_pixels + 3 * n;
    loss += log(exp(l[0]) + exp(l[1]) + exp(l[2])) - l[known_labels[n]];
  }
  assert_float_equal(result.loss, loss / 6.0, 1e-4 * loss / 6.0);
  options.top_k = 9; /* clamped to the 3 classes: everything is in the top 3 */
  options.confusion_matrix = NULL;
  assert_ok(context, bpt_evaluate(graph, dataset, &options, &result));
  assert_float_equal(result.top_k_accuracy, 1.0, 1e-12);
  assert_int_equal(result.top_k, 3);
  options.confusion_matrix = confusion;
  options.confusion_classes = 4;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "'scores' have 3 classes",
               bpt_evaluate(graph, dataset, &options, &result));
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(dataset);
  bpt_context_destroy(context);
}

/* 64 samples of 4 bytes, label 1 when the first byte is larger than the last. */
static bpt_dataset *separable_dataset(bpt_context *context, const char *name, uint64_t seed) {
  unsigned char pixels[64 * 4], labels[64];
  test_random random;
  test_random_seed(&random, seed);
  for (int n = 0; n < 64; n++) {
    for (int k = 0; k < 4; k++)
      pixels[4 * n + k] = (unsigned char)test_random_uniform(&random, 0.0f, 255.0f);
    labels[n] = pixels[4 * n] > pixels[4 * n + 3];
  }
  return make_dataset(context, name, pixels, 64, 4, labels);
}

typedef struct small_model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_dataset *train, *validation;
} small_model;

static small_model small_mlp(float learning_rate, int64_t batch) {
  small_model m = {.context = test_context(7)};
  bpt_node *x, *y, *h, *logits, *loss;
  const int64_t features = 4;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input(m.graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(m.context, bpt_graph_input(m.graph, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", x, 3, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(m.context, bpt_relu(m.graph, "relu1", h, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", h, 2, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(m.context, bpt_softmax_cross_entropy(m.graph, "loss", logits, y, &loss));
  assert_ok(m.context, bpt_graph_compile(m.graph, loss, batch));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = learning_rate;
  options.momentum = 0.9f;
  assert_ok(m.context, bpt_optimizer_create(m.graph, &options, &m.optimizer));
  m.train = separable_dataset(m.context, "train", 11);
  m.validation = separable_dataset(m.context, "validation", 12);
  return m;
}

static void small_destroy(small_model *m) {
  bpt_optimizer_destroy(m->optimizer);
  bpt_graph_destroy(m->graph);
  bpt_dataset_destroy(m->train);
  bpt_dataset_destroy(m->validation);
  bpt_context_destroy(m->context);
}

/* Trains a fresh small MLP for 3 epochs and returns its 23 parameters and the last training loss. */
static double trained_parameters(uint64_t seed, int shuffle, float *parameters) {
  small_model m = small_mlp(0.2f, 8);
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 3;
  options.seed = seed;
  options.shuffle = shuffle;
  bpt_train_result result = {.size = sizeof result};
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.stop, BPT_TRAIN_COMPLETED);
  assert_int_equal(result.epochs, 3);
  assert_int_equal(result.steps, 3 * 8);
  assert_int_equal(bpt_graph_parameter_count(m.graph), 23);
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, parameters, 23));
  const double loss = result.last.train_loss;
  small_destroy(&m);
  return loss;
}

static void seeded_epochs_repeat_exactly(void **state) {
  (void)state;
  float first[23], again[23], other_seed[23], unshuffled[23];
  const double loss = trained_parameters(5, 1, first);
  assert_true(isfinite(loss));
  trained_parameters(5, 1, again);
  trained_parameters(6, 1, other_seed);
  trained_parameters(5, 0, unshuffled);
  assert_memory_equal(first, again, sizeof first);
  /* The seed and the shuffle both change the batches, so the result. */
  assert_true(memcmp(first, other_seed, sizeof first) != 0);
  assert_true(memcmp(first, unshuffled, sizeof first) != 0);

  /* Epochs 1 to 3 one call each (first_epoch) repeat the single call. */
  small_model m = small_mlp(0.2f, 8);
  bpt_train_options options = bpt_train_options_default();
  options.seed = 5;
  bpt_train_result result = {.size = sizeof result};
  for (int64_t epoch = 1; epoch <= 3; epoch++) {
    options.first_epoch = options.epochs = epoch;
    assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
    assert_int_equal(result.epochs, epoch);
  }
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, again, 23));
  assert_memory_equal(first, again, sizeof first);
  options.first_epoch = 4;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "need 1 <= first_epoch <= epochs",
               bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  /* The largest epoch number runs once and ends there (the loop counting past it was a signed overflow). */
  options.first_epoch = options.epochs = INT64_MAX;
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.epochs, INT64_MAX);
  assert_int_equal(result.steps, 8);
  small_destroy(&m);
}

typedef struct epoch_log {
  int calls;
  int64_t improved[16];
  float epoch_one_parameters[23];
  bpt_graph *graph;
} epoch_log;

static int log_epoch(void *data, const bpt_train_epoch *epoch) {
  epoch_log *log = data;
  log->improved[log->calls++] = epoch->improved;
  if (epoch->epoch == 1) bpt_graph_read_parameters(log->graph, log->epoch_one_parameters, 23);
  return 0;
}

static bpt_status flat_validation(void *data, bpt_graph *graph, bpt_train_epoch *epoch) {
  (void)data;
  (void)graph;
  epoch->validation_loss = 1.0;
  return BPT_OK;
}

static void early_stopping_after_patience(void **state) {
  (void)state;
  small_model m = small_mlp(0.2f, 8);
  epoch_log log = {.graph = m.graph};
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 10;
  options.validation = m.validation;
  options.monitor = BPT_TRAIN_MONITOR_VALIDATION_LOSS;
  options.patience = 3;
  options.min_delta = 1e9; /* the planted flat metric: no later epoch improves by that much */
  options.restore_best = 1;
  options.epoch_end = log_epoch;
  options.epoch_data = &log;
  bpt_train_result result = {.size = sizeof result};
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.stop, BPT_TRAIN_STOPPED_EARLY);
  assert_int_equal(result.epochs, 4); /* the best epoch and patience epochs after it */
  assert_int_equal(log.calls, 4);
  assert_int_equal(result.best_epoch, 1);
  assert_int_equal(result.last.best_epoch, 1);
  const int64_t improved[4] = {1, 0, 0, 0};
  for (int i = 0; i < 4; i++)
    assert_int_equal(log.improved[i], improved[i]);
  assert_true(isfinite(result.best_metric) && result.best_metric > 0.0);
  float restored[23];
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, restored, 23));
  assert_memory_equal(restored, log.epoch_one_parameters, sizeof restored);

  /* A validate hook replaces the validation pass: here it plants a flat loss of 1. */
  options.validation = NULL;
  options.validate = flat_validation;
  options.min_delta = 0.0;
  options.patience = 2;
  options.restore_best = 0;
  log.calls = 0;
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.stop, BPT_TRAIN_STOPPED_EARLY);
  assert_int_equal(result.epochs, 3);
  assert_float_equal(result.best_metric, 1.0, 0.0);
  assert_float_equal(result.last.validation_loss, 1.0, 0.0);

  options.validate = NULL;
  options.monitor = BPT_TRAIN_MONITOR_VALIDATION_ACCURACY;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "needs a validation set",
               bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  small_destroy(&m);
}

typedef struct stop_request {
  int64_t stop_at, calls, last_batch;
} stop_request;

static int stop_after(void *data, const bpt_train_progress *progress) {
  stop_request *request = data;
  request->calls++;
  request->last_batch = progress->batch;
  return progress->step == request->stop_at;
}

static void progress_callback_stops_training(void **state) {
  (void)state;
  small_model m = small_mlp(0.2f, 8);
  stop_request request = {.stop_at = 11};
  epoch_log log = {.graph = m.graph};
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 5;
  options.progress = stop_after;
  options.progress_data = &request;
  options.epoch_end = log_epoch;
  options.epoch_data = &log;
  bpt_train_result result = {.size = sizeof result};
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.stop, BPT_TRAIN_STOPPED_BY_CALLBACK);
  assert_int_equal(result.steps, 11);
  assert_int_equal(request.calls, 11);
  assert_int_equal(request.last_batch, 3); /* 8 batches per epoch: step 11 is epoch 2's third */
  assert_int_equal(result.epochs, 1);
  assert_int_equal(log.calls, 1); /* the stopped epoch is not reported as complete */
  small_destroy(&m);
}

/* A data set that cannot go through the graph (another sample size, a label beyond the logits) fails before
 * the first step: a validation set is first read after a whole epoch of training. */
static void unfit_data_fails_before_training(void **state) {
  (void)state;
  small_model m = small_mlp(0.2f, 8);
  unsigned char pixels[8 * 5] = {0}, labels[8] = {0, 1, 0, 1, 0, 1, 0, 1};
  bpt_dataset *wide = make_dataset(m.context, "wide", pixels, 8, 5, labels);
  labels[3] = 7; /* the MLP has 2 classes */
  bpt_dataset *many = make_dataset(m.context, "many", pixels, 8, 4, labels);
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 2;
  options.validation = wide;
  assert_fails(m.context, BPT_ERR_SHAPE, "bpt_train: the validation set has 5 values per sample, input 'x' takes 4",
               bpt_train(m.graph, m.optimizer, m.train, &options, NULL));
  options.validation = many;
  assert_fails(m.context, BPT_ERR_FORMAT, "the validation set has label 7, outside the 2 classes of logits 'fc2'",
               bpt_train(m.graph, m.optimizer, m.train, &options, NULL));
  options.validation = NULL;
  assert_fails(m.context, BPT_ERR_SHAPE, "the training set has 5 values per sample",
               bpt_train(m.graph, m.optimizer, wide, &options, NULL));
  assert_int_equal(bpt_optimizer_step_count(m.optimizer), 0); /* nothing trained, nothing lost */
  bpt_dataset_destroy(wide);
  bpt_dataset_destroy(many);
  small_destroy(&m);
}

static void metrics_csv_rows(void **state) {
  (void)state;
  small_model m = small_mlp(0.2f, 32);
  FILE *csv = tmpfile();
  assert_non_null(csv);
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 2;
  options.batch_size = 32; /* 2 steps per epoch (as compiled; the default) */
  options.validation = m.validation;
  options.metrics = csv;
  bpt_train_result result = {.size = sizeof result};
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  rewind(csv);
  char text[4096];
  const size_t length = fread(text, 1, sizeof text - 1, csv);
  text[length] = 0;
  fclose(csv);
  char *line = strtok(text, "\n");
  assert_string_equal(line, "kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,learning_rate,seconds");
  const char *kinds[] = {"step,1,1,", "step,1,2,", "epoch,1,2,", "step,2,3,", "step,2,4,", "epoch,2,4,"};
  for (int row = 0; row < 6; row++) {
    line = strtok(NULL, "\n");
    assert_non_null(line);
    assert_memory_equal(line, kinds[row], strlen(kinds[row]));
    int commas = 0;
    for (const char *c = line; *c; c++)
      commas += *c == ',';
    assert_int_equal(commas, 8);
    if (row == 5) {
      /* epoch,2,4,train_loss,(empty train_accuracy),test_loss,test_accuracy,0.2,seconds */
      char expected[128];
      snprintf(expected, sizeof expected, ",%.6g,,%.6g,%.6g,0.2,", result.last.train_loss, result.last.validation_loss,
               result.last.validation_accuracy);
      assert_non_null(strstr(line, expected));
    } else if (row != 2) {
      assert_non_null(strstr(line, ",,,,0.2,")); /* a step row: loss, three empty columns, the rate */
    }
  }
  assert_null(strtok(NULL, "\n"));
  small_destroy(&m);
}

static void summary_counts_match_hand_counts(void **state) {
  (void)state;
  small_model m = small_mlp(0.1f, 8);
  bpt_model_summary summary = {.size = sizeof summary};
  assert_ok(m.context, bpt_graph_summary(m.graph, &summary));
  assert_int_equal(summary.layers, 4); /* fc1, relu1, fc2, loss */
  assert_int_equal(summary.trainable_parameters, 4 * 3 + 3 + 3 * 2 + 2);
  assert_int_equal(summary.buffer_parameters, 0);
  assert_int_equal(summary.batch, 8);
  bpt_layer_summary layer = {.size = sizeof layer};
  assert_ok(m.context, bpt_graph_layer_summary(m.graph, 0, &layer));
  assert_string_equal(layer.name, "fc1");
  assert_int_equal(layer.trainable_parameters, 15);
  assert_int_equal(layer.activation_bytes, 8 * 3 * sizeof(float));
  assert_ok(m.context, bpt_graph_layer_summary(m.graph, 2, &layer));
  assert_string_equal(layer.name, "fc2");
  assert_int_equal(layer.trainable_parameters, 8);
  assert_int_equal(layer.rank, 2);
  assert_int_equal(layer.dims[0], 8);
  assert_int_equal(layer.dims[1], 2);
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "index 4", bpt_graph_layer_summary(m.graph, 4, &layer));
  const size_t needed = bpt_graph_summary_text(m.graph, NULL, 0);
  char *text = malloc(needed + 1);
  assert_int_equal(bpt_graph_summary_text(m.graph, text, needed + 1), needed);
  assert_non_null(strstr(text, "total: 23 trainable parameters, 0 buffer values"));
  free(text);
  small_destroy(&m);

  /* conv 2@3x3 (18 + 2), batch norm (2 + 2 trainable, 2 + 2 running statistics), global pool, fc 2->3 (6 + 3). */
  bpt_context *context = test_context(3);
  bpt_graph *graph = NULL;
  bpt_node *x, *y, *h, *logits, *loss;
  const int64_t image[3] = {1, 4, 4};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_input(graph, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(context, bpt_layer_conv2d(graph, "conv", x, 2, 3, 1, 1, 1, &h));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn", h, &h));
  assert_ok(context, bpt_global_avg_pool(graph, "pool", h, &h));
  assert_ok(context, bpt_layer_linear(graph, "fc", h, 3, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, y, &loss));
  summary.size = sizeof summary;
  assert_ok(context, bpt_graph_summary(graph, &summary)); /* before compile: batch 1 */
  assert_int_equal(summary.batch, 1);
  assert_int_equal(summary.trainable_parameters, 20 + 4 + 9);
  assert_int_equal(summary.buffer_parameters, 4);
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  assert_ok(context, bpt_graph_summary(graph, &summary));
  assert_int_equal(summary.trainable_parameters, 33);
  assert_int_equal(summary.buffer_parameters, 4);
  assert_int_equal(bpt_graph_parameter_count(graph), 37);
  assert_ok(context, bpt_graph_layer_summary(graph, 1, &layer));
  assert_string_equal(layer.name, "bn");
  assert_int_equal(layer.trainable_parameters, 4);
  assert_int_equal(layer.buffer_parameters, 4);
  assert_int_equal(layer.activation_bytes, 2 * 2 * 4 * 4 * sizeof(float));
  /* The text shows each layer's op parameters by name (issue 24). */
  const size_t length = bpt_graph_summary_text(graph, NULL, 0);
  char *table = malloc(length + 1);
  bpt_graph_summary_text(graph, table, length + 1);
  assert_non_null(strstr(table, "stride_height=1, stride_width=1, padding_height=1, padding_width=1"));
  assert_non_null(strstr(table, "momentum=0.1, epsilon=1e-05, folded=false"));
  free(table);
  bpt_graph_destroy(graph);

  /* A weight read by two layers counts once, at its first reader. */
  bpt_node *shared;
  const int64_t features = 4, square[2] = {4, 4};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_parameter(graph, "shared", 2, square, BPT_INIT_HE_UNIFORM, &shared));
  assert_ok(context, bpt_linear(graph, "first", x, shared, NULL, &h));
  assert_ok(context, bpt_linear(graph, "second", h, shared, NULL, &h));
  summary.size = sizeof summary;
  assert_ok(context, bpt_graph_summary(graph, &summary));
  assert_int_equal(summary.trainable_parameters, 16);
  assert_ok(context, bpt_graph_layer_summary(graph, 1, &layer));
  assert_string_equal(layer.name, "second");
  assert_int_equal(layer.trainable_parameters, 0);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void roles_are_named_or_found(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_dataset *dataset = make_dataset(context, "roles", known_pixels, 6, 3, known_labels);
  bpt_graph *graph = identity_classifier(context, 4);
  bpt_eval_options options = bpt_eval_options_default();
  bpt_eval_result result = {.size = sizeof result};
  options.roles.data_input = "pixels";
  options.roles.labels_input = "classes";
  options.roles.logits = "scores";
  assert_ok(context, bpt_evaluate(graph, dataset, &options, &result));
  assert_float_equal(result.accuracy, 0.5, 1e-12);
  options.roles.data_input = "missing";
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "no node 'missing' (named as the data input)",
               bpt_evaluate(graph, dataset, &options, &result));
  options.roles.data_input = NULL;
  options.roles.logits = "loss";
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "logits 'loss' must be f32 (batch, classes)",
               bpt_evaluate(graph, dataset, &options, &result));
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(dataset);
  bpt_context_destroy(context);
}

/* ---- Non-finite results (issue 30, class 3) ---------------------------------------------------------- */

/* NaN logits compare false with everything, so every label used to rank first: accuracy 1, top-k 1. */
static void nan_logits_score_nothing(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_dataset *dataset = make_dataset(context, "known", known_pixels, 6, 3, known_labels);
  bpt_graph *graph = identity_classifier(context, 4);
  float weights[9];
  for (int i = 0; i < 9; i++)
    weights[i] = NAN;
  assert_ok(context, bpt_graph_write_parameters(graph, weights, 9));
  bpt_eval_options options = bpt_eval_options_default();
  options.top_k = 2;
  bpt_eval_result result = {.size = sizeof result};
  assert_ok(context, bpt_evaluate(graph, dataset, &options, &result));
  assert_int_equal(result.samples, 6);
  assert_true(isnan(result.loss));
  assert_float_equal(result.accuracy, 0.0, 0.0);
  assert_float_equal(result.top_k_accuracy, 0.0, 0.0);
  weights[4] = INFINITY; /* inf beside NaN, and inf alone in a row: neither is a prediction */
  assert_ok(context, bpt_graph_write_parameters(graph, weights, 9));
  assert_ok(context, bpt_evaluate(graph, dataset, &options, &result));
  assert_float_equal(result.accuracy, 0.0, 0.0);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(dataset);
  bpt_context_destroy(context);
}

typedef struct poison {
  bpt_graph *graph;
  int64_t at_epoch;
  float epoch_parameters[23]; /* the parameters at the end of epoch at_epoch, before the poison */
} poison;

/* After epoch at_epoch (whose parameters early stopping has already seen) every parameter becomes NaN. */
static int poison_parameters(void *data, const bpt_train_epoch *epoch) {
  poison *p = data;
  if (epoch->epoch != p->at_epoch) return 0;
  bpt_graph_read_parameters(p->graph, p->epoch_parameters, 23);
  float nan_values[23];
  for (int i = 0; i < 23; i++)
    nan_values[i] = NAN;
  bpt_graph_write_parameters(p->graph, nan_values, 23);
  return 0;
}

/* A validation hook whose accuracy rises every epoch, whatever the parameters hold. */
static bpt_status rising_accuracy(void *data, bpt_graph *graph, bpt_train_epoch *epoch) {
  (void)data;
  (void)graph;
  epoch->validation_accuracy = 0.1 * (double)epoch->epoch;
  return BPT_OK;
}

/* With the parameter check off, a diverged model trains on. Its epochs are never the best: not by their
 * (NaN-logit) validation accuracy, and not when a validation hook reports a finite, better metric while the
 * parameters are non-finite; restore_best writes back the last finite best. */
static void diverged_epochs_are_never_best(void **state) {
  (void)state;
  small_model m = small_mlp(0.001f, 8);
  assert_ok(m.context, bpt_graph_set_parameter_check(m.graph, 0));
  poison p = {.graph = m.graph, .at_epoch = 1};
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 3;
  options.validation = m.validation;
  options.monitor = BPT_TRAIN_MONITOR_VALIDATION_ACCURACY;
  options.restore_best = 1;
  options.epoch_end = poison_parameters;
  options.epoch_data = &p;
  bpt_train_result result = {.size = sizeof result};
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.epochs, 3);
  assert_float_equal(result.last.validation_accuracy, 0.0, 0.0);
  assert_int_equal(result.best_epoch, 1);
  assert_true(result.best_metric < 1.0);
  float restored[23];
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, restored, 23));
  assert_memory_equal(restored, p.epoch_parameters, sizeof restored);

  /* The momentum kept NaN: a fresh model for the hook's case. */
  small_destroy(&m);
  m = small_mlp(0.001f, 8);
  assert_ok(m.context, bpt_graph_set_parameter_check(m.graph, 0));
  p.graph = m.graph;
  options.validation = NULL;
  options.validate = rising_accuracy;
  assert_ok(m.context, bpt_train(m.graph, m.optimizer, m.train, &options, &result));
  assert_int_equal(result.best_epoch, 1);
  assert_float_equal(result.best_metric, 0.1, 1e-12);
  assert_ok(m.context, bpt_graph_read_parameters(m.graph, restored, 23));
  for (int i = 0; i < 23; i++)
    assert_true(isfinite(restored[i]));
  assert_memory_equal(restored, p.epoch_parameters, sizeof restored);
  small_destroy(&m);
}

/* bpt_train(graph A, the optimiser of graph B) stepped B on its stale gradients and left A untouched
 * (issue 30, class 5): refused before anything trains. */
static void foreign_optimizer_is_refused(void **state) {
  (void)state;
  small_model a = small_mlp(0.2f, 8), b = small_mlp(0.2f, 8);
  float before[23], after[23];
  assert_ok(b.context, bpt_graph_read_parameters(b.graph, before, 23));
  bpt_train_options options = bpt_train_options_default();
  options.epochs = 1;
  assert_fails(a.context, BPT_ERR_INVALID_ARGUMENT, "bpt_train: the optimizer belongs to another graph",
               bpt_train(a.graph, b.optimizer, a.train, &options, NULL));
  assert_int_equal(bpt_optimizer_step_count(b.optimizer), 0);
  assert_ok(b.context, bpt_graph_read_parameters(b.graph, after, 23));
  assert_memory_equal(before, after, sizeof before);
  small_destroy(&b);
  small_destroy(&a);
}

/* ---- Callbacks' failures reach the caller (issue 30, class 13) ------------------------------------------ */

typedef struct failing_callback {
  bpt_context *context;
  int mode; /* 0: return BPT_ERR_IO with no message; 1: a library call fails inside; 2: return 12345 */
} failing_callback;

static bpt_status failing_prepare(void *data, bpt_tensor *samples, bpt_tensor *labels) {
  (void)samples;
  (void)labels;
  failing_callback *f = data;
  if (f->mode == 1) {
    bpt_tensor *tensor = NULL;
    const int64_t dims[1] = {-3};
    return bpt_tensor_create(f->context, BPT_DTYPE_F32, 1, dims, &tensor);
  }
  return f->mode == 0 ? BPT_ERR_IO : (bpt_status)12345;
}

static bpt_status failing_validate(void *data, bpt_graph *graph, bpt_train_epoch *epoch) {
  (void)graph;
  (void)epoch;
  (void)data;
  return BPT_ERR_NUMERIC;
}

static void callback_failures_reach_the_caller(void **state) {
  (void)state;
  small_model m = small_mlp(0.2f, 8);
  failing_callback f = {.context = m.context};
  bpt_train_options options = bpt_train_options_default();
  options.prepare_batch = failing_prepare;
  options.prepare_batch_data = &f;
  /* An older, unrelated message and status are on the context first. */
  assert_int_equal(bpt_graph_set_training(NULL, 1), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(bpt_optimizer_set_learning_rate(m.optimizer, -1.0f), BPT_ERR_INVALID_ARGUMENT);
  assert_fails(m.context, BPT_ERR_IO, "bpt_train: the prepare_batch callback returned 3 (input/output error) at epoch 1",
               bpt_train(m.graph, m.optimizer, m.train, &options, NULL));
  assert_int_equal(bpt_context_last_status(m.context), BPT_ERR_IO);
  f.mode = 1;
  const bpt_status own = bpt_train(m.graph, m.optimizer, m.train, &options, NULL);
  assert_int_equal(own, BPT_ERR_SHAPE);
  assert_int_equal(bpt_context_last_status(m.context), BPT_ERR_SHAPE);
  const char *message = bpt_context_last_error(m.context);
  if (!strstr(message, "bpt_train: the prepare_batch callback failed at epoch 1, batch 1: bpt_tensor_create"))
    fail_msg("message: %s", message);
  f.mode = 2;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "the prepare_batch callback returned 12345 at epoch 1, batch 1",
               bpt_train(m.graph, m.optimizer, m.train, &options, NULL));
  assert_int_equal(bpt_context_last_status(m.context), BPT_ERR_INVALID_ARGUMENT);
  options.prepare_batch = NULL;
  options.validate = failing_validate;
  options.monitor = BPT_TRAIN_MONITOR_VALIDATION_LOSS;
  assert_fails(m.context, BPT_ERR_NUMERIC, "the validate callback returned 9 (non-finite value) at epoch 1",
               bpt_train(m.graph, m.optimizer, m.train, &options, NULL));
  assert_int_equal(bpt_context_last_status(m.context), BPT_ERR_NUMERIC);
  small_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(evaluation_matches_hand_counts),
      cmocka_unit_test(seeded_epochs_repeat_exactly),
      cmocka_unit_test(early_stopping_after_patience),
      cmocka_unit_test(progress_callback_stops_training),
      cmocka_unit_test(unfit_data_fails_before_training),
      cmocka_unit_test(metrics_csv_rows),
      cmocka_unit_test(summary_counts_match_hand_counts),
      cmocka_unit_test(roles_are_named_or_found),
      cmocka_unit_test(nan_logits_score_nothing),
      cmocka_unit_test(diverged_epochs_are_never_best),
      cmocka_unit_test(foreign_optimizer_is_refused),
      cmocka_unit_test(callback_failures_reach_the_caller),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
