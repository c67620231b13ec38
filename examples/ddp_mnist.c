/* Trains the 784-512-256-10 MLP of mnist_mlp data-parallel: every MPI rank runs the same graph on its share
 * of each global batch and the gradients are averaged over MPI in buckets overlapped with backward.
 *
 *   mpirun -np 2 ddp_mnist [--data DIR] [--epochs 2] [--batch 128] [--lr 0.05] [--momentum 0.9]
 *          [--threads N] [--seed 42] [--bucket-kb 25600] [--accumulate 1] [--compression none|f16|int8|topk]
 *          [--average-every 1] [--max-staleness 0] [--timeout 300] [--no-overlap] [--metrics FILE.csv] [--plot FILE.png] [--profile FILE.json]
 *          [--classes N] [--backend cpu]
 *
 * --batch is the global batch; each rank takes batch / (ranks * accumulate) samples per micro-batch. Rank 0
 * prints progress and the test accuracy. With --average-every H > 1 (local SGD) the ranks average their
 * parameters every H steps and at each epoch's end, before the evaluation; --max-staleness S lets each averaging
 * run in the background for S steps (bounded staleness). No mpi.h needed: MPI_COMM_WORLD is BPT_COMM_MPI_WORLD.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "example_util.h"

static const char usage[] =
    "usage: mpirun -np N ddp_mnist [--data DIR] [--epochs N] [--batch N] [--lr X] [--momentum X] [--threads N]\n"
    "                 [--seed N] [--bucket-kb N] [--accumulate K] [--compression none|f16|int8|topk]\n"
    "                 [--average-every H] [--max-staleness S] [--timeout SECONDS] [--no-overlap] [--backend cpu|cuda]\n"
    "  --average-every H  local SGD: each rank steps alone, parameters averaged every H steps (default 1:\n"
    "                     gradients averaged every step)\n"
    "  --max-staleness S  with --average-every H: each averaging runs while the ranks train on and is folded in\n"
    "                     S steps later (1 <= S <= H), so no rank is more than S steps ahead (default 0: it blocks)\n"
    "  --batch N    global batch over all ranks and micro-batches (default 128)\n"
    "  --threads N  CPU threads per rank (default: the cores divided among the ranks on this node)\n"
    EXAMPLE_CLASSES_USAGE EXAMPLE_USAGE;

static bpt_compression parse_compression(const char *name) {
  const char *names[] = {"none", "f16", "int8", "topk"};
  for (int i = 0; i < 4; i++)
    if (name && strcmp(name, names[i]) == 0) return (bpt_compression)i;
  fprintf(stderr, "error: --compression is none, f16, int8 or topk\n%s", usage);
  exit(2);
}

/* Open MPI and MPICH tell each process how many ranks share its node; split the cores between them. */
static int default_threads(void) {
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = getenv("MPI_LOCALNRANKS");
  long ranks = local ? strtol(local, NULL, 10) : 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return ranks > 0 && cores / ranks > 0 ? (int)(cores / ranks) : 1;
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--data",       "--epochs",      "--batch",   "--lr",
                                       "--momentum",   "--threads",     "--seed",    "--bucket-kb",
                                       "--accumulate", "--compression", "--timeout", "--classes", "--backend", "--average-every", "--max-staleness",
                                       EXAMPLE_OPTIONS, NULL};
  static const char *const flags[] = {"--no-overlap", NULL};
  example_check_arguments(argc, argv, valued, flags, usage);
  const char *data = example_option(argc, argv, "--data");
  if (!data) data = "/usr/share/datasets/fashion-mnist";
  long epochs = example_option_long(argc, argv, "--epochs", 2);
  long batch = example_option_long(argc, argv, "--batch", 128);
  long accumulate = example_option_long(argc, argv, "--accumulate", 1);
  /* Kilobytes to bytes must not wrap (--bucket-kb -1 was 2^64 - 1024 bytes). */
  long bucket_kb = example_option_long(argc, argv, "--bucket-kb", 25 * 1024);
  if (epochs < 1 || batch < 1 || accumulate < 1 || accumulate > batch || bucket_kb < 1 ||
      bucket_kb > (long)(SIZE_MAX / 2048)) {
    fprintf(stderr, "error: --epochs, --batch, --accumulate (at most --batch) and --bucket-kb (at most %zu) must be "
                    "positive\n", SIZE_MAX / 2048);
    return 2;
  }

  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = example_option_int(argc, argv, "--threads", default_threads());
  context_options.seed = (uint64_t)example_option_long(argc, argv, "--seed", 42);
  if (example_option(argc, argv, "--backend")) context_options.backend = example_option(argc, argv, "--backend");
  bpt_context *context = NULL;
  EXAMPLE_CHECK(NULL, bpt_context_create(&context_options, &context));

  bpt_comm_options comm_options = bpt_comm_options_default();
  comm_options.timeout_seconds = example_option_double(argc, argv, "--timeout", 300.0);
  bpt_comm *comm = NULL;
  EXAMPLE_CHECK(context, bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &comm_options, &comm));
  int rank = bpt_comm_rank(comm), ranks = bpt_comm_size(comm);
  /* Divided in turn: ranks x --accumulate may not fit in a long. */
  long share = batch / ranks / accumulate;
  if (share < 1 || batch % ranks != 0 || batch / ranks % accumulate != 0) {
    if (rank == 0)
      fprintf(stderr, "error: --batch %ld must be a multiple of ranks (%d) x --accumulate (%ld)\n", batch, ranks,
              accumulate);
    bpt_comm_destroy(comm);
    bpt_context_destroy(context);
    return 2;
  }

  /* Rank 0 alone records and profiles: the other ranks run the same steps. */
  example_metrics *metrics = rank == 0 ? example_metrics_open(argc, argv, context, "ddp_mnist") : NULL;
  bpt_dataset *train = NULL, *test = NULL;
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "train", &train));
  EXAMPLE_CHECK(context, bpt_dataset_load_idx_directory(context, data, "t10k", &test));
  int64_t features = bpt_dataset_sample_size(train);
  int64_t classes = example_class_count(argc, argv, context, train, test, 0);
  /* Only whole global batches train, so a batch larger than the set would finish every epoch without a step. */
  if (bpt_dataset_size(train) < batch) {
    if (rank == 0)
      fprintf(stderr, "error: --batch %ld is larger than the %lld training samples: no optimiser step would run\n",
              batch, (long long)bpt_dataset_size(train));
    example_metrics_close(metrics);
    bpt_dataset_destroy(train);
    bpt_dataset_destroy(test);
    bpt_comm_destroy(comm);
    bpt_context_destroy(context);
    return 2;
  }
  if (rank == 0) {
    printf("libbptrain %s: %d ranks over %s, %d threads each; global batch %ld = %d x %ld x %ld micro-batch\n",
           bpt_version(), ranks, bpt_comm_engine(comm), bpt_context_num_threads(context), batch, ranks, accumulate,
           share);
    fflush(stdout);
  }

  bpt_graph *graph = NULL;
  EXAMPLE_CHECK(context, bpt_graph_create(context, &graph));
  static const int64_t widths[2] = {512, 256};
  example_classifier mlp;
  EXAMPLE_CHECK(context, example_build_mlp(graph, features, widths, 2, classes, &mlp));
  bpt_node *images = mlp.images, *labels = mlp.labels, *loss = mlp.loss;
  /* Evaluation runs whole batches through the same graph, so compile for the larger of the two. */
  EXAMPLE_CHECK(context, bpt_graph_compile(graph, loss, batch > share ? batch : share));

  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = (float)example_option_double(argc, argv, "--lr", 0.05);
  optimizer_options.momentum = (float)example_option_double(argc, argv, "--momentum", 0.9);
  bpt_optimizer *optimizer = NULL;
  EXAMPLE_CHECK(context, bpt_optimizer_create(graph, &optimizer_options, &optimizer));

  bpt_data_parallel_options parallel_options = bpt_data_parallel_options_default();
  parallel_options.bucket_bytes = (size_t)bucket_kb * 1024;
  parallel_options.overlap = !example_flag(argc, argv, "--no-overlap");
  parallel_options.accumulation_steps = (int)accumulate;
  const char *compression = example_option(argc, argv, "--compression");
  parallel_options.compression = parse_compression(compression ? compression : "none");
  parallel_options.average_every = (int)example_option_long(argc, argv, "--average-every", 1);
  parallel_options.max_staleness = (int)example_option_long(argc, argv, "--max-staleness", 0);
  bpt_data_parallel *parallel = NULL;
  EXAMPLE_CHECK(context, bpt_data_parallel_create(graph, comm, &parallel_options, &parallel));
  if (rank == 0) printf("%d gradient buckets\n", bpt_data_parallel_bucket_count(parallel));

  int64_t batch_dims[2] = {batch, features};
  bpt_tensor *batch_images = NULL, *batch_labels = NULL;
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, batch_dims, &batch_images));
  EXAMPLE_CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, batch_dims, &batch_labels));

  /* Every rank shuffles with the same seed and takes its own micro-batches of each global batch; all ranks
   * run the same number of steps, dropping the last partial global batch. */
  int64_t steps = bpt_dataset_size(train) / batch;
  if (rank == 0) example_warn_whole_batch((long)steps, (long)(steps * batch));
  double accuracy = 0.0, start = example_seconds();
  for (long epoch = 1; epoch <= epochs; epoch++) {
    EXAMPLE_CHECK(context, bpt_dataset_shuffle(train, context_options.seed + (uint64_t)epoch));
    char label[64];
    snprintf(label, sizeof label, "epoch %ld/%ld", epoch, epochs);
    example_progress progress;
    if (rank == 0) example_progress_start(&progress, label, (long)(steps * batch));
    double running_loss = 0.0;
    for (int64_t step = 0; step < steps; step++) {
      for (long micro = 0; micro < accumulate; micro++) {
        int64_t index = (step * ranks + rank) * accumulate + micro;
        EXAMPLE_CHECK(context, bpt_dataset_batch(train, index, share, batch_images, batch_labels));
        EXAMPLE_CHECK(context, bpt_graph_set_input(graph, images, batch_images));
        EXAMPLE_CHECK(context, bpt_graph_set_input(graph, labels, batch_labels));
        EXAMPLE_CHECK(context, bpt_graph_forward(graph));
        EXAMPLE_CHECK(context, micro == 0 ? bpt_graph_backward(graph) : bpt_graph_backward_accumulate(graph));
      }
      EXAMPLE_CHECK(context, bpt_optimizer_step(optimizer));
      float batch_loss;
      EXAMPLE_CHECK(context, bpt_graph_loss(graph, &batch_loss));
      running_loss = step == 0 ? batch_loss : 0.98 * running_loss + 0.02 * batch_loss;
      if (rank == 0) {
        example_metrics_step(metrics, epoch, batch_loss, bpt_optimizer_learning_rate(optimizer));
        example_progress_update(&progress, (long)((step + 1) * batch), running_loss);
      }
    }
    /* Local SGD: every rank evaluates (and would save) the same model, the ranks' average. */
    if (parallel_options.average_every > 1) EXAMPLE_CHECK(context, bpt_data_parallel_average_parameters(parallel));
    if (rank == 0) {
      example_progress_finish(&progress, running_loss);
      bpt_eval_options evaluation = bpt_eval_options_default();
      evaluation.batch_size = batch;
      bpt_eval_result tested = {.size = sizeof tested};
      EXAMPLE_CHECK(context, bpt_evaluate(graph, test, &evaluation, &tested));
      accuracy = tested.accuracy;
      example_metrics_epoch(metrics, epoch, NAN, NAN, tested.loss, accuracy, bpt_optimizer_learning_rate(optimizer));
      printf("epoch %ld: test accuracy %.2f%%, test loss %.4f, %.1f s elapsed\n", epoch, 100.0 * accuracy, tested.loss,
             example_seconds() - start);
      fflush(stdout);
    }
  }
  if (rank == 0) printf("final test accuracy: %.2f%%\n", 100.0 * accuracy);
  const int status = example_metrics_close(metrics);

  bpt_tensor_destroy(batch_images);
  bpt_tensor_destroy(batch_labels);
  bpt_data_parallel_destroy(parallel);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_dataset_destroy(train);
  bpt_dataset_destroy(test);
  bpt_comm_destroy(comm);
  bpt_context_destroy(context);
  return status;
}
