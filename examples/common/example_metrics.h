/* Seeing a training run from an example: --metrics FILE.csv (one row per step and per epoch), --plot FILE.png
 * (loss and accuracy curves drawn by gnuplot) and --profile FILE.json (the library's profiler: a summary
 * table on stdout and a Chrome trace). Usable from C and C++.
 *
 * Wiring an example that trains with bpt_train(): steps 1, 2 and 5 below, and
 * options.metrics = example_metrics_csv(metrics). Wiring a loop of its own:
 *   1. add EXAMPLE_METRICS_OPTIONS to its NULL-terminated list of valued options (example_check_arguments);
 *   2. after creating the context:  example_metrics *metrics = example_metrics_open(argc, argv, context, "title");
 *   3. after each optimiser step:    example_metrics_step(metrics, epoch, loss, learning_rate);
 *   4. after each epoch's evaluation: example_metrics_epoch(metrics, epoch, train_loss, train_accuracy,
 *                                                           test_loss, test_accuracy, learning_rate);
 *   5. before destroying the context: example_metrics_close(metrics);
 * Every call accepts a NULL handle (no option given), so the example needs no conditionals. Pass NAN
 * (math.h) for a value that is not known; it is left empty in the CSV. */
#ifndef BPT_EXAMPLE_METRICS_H
#define BPT_EXAMPLE_METRICS_H

#include "bptrain.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EXAMPLE_METRICS_OPTIONS "--metrics", "--plot", "--profile"
#define EXAMPLE_METRICS_USAGE                                                                                          \
  "  --metrics FILE.csv   write per-step and per-epoch metrics (kind,epoch,step,train_loss,train_accuracy,\n"          \
  "                       test_loss,test_accuracy,learning_rate,seconds)\n"                                            \
  "  --plot FILE.png      draw loss and accuracy curves with gnuplot (Debian: gnuplot-nox)\n"                          \
  "  --profile FILE.json  profile ops, optimiser and communication; print a summary, write a Chrome trace\n"

typedef struct example_metrics example_metrics;

/* Reads --metrics, --plot and --profile; returns NULL when none is given. Exits with a message when a file
 * cannot be created or the profiler cannot start. */
example_metrics *example_metrics_open(int argc, char **argv, bpt_context *context, const char *title);
/* The --metrics CSV (NULL without --metrics or --plot), to hand to bpt_train_options.metrics. */
FILE *example_metrics_csv(const example_metrics *metrics);
/* Records one optimiser step; the step number counts from 1 across epochs. */
void example_metrics_step(example_metrics *metrics, long epoch, double loss, double learning_rate);
/* Records the end of an epoch. */
void example_metrics_epoch(example_metrics *metrics, long epoch, double train_loss, double train_accuracy,
                           double test_loss, double test_accuracy, double learning_rate);
/* For an example whose runs each have a context of their own: with --profile, profile context from now on;
 * end_run prints its summary and writes the trace (a later run's overwrites it) before the context goes.
 * end_run returns 1 when the trace could not be written. */
void example_metrics_begin_run(example_metrics *metrics, bpt_context *context);
int example_metrics_end_run(example_metrics *metrics);
/* Closes the CSV, draws the plot, prints the profile summary and writes the trace; frees metrics.
 * Returns 0, or 1 when an output could not be produced (the message is already on stderr). */
int example_metrics_close(example_metrics *metrics);

/* Draws a metrics CSV into a PNG with gnuplot; returns 0 on success. BPT_GNUPLOT overrides the program. */
int example_plot_metrics(const char *csv_path, const char *png_path, const char *title);

#ifdef __cplusplus
}
#endif

#endif
