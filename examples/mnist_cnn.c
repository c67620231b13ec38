/* Trains LeNet-5 on an MNIST-style IDX data set (Fashion-MNIST by default) with SGD and momentum:
 *
 *   conv 6@5x5 pad 2 - ReLU - maxpool 2 - conv 16@5x5 - ReLU - maxpool 2 - fc 120 - ReLU - fc 84 - ReLU - fc 10
 *
 *   mnist_cnn [--data DIR] [--epochs 3] [--batch 128] [--lr 0.05] [--momentum 0.9] [--threads N] [--seed 42]
 *             [--grad-stats] [--summary] [--save FILE] [--eval FILE] [--onnx FILE] [--metrics FILE.csv]
 *             [--plot FILE.png] [--profile FILE.json] [--classes N] [--backend cpu]
 */
#include "cnn_example.h"

static const char usage[] =
    "usage: mnist_cnn [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--threads N] [--seed N]\n"
    "                 [--grad-stats] [--summary] [--save FILE] [--eval FILE] [--backend cpu|cuda|fpga-sim]\n"
    "  --data DIR     IDX directory with train-* and t10k-* files (default /usr/share/datasets/fashion-mnist)\n"
    "  --grad-stats   print per-parameter gradient norms and per-layer activation statistics each epoch\n"
    "  --summary      print the model summary (per-layer parameters, buffers and activation bytes)\n"
    "  --save FILE    write the trained parameters to FILE as a checkpoint\n"
    "  --eval FILE    skip training: load a checkpoint's parameters (by name) and report the test accuracy\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE EXAMPLE_ONNX_USAGE;

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data",    "--epochs", "--batch", "--lr",   "--momentum",
                                       "--threads", "--seed",   "--save",  "--eval", "--classes", "--onnx", "--backend", EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--grad-stats", "--summary", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  const long epochs = example_option_long(argc, argv, "--epochs", 3);
  cnn_example e = {.batch = example_option_long(argc, argv, "--batch", 128),
                   .grad_stats = example_flag(argc, argv, "--grad-stats")};
  if (epochs < 1 || e.batch < 1) {
    fprintf(stderr, "error: --epochs and --batch must be positive\n");
    return 2;
  }
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (example_option(argc, argv, "--backend")) context_options.backend = example_option(argc, argv, "--backend");
  e.seed = context_options.seed;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &e.context));
  example_metrics *metrics = example_metrics_open(argc, argv, e.context, "mnist_cnn");
  EXAMPLE_CHECK(e.context, bpt_dataset_load_idx_directory(e.context, data, "train", &e.train));
  EXAMPLE_CHECK(e.context, bpt_dataset_load_idx_directory(e.context, data, "t10k", &e.test));
  e.classes = example_class_count(argc, argv, e.context, e.train, e.test, 10);
  /* Fashion-MNIST's pixel mean and standard deviation. */
  EXAMPLE_CHECK(e.context, bpt_dataset_set_normalization(e.train, 0.2860f, 0.3530f));
  EXAMPLE_CHECK(e.context, bpt_dataset_set_normalization(e.test, 0.2860f, 0.3530f));
  example_banner(e.context, "LeNet-5 on %lld training and %lld test samples from %s",
                 (long long)bpt_dataset_size(e.train), (long long)bpt_dataset_size(e.test), data);

  int64_t image[3] = {1, 28, 28};
  bpt_node *loss;
  EXAMPLE_CHECK(e.context, bpt_graph_create(e.context, &e.graph));
  EXAMPLE_CHECK(e.context, bpt_graph_input(e.graph, "images", BPT_DTYPE_F32, 3, image, &e.images));
  EXAMPLE_CHECK(e.context, bpt_graph_input(e.graph, "labels", BPT_DTYPE_I32, 0, NULL, &e.labels));
  EXAMPLE_CHECK(e.context, example_build_lenet(e.graph, e.images, e.classes, &e.logits));
  EXAMPLE_CHECK(e.context, bpt_softmax_cross_entropy(e.graph, "loss", e.logits, e.labels, &loss));
  EXAMPLE_CHECK(e.context, bpt_graph_compile(e.graph, loss, e.batch));
  if (example_flag(argc, argv, "--summary")) example_print_summary(e.graph);
  printf("model: %lld parameters\n", (long long)bpt_graph_parameter_count(e.graph));
  fflush(stdout);

  double test_loss = 0.0, accuracy = 0.0;
  const char *eval_path = example_option(argc, argv, "--eval");
  if (eval_path) {
    cnn_example_load(&e, eval_path);
    double start = example_seconds();
    accuracy = cnn_example_test_accuracy(&e, &test_loss);
    printf("%s: test accuracy %.2f%%, test loss %.4f (%.2f s)\n", eval_path, 100.0 * accuracy, test_loss,
           example_seconds() - start);
  } else {
    bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
    optimizer_options.kind = BPT_OPTIMIZER_SGD;
    optimizer_options.learning_rate = (float)example_option_double(argc, argv, "--lr", 0.05);
    optimizer_options.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
    bpt_optimizer *optimizer = NULL;
    EXAMPLE_CHECK(e.context, bpt_optimizer_create(e.graph, &optimizer_options, &optimizer));
    const bpt_train_result result = cnn_example_fit(&e, optimizer, epochs, example_metrics_csv(metrics), false);
    printf("final test accuracy: %.2f%% after %ld epochs, %.1f s of training (%.0f samples/s)\n",
           100.0 * result.last.validation_accuracy, epochs, result.train_seconds,
           (double)epochs * (double)bpt_dataset_size(e.train) / result.train_seconds);
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
