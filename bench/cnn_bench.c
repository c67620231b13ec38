/* Training throughput of LeNet-5 and the ResNet of examples/resnet.c on random 1x28x28 batches: samples/s
 * over timed SGD steps after warm-up, and the process's peak resident memory. bench/cnn.sh runs it side by
 * side with the same models in PyTorch (bench/cnn_torch.py).
 *
 *   cnn_bench lenet|resnet8|resnet14|resnet20 [--batch 128] [--threads 2] [--steps 30] [--fold-eval]
 *             [--dtype f32|bf16]     (bf16: the bf16 precision policy; the line names the bf16 GEMM mode)
 *             [--store-16bit|--store-f32] (with bf16: activations stored as bf16, or f32 rounded in place;
 *                                    without either, the library's default: 16-bit on the CPU)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bptrain.h"

#define CHECK(expression)                                                                                              \
  do {                                                                                                                 \
    if ((expression) != BPT_OK) {                                                                                      \
      fprintf(stderr, "error: %s: %s\n", #expression, bpt_context_last_error(context));                                \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* CPU time of the whole process (all threads): on a shared machine it moves far less than wall time. */
static double cpu_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static bpt_node *build(bpt_context *context, bpt_graph *graph, const char *model, bpt_node *x) {
  bpt_node *y;
  if (strcmp(model, "lenet") == 0) {
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
        {BPT_LAYER(BPT_LAYER_LINEAR), .units = 10},
    };
    CHECK(bpt_layer_sequential(graph, "lenet", x, lenet, 12, &y));
    return y;
  }
  int depth = atoi(model + 6);
  if (strncmp(model, "resnet", 6) != 0 || (depth != 8 && depth != 14 && depth != 20)) {
    fprintf(stderr, "unknown model %s\n", model);
    exit(2);
  }
  const bpt_layer_spec stem[] = {{BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 3, .padding = 1},
                                 {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
                                 {BPT_LAYER(BPT_LAYER_RELU)}};
  CHECK(bpt_layer_sequential(graph, "stem", x, stem, 3, &y));
  const int widths[3] = {16, 32, 64};
  for (int stage = 0; stage < 3; stage++)
    for (int block = 0; block < (depth - 2) / 6; block++) {
      char name[32];
      snprintf(name, sizeof name, "s%db%d", stage, block);
      CHECK(bpt_layer_resnet_basic_block(graph, name, y, widths[stage], stage > 0 && block == 0 ? 2 : 1, &y));
    }
  const bpt_layer_spec head[] = {{BPT_LAYER(BPT_LAYER_GLOBAL_AVG_POOL)}, {BPT_LAYER(BPT_LAYER_LINEAR), .units = 10}};
  CHECK(bpt_layer_sequential(graph, "head", y, head, 2, &y));
  return y;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: cnn_bench lenet|resnet8|resnet14|resnet20 [--batch N] [--threads N] [--steps N] [--fold-eval] "
            "[--dtype f32|bf16] [--store-16bit|--store-f32]\n");
    return 2;
  }
  const char *model = argv[1];
  int batch = 128, threads = 2, steps = 30, fold_eval = 0, bf16 = 0, store_16bit = -1;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--fold-eval") == 0)
      fold_eval = 1;
    else if (strcmp(argv[i], "--store-16bit") == 0 || strcmp(argv[i], "--store-f32") == 0)
      store_16bit = strcmp(argv[i], "--store-16bit") == 0;
    else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc && (strcmp(argv[i + 1], "f32") == 0 || strcmp(argv[i + 1], "bf16") == 0))
      bf16 = strcmp(argv[++i], "bf16") == 0;
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (store_16bit >= 0 && !bf16) {
    fprintf(stderr, "--store-16bit and --store-f32 work with --dtype bf16\n");
    return 2;
  }
  if (bpt_context_create(&options, &context) != BPT_OK) return 1;
  bpt_graph *graph;
  bpt_node *x, *labels, *logits, *loss;
  int64_t image[3] = {1, 28, 28};
  CHECK(bpt_graph_create(context, &graph));
  CHECK(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  CHECK(bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  logits = build(context, graph, model, x);
  CHECK(bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  if (bf16) {
    bpt_precision_options precision = bpt_precision_options_default();
    precision.compute_dtype = BPT_DTYPE_BF16;
    precision.store_activations_16bit = store_16bit;
    CHECK(bpt_graph_set_precision(graph, &precision));
  }
  CHECK(bpt_graph_compile(graph, loss, batch));
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  CHECK(bpt_graph_memory(graph, &memory));
  /* On stderr, so bench/cnn.sh's parsing of the result line is unaffected. */
  fprintf(stderr, "activation memory: %.1f MB held for backward, %.1f MB transient, %.1f MB gradients\n",
          memory.activation_bytes_held / 1e6, memory.transient_bytes / 1e6, memory.gradient_bytes / 1e6);
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.01f;
  optimizer_options.momentum = 0.9f;
  bpt_optimizer *optimizer;
  CHECK(bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  int64_t dims[4] = {batch, 1, 28, 28};
  bpt_tensor *images, *label_values;
  CHECK(bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &images));
  CHECK(bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &label_values));
  float *pixels = bpt_tensor_data(images);
  int32_t *classes = bpt_tensor_data(label_values);
  uint64_t state = 1;
  for (int64_t i = 0; i < (int64_t)batch * 784; i++) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    pixels[i] = (float)((state >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  for (int n = 0; n < batch; n++)
    classes[n] = n % 10;
  CHECK(bpt_graph_set_input(graph, x, images));
  CHECK(bpt_graph_set_input(graph, labels, label_values));
  const int warmup = 5;
  double start = 0.0, cpu_start = 0.0;
  for (int step = 0; step < warmup + steps; step++) {
    if (step == warmup) {
      start = seconds();
      cpu_start = cpu_seconds();
    }
    CHECK(bpt_graph_forward(graph));
    CHECK(bpt_graph_backward(graph));
    CHECK(bpt_optimizer_step(optimizer));
  }
  const double elapsed = seconds() - start, cpu_elapsed = cpu_seconds() - cpu_start;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  bpt_compute_info info = {.size = sizeof info};
  CHECK(bpt_cpu_compute_info(&info));
  printf("libbptrain %s batch %d threads %d: %.0f samples/s training, %.0f samples per CPU-second, peak RSS %.1f MB, "
         "dtype %s%s (%s)\n",
         model, batch, threads, (double)steps * batch / elapsed, (double)steps * batch / cpu_elapsed,
         usage.ru_maxrss / 1024.0, bf16 ? "bf16" : "f32",
         memory.activation_bytes < memory.activation_bytes_f32 ? ", stored as bf16" : "",
         bf16 ? info.bf16_gemm : info.gemm);
  if (fold_eval) {
    /* Inference throughput in eval mode, then again after folding batch norms into the convolutions. */
    double rates[2], cpu_rates[2];
    CHECK(bpt_graph_set_training(graph, 0));
    for (int folded = 0; folded < 2; folded++) {
      if (folded) CHECK(bpt_graph_fold_batch_norm(graph, NULL));
      for (int step = 0; step < warmup + 4 * steps; step++) {
        if (step == warmup) {
          start = seconds();
          cpu_start = cpu_seconds();
        }
        CHECK(bpt_graph_forward(graph));
      }
      rates[folded] = 4.0 * steps * batch / (seconds() - start);
      cpu_rates[folded] = 4.0 * steps * batch / (cpu_seconds() - cpu_start);
    }
    printf("libbptrain %s eval: %.0f samples/s (%.0f per CPU-second), with batch norm folded %.0f samples/s (%.0f "
           "per CPU-second): %.2fx (%.2fx per CPU-second)\n",
           model, rates[0], cpu_rates[0], rates[1], cpu_rates[1], rates[1] / rates[0], cpu_rates[1] / cpu_rates[0]);
  }
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(label_values);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return 0;
}
