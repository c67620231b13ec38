/* Shared helpers for the examples: option parsing, a progress bar, timing, evaluation and error exits.
 * Not part of the library: examples show the public API, these keep them short. */
#ifndef BPT_EXAMPLE_UTIL_H
#define BPT_EXAMPLE_UTIL_H

#include <stdbool.h>
#include <stdio.h>

#include "bptrain.h"

/* Prints the context's last error with the failing expression and exits(1): examples stop at the first error. */
#define EXAMPLE_CHECK(context, expression)                                                                  \
  do {                                                                                                      \
    bpt_status example_status_ = (expression);                                                              \
    if (example_status_ != BPT_OK) example_fail((context), example_status_, #expression, __FILE__, __LINE__); \
  } while (0)

void example_fail(const bpt_context *context, bpt_status status, const char *expression, const char *file, int line);

/* Looks for "--name value" in argv; returns the value or NULL. "--name" alone makes example_flag true. */
const char *example_option(int argc, char **argv, const char *name);
bool example_flag(int argc, char **argv, const char *name);
long example_option_long(int argc, char **argv, const char *name, long fallback);
double example_option_double(int argc, char **argv, const char *name, double fallback);
/* Fails with a message naming any argument not in the NULL-terminated lists of valued and plain flags. */
void example_check_arguments(int argc, char **argv, const char *const *valued, const char *const *flags,
                             const char *usage);

/* The class count for a classifier over train and test: --classes N when given, else fallback (0: one more than
 * the largest training label), checked against both label sets by bpt_dataset_check_classes(), so a corrupt
 * label ends the run with a message naming the label file instead of silently growing the model. */
#define EXAMPLE_CLASSES_USAGE "  --classes N  the number of classes (default: from the training labels, checked)\n"
int64_t example_class_count(int argc, char **argv, bpt_context *context, const bpt_dataset *train,
                            const bpt_dataset *test, int fallback);

/* --onnx FILE: writes graph's inference computation to FILE as ONNX (bpt_graph_export_onnx), with the data set's
 * normalisation (mean, std as given to bpt_dataset_set_normalization) inside, so the model takes pixels in [0, 1].
 * Does nothing without the option. */
#define EXAMPLE_ONNX_USAGE "  --onnx FILE  export the model to FILE as ONNX (input: pixels in [0, 1]; docs/onnx.md)\n"
void example_export_onnx(int argc, char **argv, bpt_context *context, bpt_graph *graph, float mean, float std);

double example_seconds(void);

/* Prints "compute: ..." (bpt_cpu_compute_info's summary: BLAS, kernel and who chose it, self-check, bf16 GEMMs,
 * CPU) when the context runs on the CPU. */
void example_print_compute_info(const bpt_context *context);

/* A one-line progress bar on stderr: "epoch 1/5 [=====>    ] 30000/60000  41234 samples/s  loss 0.4312". */
typedef struct example_progress {
  const char *label;
  long total, done;
  double start, last_draw;
  bool interactive;
} example_progress;
void example_progress_start(example_progress *progress, const char *label, long total);
void example_progress_update(example_progress *progress, long done, double running_loss);
void example_progress_finish(example_progress *progress, double running_loss);

/* The examples' MLP classifier: inputs "images" (features f32) and "labels" (i32), ReLU layers of the given
 * widths ("fc1", "relu1", ...; He-uniform weights), a last linear layer to the classes and a softmax
 * cross-entropy "loss". examples/mnist_mlp.c spells the same graph out call by call. */
typedef struct example_classifier {
  bpt_node *images, *labels, *logits, *loss;
} example_classifier;
bpt_status example_build_mlp(bpt_graph *graph, int64_t features, const int64_t *widths, int width_count,
                             int64_t classes, example_classifier *out);

/* One epoch of forward, backward and optimiser step over every batch of train in its current order, with a
 * progress bar named label; *running_loss ends as the smoothed training loss. examples/mnist_mlp.c spells
 * the same loop out. x (f32) and y (i32) are batch tensors with room for batch samples. */
bpt_status example_train_epoch(bpt_graph *graph, bpt_optimizer *optimizer, bpt_node *images, bpt_node *labels,
                               bpt_dataset *train, long batch, bpt_tensor *x, bpt_tensor *y, const char *label,
                               double *running_loss);

/* Runs the graph forward over a data set and returns the fraction of argmax(logits) equal to the label. */
bpt_status example_accuracy(bpt_context *context, bpt_graph *graph, bpt_node *images_input, bpt_node *labels_input,
                            bpt_node *logits, bpt_dataset *dataset, long batch, double *accuracy, double *mean_loss);

#endif
