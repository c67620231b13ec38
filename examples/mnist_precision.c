/* Trains the 784-512-256-10 ReLU MLP of mnist_mlp under a precision policy and reports the test accuracy, the
 * loss scaler's state and the activation memory the graph holds between forward and backward. With --all it
 * runs f32, bf16, f16 with loss scaling, and f32 with each compressed saved-activation storage, then prints
 * one table (the figures in docs/precision.md come from it).
 *
 *   mnist_precision [--data DIR] [--epochs 5] [--batch 128] [--lr 0.05] [--momentum 0.9] [--dtype f32|bf16|f16]
 *                   [--loss-scaling auto|none|dynamic] [--storage compute|f16|bf16|fp8] [--store-16bit|--store-f32] [--all]
 *                   [--threads N] [--seed 42] [--backend cpu] [--metrics FILE.csv] [--plot FILE.png]
 *                   [--profile FILE.json] [--classes N]
 */
#include <stdlib.h>
#include <string.h>

#include "example_util.h"

static const char usage[] =
    "usage: mnist_precision [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--dtype f32|bf16|f16]\n"
    "                       [--loss-scaling auto|none|dynamic] [--storage compute|f16|bf16|fp8] [--store-16bit|--store-f32] [--all]\n"
    "  --store-16bit   bf16: keep activations and their gradients as bf16 where the kernels allow (half memory;\n"
    "                  the default on the CPU); --store-f32: f32 buffers rounded in place instead\n"
    "                       [--threads N] [--seed N] [--backend cpu|cuda]\n"
    "  --dtype         compute dtype of activations, their gradients and weight copies (default f32)\n"
    "  --storage       format of the activations kept for backward (default: the compute dtype)\n"
    "  --all           run every configuration and print a table\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE;

typedef struct run_result {
  double accuracy;
  float loss_scale;
  int64_t skipped;
  bpt_graph_memory_stats memory;
} run_result;

typedef struct settings {
  const char *data;
  long epochs, batch;
  float learning_rate, momentum;
  bpt_context_options context_options;
  int64_t classes; /* checked against both label sets (--classes) */
} settings;

static int print_epoch(void *data, const bpt_train_epoch *epoch) {
  bpt_graph *graph = data;
  printf("epoch %lld: test accuracy %.2f%%, loss scale %g, %lld skipped steps\n", (long long)epoch->epoch,
         100.0 * epoch->validation_accuracy, (double)bpt_graph_loss_scale(graph),
         (long long)bpt_graph_skipped_steps(graph));
  fflush(stdout);
  return 0;
}

/* One run on the shared context: parameters start from its seed alone, so every run starts alike. */
static run_result train(const settings *s, bpt_context *context, const bpt_precision_options *precision,
                        bpt_dataset *train_set, bpt_dataset *test_set, FILE *metrics) {
  int64_t features = bpt_dataset_sample_size(train_set), classes = s->classes;
  bpt_graph *graph = NULL;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  EXAMPLE_CHECK(context, bpt_graph_set_precision(graph, precision));
  static const int64_t widths[2] = {512, 256};
  example_classifier mlp;
  EXAMPLE_CHECK(context, example_build_mlp(graph, features, widths, 2, classes, &mlp));
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, mlp.loss, s->batch));
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  EXAMPLE_CHECK(context, bpt_graph_memory(graph, &memory));
  /* The storage dtype's saving (docs/precision.md): the same plan with every activation in f32 beside it. */
  printf("activation memory: %.0f bytes per sample in all (%.0f with every activation stored in f32: %.0f%%)\n",
         (double)memory.activation_bytes / (double)memory.max_batch,
         (double)memory.activation_bytes_f32 / (double)memory.max_batch,
         100.0 * (double)memory.activation_bytes / (double)memory.activation_bytes_f32);
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = s->learning_rate;
  optimizer_options.momentum = s->momentum;
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  char prefix[16];
  snprintf(prefix, sizeof prefix, "%s ", bpt_dtype_name(precision->compute_dtype));
  example_progress bar = {.prefix = prefix};
  bpt_train_options options = example_train_options(s->epochs, s->context_options.seed, test_set, &bar, metrics);
  options.epoch_end = print_epoch;
  options.epoch_data = graph;
  bpt_train_result trained = {.size = sizeof trained};
  EXAMPLE_CHECK(context, bpt_train(graph, optimizer, train_set, &options, &trained));
  run_result result = {.accuracy = trained.last.validation_accuracy};
  result.loss_scale = bpt_graph_loss_scale(graph);
  result.skipped = bpt_graph_skipped_steps(graph);
  result.memory.size = sizeof result.memory;
  EXAMPLE_CHECK(context, bpt_graph_memory(graph, &result.memory));
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  return result;
}

static const char *storage_name(bpt_activation_storage storage) {
  static const char *const names[] = {"compute", "f16", "bf16", "fp8"};
  return names[storage];
}

static void print_result(const bpt_precision_options *p, const run_result *r) {
  double per_sample = (double)r->memory.max_batch;
  printf("| %-5s | %-7s | %-7s | %7.2f%% | %11g | %7lld | %13.0f | %16.0f | %18.0f |\n",
         bpt_dtype_name(p->compute_dtype),
         r->loss_scale != 1.0f || p->loss_scaling == BPT_LOSS_SCALING_DYNAMIC ? "dynamic" : "none",
         storage_name(p->saved_activation_storage), 100.0 * r->accuracy, (double)r->loss_scale,
         (long long)r->skipped, (double)r->memory.activation_bytes_held / per_sample,
         (double)(r->memory.activation_bytes_held - r->memory.input_bytes) / per_sample,
         (double)r->memory.transient_bytes / per_sample);
  fflush(stdout);
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data", "--epochs", "--batch", "--lr", "--momentum", "--dtype",
                                       "--loss-scaling", "--storage", "--threads", "--seed", "--backend", "--classes", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--all", "--store-16bit", "--store-f32", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  settings s = {0};
  s.data = example_option(argc, argv, "--data");
  if (!s.data) s.data = "/usr/share/datasets/fashion-mnist";
  s.epochs = example_option_long(argc, argv, "--epochs", 5);
  s.batch = example_option_long(argc, argv, "--batch", 128);
  s.learning_rate = (float)example_option_double(argc, argv, "--lr", 0.05);
  s.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
  if (s.epochs < 1 || s.batch < 1) {
    fprintf(stderr, "error: --epochs and --batch must be positive\n");
    return 2;
  }
  s.context_options = bpt_context_options_default();
  s.context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  s.context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (example_option(argc, argv, "--backend")) s.context_options.backend = example_option(argc, argv, "--backend");

  bpt_precision_options one = bpt_precision_options_default();
  const char *dtype = example_option(argc, argv, "--dtype"), *scaling = example_option(argc, argv, "--loss-scaling"),
             *storage = example_option(argc, argv, "--storage");
  if (example_flag(argc, argv, "--all") && (dtype || scaling || storage)) { /* --all ran its table, ignoring them */
    fprintf(stderr, "error: --all runs every configuration; it takes no --dtype, --loss-scaling or --storage\n");
    return 2;
  }
  if (dtype && strcmp(dtype, "f32") != 0 && strcmp(dtype, "bf16") != 0 && strcmp(dtype, "f16") != 0) {
    fprintf(stderr, "error: --dtype must be f32, bf16 or f16\n%s", usage);
    return 2;
  }
  one.compute_dtype = !dtype || strcmp(dtype, "f32") == 0 ? BPT_DTYPE_F32
                      : strcmp(dtype, "bf16") == 0        ? BPT_DTYPE_BF16
                                                          : BPT_DTYPE_F16;
  one.store_activations_16bit = example_store_16bit(argc, argv);
  if (scaling) {
    if (strcmp(scaling, "auto") == 0) one.loss_scaling = BPT_LOSS_SCALING_AUTO;
    else if (strcmp(scaling, "none") == 0) one.loss_scaling = BPT_LOSS_SCALING_NONE;
    else if (strcmp(scaling, "dynamic") == 0) one.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
    else {
      fprintf(stderr, "error: --loss-scaling must be auto, none or dynamic\n%s", usage);
      return 2;
    }
  }
  if (storage) {
    bool found = false;
    for (int i = 0; i <= BPT_ACTIVATION_STORAGE_FP8; i++)
      if (strcmp(storage, storage_name((bpt_activation_storage)i)) == 0) {
        one.saved_activation_storage = (bpt_activation_storage)i;
        found = true;
      }
    if (!found) {
      fprintf(stderr, "error: --storage must be compute, f16, bf16 or fp8\n%s", usage);
      return 2;
    }
  }

  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&s.context_options, &context));
  example_metrics *metrics = example_metrics_open(argc, argv, context, "mnist_precision");
  bpt_dataset *train_set = NULL, *test_set = NULL;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, s.data, "train", &train_set));
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, s.data, "t10k", &test_set));
  s.classes = example_class_count(argc, argv, context, train_set, test_set, 0);
  example_banner(context, "%lld training and %lld test samples from %s, %ld epochs, batch %ld",
                 (long long)bpt_dataset_size(train_set), (long long)bpt_dataset_size(test_set), s.data, s.epochs, s.batch);

  bpt_precision_options runs[7];
  int run_count = 0;
  if (example_flag(argc, argv, "--all")) {
    bpt_dtype dtypes[3] = {BPT_DTYPE_F32, BPT_DTYPE_BF16, BPT_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
      runs[run_count] = bpt_precision_options_default();
      runs[run_count++].compute_dtype = dtypes[i];
    }
    for (int storage_kind = BPT_ACTIVATION_STORAGE_F16; storage_kind <= BPT_ACTIVATION_STORAGE_FP8; storage_kind++) {
      runs[run_count] = bpt_precision_options_default();
      runs[run_count++].saved_activation_storage = (bpt_activation_storage)storage_kind;
    }
    runs[run_count] = bpt_precision_options_default();
    runs[run_count++].keep_all_values = 1;
  } else {
    runs[run_count++] = one;
  }
  run_result results[7];
  for (int i = 0; i < run_count; i++) {
    printf("run %d/%d: compute %s, saved activations %s%s\n", i + 1, run_count, bpt_dtype_name(runs[i].compute_dtype),
           storage_name(runs[i].saved_activation_storage), runs[i].keep_all_values ? ", every value kept" : "");
    results[i] = train(&s, context, &runs[i], train_set, test_set, example_metrics_csv(metrics));
  }
  printf("\n| dtype | scaling | storage | test acc | final scale | skipped | held B/sample | held w/o inputs | "
         "transient B/sample |\n");
  printf("|-------|---------|---------|----------|-------------|---------|---------------|------------------|"
         "--------------------|\n");
  for (int i = 0; i < run_count; i++) {
    print_result(&runs[i], &results[i]);
    if (runs[i].keep_all_values) printf("  (previous row: every value kept, as before the memory plan)\n");
  }
  const int status = example_metrics_close(metrics);
  bpt_dataset_destroy(train_set);
  bpt_dataset_destroy(test_set);
  bpt_context_destroy(context);
  return status;
}
