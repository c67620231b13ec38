/* Trains a ResNet for 1x28x28 images (He et al. 2016, the CIFAR variant) on Fashion-MNIST:
 *
 *   stem conv3x3-16 - BN - ReLU
 *   stage 1: n basic blocks at 16 channels, 28x28
 *   stage 2: n basic blocks at 32 channels, 14x14 (the first with stride 2 and a 1x1 projection shortcut)
 *   stage 3: n basic blocks at 64 channels, 7x7   (likewise)
 *   global average pool - fc 10
 *
 * with depth = 6n + 2 (--depth 8, 14 or 20), SGD with Nesterov momentum, weight decay (none on batch-norm
 * scales and shifts or biases), linear warm-up and cosine annealing, and optionally random flips and shifts.
 * The defaults reach 92.6% test accuracy in 6 epochs (docs/cnn.md).
 *
 *   resnet [--depth 8] [--epochs 6] [--batch 128] [--lr 0.1] [--momentum 0.9] [--weight-decay 5e-4]
 *          [--augment] [--clip NORM] [--threads N] [--seed 42] [--data DIR] [--grad-stats] [--summary]
 *          [--save FILE] [--eval FILE] [--fold] [--backend cpu] [--dtype f32] [--storage compute] [--store-16bit|--store-f32]
 *          [--onnx FILE]
 *          [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json] [--classes N]
 */
#include "cnn_example.h"

static const char usage[] =
    "usage: resnet [--depth 8|14|20] [--epochs N] [--batch N] [--lr X] [--momentum X] [--weight-decay X]\n"
    "              [--augment] [--clip NORM] [--threads N] [--seed N] [--data DIR] [--grad-stats] [--summary]\n"
    "              [--save FILE] [--eval FILE] [--fold] [--backend cpu|cuda] [--dtype f32|bf16|f16]\n"
    "              [--storage compute|f16|bf16|fp8] [--store-16bit|--store-f32]\n"
    "  --data DIR     IDX directory with train-* and t10k-* files (default /usr/share/datasets/fashion-mnist)\n"
    "  --grad-stats   print per-parameter gradient norms and per-layer activation statistics each epoch\n"
    "  --summary      print the model summary (per-layer parameters, buffers and activation bytes)\n"
    "  --augment      random horizontal flips and shifts of up to 2 pixels (needs more epochs)\n"
    "  --clip NORM    clip the global gradient norm to NORM\n"
    "  --save FILE    write the trained parameters (with batch-norm running statistics) to FILE as a checkpoint\n"
    "  --eval FILE    skip training: load a checkpoint's parameters (by name) and report the test accuracy\n"
    "  --fold         with --eval: also fold batch norms into the convolutions and compare speed and accuracy\n"
    "  --store-16bit  with --dtype bf16: store activations and their gradients as bf16 wherever the plan can\n"
    "                 (about half the activation memory, the same forward values; the default on the CPU);\n"
    "                 --store-f32: f32 buffers rounded in place instead\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE EXAMPLE_ONNX_USAGE;

static void build_resnet(cnn_example *e, long depth, bpt_dtype compute_dtype, bpt_activation_storage storage,
                         int store_16bit) {
  int64_t image[3] = {1, 28, 28};
  bpt_node *x, *loss;
  EXAMPLE_CHECK(e->context, bpt_graph_create(e->context, &e->graph));
  if (compute_dtype != BPT_DTYPE_F32 || storage != BPT_ACTIVATION_STORAGE_COMPUTE) {
    /* 16-bit activations and weight copies, f32 master weights; f16 gets dynamic loss scaling. */
    bpt_precision_options precision = bpt_precision_options_default();
    precision.compute_dtype = compute_dtype;
    precision.saved_activation_storage = storage;
    precision.store_activations_16bit = store_16bit;
    EXAMPLE_CHECK(e->context, bpt_graph_set_precision(e->graph, &precision));
  }
  EXAMPLE_CHECK(e->context, bpt_graph_input(e->graph, "images", BPT_DTYPE_F32, 3, image, &e->images));
  EXAMPLE_CHECK(e->context, bpt_graph_input(e->graph, "labels", BPT_DTYPE_I32, 0, NULL, &e->labels));
  const bpt_layer_spec stem[] = {
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 3, .padding = 1},
      {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
      {BPT_LAYER(BPT_LAYER_RELU)},
  };
  EXAMPLE_CHECK(e->context, bpt_layer_sequential(e->graph, "stem", e->images, stem, 3, &x));
  const int64_t blocks = (depth - 2) / 6, widths[3] = {16, 32, 64};
  for (int stage = 0; stage < 3; stage++)
    for (int64_t block = 0; block < blocks; block++) {
      char name[32];
      snprintf(name, sizeof name, "stage%d.block%lld", stage + 1, (long long)block + 1);
      const int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      EXAMPLE_CHECK(e->context, bpt_layer_resnet_basic_block(e->graph, name, x, widths[stage], stride, &x));
    }
  const bpt_layer_spec head[] = {
      {BPT_LAYER(BPT_LAYER_GLOBAL_AVG_POOL)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = e->classes},
  };
  EXAMPLE_CHECK(e->context, bpt_layer_sequential(e->graph, "head", x, head, 2, &e->logits));
  EXAMPLE_CHECK(e->context, bpt_softmax_cross_entropy(e->graph, "loss", e->logits, e->labels, &loss));
  EXAMPLE_CHECK(e->context, bpt_graph_compile(e->graph, loss, e->batch));
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  EXAMPLE_CHECK(e->context, bpt_graph_memory(e->graph, &memory));
  printf("activation memory: %.0f bytes per sample held for backward (%.0f without the input), %.0f transient, "
         "%.0f for gradients (over the transient bytes)\n",
         (double)memory.activation_bytes_held / (double)memory.max_batch,
         (double)(memory.activation_bytes_held - memory.input_bytes) / (double)memory.max_batch,
         (double)memory.transient_bytes / (double)memory.max_batch,
         (double)memory.gradient_bytes / (double)memory.max_batch);
  printf("activation memory: %.0f bytes per sample in all (%.0f with every activation stored in f32: %.0f%%)\n",
         (double)memory.activation_bytes / (double)memory.max_batch,
         (double)memory.activation_bytes_f32 / (double)memory.max_batch,
         100.0 * (double)memory.activation_bytes / (double)memory.activation_bytes_f32);
}

static void evaluate(cnn_example *e, const char *path, bool fold) {
  double loss, start = example_seconds();
  double accuracy = cnn_example_test_accuracy(e, &loss);
  double seconds = example_seconds() - start;
  printf("%s: test accuracy %.2f%%, test loss %.4f, %.2f s (%.0f samples/s)\n", path, 100.0 * accuracy, loss, seconds,
         (double)bpt_dataset_size(e->test) / seconds);
  if (!fold) return;
  int folded = 0;
  EXAMPLE_CHECK(e->context, bpt_graph_fold_batch_norm(e->graph, &folded));
  start = example_seconds();
  double folded_accuracy = cnn_example_test_accuracy(e, &loss);
  double folded_seconds = example_seconds() - start;
  printf("folded %d batch norms: test accuracy %.2f%%, test loss %.4f, %.2f s (%.0f samples/s), speed-up %.2fx\n",
         folded, 100.0 * folded_accuracy, loss, folded_seconds, (double)bpt_dataset_size(e->test) / folded_seconds,
         seconds / folded_seconds);
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data",         "--epochs",  "--batch", "--lr",   "--momentum",
                                       "--weight-decay", "--threads", "--seed",  "--save", "--eval",
                                       "--depth",        "--clip",    "--backend", "--dtype", "--storage", "--classes", "--onnx", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--grad-stats", "--summary", "--augment", "--fold", "--store-16bit", "--store-f32", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  if (example_flag(argc, argv, "--fold") && !example_option(argc, argv, "--eval")) {
    fprintf(stderr, "error: --fold works with --eval FILE (it folds the loaded model's batch norms)\n%s", usage);
    return 2; /* it was ignored: the run trained as if it had not been given */
  }
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  const long epochs = example_option_long(argc, argv, "--epochs", 6);
  const long depth = example_option_long(argc, argv, "--depth", 8);
  cnn_example e = {.batch = example_option_long(argc, argv, "--batch", 128),
                   .grad_stats = example_flag(argc, argv, "--grad-stats"),
                   .augment = example_flag(argc, argv, "--augment"),
                   .clip_norm = (float)example_option_double(argc, argv, "--clip", 0.0)};
  if (epochs < 1 || e.batch < 1 || (depth != 8 && depth != 14 && depth != 20)) {
    fprintf(stderr, "error: --epochs and --batch must be positive and --depth 8, 14 or 20\n");
    return 2;
  }
  const char *dtype = example_option(argc, argv, "--dtype");
  bpt_dtype compute_dtype = BPT_DTYPE_F32;
  if (dtype && strcmp(dtype, "bf16") == 0) compute_dtype = BPT_DTYPE_BF16;
  else if (dtype && strcmp(dtype, "f16") == 0) compute_dtype = BPT_DTYPE_F16;
  else if (dtype && strcmp(dtype, "f32") != 0) {
    fprintf(stderr, "error: --dtype must be f32, bf16 or f16\n%s", usage);
    return 2;
  }
  static const char *const storage_names[] = {"compute", "f16", "bf16", "fp8"};
  const char *storage_option = example_option(argc, argv, "--storage");
  bpt_activation_storage storage = BPT_ACTIVATION_STORAGE_COMPUTE;
  bool storage_known = !storage_option;
  for (int i = 0; storage_option && i <= BPT_ACTIVATION_STORAGE_FP8; i++)
    if (strcmp(storage_option, storage_names[i]) == 0) {
      storage = (bpt_activation_storage)i;
      storage_known = true;
    }
  if (!storage_known) {
    fprintf(stderr, "error: --storage must be compute, f16, bf16 or fp8\n%s", usage);
    return 2;
  }
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (example_option(argc, argv, "--backend")) context_options.backend = example_option(argc, argv, "--backend");
  e.seed = context_options.seed;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &e.context));
  example_metrics *metrics = example_metrics_open(argc, argv, e.context, "resnet");
  EXAMPLE_CHECK(e.context, bpt_dataset_load_idx_directory(e.context, data, "train", &e.train));
  EXAMPLE_CHECK(e.context, bpt_dataset_load_idx_directory(e.context, data, "t10k", &e.test));
  e.classes = example_class_count(argc, argv, e.context, e.train, e.test, 10);
  EXAMPLE_CHECK(e.context, bpt_dataset_set_normalization(e.train, 0.2860f, 0.3530f));
  EXAMPLE_CHECK(e.context, bpt_dataset_set_normalization(e.test, 0.2860f, 0.3530f));
  const int store_16bit = example_store_16bit(argc, argv);
  if (store_16bit >= 0 && compute_dtype != BPT_DTYPE_BF16) {
    fprintf(stderr, "error: --store-16bit and --store-f32 work with --dtype bf16\n%s", usage);
    return 2;
  }
  build_resnet(&e, depth, compute_dtype, storage, store_16bit);
  if (example_flag(argc, argv, "--summary")) example_print_summary(e.graph);
  example_banner(e.context, "ResNet-%ld (%lld parameters) on %lld training and %lld test samples from %s", depth,
                 (long long)bpt_graph_parameter_count(e.graph), (long long)bpt_dataset_size(e.train),
                 (long long)bpt_dataset_size(e.test), data);

  const char *eval_path = example_option(argc, argv, "--eval");
  if (eval_path) {
    cnn_example_load(&e, eval_path);
    evaluate(&e, eval_path, example_flag(argc, argv, "--fold"));
  } else {
    bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
    optimizer_options.kind = BPT_OPTIMIZER_SGD;
    optimizer_options.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
    optimizer_options.nesterov = 1;
    optimizer_options.weight_decay = (float)example_option_double(argc, argv, "--weight-decay", 5e-4);
    bpt_optimizer *optimizer = NULL;
    EXAMPLE_CHECK(e.context, bpt_optimizer_create(e.graph, &optimizer_options, &optimizer));
    EXAMPLE_CHECK(e.context, bpt_optimizer_no_decay_on_vectors(optimizer));
    const int64_t steps_per_epoch = bpt_dataset_batch_count(e.train, e.batch);
    bpt_schedule_options schedule = bpt_schedule_options_default();
    schedule.kind = BPT_SCHEDULE_COSINE;
    schedule.base_learning_rate = (float)example_option_double(argc, argv, "--lr", 0.1);
    schedule.warmup_steps = steps_per_epoch / 2;
    schedule.warmup_start_factor = 0.1f;
    if (epochs > INT64_MAX / steps_per_epoch) {
      fprintf(stderr, "error: --epochs %ld: with %lld steps per epoch the step count would not fit in 64 bits\n",
              epochs, (long long)steps_per_epoch);
      exit(2);
    }
    schedule.total_steps = steps_per_epoch * epochs - schedule.warmup_steps;
    EXAMPLE_CHECK(e.context, bpt_optimizer_set_schedule(optimizer, &schedule));

    const double start = example_seconds();
    const bpt_train_result result = cnn_example_fit(&e, optimizer, epochs, example_metrics_csv(metrics), true);
    printf("final test accuracy: %.2f%% after %ld epochs, %.1f s of training (%.0f samples/s), %.1f s in all\n",
           100.0 * result.last.validation_accuracy, epochs, result.train_seconds,
           (double)epochs * (double)bpt_dataset_size(e.train) / result.train_seconds, example_seconds() - start);
    const char *save_path = example_option(argc, argv, "--save");
    if (save_path) cnn_example_save(&e, save_path);
    bpt_optimizer_destroy(optimizer);
  }
  example_export_onnx(argc, argv, e.context, e.graph, 0.2860f, 0.3530f);
  const int status = example_metrics_close(metrics);
  bpt_graph_destroy(e.graph);
  bpt_dataset_destroy(e.train);
  bpt_dataset_destroy(e.test);
  bpt_context_destroy(e.context);
  return status;
}
