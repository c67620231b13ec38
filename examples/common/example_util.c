/* See example_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "example_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

long example_option_long(int argc, char **argv, const char *name, long fallback) {
  const char *value = example_option(argc, argv, name);
  if (!value) return fallback;
  char *end;
  long parsed = strtol(value, &end, 10);
  if (*end || end == value) {
    fprintf(stderr, "error: %s expects an integer, got '%s'\n", name, value);
    exit(2);
  }
  return parsed;
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
  double parsed = strtod(value, &end);
  if (*end || end == value) {
    fprintf(stderr, "error: %s expects a number, got '%s'\n", name, value);
    exit(2);
  }
  return parsed;
}

static bool listed(const char *argument, const char *const *names) {
  for (int i = 0; names && names[i]; i++)
    if (strcmp(argument, names[i]) == 0) return true;
  return false;
}

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
      i++;
    } else if (!listed(argv[i], flags)) {
      fprintf(stderr, "error: unknown argument '%s'\n%s", argv[i], usage);
      exit(2);
    }
  }
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
  double elapsed = example_seconds() - progress->start;
  double rate = elapsed > 0 ? (double)progress->done / elapsed : 0.0;
  if (!progress->interactive && !final) return;
  const int width = 30;
  int filled = progress->total ? (int)((double)width * (double)progress->done / (double)progress->total) : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[width] = 0;
  fprintf(stderr, "%s%s [%s] %ld/%ld  %.0f samples/s  loss %.4f%s", progress->interactive ? "\r" : "",
          progress->label, bar, progress->done, progress->total, rate, running_loss, final ? "\n" : "");
  fflush(stderr);
}

void example_progress_start(example_progress *progress, const char *label, long total) {
  progress->label = label;
  progress->total = total;
  progress->done = 0;
  progress->start = progress->last_draw = example_seconds();
  progress->interactive = isatty(fileno(stderr));
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

bpt_status example_train_epoch(bpt_graph *graph, bpt_optimizer *optimizer, bpt_node *images, bpt_node *labels,
                               bpt_dataset *train, long batch, bpt_tensor *x, bpt_tensor *y, const char *label,
                               double *running_loss) {
  example_progress progress;
  example_progress_start(&progress, label, (long)bpt_dataset_size(train));
  double smoothed = 0.0;
  long seen = 0;
  const int64_t batches = bpt_dataset_batch_count(train, batch);
  for (int64_t b = 0; b < batches; b++) {
    BPT_EXAMPLE_TRY(bpt_dataset_batch(train, b, batch, x, y));
    BPT_EXAMPLE_TRY(bpt_graph_set_input(graph, images, x));
    BPT_EXAMPLE_TRY(bpt_graph_set_input(graph, labels, y));
    BPT_EXAMPLE_TRY(bpt_graph_forward(graph));
    BPT_EXAMPLE_TRY(bpt_graph_backward(graph));
    BPT_EXAMPLE_TRY(bpt_optimizer_step(optimizer));
    float batch_loss;
    BPT_EXAMPLE_TRY(bpt_graph_loss(graph, &batch_loss));
    smoothed = b == 0 ? batch_loss : 0.98 * smoothed + 0.02 * batch_loss;
    seen += (long)bpt_tensor_dim(x, 0);
    example_progress_update(&progress, seen, smoothed);
  }
  example_progress_finish(&progress, smoothed);
  if (running_loss) *running_loss = smoothed;
  return BPT_OK;
}

bpt_status example_accuracy(bpt_context *context, bpt_graph *graph, bpt_node *images_input, bpt_node *labels_input,
                            bpt_node *logits, bpt_dataset *dataset, long batch, double *accuracy, double *mean_loss) {
  int64_t sample_dims[BPT_MAX_RANK + 1];
  int sample_rank = bpt_dataset_sample_shape(dataset, sample_dims + 1);
  sample_dims[0] = batch;
  int64_t classes = bpt_node_dim(logits, 1);
  int64_t logit_dims[2] = {batch, classes};
  bpt_tensor *images = NULL, *labels = NULL, *output = NULL;
  bpt_status status = bpt_tensor_create(context, BPT_DTYPE_F32, sample_rank + 1, sample_dims, &images);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_I32, 1, sample_dims, &labels);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &output);
  long correct = 0;
  double loss_sum = 0.0;
  int64_t batches = bpt_dataset_batch_count(dataset, batch);
  for (int64_t b = 0; status == BPT_OK && b < batches; b++) {
    status = bpt_dataset_batch(dataset, b, batch, images, labels);
    if (status == BPT_OK) status = bpt_graph_set_input(graph, images_input, images);
    if (status == BPT_OK) status = bpt_graph_set_input(graph, labels_input, labels);
    if (status == BPT_OK) status = bpt_graph_forward(graph);
    float loss = 0.0f;
    if (status == BPT_OK) status = bpt_graph_loss(graph, &loss);
    if (status == BPT_OK) status = bpt_graph_read(graph, logits, output);
    if (status != BPT_OK) break;
    const float *values = bpt_tensor_data(output);
    const int32_t *truth = bpt_tensor_data(labels);
    int64_t count = bpt_tensor_dim(labels, 0);
    loss_sum += (double)loss * (double)count;
    for (int64_t n = 0; n < count; n++) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; c++)
        if (values[n * classes + c] > values[n * classes + best]) best = c;
      correct += best == truth[n];
    }
  }
  if (status == BPT_OK) {
    *accuracy = (double)correct / (double)bpt_dataset_size(dataset);
    if (mean_loss) *mean_loss = loss_sum / (double)bpt_dataset_size(dataset);
  }
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(output);
  return status;
}
