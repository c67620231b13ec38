/* Training throughput and peak memory of the 784-512-256-10 MLP (SGD lr 0.05, momentum 0.9) on
 * Fashion-MNIST, for one batch size per process so peak RSS belongs to that run alone.
 * Prints one line: "libbptrain batch=B samples_per_second=S peak_rss_mb=M loss=L dtype=D unit=U
 * activation_bytes_per_sample=A f32_activation_bytes_per_sample=F", U naming what multiplied (the f32 BLAS, or
 * the bf16 policy's GEMM: native AVX512_BF16 or emulated), A and F the planned activation memory as stored and
 * as it would be with every activation in f32 (bpt_graph_memory).
 *
 *   mlp_train_bench --batch 128 [--samples 60000] [--seconds S] [--threads 2] [--data DIR] [--dtype f32|bf16]
 * --dtype bf16 trains under the bf16 precision policy (bpt_graph_set_precision with its other defaults);
 * --store-16bit / --store-f32 set store_activations_16bit to 1 / 0 (activations and gradients kept as bf16 where
 * the kernels allow, or f32 buffers rounded in place); without either, the library's default (16-bit on the CPU).
 * --seconds ends the timed steps early once S seconds have passed (bench/shared_cores.sh, whose slowest runs
 * would otherwise take minutes); the rate counts the steps that ran.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "example_util.h"

int main(int argc, char **argv) {
  static const char *const valued[] = {"--batch", "--samples", "--seconds", "--threads", "--data", "--dtype", NULL};
  static const char *const flags[] = {"--store-16bit", "--store-f32", NULL};
  example_check_arguments(argc, argv, valued, flags,
                          "usage: mlp_train_bench --batch N [--samples N] [--seconds S] [--threads N] [--data DIR]"
                          " [--dtype f32|bf16] [--store-16bit|--store-f32]\n");
  const char *dtype = example_option(argc, argv, "--dtype");
  if (!dtype) dtype = "f32";
  if (strcmp(dtype, "f32") != 0 && strcmp(dtype, "bf16") != 0) {
    fprintf(stderr, "mlp_train_bench: --dtype must be f32 or bf16, not %s\n", dtype);
    return 2;
  }
  const bool bf16 = strcmp(dtype, "bf16") == 0;
  long batch = example_option_long(argc, argv, "--batch", 128);
  long samples = example_option_long(argc, argv, "--samples", 60000);
  long seconds_limit = example_option_long(argc, argv, "--seconds", 0);
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = (int)example_option_long(argc, argv, "--threads", 2);
  bpt_context *context;
  EXAMPLE_CHECK(NULL, bpt_context_create(&options, &context));
  bpt_dataset *train;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "train", &train));
  int64_t features = bpt_dataset_sample_size(train);

  bpt_graph *graph;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  static const int64_t widths[2] = {512, 256};
  example_classifier mlp;
  EXAMPLE_CHECK(context, example_build_mlp(graph, features, widths, 2, 10, &mlp));
  bpt_node *images = mlp.images, *labels = mlp.labels, *loss = mlp.loss;
  if (bf16) {
    bpt_precision_options precision = bpt_precision_options_default();
    precision.compute_dtype = BPT_DTYPE_BF16;
    precision.store_activations_16bit = example_store_16bit(argc, argv);
    EXAMPLE_CHECK(context, bpt_graph_set_precision(graph, &precision));
  }
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, batch));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = 0.05f;
  optimizer_options.momentum = 0.9f;
  bpt_optimizer *optimizer;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  int64_t dims[2] = {batch, features};
  bpt_tensor *x, *y;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &y));
  EXAMPLE_CHECK(context, bpt_dataset_shuffle(train, 1));

  /* Full batches only, so every timed step does the same work; the first 20 warm up caches and threads (5
   * in a run bounded by time, where a slow configuration would spend the budget warming up). */
  int64_t full_batches = bpt_dataset_size(train) / batch;
  long steps = samples / batch, warmup = seconds_limit > 0 ? 5 : 20, step = 0;
  double start = 0.0;
  for (; step < warmup + steps; step++) {
    if (step == warmup) start = example_seconds();
    if (seconds_limit > 0 && step > warmup && example_seconds() - start >= (double)seconds_limit) break;
    EXAMPLE_CHECK(context, bpt_dataset_batch(train, step % full_batches, batch, x, y));
    EXAMPLE_CHECK(context, bpt_graph_set_input(graph, images, x));
    EXAMPLE_CHECK(context, bpt_graph_set_input(graph, labels, y));
    EXAMPLE_CHECK(context, bpt_graph_forward(graph));
    EXAMPLE_CHECK(context, bpt_graph_backward(graph));
    EXAMPLE_CHECK(context, bpt_optimizer_step(optimizer));
  }
  float final_loss;
  EXAMPLE_CHECK(context, bpt_graph_loss(graph, &final_loss));
  double seconds = example_seconds() - start;
  steps = step - warmup;
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  /* The unit, with spaces made underscores so the line stays key=value. */
  bpt_compute_info info = {.size = sizeof info};
  char unit[128] = "unknown";
  if (bpt_cpu_compute_info(&info) == BPT_OK) {
    if (bf16)
      snprintf(unit, sizeof unit, "bf16_gemm:%s", info.bf16_gemm);
    else
      snprintf(unit, sizeof unit, "%s:%s", info.gemm, info.blas_core);
  }
  for (char *c = unit; *c; c++)
    if (*c == ' ') *c = '_';
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  EXAMPLE_CHECK(context, bpt_graph_memory(graph, &memory));
  printf("libbptrain batch=%ld samples_per_second=%.0f peak_rss_mb=%.1f loss=%.4f dtype=%s unit=%s "
         "activation_bytes_per_sample=%.0f f32_activation_bytes_per_sample=%.0f\n",
         batch, (double)(steps * batch) / seconds, (double)usage.ru_maxrss / 1024.0, final_loss, dtype, unit,
         (double)memory.activation_bytes / (double)batch, (double)memory.activation_bytes_f32 / (double)batch);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(train);
  bpt_context_destroy(context);
  return 0;
}
