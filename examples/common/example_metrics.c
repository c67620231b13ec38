/* See example_metrics.h. The CSV format is shared with the Python binding (python/bptrain), so one plot
 * script and one reader serve both. */
#define _POSIX_C_SOURCE 200809L
#include "example_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct example_metrics {
  bpt_context *context;
  FILE *csv;
  char csv_path[1024];
  const char *plot_path, *profile_path;
  char title[128];
  long step;
  double start;
};

static double seconds_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static const char *option_value(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return NULL;
}

example_metrics *example_metrics_open(int argc, char **argv, bpt_context *context, const char *title) {
  const char *csv_path = option_value(argc, argv, "--metrics");
  const char *plot_path = option_value(argc, argv, "--plot");
  const char *profile_path = option_value(argc, argv, "--profile");
  if (!csv_path && !plot_path && !profile_path) return NULL;
  example_metrics *metrics = calloc(1, sizeof *metrics);
  if (!metrics) {
    fprintf(stderr, "error: out of memory\n");
    exit(1);
  }
  metrics->context = context;
  metrics->plot_path = plot_path;
  metrics->profile_path = profile_path;
  snprintf(metrics->title, sizeof metrics->title, "%s", title ? title : "training");
  metrics->start = seconds_now();
  /* A plot needs the numbers: without --metrics they go next to the PNG. */
  if (csv_path || plot_path) {
    if (csv_path)
      snprintf(metrics->csv_path, sizeof metrics->csv_path, "%s", csv_path);
    else
      snprintf(metrics->csv_path, sizeof metrics->csv_path, "%s.csv", plot_path);
    metrics->csv = fopen(metrics->csv_path, "w");
    if (!metrics->csv) {
      fprintf(stderr, "error: --metrics: cannot create '%s'\n", metrics->csv_path);
      exit(2);
    }
    bpt_train_write_metrics_header(metrics->csv);
  }
  if (profile_path && bpt_profiler_enable(context, 1) != BPT_OK) {
    fprintf(stderr, "error: --profile: %s\n", bpt_context_last_error(context));
    exit(1);
  }
  return metrics;
}

FILE *example_metrics_csv(const example_metrics *metrics) { return metrics ? metrics->csv : NULL; }

/* The rows are the library's (bpt_train writes the same ones), so loops of their own and bpt_train() agree. */
void example_metrics_step(example_metrics *metrics, long epoch, double loss, double learning_rate) {
  if (!metrics) return;
  metrics->step++;
  if (!metrics->csv) return;
  bpt_train_progress progress = {.size = sizeof progress, .epoch = epoch, .step = metrics->step, .loss = loss,
                                 .learning_rate = learning_rate};
  bpt_train_write_metrics_step(metrics->csv, &progress, seconds_now() - metrics->start);
}

void example_metrics_epoch(example_metrics *metrics, long epoch, double train_loss, double train_accuracy,
                           double test_loss, double test_accuracy, double learning_rate) {
  if (!metrics || !metrics->csv) return;
  (void)train_accuracy; /* the library's rows leave train_accuracy empty: no example measures it */
  bpt_train_epoch row = {.size = sizeof row, .epoch = epoch, .step = metrics->step, .train_loss = train_loss,
                         .validation_loss = test_loss, .validation_accuracy = test_accuracy,
                         .learning_rate = learning_rate, .seconds = seconds_now() - metrics->start};
  bpt_train_write_metrics_epoch(metrics->csv, &row);
}

/* Finds an executable in PATH (popen would only tell us through the shell's "not found"). */
static int find_program(const char *name, char *path, size_t size) {
  const char *search = getenv("PATH");
  while (search && *search) {
    size_t length = strcspn(search, ":");
    snprintf(path, size, "%.*s/%s", (int)length, search, name);
    if (length && access(path, X_OK) == 0) return 1;
    search += length + (search[length] == ':');
  }
  return 0;
}

/* gnuplot single-quoted strings escape a quote by doubling it. */
static void write_quoted(FILE *file, const char *text) {
  fputc('\'', file);
  for (; *text; text++) {
    if (*text == '\'') fputc('\'', file);
    fputc(*text, file);
  }
  fputc('\'', file);
}

/* Splits one CSV line in place into at most `capacity` fields; returns the field count. */
static int split_fields(char *line, char **fields, int capacity) {
  int count = 0;
  line[strcspn(line, "\r\n")] = 0;
  for (char *field = line; count < capacity;) {
    fields[count++] = field;
    char *comma = strchr(field, ',');
    if (!comma) break;
    *comma = 0;
    field = comma + 1;
  }
  return count;
}

/* The extent of the values one axis shows. */
typedef struct extent {
  double low, high;
  int any;
} extent;

/* Widens e to the field's value; returns 0 when the field holds no finite number (empty, "nan", "inf"). */
static int extend(extent *e, const char *field, double scale) {
  char *end;
  const double value = strtod(field, &end) * scale;
  if (end == field || !isfinite(value)) return 0;
  if (!e->any || value < e->low) e->low = value;
  if (!e->any || value > e->high) e->high = value;
  e->any = 1;
  return 1;
}

/* Sets an axis to its values' extent with 5% room on each side, so no point sits on the frame (the accuracy
 * axis clipped its top point), and a single value gets room of 10% of itself (one epoch made gnuplot warn
 * "empty x range"). An axis without values gets [0:1]. */
static void write_range(FILE *gnuplot, const char *axis, extent e) {
  double low = e.any ? e.low : 0.0, high = e.any ? e.high : 1.0;
  const double room = high > low ? 0.05 * (high - low) : low != 0.0 ? 0.1 * fabs(low) : 1.0;
  fprintf(gnuplot, "set %srange [%.9g:%.9g]\n", axis, low - room, high + room);
}

/* The three panels' axes: loss and learning rate against the step, accuracy (%) against the epoch. */
typedef struct plot_extents {
  extent step, loss, epoch, accuracy, rate;
  int rows;
  /* Which $epochs columns (1-based) hold a finite value: 3 train_loss ... 6 test_accuracy; and how many step
   * rows hold a finite loss and rate. A series without a finite point makes gnuplot warn. */
  int has[7];
  int batch_losses, rates;
} plot_extents;

/* Copies the CSV into two inline gnuplot data blocks, $steps (step loss learning_rate) and $epochs (epoch step
 * train_loss train_accuracy test_loss test_accuracy), so each curve is a plain series whose gaps
 * never break its line, and measures what each axis will show. */
static void write_data_blocks(FILE *gnuplot, FILE *csv, plot_extents *x) {
  char line[1024], *fields[9];
  memset(x, 0, sizeof *x);
  fprintf(gnuplot, "$steps << EOD\n");
  if (!fgets(line, sizeof line, csv)) {
    fprintf(gnuplot, "EOD\n$epochs << EOD\nEOD\n");
    return;
  }
  long position = ftell(csv);
  while (fgets(line, sizeof line, csv))
    if (split_fields(line, fields, 9) == 9 && strcmp(fields[0], "step") == 0 && (*fields[3] || *fields[7])) {
      fprintf(gnuplot, "%s %s %s\n", fields[2], *fields[3] ? fields[3] : "NaN", *fields[7] ? fields[7] : "NaN");
      extend(&x->step, fields[2], 1.0);
      x->batch_losses += extend(&x->loss, fields[3], 1.0);
      x->rates += extend(&x->rate, fields[7], 1.0);
      x->rows++;
    }
  fprintf(gnuplot, "EOD\n$epochs << EOD\n");
  fseek(csv, position, SEEK_SET);
  while (fgets(line, sizeof line, csv)) {
    if (split_fields(line, fields, 9) != 9 || strcmp(fields[0], "epoch") != 0) continue;
    for (int column = 1; column < 7; column++)
      fprintf(gnuplot, "%s%s", column > 1 ? " " : "", *fields[column] ? fields[column] : "NaN");
    fputc('\n', gnuplot);
    extend(&x->epoch, fields[1], 1.0);
    const int train_loss = extend(&x->loss, fields[3], 1.0), test_loss = extend(&x->loss, fields[5], 1.0);
    if (train_loss || test_loss) extend(&x->step, fields[2], 1.0);
    x->has[3] |= train_loss;
    x->has[5] |= test_loss;
    x->has[4] |= extend(&x->accuracy, fields[4], 100.0);
    x->has[6] |= extend(&x->accuracy, fields[6], 100.0);
    x->rows++;
  }
  fprintf(gnuplot, "EOD\n");
}

/* A step series is a line; a single point, which a line would not show, is drawn as one. */
static const char *step_style(int points) { return points > 1 ? "lines" : "points pt 7"; }

/* An empty panel says so instead of plotting nothing (which gnuplot warns about). */
static void write_empty_panel(FILE *gnuplot, const char *what) {
  fprintf(gnuplot, "set label 'no %s recorded' at graph 0.5, 0.5 center\nplot NaN notitle\n", what);
}

int example_plot_metrics(const char *csv_path, const char *png_path, const char *title) {
  char program[4096];
  const char *override = getenv("BPT_GNUPLOT");
  if (override) {
    snprintf(program, sizeof program, "%s", override);
  } else if (!find_program("gnuplot", program, sizeof program)) {
    snprintf(program, sizeof program, "gnuplot");
  }
  if (access(program, X_OK) != 0) {
    fprintf(stderr,
            "warning: --plot: gnuplot not found, so no %s was drawn. Install it (Debian: apt-get install gnuplot-nox)"
            " or plot %s with any CSV tool.\n",
            png_path, csv_path);
    return 1;
  }
  FILE *csv = fopen(csv_path, "r");
  if (!csv) {
    fprintf(stderr, "warning: --plot: cannot read %s\n", csv_path);
    return 1;
  }
  char command[4200];
  snprintf(command, sizeof command, "'%s'", program);
  FILE *gnuplot = popen(command, "w");
  if (!gnuplot) {
    fclose(csv);
    fprintf(stderr, "warning: --plot: cannot run %s\n", program);
    return 1;
  }
  plot_extents x;
  write_data_blocks(gnuplot, csv, &x);
  fclose(csv);
  fprintf(gnuplot, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1400,420 noenhanced }"
                   " else { set terminal png size 1400,420 noenhanced }\n");
  fprintf(gnuplot, "set output ");
  write_quoted(gnuplot, png_path);
  fprintf(gnuplot, "\nset multiplot layout 1,3 title ");
  write_quoted(gnuplot, title);
  fprintf(gnuplot, "\nset grid\nset key top right\nset xlabel 'step'\nset ylabel 'loss'\n");
  write_range(gnuplot, "x", x.step);
  write_range(gnuplot, "y", x.loss);
  if (x.loss.any) {
    /* Only series with a point: gnuplot warns about one without. */
    const char *separator = "plot ";
    if (x.batch_losses) {
      fprintf(gnuplot, "%s$steps using 1:2 with %s lc rgb '#9fb7df' title 'train (batch)'", separator,
              step_style(x.batch_losses));
      separator = ", ";
    }
    if (x.has[3]) {
      fprintf(gnuplot, "%s$epochs using 2:3 with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train (epoch)'",
              separator);
      separator = ", ";
    }
    if (x.has[5])
      fprintf(gnuplot, "%s$epochs using 2:5 with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'", separator);
    fprintf(gnuplot, "\n");
  } else {
    write_empty_panel(gnuplot, x.rows ? "loss" : "data");
  }
  fprintf(gnuplot, "unset label\nset xlabel 'epoch'\nset ylabel 'accuracy (%%)'\nset key bottom right\nset xtics 1\n");
  write_range(gnuplot, "x", x.epoch);
  write_range(gnuplot, "y", x.accuracy);
  if (x.has[6] || x.has[4]) {
    fprintf(gnuplot, "plot ");
    if (x.has[6])
      fprintf(gnuplot, "$epochs using 1:(100 * $6) with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'");
    if (x.has[6] && x.has[4]) fprintf(gnuplot, ", ");
    if (x.has[4])
      fprintf(gnuplot, "$epochs using 1:(100 * $4) with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train'");
    fprintf(gnuplot, "\n");
  } else {
    write_empty_panel(gnuplot, "accuracy");
  }
  fprintf(gnuplot,
          "unset label\nset xlabel 'step'\nset ylabel 'learning rate'\nset key top right\nset xtics autofreq\n");
  write_range(gnuplot, "x", x.step);
  write_range(gnuplot, "y", x.rate);
  if (x.rates)
    fprintf(gnuplot, "plot $steps using 1:3 with %s lw 2 lc rgb '#3f8f3f' title 'learning rate'\n",
            step_style(x.rates));
  else
    write_empty_panel(gnuplot, "learning rate");
  fprintf(gnuplot, "unset multiplot\n");
  int status = pclose(gnuplot);
  if (status != 0) {
    fprintf(stderr, "warning: --plot: gnuplot failed (status %d) drawing %s from %s\n", status, png_path, csv_path);
    return 1;
  }
  return 0;
}

/* Prints the profiled context's summary and writes its trace; returns 1 when the trace could not be written. */
static int report_profile(example_metrics *metrics) {
  size_t length = bpt_profiler_summary(metrics->context, NULL, 0);
  char *summary = malloc(length + 1);
  if (summary) {
    bpt_profiler_summary(metrics->context, summary, length + 1);
    fputs(summary, stdout);
    free(summary);
  }
  if (bpt_profiler_write_trace(metrics->context, metrics->profile_path) != BPT_OK) {
    fprintf(stderr, "error: --profile: %s\n", bpt_context_last_error(metrics->context));
    return 1;
  }
  printf("profile: Chrome trace in %s (open in chrome://tracing or https://ui.perfetto.dev)\n", metrics->profile_path);
  return 0;
}

void example_metrics_begin_run(example_metrics *metrics, bpt_context *context) {
  if (!metrics || !metrics->profile_path) return;
  metrics->context = context;
  if (bpt_profiler_enable(context, 1) != BPT_OK) {
    fprintf(stderr, "error: --profile: %s\n", bpt_context_last_error(context));
    exit(1);
  }
}

int example_metrics_end_run(example_metrics *metrics) {
  if (!metrics || !metrics->profile_path || !metrics->context) return 0;
  const int failed = report_profile(metrics);
  metrics->context = NULL;
  return failed;
}

int example_metrics_close(example_metrics *metrics) {
  if (!metrics) return 0;
  int failures = 0;
  if (metrics->csv && fclose(metrics->csv) != 0) {
    fprintf(stderr, "error: --metrics: writing '%s' failed\n", metrics->csv_path);
    failures++;
  }
  if (metrics->csv && metrics->plot_path) {
    if (example_plot_metrics(metrics->csv_path, metrics->plot_path, metrics->title) == 0)
      printf("plot: %s (data in %s)\n", metrics->plot_path, metrics->csv_path);
    else
      failures++;
  }
  if (metrics->profile_path && metrics->context) failures += report_profile(metrics);
  free(metrics);
  return failures ? 1 : 0;
}
