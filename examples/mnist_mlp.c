/* Trains a 784-512-256-10 ReLU MLP on an MNIST-style IDX data set (Fashion-MNIST by default) with SGD
 * and momentum through bpt_train(), printing a progress bar per epoch and the test accuracy after each one.
 *
 *   mnist_mlp [--data DIR] [--epochs 5] [--batch 128] [--lr 0.05] [--momentum 0.9] [--threads N]
 *             [--seed 42] [--backend cpu] [--save FILE] [--eval FILE] [--onnx FILE] [--metrics FILE.csv]
 *             [--plot FILE.png] [--profile FILE.json] [--classes N]
 *
 * --save writes the trained model as a checkpoint (the one model file, also read by the C++ and Python
 * examples' --eval); --eval FILE skips training and reports FILE's test accuracy.
 */
#include "example_util.h"

static const char usage[] =
    "usage: mnist_mlp [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--threads N]\n"
    "                 [--seed N] [--backend NAME] [--save FILE] [--eval FILE]\n"
    "  --data DIR   IDX directory with train-* and t10k-* files (default /usr/share/datasets/fashion-mnist)\n"
    "  --save FILE  write the trained model to FILE as a checkpoint\n"
    "  --eval FILE  skip training: load a checkpoint's parameters (by name) and report the test accuracy\n"
    EXAMPLE_CLASSES_USAGE
    EXAMPLE_USAGE EXAMPLE_ONNX_USAGE;

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data", "--epochs", "--batch", "--lr", "--momentum", "--threads",
                                       "--seed", "--backend", "--classes", "--onnx", "--save", "--eval", EXAMPLE_OPTIONS,
                                       NULL};
  example_check_arguments(argc, argv, valued, NULL, usage);
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  long epochs = example_option_long(argc, argv, "--epochs", 5);
  long batch = example_option_long(argc, argv, "--batch", 128);
  if (epochs < 1 || batch < 1) {
    fprintf(stderr, "error: --epochs and --batch must be positive\n");
    return 2;
  }

  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", 0);
  context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  const char *backend = example_option(argc, argv, "--backend");
  if (backend) context_options.backend = backend;
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &context));
  example_metrics *metrics = example_metrics_open(argc, argv, context, "mnist_mlp");

  bpt_dataset *train = NULL, *test = NULL;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "train", &train));
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "t10k", &test));
  int64_t features = bpt_dataset_sample_size(train);
  int64_t classes = example_class_count(argc, argv, context, train, test, 0);
  example_banner(context, "%lld training and %lld test samples from %s", (long long)bpt_dataset_size(train),
                 (long long)bpt_dataset_size(test), data);

  bpt_graph *graph = NULL;
  bpt_node *images, *labels, *hidden, *logits, *loss;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  EXAMPLE_CHECK(context, bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &images));
  EXAMPLE_CHECK(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc1", images, 512, BPT_INIT_HE_UNIFORM, &hidden));
  EXAMPLE_CHECK(context, bpt_relu(graph, "relu1", hidden, &hidden));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc2", hidden, 256, BPT_INIT_HE_UNIFORM, &hidden));
  EXAMPLE_CHECK(context, bpt_relu(graph, "relu2", hidden, &hidden));
  EXAMPLE_CHECK(context, bpt_layer_linear(graph, "fc3", hidden, classes, BPT_INIT_HE_UNIFORM, &logits));
  EXAMPLE_CHECK(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, batch));

  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.kind = BPT_OPTIMIZER_SGD;
  optimizer_options.learning_rate = (float)example_option_double(argc, argv, "--lr", 0.05);
  optimizer_options.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  const char *eval_path = example_option(argc, argv, "--eval");
  if (eval_path) {
    /* Parameters only, strictly: a file of another model fails naming the first parameter that differs. */
    bpt_checkpoint_load_options load_options = bpt_checkpoint_load_options_default();
    EXAMPLE_CHECK(context, bpt_checkpoint_load_with_options(graph, eval_path, NULL, &load_options, NULL));
    bpt_eval_options eval_options = bpt_eval_options_default();
    eval_options.batch_size = batch;
    bpt_eval_result tested = {.size = sizeof tested};
    EXAMPLE_CHECK(context, bpt_evaluate(graph, test, &eval_options, &tested));
    printf("%s: test accuracy %.2f%%, test loss %.4f\n", eval_path, 100.0 * tested.accuracy, tested.loss);
  } else {
    example_progress bar = {0};
    bpt_train_options train_options =
        example_train_options(epochs, context_options.seed, test, &bar, example_metrics_csv(metrics));
    bpt_train_result result = {.size = sizeof result};
    EXAMPLE_CHECK(context, bpt_train(graph, optimizer, train, &train_options, &result));
    printf("final test accuracy: %.2f%%\n", 100.0 * result.last.validation_accuracy);
    const char *save_path = example_option(argc, argv, "--save");
    if (save_path) {
      EXAMPLE_CHECK(context, bpt_checkpoint_save(graph, save_path, NULL));
      printf("saved the model as a checkpoint to %s\n", save_path);
    }
  }
  example_export_onnx(argc, argv, context, graph, 0.0f, 1.0f);
  int status = example_metrics_close(metrics);

  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(train);
  bpt_dataset_destroy(test);
  bpt_context_destroy(context);
  return status;
}
