/* Shared helpers for the examples: option parsing, the banner, a progress bar for bpt_train(), timing and error exits.
 * Not part of the library: examples show the public API, these keep them short. */
#ifndef BPT_EXAMPLE_UTIL_H
#define BPT_EXAMPLE_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bptrain.h"
#include "example_metrics.h"

/* The valued options every example takes, for its list given to example_check_arguments(), and their usage
 * lines. An option all examples gain is one line in each of these two. */
#define EXAMPLE_OPTIONS EXAMPLE_METRICS_OPTIONS
#define EXAMPLE_USAGE EXAMPLE_METRICS_USAGE

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
/* bpt_precision_options.store_activations_16bit from --store-16bit (1) or --store-f32 (0), else the library's
 * default (-1: 16-bit storage on the CPU backend). */
int example_store_16bit(int argc, char **argv);
/* The number after name; a value that is not a number, or out of range (of long, or of int for
 * example_option_int), ends the run with a message naming the option. */
long example_option_long(int argc, char **argv, const char *name, long fallback);
int example_option_int(int argc, char **argv, const char *name, int fallback);
double example_option_double(int argc, char **argv, const char *name, double fallback);
/* Fails with a message naming any argument not in the NULL-terminated lists of valued and plain flags, a valued
 * option given twice, or an output file (--save, --onnx, --checkpoint, --metrics, --plot, --profile) that cannot
 * be created (example_output.h), so that no run ends in an error after its training. */
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
  const char *prefix; /* example_progress_callback without a label: "<prefix>epoch E/N" */
  long total, done;
  double start, last_draw;
  bool interactive;
  /* Set by example_progress_callback: the library's seconds since the epoch began (before its first batch),
   * used instead of this bar's own clock, which would start only after that batch. */
  bool library_clock;
  double library_seconds;
} example_progress;
void example_progress_start(example_progress *progress, const char *label, long total);
void example_progress_update(example_progress *progress, long done, double running_loss);
void example_progress_finish(example_progress *progress, double running_loss);

/* Warns on stderr when an epoch of @p samples training samples is @p batches == 1 batch: one optimiser step
 * per epoch trains far less than the epoch count suggests. Returns whether it warned; callers warn once a run. */
bool example_warn_whole_batch(long batches, long samples);

/* The examples' MLP classifier: inputs "images" (features f32) and "labels" (i32), ReLU layers of the given
 * widths ("fc1", "relu1", ...; He-uniform weights), a last linear layer to the classes and a softmax
 * cross-entropy "loss". examples/mnist_mlp.c spells the same graph out call by call. */
typedef struct example_classifier {
  bpt_node *images, *labels, *logits, *loss;
} example_classifier;
bpt_status example_build_mlp(bpt_graph *graph, int64_t features, const int64_t *widths, int width_count,
                             int64_t classes, example_classifier *out);

/* LeNet-5 for (N, 1, 28, 28) images: conv 6@5x5 (padding 2), ReLU, max pool 2, conv 16@5x5, ReLU, max pool 2,
 * flatten, linear 120, ReLU, linear 84, ReLU, linear classes, its nodes named "lenet.*". */
bpt_status example_build_lenet(bpt_graph *graph, bpt_node *images, int64_t classes, bpt_node **logits);

/* The lines every example prints first: "libbptrain 0.1.0, backend cpu, 2 threads: " and the formatted rest,
 * then example_print_compute_info()'s "compute:" line. */
void example_banner(const bpt_context *context, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* bpt_train()'s progress callback drawing the bar above: data is an example_progress, whose label is NULL
 * ("<prefix>epoch E/N" from the progress) or the caller's. It starts a fresh bar at each epoch's first batch. */
int example_progress_callback(void *data, const bpt_train_progress *progress);

/* bpt_train()'s epoch callbacks printing "epoch E: test accuracy A%, test loss L, S s elapsed" (the second one
 * adds ", learning rate R" before the time); data is unused. */
int example_print_epoch(void *data, const bpt_train_epoch *epoch);
int example_print_epoch_with_rate(void *data, const bpt_train_epoch *epoch);

/* The graph's parameters in declaration order, in memory the caller frees; *count receives how many. Ends the
 * run with a message on failure, as EXAMPLE_CHECK does. */
float *example_read_parameters(bpt_context *context, bpt_graph *graph, int64_t *count);
/* FNV-1a over the parameters' bytes: equal checksums mean bit-identical weights (the resume checks). */
uint64_t example_parameter_checksum(bpt_context *context, bpt_graph *graph);

/* Prints the graph's model summary (bpt_graph_summary_text) to stdout. */
void example_print_summary(const bpt_graph *graph);

/* bpt_train() options as the examples use them: epochs, shuffled with seed + epoch, validated on test in eval
 * mode, the progress bar *bar, example_print_epoch, and the --metrics CSV when metrics is non-NULL. */
bpt_train_options example_train_options(long epochs, uint64_t seed, bpt_dataset *test, example_progress *bar,
                                        FILE *metrics);

#endif
