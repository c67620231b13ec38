/* See example_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "example_util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "example_output.h"

#define BPT_EXAMPLE_TRY(expression)        \
  do {                                      \
    bpt_status try_status_ = (expression);  \
    if (try_status_ != BPT_OK) return try_status_; \
  } while (0)

void example_fail(const bpt_context *context, bpt_status status, const char *expression, const char *file, int line) {
  fprintf(stderr, "\nerror: %s (%s)\n  in %s at %s:%d\n", bpt_context_last_error(context), bpt_status_string(status),
          expression, file, line);
  exit(1);
}

const char *example_option(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  return NULL;
}

bool example_flag(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return true;
  return false;
}

int example_store_16bit(int argc, char **argv) {
  if (example_flag(argc, argv, "--store-16bit")) return 1;
  return example_flag(argc, argv, "--store-f32") ? 0 : -1;
}

long example_option_long(int argc, char **argv, const char *name, long fallback) {
  const char *value = example_option(argc, argv, name);
  if (!value) return fallback;
  char *end;
  errno = 0;
  long parsed = strtol(value, &end, 10);
  if (*end || end == value) {
    fprintf(stderr, "error: %s expects an integer, got '%s'\n", name, value);
    exit(2);
  }
  if (errno == ERANGE) { /* strtol saturates: 1e30 epochs would run for ever as LONG_MAX */
    fprintf(stderr, "error: %s %s is out of range\n", name, value);
    exit(2);
  }
  return parsed;
}

int example_option_int(int argc, char **argv, const char *name, int fallback) {
  const long parsed = example_option_long(argc, argv, name, fallback);
  if (parsed < INT_MIN || parsed > INT_MAX) { /* a cast would wrap 4294967297 threads to 1 */
    fprintf(stderr, "error: %s %ld is out of range\n", name, parsed);
    exit(2);
  }
  return (int)parsed;
}

void example_export_onnx(int argc, char **argv, bpt_context *context, bpt_graph *graph, float mean, float std) {
  const char *path = example_option(argc, argv, "--onnx");
  if (!path) return;
  bpt_onnx_export_options options = bpt_onnx_export_options_default();
  options.input_mean = mean;
  options.input_std = std;
  EXAMPLE_CHECK(context, bpt_graph_export_onnx(graph, path, &options));
  printf("wrote ONNX model %s (opset %lld; input pixels in [0, 1])\n", path, (long long)options.opset);
}

int64_t example_class_count(int argc, char **argv, bpt_context *context, const bpt_dataset *train,
                            const bpt_dataset *test, int fallback) {
  const long requested = example_option_long(argc, argv, "--classes", fallback);
  if (requested < 0 || requested > 65536) {
    fprintf(stderr, "error: --classes must be in [1, 65536], got %ld\n", requested);
    exit(2);
  }
  int classes = 0;
  EXAMPLE_CHECK(context, bpt_dataset_check_classes(train, test, (int)requested, &classes));
  return classes;
}

double example_option_double(int argc, char **argv, const char *name, double fallback) {
  const char *value = example_option(argc, argv, name);
  if (!value) return fallback;
  char *end;
  errno = 0;
  double parsed = strtod(value, &end);
  if (*end || end == value) {
    fprintf(stderr, "error: %s expects a number, got '%s'\n", name, value);
    exit(2);
  }
  if (errno == ERANGE && isinf(parsed)) {
    fprintf(stderr, "error: %s %s is out of range\n", name, value);
    exit(2);
  }
  return parsed;
}

static bool listed(const char *argument, const char *const *names) {
  for (int i = 0; names && names[i]; i++)
    if (strcmp(argument, names[i]) == 0) return true;
  return false;
}

/* Whether option argv[i] appeared before i as an option (not as another option's value). */
static bool given_before(char **argv, int i, const char *const *valued) {
  for (int j = 1; j < i; j++) {
    if (strcmp(argv[j], argv[i]) == 0) return true;
    if (listed(argv[j], valued)) j++;
  }
  return false;
}

/* Levenshtein distance of two short option names, capped: "did you mean" needs only small ones. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t above = row[j];
      size_t best = diagonal + (a[i - 1] != b[j - 1]);
      if (above + 1 < best) best = above + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  return row[lb];
}

/* The known option nearest to @p argument (at most 2 edits), or NULL. */
static const char *nearest_option(const char *argument, const char *const *valued, const char *const *flags) {
  const char *best = NULL;
  size_t best_distance = 3;
  const char *const *lists[2] = {valued, flags};
  for (int l = 0; l < 2; l++)
    for (int i = 0; lists[l] && lists[l][i]; i++) {
      size_t distance = edit_distance(argument, lists[l][i]);
      if (distance < best_distance) best = lists[l][i], best_distance = distance;
    }
  return best;
}

/* The options whose files are written only after training: checked before anything runs. */
static const char *const output_options[] = {"--save", "--onnx", "--checkpoint", "--metrics", "--plot", "--profile",
                                             NULL};

void example_check_arguments(int argc, char **argv, const char *const *valued, const char *const *flags,
                             const char *usage) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("%s", usage);
      exit(0);
    }
    if (listed(argv[i], valued)) {
      if (i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n%s", argv[i], usage);
        exit(2);
      }
      /* The first of two values would win silently (example_option), whatever the user meant. */
      if (given_before(argv, i, valued)) {
        fprintf(stderr, "error: %s is given more than once\n", argv[i]);
        exit(2);
      }
      i++;
    } else if (!listed(argv[i], flags)) {
      const char *nearest = nearest_option(argv[i], valued, flags);
      if (nearest)
        fprintf(stderr, "error: unknown argument '%s'; did you mean %s?\n%s", argv[i], nearest, usage);
      else
        fprintf(stderr, "error: unknown argument '%s'\n%s", argv[i], usage);
      exit(2);
    }
  }
  /* --eval skips training, so --save would write nothing: say so rather than exit 0 without the file. */
  if (example_option(argc, argv, "--eval") && example_option(argc, argv, "--save")) {
    fprintf(stderr, "error: --save and --eval exclude each other: --eval only evaluates, so nothing would be saved\n");
    exit(2);
  }
  for (int i = 0; output_options[i]; i++)
    if (listed(output_options[i], valued))
      example_check_output_file(output_options[i], example_option(argc, argv, output_options[i]));
}

void example_print_compute_info(const bpt_context *context) {
  bpt_compute_info info = {.size = sizeof info};
  if (strcmp(bpt_context_backend(context), "cpu") == 0 && bpt_cpu_compute_info(&info) == BPT_OK)
    printf("compute: %s\n", info.summary);
}

double example_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void draw(example_progress *progress, double running_loss, bool final) {
  double elapsed = progress->library_clock ? progress->library_seconds : example_seconds() - progress->start;
  if (!progress->interactive && !final) return;
  const int width = 30;
  int filled = progress->total ? (int)((double)width * (double)progress->done / (double)progress->total) : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[width] = 0;
  /* No rate from a clock that has not moved (a coarse clock, a first tiny batch): it would read as infinite. */
  char rate[32] = "-";
  if (elapsed > 1e-6) snprintf(rate, sizeof rate, "%.0f", (double)progress->done / elapsed);
  fprintf(stderr, "%s%s [%s] %ld/%ld  %s samples/s  loss %.4f%s", progress->interactive ? "\r" : "",
          progress->label, bar, progress->done, progress->total, rate, running_loss, final ? "\n" : "");
  fflush(stderr);
}

void example_progress_start(example_progress *progress, const char *label, long total) {
  progress->label = label;
  progress->total = total;
  progress->done = 0;
  progress->start = progress->last_draw = example_seconds();
  progress->interactive = isatty(fileno(stderr));
  /* Its own clock until example_progress_callback says otherwise: the examples' own loops start a bar on a
   * fresh stack struct, whose stale library_clock would print "-" samples/s. */
  progress->library_clock = false;
}

void example_progress_update(example_progress *progress, long done, double running_loss) {
  progress->done = done;
  double now = example_seconds();
  if (now - progress->last_draw < 0.1) return;
  progress->last_draw = now;
  draw(progress, running_loss, false);
}

void example_progress_finish(example_progress *progress, double running_loss) {
  draw(progress, running_loss, true);
}

bool example_warn_whole_batch(long batches, long samples) {
  if (batches != 1 || samples <= 1) return false;
  fprintf(stderr, "warning: the batch holds the whole training set (%ld samples): one optimiser step per epoch; "
                  "a smaller --batch trains more per epoch\n", samples);
  return true;
}

bpt_status example_build_mlp(bpt_graph *graph, int64_t features, const int64_t *widths, int width_count,
                             int64_t classes, example_classifier *out) {
  bpt_node *hidden;
  char name[32];
  BPT_EXAMPLE_TRY(bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &out->images));
  BPT_EXAMPLE_TRY(bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &out->labels));
  hidden = out->images;
  for (int layer = 0; layer < width_count; layer++) {
    snprintf(name, sizeof name, "fc%d", layer + 1);
    BPT_EXAMPLE_TRY(bpt_layer_linear(graph, name, hidden, widths[layer], BPT_INIT_HE_UNIFORM, &hidden));
    snprintf(name, sizeof name, "relu%d", layer + 1);
    BPT_EXAMPLE_TRY(bpt_relu(graph, name, hidden, &hidden));
  }
  snprintf(name, sizeof name, "fc%d", width_count + 1);
  BPT_EXAMPLE_TRY(bpt_layer_linear(graph, name, hidden, classes, BPT_INIT_HE_UNIFORM, &out->logits));
  return bpt_softmax_cross_entropy(graph, "loss", out->logits, out->labels, &out->loss);
}

int example_progress_callback(void *data, const bpt_train_progress *progress) {
  example_progress *bar = data;
  if (progress->batch == 1) {
    const char *label = bar->label;
    example_progress_start(bar, NULL, (long)progress->total);
    bar->label = label;
  }
  bar->library_clock = true;
  bar->library_seconds = progress->seconds;
  /* Once, before the bar. */
  if (progress->epoch == 1 && progress->batch == 1)
    example_warn_whole_batch((long)progress->batches, (long)progress->total);
  char label[64];
  const char *saved = bar->label;
  if (!saved) {
    snprintf(label, sizeof label, "%sepoch %lld/%lld", bar->prefix ? bar->prefix : "", (long long)progress->epoch,
             (long long)progress->epochs);
    bar->label = label;
  }
  if (progress->batch == progress->batches) {
    bar->done = (long)progress->samples;
    example_progress_finish(bar, progress->running_loss);
  } else {
    example_progress_update(bar, (long)progress->samples, progress->running_loss);
  }
  bar->label = saved;
  return 0;
}

static void print_epoch(const bpt_train_epoch *epoch, bool learning_rate) {
  printf("epoch %lld: test accuracy %.2f%%, test loss %.4f, ", (long long)epoch->epoch,
         100.0 * epoch->validation_accuracy, epoch->validation_loss);
  if (learning_rate) printf("learning rate %.4f, ", epoch->learning_rate);
  printf("%.1f s elapsed\n", epoch->seconds);
  fflush(stdout);
}

int example_print_epoch(void *data, const bpt_train_epoch *epoch) {
  (void)data;
  print_epoch(epoch, false);
  return 0;
}

int example_print_epoch_with_rate(void *data, const bpt_train_epoch *epoch) {
  (void)data;
  print_epoch(epoch, true);
  return 0;
}

bpt_train_options example_train_options(long epochs, uint64_t seed, bpt_dataset *test, example_progress *bar,
                                        FILE *metrics) {
  bpt_train_options options = bpt_train_options_default();
  options.epochs = epochs;
  options.seed = seed;
  options.validation = test;
  options.progress = example_progress_callback;
  options.progress_data = bar;
  options.epoch_end = example_print_epoch;
  options.metrics = metrics;
  return options;
}

void example_print_summary(const bpt_graph *graph) {
  const size_t length = bpt_graph_summary_text(graph, NULL, 0);
  char *text = malloc(length + 1);
  if (!text) return;
  bpt_graph_summary_text(graph, text, length + 1);
  fputs(text, stdout);
  fflush(stdout);
  free(text);
}

void example_banner(const bpt_context *context, const char *format, ...) {
  printf("libbptrain %s, backend %s, %d threads: ", bpt_version(), bpt_context_backend(context),
         bpt_context_num_threads(context));
  va_list arguments;
  va_start(arguments, format);
  vprintf(format, arguments);
  va_end(arguments);
  printf("\n");
  example_print_compute_info(context);
  fflush(stdout);
}

float *example_read_parameters(bpt_context *context, bpt_graph *graph, int64_t *count) {
  *count = bpt_graph_parameter_count(graph);
  float *values = malloc((size_t)(*count > 0 ? *count : 1) * sizeof *values);
  if (!values) {
    fprintf(stderr, "error: out of memory for %lld parameters\n", (long long)*count);
    exit(1);
  }
  EXAMPLE_CHECK(context, bpt_graph_read_parameters(graph, values, *count));
  return values;
}

uint64_t example_parameter_checksum(bpt_context *context, bpt_graph *graph) {
  int64_t count;
  float *values = example_read_parameters(context, graph, &count);
  uint64_t hash = 1469598103934665603ULL;
  const unsigned char *bytes = (const unsigned char *)values;
  for (size_t i = 0; i < (size_t)count * sizeof *values; i++)
    hash = (hash ^ bytes[i]) * 1099511628211ULL;
  free(values);
  return hash;
}

/* One definition of the examples' LeNet-5, so that mnist_cnn's and speculative_mnist's checkpoints load into
 * each other: node names "lenet.*". */
bpt_status example_build_lenet(bpt_graph *graph, bpt_node *images, int64_t classes, bpt_node **logits) {
  const bpt_layer_spec lenet[] = {
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 6, .kernel = 5, .padding = 2},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_MAX_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 5},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_MAX_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_FLATTEN)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = 120},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = 84},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = classes},
  };
  return bpt_layer_sequential(graph, "lenet", images, lenet, (int)(sizeof lenet / sizeof lenet[0]), logits);
}
