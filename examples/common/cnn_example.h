/* What the convolutional examples (mnist_cnn, resnet) share: the training loop with progress bar, schedule,
 * optional augmentation and --grad-stats, evaluation in eval mode, and --save / --eval of a checkpoint.
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
    bpt_value_statistics s;
    /* A value that backward never reads shares its memory after forward and cannot be inspected. */
    if (bpt_graph_value_statistics(e->graph, node, &s) == BPT_ERR_STATE) continue;
    printf("  act   %-28s mean %.4f  std %.4f  zeros %.1f%%\n", bpt_node_name(node), s.mean, s.standard_deviation,
           100.0 * s.zero_fraction);
  }
  fflush(stdout);
}

/* One epoch of training; returns the running loss. */
static double cnn_example_train_epoch(cnn_example *e, bpt_optimizer *optimizer, long epoch, long epochs,
                                      bpt_tensor *batch_images, bpt_tensor *batch_labels, uint64_t seed) {
  EXAMPLE_CHECK(e->context, bpt_graph_set_training(e->graph, 1));
  EXAMPLE_CHECK(e->context, bpt_dataset_shuffle(e->train, seed + (uint64_t)epoch));
  char label[64];
  snprintf(label, sizeof label, "epoch %ld/%ld", epoch, epochs);
  example_progress progress;
  const int64_t batches = bpt_dataset_batch_count(e->train, e->batch);
  example_progress_start(&progress, label, (long)bpt_dataset_size(e->train));
  double running_loss = 0.0;
  long seen = 0;
  uint64_t augment_state = seed * 7919 + (uint64_t)epoch;
  for (int64_t b = 0; b < batches; b++) {
    EXAMPLE_CHECK(e->context, bpt_dataset_batch(e->train, b, e->batch, batch_images, batch_labels));
    if (e->augment) cnn_example_augment(batch_images, &augment_state);
    EXAMPLE_CHECK(e->context, bpt_graph_set_input(e->graph, e->images, batch_images));
    EXAMPLE_CHECK(e->context, bpt_graph_set_input(e->graph, e->labels, batch_labels));
    EXAMPLE_CHECK(e->context, bpt_graph_forward(e->graph));
    EXAMPLE_CHECK(e->context, bpt_graph_backward(e->graph));
    if (e->clip_norm > 0.0f) EXAMPLE_CHECK(e->context, bpt_graph_clip_gradient_norm(e->graph, e->clip_norm, NULL));
    const long step = (long)bpt_optimizer_step_count(optimizer);
    if (e->grad_stats && (step == 0 || b == batches - 1)) {
      if (progress.interactive) fprintf(stderr, "\n");
      cnn_example_print_statistics(e, step);
    }
    EXAMPLE_CHECK(e->context, bpt_optimizer_step(optimizer));
    float batch_loss;
    EXAMPLE_CHECK(e->context, bpt_graph_loss(e->graph, &batch_loss));
    running_loss = b == 0 ? batch_loss : 0.98 * running_loss + 0.02 * batch_loss;
    seen += (long)bpt_tensor_dim(batch_images, 0);
    example_progress_update(&progress, seen, running_loss);
  }
  example_progress_finish(&progress, running_loss);
  return running_loss;
}

/* Test accuracy in evaluation mode (batch norm on running statistics, no dropout). */
static double cnn_example_test_accuracy(cnn_example *e, double *test_loss) {
  double accuracy = 0.0;
  EXAMPLE_CHECK(e->context, bpt_graph_set_training(e->graph, 0));
  EXAMPLE_CHECK(e->context, example_accuracy(e->context, e->graph, e->images, e->labels, e->logits, e->test, e->batch,
                                             &accuracy, test_loss));
  return accuracy;
}

#endif
