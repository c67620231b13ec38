/* Trains a 784-512-256-10 ReLU MLP on an MNIST-style IDX data set (Fashion-MNIST by default) with SGD
 * and momentum, printing a progress bar per epoch and the test accuracy after each one.
 *
 *   mnist_mlp [--data DIR] [--epochs 5] [--batch 128] [--lr 0.05] [--momentum 0.9] [--threads N]
 *             [--seed 42] [--backend cpu] [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json]
 */
#include <math.h>
#include <stdlib.h>

#include "example_metrics.h"
#include "example_util.h"

static const char usage[] =
    "usage: mnist_mlp [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--threads N]\n"
    "                 [--seed N] [--backend NAME]\n"
    "  --data DIR   IDX directory with train-* and t10k-* files (default /usr/share/datasets/fashion-mnist)\n"
    EXAMPLE_CLASSES_USAGE
    EXAMPLE_METRICS_USAGE EXAMPLE_ONNX_USAGE;

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data", "--epochs", "--batch", "--lr", "--momentum", "--threads",
                                       "--seed", "--backend", EXAMPLE_METRICS_OPTIONS, "--classes", "--onnx", NULL};
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
  context_options.num_threads = (int)example_option_long(argc, argv, "--threads", 0);
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
  printf("libbptrain %s, backend %s, %d threads: %lld training and %lld test samples from %s\n", bpt_version(),
         bpt_context_backend(context), bpt_context_num_threads(context), (long long)bpt_dataset_size(train),
         (long long)bpt_dataset_size(test), data);
  example_print_compute_info(context);
  fflush(stdout);

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

  int64_t batch_dims[2] = {batch, features};
  bpt_tensor *batch_images = NULL, *batch_labels = NULL;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, batch_dims, &batch_images));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, batch_dims, &batch_labels));

  double accuracy = 0.0, start = example_seconds();
  for (long epoch = 1; epoch <= epochs; epoch++) {
    EXAMPLE_CHECK(context, bpt_dataset_shuffle(train, context_options.seed + (uint64_t)epoch));
    char label[64];
    snprintf(label, sizeof label, "epoch %ld/%ld", epoch, epochs);
    example_progress progress;
    int64_t batches = bpt_dataset_batch_count(train, batch);
    example_progress_start(&progress, label, (long)bpt_dataset_size(train));
    double running_loss = 0.0, loss_sum = 0.0;
    long seen = 0;
    for (int64_t b = 0; b < batches; b++) {
      EXAMPLE_CHECK(context, bpt_dataset_batch(train, b, batch, batch_images, batch_labels));
      EXAMPLE_CHECK(context, bpt_graph_set_input(graph, images, batch_images));
      EXAMPLE_CHECK(context, bpt_graph_set_input(graph, labels, batch_labels));
      EXAMPLE_CHECK(context, bpt_graph_forward(graph));
      EXAMPLE_CHECK(context, bpt_graph_backward(graph));
      EXAMPLE_CHECK(context, bpt_optimizer_step(optimizer));
      float batch_loss;
      EXAMPLE_CHECK(context, bpt_graph_loss(graph, &batch_loss));
      running_loss = b == 0 ? batch_loss : 0.98 * running_loss + 0.02 * batch_loss;
      loss_sum += (double)batch_loss * (double)bpt_tensor_dim(batch_images, 0);
      seen += (long)bpt_tensor_dim(batch_images, 0);
      example_metrics_step(metrics, epoch, batch_loss, bpt_optimizer_learning_rate(optimizer));
      example_progress_update(&progress, seen, running_loss);
    }
    example_progress_finish(&progress, running_loss);
    double test_loss;
    EXAMPLE_CHECK(context, example_accuracy(context, graph, images, labels, logits, test, batch, &accuracy, &test_loss));
    example_metrics_epoch(metrics, epoch, loss_sum / (double)seen, NAN, test_loss, accuracy,
                          bpt_optimizer_learning_rate(optimizer));
    printf("epoch %ld: test accuracy %.2f%%, test loss %.4f, %.1f s elapsed\n", epoch, 100.0 * accuracy, test_loss,
           example_seconds() - start);
    fflush(stdout);
  }
  printf("final test accuracy: %.2f%%\n", 100.0 * accuracy);
  example_export_onnx(argc, argv, context, graph, 0.0f, 1.0f);
  int status = example_metrics_close(metrics);

  bpt_tensor_destroy(batch_images);
  bpt_tensor_destroy(batch_labels);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(train);
  bpt_dataset_destroy(test);
  bpt_context_destroy(context);
  return status;
}
