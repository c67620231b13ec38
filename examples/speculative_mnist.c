/* Speculative backpropagation on Fashion-MNIST: trains a 784-128-64-10 leaky-ReLU MLP (He init), or with
 * --model lenet the LeNet-5 of mnist_cnn.c (issue 28), with gradient clipping to [-5, 5], SGD with momentum and
 * mini-batches of per-sample forward/backward, at several gate thresholds, on the CPU backend (real wall time, the
 * speculative backward on a second thread) and on fpga-sim (simulated cycles and energy), and prints one table
 * comparing each threshold with threshold 0, which is ordinary backprop.
 *
 *   speculative_mnist [--data DIR] [--epochs 2] [--train-samples 60000] [--fpga-samples 10000] [--batch 32]
 *                     [--lr 0.02] [--momentum 0.9] [--seed 42] [--thresholds 0,0.10,0.175,0.25]
 *                     [--repeats 1] [--trainer-threads 2] [--fpga-fixed W:I] [--skip-cpu] [--skip-fpga]
 *                     [--backend cpu] [--model mlp|lenet] [--metrics FILE.csv] [--plot FILE.png]
 *                     [--profile FILE.json] [--classes N]
 *
 * --backend picks the backend of the wall-time runs ("CPU" in the table, named there when it is another); the
 * fpga-sim runs are the simulated ones, always on fpga-sim. fpga-sim has no convolution or pooling kernels, so
 * for LeNet the trainer refuses the chain there (naming the node); the example prints that and skips those runs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "example_util.h"

static const char usage[] =
    "usage: speculative_mnist [--data DIR] [--epochs N] [--train-samples N] [--fpga-samples N] [--batch N]\n"
    "                         [--lr X] [--momentum X] [--seed N] [--thresholds T0,T1,...] [--repeats N]\n"
    "                         [--trainer-threads 1|2] [--fpga-fixed W:I] [--skip-cpu] [--skip-fpga]\n"
    "                         [--backend cpu|cuda] [--model mlp|lenet]\n"
    "  --data DIR          IDX directory (default /usr/share/datasets/fashion-mnist)\n"
    "  --train-samples N   training samples per epoch on the CPU (a prefix of the shuffled set)\n"
    "  --fpga-samples N    the same on fpga-sim, whose C simulation is slower\n"
    "  --repeats N         CPU runs per threshold, interleaved; the fastest wall time is kept (noisy machines)\n"
    "  --fpga-fixed W:I    fpga-sim in ap_fixed<W, I, AP_RND, AP_SAT> instead of f32\n"
    "  --backend NAME      backend of the wall-time runs (default cpu; --skip-cpu skips them)\n"
    "  --model NAME        mlp (784-128-64-10, default) or lenet (LeNet-5 as in mnist_cnn)\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE;

enum { MAX_THRESHOLDS = 16, EVALUATION_BATCH = 500 };

typedef struct run_result {
  double hit_rate, accuracy, seconds, joules;
  double busy_seconds; /* CPU: the longer of the two trainer threads' CPU times (waits excluded) */
  bool done;
} run_result;

typedef struct settings {
  const char *data;
  long epochs, batch, repeats, trainer_threads;
  long cpu_samples, fpga_samples;
  double learning_rate, momentum;
  uint64_t seed;
  int fixed_word_bits, fixed_integer_bits; /* fpga-sim number format: 0 for f32 */
  int64_t classes; /* checked against both label sets (--classes) */
  bool lenet;      /* --model lenet */
} settings;

/* The samples a run trains per epoch: --train-samples or --fpga-samples, at most the whole set. */
static long run_samples(long wanted, const bpt_dataset *train_set) {
  return wanted < bpt_dataset_size(train_set) ? wanted : (long)bpt_dataset_size(train_set);
}

/* Warns once a program run when the runs of either kind train one batch per epoch. */
static void warn_whole_batch(const settings *s, const bpt_dataset *train_set, bool run_cpu, bool run_fpga) {
  long cpu = run_samples(s->cpu_samples, train_set), fpga = run_samples(s->fpga_samples, train_set);
  if (run_cpu && example_warn_whole_batch((cpu + s->batch - 1) / s->batch, cpu)) return;
  if (run_fpga) example_warn_whole_batch((fpga + s->batch - 1) / s->batch, fpga);
}

/* Trains one model at one threshold on one backend; returns wall seconds (CPU) or simulated ones (fpga-sim). */
static void train(const settings *s, bpt_dataset *train_set, bpt_dataset *test_set, const char *backend,
                  float threshold, run_result *result, example_metrics *metrics) {
  bool fpga = strcmp(backend, "fpga-sim") == 0;
  bpt_context_options context_options = bpt_context_options_default();
  context_options.backend = backend;
  context_options.num_threads = 1; /* BLAS on one thread: the trainer's second thread is the other core */
  context_options.seed = s->seed;
  /* LeNet on fpga-sim: every op of it runs there; the fallback lets a chain holding an op fpga-sim lacks
   * compile, so that the trainer's refusal, naming that op, is what is seen. */
  context_options.cpu_fallback = fpga && s->lenet;
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &context));
  example_metrics_begin_run(metrics, context);
  if (fpga) {
    bpt_fpga_options fpga_options = bpt_fpga_options_default();
    if (s->fixed_word_bits) {
      fpga_options.format = BPT_FPGA_FORMAT_FIXED;
      fpga_options.word_bits = s->fixed_word_bits;
      fpga_options.integer_bits = s->fixed_integer_bits;
    }
    EXAMPLE_CHECK(context, bpt_fpga_configure(context, &fpga_options));
  }

  int64_t features = bpt_dataset_sample_size(train_set);
  int64_t classes = s->classes;
  bpt_graph *graph = NULL;
  bpt_node *images, *labels, *hidden, *logits, *loss;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  if (s->lenet) {
    /* The trainer snapshots every chain value; a ReLU's 1-bit mask would otherwise make its input transient. */
    bpt_precision_options precision = bpt_precision_options_default();
    precision.keep_all_values = 1;
    EXAMPLE_CHECK(context, bpt_graph_set_precision(graph, &precision));
    int64_t image[3] = {1, 28, 28};
    if (features != 28 * 28) {
      fprintf(stderr, "error: --model lenet takes 28x28 images, the data has %lld values per sample\n",
              (long long)features);
      exit(2);
    }
    EXAMPLE_CHECK(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 3, image, &images));
    EXAMPLE_CHECK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
    EXAMPLE_CHECK(context, example_build_lenet(graph, images, classes, &logits));
  } else {
    EXAMPLE_CHECK(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &images));
    EXAMPLE_CHECK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
    EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc1", images, 128, BPT_INIT_HE_NORMAL, &hidden));
    EXAMPLE_CHECK(context, bpt_leaky_relu(graph, "act1", hidden, 0.01f, &hidden));
    EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc2", hidden, 64, BPT_INIT_HE_NORMAL, &hidden));
    EXAMPLE_CHECK(context, bpt_leaky_relu(graph, "act2", hidden, 0.01f, &hidden));
    EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc3", hidden, classes, BPT_INIT_HE_NORMAL, &logits));
  }
  EXAMPLE_CHECK(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  /* On fpga-sim a batch-1 graph keeps the activations on chip (an evaluation batch would not fit in BRAM). */
  long evaluation_batch = fpga ? 1 : EVALUATION_BATCH;
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, evaluation_batch));

  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = (float)s->learning_rate;
  optimizer_options.momentum = (float)s->momentum;
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  bpt_speculative_options speculative_options = bpt_speculative_options_default();
  speculative_options.threshold = threshold;
  speculative_options.threads = (int)s->trainer_threads;
  speculative_options.gradient_clip = 5.0f;
  bpt_speculative_trainer *trainer = NULL;
  if (fpga && s->lenet) {
    /* A chain with an op on the CPU fallback is refused: say why, and leave result->done false. */
    if (bpt_speculative_create(graph, images, labels, optimizer, &speculative_options, &trainer) != BPT_OK) {
      printf("fpga-sim: no simulated runs for LeNet: %s\n", bpt_context_last_error(context));
      bpt_optimizer_destroy(optimizer);
      bpt_graph_destroy(graph);
      if (example_metrics_end_run(metrics)) exit(1);
      bpt_context_destroy(context);
      return;
    }
  } else {
    EXAMPLE_CHECK(context, bpt_speculative_create(graph, images, labels, optimizer, &speculative_options, &trainer));
  }

  int64_t batch_dims[2] = {s->batch, features};
  bpt_tensor *batch_images = NULL, *batch_labels = NULL;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, batch_dims, &batch_images));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, batch_dims, &batch_labels));

  long samples = run_samples(fpga ? s->fpga_samples : s->cpu_samples, train_set);
  int64_t batches = (samples + s->batch - 1) / s->batch;
  double seconds = 0.0;
  if (fpga) EXAMPLE_CHECK(context, bpt_fpga_reset_counters(context));
  /* Shuffles compose, so every run starts from the file order to see the same samples in the same order. */
  EXAMPLE_CHECK(context, bpt_dataset_reset_order(train_set));
  for (long epoch = 1; epoch <= s->epochs; epoch++) {
    EXAMPLE_CHECK(context, bpt_dataset_shuffle(train_set, s->seed + (uint64_t)epoch));
    char label[96];
    snprintf(label, sizeof label, "%s t=%.3f epoch %ld/%ld", backend, (double)threshold, epoch, s->epochs);
    example_progress progress;
    example_progress_start(&progress, label, samples);
    double running_loss = 0.0, start = example_seconds();
    long seen = 0;
    for (int64_t b = 0; b < batches; b++) {
      EXAMPLE_CHECK(context, bpt_dataset_batch(train_set, b, s->batch, batch_images, batch_labels));
      if (seen + bpt_tensor_dim(batch_images, 0) > samples) {
        EXAMPLE_CHECK(context, bpt_tensor_set_batch(batch_images, samples - seen));
        EXAMPLE_CHECK(context, bpt_tensor_set_batch(batch_labels, samples - seen));
      }
      float batch_loss;
      EXAMPLE_CHECK(context, bpt_speculative_train_batch(trainer, batch_images, batch_labels, &batch_loss));
      running_loss = b == 0 ? batch_loss : 0.98 * running_loss + 0.02 * batch_loss;
      example_metrics_step(metrics, epoch, batch_loss, bpt_optimizer_learning_rate(optimizer));
      seen += (long)bpt_tensor_dim(batch_images, 0);
      example_progress_update(&progress, seen, running_loss);
    }
    seconds += example_seconds() - start;
    example_progress_finish(&progress, running_loss);
  }
  if (fpga) {
    bpt_fpga_report report = {.size = sizeof report};
    EXAMPLE_CHECK(context, bpt_fpga_get_report(context, &report));
    result->seconds = report.seconds;
    result->joules = report.joules;
    if (threshold == 0.0f || threshold >= 0.25f) {
      char text[4096];
      EXAMPLE_CHECK(context, bpt_fpga_format_report(context, text, sizeof text));
      printf("fpga-sim cycle report, threshold %.3f:\n%s", (double)threshold, text);
    }
  } else {
    result->seconds = seconds;
  }
  bpt_speculative_counters counters = {.size = sizeof counters};
  EXAMPLE_CHECK(context, bpt_speculative_get_counters(trainer, &counters));
  result->hit_rate = counters.samples ? (double)counters.hits / (double)counters.samples : 0.0;
  result->busy_seconds = counters.main_thread_seconds > counters.worker_thread_seconds ? counters.main_thread_seconds
                                                                                       : counters.worker_thread_seconds;
  bpt_eval_options evaluation = bpt_eval_options_default();
  evaluation.batch_size = evaluation_batch;
  bpt_eval_result tested = {.size = sizeof tested};
  EXAMPLE_CHECK(context, bpt_evaluate(graph, test_set, &evaluation, &tested));
  result->accuracy = tested.accuracy;
  example_metrics_epoch(metrics, s->epochs, NAN, NAN, tested.loss, tested.accuracy,
                        bpt_optimizer_learning_rate(optimizer));
  result->done = true;
  printf("%-8s threshold %.3f: hit rate %5.1f%%, mean gate distance %.4f, test accuracy %.2f%%, %s %.3f s, "
         "thread CPU time main %.3f s worker %.3f s\n",
         backend, (double)threshold, 100.0 * result->hit_rate, counters.mean_distance, 100.0 * result->accuracy,
         fpga ? "simulated" : "wall", result->seconds, counters.main_thread_seconds, counters.worker_thread_seconds);
  fflush(stdout);

  bpt_tensor_destroy(batch_images);
  bpt_tensor_destroy(batch_labels);
  bpt_speculative_destroy(trainer);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  if (example_metrics_end_run(metrics)) exit(1);
  bpt_context_destroy(context);
}

static int parse_thresholds(const char *text, float *values) {
  int count = 0;
  while (text && *text && count < MAX_THRESHOLDS) {
    char *end;
    double value = strtod(text, &end);
    if (end == text || value < 0.0) return -1;
    values[count++] = (float)value;
    text = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return count;
}

int main(int argc, char **argv) {
  static const char *const valued[] = {
      "--data", "--epochs",     "--train-samples", "--fpga-samples",    "--batch",      "--lr", "--momentum",
      "--seed", "--thresholds", "--repeats",       "--trainer-threads", "--fpga-fixed", "--classes", "--backend",
      "--model", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--skip-cpu", "--skip-fpga", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  settings s = {.data = example_option(argc, argv, "--data"),
                .epochs = example_option_long(argc, argv, "--epochs", 2),
                .batch = example_option_long(argc, argv, "--batch", 32),
                .repeats = example_option_long(argc, argv, "--repeats", 1),
                .trainer_threads = example_option_long(argc, argv, "--trainer-threads", 2),
                .cpu_samples = example_option_long(argc, argv, "--train-samples", 60000),
                .fpga_samples = example_option_long(argc, argv, "--fpga-samples", 10000),
                .learning_rate = example_option_double(argc, argv, "--lr", 0.02),
                .momentum = example_option_double(argc, argv, "--momentum", 0.9),
                .seed = (uint64_t)example_option_long(argc, argv, "--seed", 42)};
  if (!s.data) s.data = "/usr/share/datasets/fashion-mnist";
  const char *model = example_option(argc, argv, "--model");
  if (model && strcmp(model, "mlp") != 0 && strcmp(model, "lenet") != 0) {
    fprintf(stderr, "error: --model takes mlp or lenet, not '%s'\n", model);
    return 2;
  }
  s.lenet = model && strcmp(model, "lenet") == 0;
  const char *fixed = example_option(argc, argv, "--fpga-fixed");
  if (fixed && (sscanf(fixed, "%d:%d", &s.fixed_word_bits, &s.fixed_integer_bits) != 2 || s.fixed_word_bits < 2 ||
                s.fixed_word_bits > 32 || s.fixed_integer_bits < 1 || s.fixed_integer_bits > s.fixed_word_bits)) {
    fprintf(stderr, "error: --fpga-fixed takes W:I with 2 <= W <= 32 and 1 <= I <= W (ap_fixed<W, I>)\n");
    return 2;
  }
  float thresholds[MAX_THRESHOLDS];
  const char *threshold_text = example_option(argc, argv, "--thresholds");
  int threshold_count = parse_thresholds(threshold_text ? threshold_text : "0,0.10,0.175,0.25", thresholds);
  if (s.epochs < 1 || s.batch < 1 || s.repeats < 1 || s.cpu_samples < 1 || s.fpga_samples < 1 || threshold_count < 1 ||
      thresholds[0] != 0.0f) {
    fprintf(stderr, "error: counts must be positive and --thresholds a comma list starting with 0\n%s", usage);
    return 2;
  }
  bool run_cpu = !example_flag(argc, argv, "--skip-cpu"), run_fpga = !example_flag(argc, argv, "--skip-fpga");
  if (!run_cpu && !run_fpga) { /* it printed a table of dashes and exited 0 */
    fprintf(stderr, "error: --skip-cpu and --skip-fpga together leave nothing to run\n");
    return 2;
  }
  if (fixed && !run_fpga) {
    fprintf(stderr, "error: --fpga-fixed configures the fpga-sim runs, which --skip-fpga skips\n");
    return 2;
  }
  const char *backend = example_option(argc, argv, "--backend");
  if (backend && !run_cpu) {
    fprintf(stderr, "error: --backend picks the backend of the wall-time runs, which --skip-cpu skips\n");
    return 2;
  }
  if (backend && strcmp(backend, "fpga-sim") == 0) {
    fprintf(stderr, "error: --backend fpga-sim: the fpga-sim runs are made anyway (--skip-cpu leaves only them); "
                    "--backend picks the backend of the wall-time runs\n");
    return 2;
  }
  if (!backend) backend = "cpu";
  /* The table's name for the wall-time runs. */
  const char *wall = strcmp(backend, "cpu") == 0 ? "CPU" : backend;

  bpt_context_options data_options = bpt_context_options_default();
  data_options.num_threads = 1;
  /* On the wall-time runs' backend, so that a backend which cannot start fails here, before the data is read. */
  data_options.backend = backend;
  bpt_context *data_context = NULL; /* owns the data sets; each run has its own context */
  EXAMPLE_CHECK(NULL, bpt_context_create(&data_options, &data_context));
  /* Each run profiles its own context (example_metrics_begin_run); the CSV follows all runs in turn. */
  example_metrics *metrics = example_metrics_open(argc, argv, data_context, "speculative_mnist");
  bpt_dataset *train_set = NULL, *test_set = NULL;
  EXAMPLE_CHECK(data_context, bpt_dataset_load_idx_directory(data_context, s.data, "train", &train_set));
  EXAMPLE_CHECK(data_context, bpt_dataset_load_idx_directory(data_context, s.data, "t10k", &test_set));
  s.classes = example_class_count(argc, argv, data_context, train_set, test_set, 0);
  EXAMPLE_CHECK(data_context, bpt_dataset_set_normalization(train_set, 0.2860f, 0.3530f));
  EXAMPLE_CHECK(data_context, bpt_dataset_set_normalization(test_set, 0.2860f, 0.3530f));
  warn_whole_batch(&s, train_set, run_cpu, run_fpga);
  printf("libbptrain %s: speculative backprop, %s, batch %ld, %ld epochs, %ld CPU / %ld fpga-sim "
         "samples per epoch\n",
         bpt_version(), s.lenet ? "LeNet-5" : "MLP 784-128-64-10", s.batch, s.epochs, s.cpu_samples, s.fpga_samples);

  run_result cpu[MAX_THRESHOLDS] = {{0}}, fpga[MAX_THRESHOLDS] = {{0}};
  for (long repeat = 0; run_cpu && repeat < s.repeats; repeat++) {
    for (int t = 0; t < threshold_count; t++) {
      run_result result = {0};
      train(&s, train_set, test_set, backend, thresholds[t], &result, metrics);
      if (!cpu[t].done || result.seconds < cpu[t].seconds) {
        double busy =
            cpu[t].done && cpu[t].busy_seconds < result.busy_seconds ? cpu[t].busy_seconds : result.busy_seconds;
        cpu[t] = result;
        cpu[t].busy_seconds = busy;
      } else if (result.busy_seconds < cpu[t].busy_seconds) {
        cpu[t].busy_seconds = result.busy_seconds;
      }
    }
  }
  for (int t = 0; run_fpga && t < threshold_count && (t == 0 || fpga[0].done); t++)
    train(&s, train_set, test_set, "fpga-sim", thresholds[t], &fpga[t], metrics);

  /* Speedup is the share of time saved against threshold 0: 1 - time / time at threshold 0. The CPU critical
   * path is the longer thread's CPU time, what the wall time would be on two otherwise idle cores. */
  printf("\n| threshold | %s hit rate | %s test acc | %s acc change | fpga-sim hit rate | fpga-sim test acc | "
         "fpga-sim acc change | %s wall-time speedup | %s critical-path speedup | simulated speedup | "
         "simulated energy |\n",
         wall, wall, wall, wall, wall);
  printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int t = 0; t < threshold_count; t++) {
    printf("| %.3f ", (double)thresholds[t]);
    if (cpu[t].done)
      printf("| %.1f%% | %.2f%% | %+.2f | ", 100.0 * cpu[t].hit_rate, 100.0 * cpu[t].accuracy,
             100.0 * (cpu[t].accuracy - cpu[0].accuracy));
    else
      printf("| - | - | - | ");
    if (fpga[t].done)
      printf("%.1f%% | %.2f%% | %+.2f | ", 100.0 * fpga[t].hit_rate, 100.0 * fpga[t].accuracy,
             100.0 * (fpga[t].accuracy - fpga[0].accuracy));
    else
      printf("- | - | - | ");
    if (cpu[t].done)
      printf("%+.1f%% (%.2f s) | %+.1f%% (%.2f s) | ", 100.0 * (1.0 - cpu[t].seconds / cpu[0].seconds), cpu[t].seconds,
             100.0 * (1.0 - cpu[t].busy_seconds / cpu[0].busy_seconds), cpu[t].busy_seconds);
    else
      printf("- | - | ");
    if (fpga[t].done)
      printf("%+.1f%% (%.4f s) | %.4f J |\n", 100.0 * (1.0 - fpga[t].seconds / fpga[0].seconds), fpga[t].seconds,
             fpga[t].joules);
    else
      printf("- | - |\n");
  }
  const int status = example_metrics_close(metrics);
  bpt_dataset_destroy(train_set);
  bpt_dataset_destroy(test_set);
  bpt_context_destroy(data_context);
  return status;
}
