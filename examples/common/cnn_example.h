/* What the convolutional examples (mnist_cnn, resnet) share: bpt_train() with the progress bar, optional
 * augmentation and --grad-stats, evaluation in eval mode, and --save / --eval of a checkpoint.
 * Header-only (static functions) so the examples build without a change to the build files. --eval loads
 * the parameters only (matched by name and shape) into the training graph the example built. */
#ifndef BPT_CNN_EXAMPLE_H
#define BPT_CNN_EXAMPLE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "example_util.h"

typedef struct cnn_example {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *images, *labels, *logits;
  bpt_dataset *train, *test;
  int64_t classes; /* checked against both label sets (example_class_count) */
  long batch;
  bool augment;    /* random horizontal flips and shifts of up to 2 pixels */
  bool grad_stats; /* print gradient norms and activation statistics */
  float clip_norm; /* 0: no clipping */
  uint64_t seed;   /* epoch e shuffles with seed + e */
  uint64_t augment_state;
  example_progress bar;
} cnn_example;

/* --save: a checkpoint of the parameters and registered buffers (docs/checkpoints.md), the one model file that
 * every example, the C API and the Python binding read. */
static void cnn_example_save(const cnn_example *e, const char *path) {
  EXAMPLE_CHECK(e->context, bpt_checkpoint_save(e->graph, path, NULL));
  printf("saved a checkpoint of %lld parameter values (batch-norm running statistics included) to %s\n",
         (long long)bpt_graph_parameter_count(e->graph), path);
}

/* Whether path starts with the magic of a parameter file from before checkpoints (BPTPARAM, BPTPARM1). */
static bool cnn_example_is_old_parameter_file(const char *path) {
  char magic[8] = {0};
  FILE *file = fopen(path, "rb");
  bool old = file && fread(magic, 1, 8, file) == 8 &&
             (memcmp(magic, "BPTPARAM", 8) == 0 || memcmp(magic, "BPTPARM1", 8) == 0);
  if (file) fclose(file);
  return old;
}

/* --eval: the parameters of a checkpoint, matched by name and shape; a file of another model fails naming the
 * first parameter that differs. An old BPTPARAM file (this example's --save before checkpoints) loads by
 * position when the value count agrees, with a note, since nothing in it can be checked. */
static void cnn_example_load(const cnn_example *e, const char *path) {
  bpt_checkpoint_load_options options = bpt_checkpoint_load_options_default();
  if (cnn_example_is_old_parameter_file(path)) {
    options.strict = 0;
    EXAMPLE_CHECK(e->context, bpt_checkpoint_load_with_options(e->graph, path, NULL, &options, NULL));
    printf("note: %s is an old parameter file (no names or shapes): its %lld values were loaded by position; "
           "train again with --save for a checkpoint\n",
           path, (long long)bpt_graph_parameter_count(e->graph));
    return;
  }
  EXAMPLE_CHECK(e->context, bpt_checkpoint_load_with_options(e->graph, path, NULL, &options, NULL));
}

/* Flips half the images left-right and shifts each by up to 2 pixels (zero fill), in place. */
static void cnn_example_augment(bpt_tensor *images, uint64_t *state) {
  const int64_t n = bpt_tensor_dim(images, 0), h = bpt_tensor_dim(images, 1), w = bpt_tensor_dim(images, 2);
  float *data = bpt_tensor_data(images);
  float scratch[64 * 64];
  if (h * w > 64 * 64) return;
  for (int64_t s = 0; s < n; s++) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t r = *state >> 33;
    const bool flip = r & 1;
    const int64_t dy = (int64_t)((r >> 1) % 5) - 2, dx = (int64_t)((r >> 4) % 5) - 2;
    float *image = data + s * h * w;
    float background = image[0];
    memcpy(scratch, image, (size_t)(h * w) * sizeof *image);
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w; x++) {
        int64_t sy = y + dy, sx = flip ? w - 1 - (x + dx) : x + dx;
        image[y * w + x] = sy >= 0 && sy < h && sx >= 0 && sx < w ? scratch[sy * w + sx] : background;
      }
  }
}

/* Per-parameter gradient norms and, for every ReLU and pooling output, mean and fraction of zeros. */
static void cnn_example_print_statistics(const cnn_example *e, long step) {
  printf("grad-stats at step %ld\n", step);
  for (int i = 0; i < bpt_graph_parameter_node_count(e->graph); i++) {
    bpt_node *parameter = bpt_graph_parameter_node(e->graph, i);
    if (!bpt_node_is_trainable(parameter)) continue;
    float norm;
    EXAMPLE_CHECK(e->context, bpt_graph_gradient_norm(e->graph, parameter, &norm));
    printf("  grad  %-28s |g| %.3e\n", bpt_node_name(parameter), (double)norm);
  }
  for (int i = 0; i < bpt_graph_node_count(e->graph); i++) {
    bpt_node *node = bpt_graph_node(e->graph, i);
    const char *op = bpt_node_op_name(node);
    /* ReLU outputs (alone or fused: batch_norm_relu, add_relu) show dead units. */
    const size_t length = strlen(op);
    const bool relu_output = length >= 4 && strcmp(op + length - 4, "relu") == 0;
    if (!relu_output && strcmp(op, "global_avg_pool") != 0) continue;
    bpt_value_statistics s = {.size = sizeof s};
    /* A value that backward never reads shares its memory after forward and cannot be inspected. */
    const bpt_status status = bpt_graph_value_statistics(e->graph, node, &s);
    if (status == BPT_ERR_STATE) continue;
    EXAMPLE_CHECK(e->context, status);
    printf("  act   %-28s mean %.4f  std %.4f  zeros %.1f%%\n", bpt_node_name(node), s.mean, s.standard_deviation,
           100.0 * s.zero_fraction);
  }
  fflush(stdout);
}

/* bpt_train()'s hooks for the CNN examples: augmentation of each filled batch, --grad-stats before the first
 * step and each epoch's last, and the progress bar, which also restarts the augmentation stream per epoch. */
static bpt_status cnn_example_prepare_batch(void *data, bpt_tensor *samples, bpt_tensor *labels) {
  cnn_example *e = data;
  (void)labels;
  if (e->augment) cnn_example_augment(samples, &e->augment_state);
  return BPT_OK;
}

static bpt_status cnn_example_before_step(void *data, bpt_graph *graph, const bpt_train_progress *progress) {
  cnn_example *e = data;
  (void)graph;
  if (progress->step == 0 || progress->batch == progress->batches) {
    if (e->bar.interactive) fprintf(stderr, "\n");
    cnn_example_print_statistics(e, (long)progress->step);
  }
  return BPT_OK;
}

static int cnn_example_progress(void *data, const bpt_train_progress *progress) {
  cnn_example *e = data;
  if (progress->batch == progress->batches) e->augment_state = e->seed * 7919 + (uint64_t)progress->epoch + 1;
  return example_progress_callback(&e->bar, progress);
}

/* Trains for epochs epochs with the test set as validation, printing a line per epoch (with the learning rate
 * when print_rate) and writing the --metrics rows to metrics (NULL: none). */
static bpt_train_result cnn_example_fit(cnn_example *e, bpt_optimizer *optimizer, long epochs, FILE *metrics,
                                        bool print_rate) {
  bpt_train_options options = example_train_options(epochs, e->seed, e->test, &e->bar, metrics);
  options.batch_size = e->batch;
  options.clip_norm = e->clip_norm;
  options.progress = cnn_example_progress;
  options.progress_data = e;
  if (print_rate) options.epoch_end = example_print_epoch_with_rate;
  if (e->augment) {
    options.prepare_batch = cnn_example_prepare_batch;
    options.prepare_batch_data = e;
  }
  if (e->grad_stats) {
    options.before_step = cnn_example_before_step;
    options.before_step_data = e;
  }
  e->augment_state = e->seed * 7919 + 1;
  bpt_train_result result = {.size = sizeof result};
  EXAMPLE_CHECK(e->context, bpt_train(e->graph, optimizer, e->train, &options, &result));
  return result;
}

/* Test accuracy in evaluation mode (batch norm on running statistics, no dropout). */
static double cnn_example_test_accuracy(cnn_example *e, double *test_loss) {
  bpt_eval_options options = bpt_eval_options_default();
  options.batch_size = e->batch;
  bpt_eval_result result = {.size = sizeof result};
  EXAMPLE_CHECK(e->context, bpt_evaluate(e->graph, e->test, &options, &result));
  *test_loss = result.loss;
  return result.accuracy;
}

#endif
