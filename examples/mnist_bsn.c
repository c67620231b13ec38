/* Trains a 784-512-256-10 MLP whose hidden activations are binary stochastic neurons (a = 1[u < sigmoid(z)],
 * straight-through gradients) on an MNIST-style IDX data set (Fashion-MNIST by default), evaluates it in
 * deterministic mode (a = 1[sigmoid(z) > 0.5]), and then trains the same MLP with ReLU activations so the two
 * test accuracies can be compared (the target: the BSN net within 1.5 points of the float one).
 * After the last epoch it also reports the accuracy of class probabilities averaged over --eval-samples
 * stochastic passes. Both nets use the same recipe: Adam (lr 0.002, batch 64) by default, --sgd for SGD with
 * momentum (lr 0.05). The binary net needs the noisier small batches; see docs/precision.md for what was tried.
 *
 *   mnist_bsn [--data DIR] [--epochs 5] [--batch 64] [--lr X] [--momentum 0.9] [--estimator sigmoid]
 *             [--sgd] [--eval-samples 16] [--threads N] [--seed 42] [--backend cpu] [--no-baseline]
 *             [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json] [--classes N]
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "example_util.h"

static const char usage[] =
    "usage: mnist_bsn [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--estimator identity|sigmoid]\n"
    "                 [--sgd] [--eval-samples N] [--threads N] [--seed N] [--backend NAME] [--no-baseline]\n"
    "  --sgd        SGD with momentum (default lr 0.05) instead of Adam (default lr 0.002)\n"
    "  --eval-samples  stochastic passes averaged for the final extra accuracy (default 16; 0 or 1: none)\n"
    "  --estimator  straight-through gradient: identity (dz = da) or sigmoid (dz = da sigmoid'(z), default)\n"
    "  --no-baseline  skip training the float (ReLU) MLP used for comparison\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE;

typedef struct run_settings {
  const char *data;
  long epochs, batch;
  float learning_rate, momentum;
  bool binary, adam;
  long eval_samples;
  bpt_straight_through estimator;
  bpt_context_options context_options;
  int64_t classes; /* checked against both label sets (--classes) */
} run_settings;

/* Test accuracy of the class probabilities averaged over several stochastic forward passes. */
static double stochastic_accuracy(bpt_context *context, bpt_graph *graph, bpt_node *images, bpt_node *labels,
                                  bpt_node *logits, bpt_dataset *test_set, long batch, long samples) {
  int64_t classes = bpt_node_dim(logits, 1), features = bpt_dataset_sample_size(test_set);
  int64_t dims[2] = {batch, features}, logit_dims[2] = {batch, classes};
  bpt_tensor *x = NULL, *y = NULL, *out = NULL;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &y));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &out));
  double *sums = calloc((size_t)(batch * classes), sizeof *sums);
  long correct = 0;
  EXAMPLE_CHECK(context, bpt_graph_set_deterministic(graph, 0));
  for (int64_t b = 0; b < bpt_dataset_batch_count(test_set, batch); b++) {
    EXAMPLE_CHECK(context, bpt_dataset_batch(test_set, b, batch, x, y));
    EXAMPLE_CHECK(context, bpt_graph_set_input(graph, images, x));
    EXAMPLE_CHECK(context, bpt_graph_set_input(graph, labels, y));
    int64_t count = bpt_tensor_dim(y, 0);
    memset(sums, 0, (size_t)(batch * classes) * sizeof *sums);
    for (long s = 0; s < samples; s++) {
      EXAMPLE_CHECK(context, bpt_graph_forward(graph));
      EXAMPLE_CHECK(context, bpt_graph_read(graph, logits, out));
      const float *values = bpt_tensor_data(out);
      for (int64_t n = 0; n < count; n++) {
        double maximum = values[n * classes], total = 0.0;
        for (int64_t c = 1; c < classes; c++) maximum = fmax(maximum, values[n * classes + c]);
        for (int64_t c = 0; c < classes; c++) total += exp(values[n * classes + c] - maximum);
        for (int64_t c = 0; c < classes; c++) sums[n * classes + c] += exp(values[n * classes + c] - maximum) / total;
      }
    }
    const int32_t *truth = bpt_tensor_data(y);
    for (int64_t n = 0; n < count; n++) {
      int64_t best = 0;
      for (int64_t c = 1; c < classes; c++)
        if (sums[n * classes + c] > sums[n * classes + best]) best = c;
      correct += best == truth[n];
    }
  }
  free(sums);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_tensor_destroy(out);
  return (double)correct / (double)bpt_dataset_size(test_set);
}

/* What the epoch hooks of one run need. */
typedef struct bsn_run {
  const run_settings *settings;
  bpt_context *context;
  bpt_graph *graph;
  bpt_dataset *test_set;
  bpt_node *images, *labels, *logits;
  const char *kind;
} bsn_run;

/* Evaluation uses the deterministic neuron, a = 1[sigmoid(z) > 0.5]; training goes on with the stochastic one. */
static bpt_status validate_deterministic(void *data, bpt_graph *graph, bpt_train_epoch *epoch) {
  const bsn_run *run = data;
  bpt_eval_options options = bpt_eval_options_default();
  options.batch_size = run->settings->batch;
  bpt_eval_result result = {.size = sizeof result};
  bpt_status status = bpt_graph_set_deterministic(graph, 1);
  if (status == BPT_OK) status = bpt_evaluate(graph, run->test_set, &options, &result);
  if (status == BPT_OK) status = bpt_graph_set_deterministic(graph, 0);
  epoch->validation_loss = result.loss;
  epoch->validation_accuracy = result.accuracy;
  epoch->validation_top_k_accuracy = result.top_k_accuracy;
  return status;
}

static int print_epoch(void *data, const bpt_train_epoch *epoch) {
  const bsn_run *run = data;
  printf("%s epoch %lld: test accuracy %.2f%%, test loss %.4f, %.1f s elapsed\n", run->kind, (long long)epoch->epoch,
         100.0 * epoch->validation_accuracy, epoch->validation_loss, epoch->seconds);
  const run_settings *settings = run->settings;
  if (settings->binary && settings->eval_samples > 1 && epoch->epoch == epoch->epochs) {
    double averaged = stochastic_accuracy(run->context, run->graph, run->images, run->labels, run->logits,
                                          run->test_set, settings->batch, settings->eval_samples);
    printf("%s epoch %lld: test accuracy %.2f%% averaging %ld stochastic passes\n", run->kind,
           (long long)epoch->epoch, 100.0 * averaged, settings->eval_samples);
  }
  fflush(stdout);
  return 0;
}

/* Trains one MLP and returns its final test accuracy. */
static double train(const run_settings *settings, bpt_dataset *train_set, bpt_dataset *test_set,
                    bpt_context *context, FILE *metrics) {
  int64_t features = bpt_dataset_sample_size(train_set), classes = settings->classes;
  long batch = settings->batch;
  bpt_graph *graph = NULL;
  bpt_node *images, *labels, *hidden, *logits, *loss;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  EXAMPLE_CHECK(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &images));
  EXAMPLE_CHECK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc1", images, 512, BPT_INIT_HE_UNIFORM, &hidden));
  if (settings->binary)
    EXAMPLE_CHECK(context, bpt_binary_stochastic(graph, "bsn1", hidden, settings->estimator, &hidden));
  else
    EXAMPLE_CHECK(context, bpt_relu(graph, "relu1", hidden, &hidden));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc2", hidden, 256, BPT_INIT_HE_UNIFORM, &hidden));
  if (settings->binary)
    EXAMPLE_CHECK(context, bpt_binary_stochastic(graph, "bsn2", hidden, settings->estimator, &hidden));
  else
    EXAMPLE_CHECK(context, bpt_relu(graph, "relu2", hidden, &hidden));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc3", hidden, classes, BPT_INIT_HE_UNIFORM, &logits));
  EXAMPLE_CHECK(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, batch));

  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.kind = settings->adam ? BPT_OPTIMIZER_ADAM : BPT_OPTIMIZER_SGD;
  optimizer_options.learning_rate = settings->learning_rate;
  optimizer_options.momentum = settings->adam ? 0.0f : settings->momentum;
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  char prefix[16];
  snprintf(prefix, sizeof prefix, "%s ", settings->binary ? "binary" : "float");
  example_progress bar = {.prefix = prefix};
  bsn_run run = {.settings = settings, .context = context, .graph = graph, .test_set = test_set, .images = images, .labels = labels, .logits = logits,
                 .kind = settings->binary ? "binary" : "float"};
  bpt_train_options options =
      example_train_options(settings->epochs, settings->context_options.seed, NULL, &bar, metrics);
  options.validate = validate_deterministic;
  options.validate_data = &run;
  options.epoch_end = print_epoch;
  options.epoch_data = &run;
  bpt_train_result result = {.size = sizeof result};
  EXAMPLE_CHECK(context, bpt_train(graph, optimizer, train_set, &options, &result));
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  return result.last.validation_accuracy;
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data", "--epochs",  "--batch",   "--lr",      "--momentum",
                                       "--seed", "--threads", "--backend", "--estimator", "--eval-samples", "--classes", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--no-baseline", "--sgd", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  run_settings settings = {0};
  settings.data = example_option(argc, argv, "--data");
  if (!settings.data) settings.data = "/usr/share/datasets/fashion-mnist";
  settings.epochs = example_option_long(argc, argv, "--epochs", 5);
  settings.batch = example_option_long(argc, argv, "--batch", 64);
  settings.adam = !example_flag(argc, argv, "--sgd");
  settings.learning_rate = (float)example_option_double(argc, argv, "--lr", settings.adam ? 0.002 : 0.05);
  settings.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
  settings.eval_samples = example_option_long(argc, argv, "--eval-samples", 16);
  const char *estimator = example_option(argc, argv, "--estimator");
  if (!estimator || strcmp(estimator, "sigmoid") == 0) {
    settings.estimator = BPT_STRAIGHT_THROUGH_SIGMOID;
  } else if (strcmp(estimator, "identity") == 0) {
    settings.estimator = BPT_STRAIGHT_THROUGH_IDENTITY;
  } else {
    fprintf(stderr, "error: --estimator must be identity or sigmoid, not '%s'\n%s", estimator, usage);
    return 2;
  }
  if (settings.epochs < 1 || settings.batch < 1 || settings.eval_samples < 0) {
    fprintf(stderr, "error: --epochs and --batch must be positive, --eval-samples >= 0\n");
    return 2;
  }
  if (settings.adam && example_option(argc, argv, "--momentum")) { /* Adam's step ignored it */
    fprintf(stderr, "error: --momentum is for --sgd (Adam keeps its own moment estimates)\n");
    return 2;
  }
  settings.context_options = bpt_context_options_default();
  settings.context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  settings.context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  const char *backend = example_option(argc, argv, "--backend");
  if (backend) settings.context_options.backend = backend;
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&settings.context_options, &context));
  example_metrics *metrics = example_metrics_open(argc, argv, context, "mnist_bsn");
  bpt_dataset *train_set = NULL, *test_set = NULL;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, settings.data, "train", &train_set));
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, settings.data, "t10k", &test_set));
  settings.classes = example_class_count(argc, argv, context, train_set, test_set, 0);
  example_banner(context, "%lld training and %lld test samples from %s", (long long)bpt_dataset_size(train_set),
                 (long long)bpt_dataset_size(test_set), settings.data);

  settings.binary = true;
  double binary_accuracy = train(&settings, train_set, test_set, context, example_metrics_csv(metrics));
  printf("binary stochastic MLP (%s estimator): final test accuracy %.2f%%\n",
         settings.estimator == BPT_STRAIGHT_THROUGH_SIGMOID ? "sigmoid" : "identity", 100.0 * binary_accuracy);
  if (!example_flag(argc, argv, "--no-baseline")) {
    settings.binary = false;
    double float_accuracy = train(&settings, train_set, test_set, context, example_metrics_csv(metrics));
    printf("float (ReLU) MLP: final test accuracy %.2f%%\n", 100.0 * float_accuracy);
    printf("gap: %.2f points (target: within 1.5)\n", 100.0 * (float_accuracy - binary_accuracy));
  }
  const int status = example_metrics_close(metrics);
  bpt_dataset_destroy(train_set);
  bpt_dataset_destroy(test_set);
  bpt_context_destroy(context);
  return status;
}
