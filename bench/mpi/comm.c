/* Comm layer benchmark, run as 2 MPI ranks (bench/comm.sh). Two measurements, each side by side in one run
 * with the candidates interleaved round by round so machine noise hits both alike:
 *   1. bpt_comm_allreduce against MPI_Allreduce (and MPI_Iallreduce + MPI_Test, what a naive non-blocking
 *      design would use) on the same f32 buffers, 1 MiB (or --min-bytes) to 64 MiB: the fastest and the
 *      median round of each and our overhead on both (on a loaded machine the fastest round is the better
 *      estimate of the cost).
 *   2. Data-parallel step time (forward + backward + all-reduce + SGD) of an MLP with 6.8 M parameters,
 *      with buckets overlapped with backward (moved by the progress thread, or only by polls between
 *      backward nodes), started after backward, and without communication at all.
 *
 *   mpirun -np 2 comm_bench [--rounds N] [--steps N] [--batch N] [--threads N] [--rotate 0|1] [--min-bytes N]
 * The all-reduce candidates' order rotates round by round (the default, --rotate 1), so each follows each of
 * the others equally often: in a fixed order (--rotate 0: MPI_Allreduce, ours, MPI_Iallreduce) ours always
 * ran right after MPI_Allreduce, and measured about 25% slower at 4 MiB there than after itself, whatever
 * the ring's segment size (a cache effect of the order, not a cost of the ring).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bptrain/comm_mpi.h"

#define CHECK(context, expression)                                                                                     \
  do {                                                                                                                 \
    bpt_status check_status_ = (expression);                                                                           \
    if (check_status_ != BPT_OK) {                                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expression, bpt_context_last_error(context));            \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                                    \
    }                                                                                                                  \
  } while (0)

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_doubles);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* CPU time of the calling thread: the work of the step itself, whatever share of the machine it got. */
static double thread_cpu_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static long option(int argc, char **argv, const char *name, long fallback) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
  return fallback;
}

static void allreduce_overhead(bpt_context *context, bpt_comm *comm, int rounds, bool rotate, int64_t min_bytes) {
  int rank = bpt_comm_rank(comm);
  if (rank == 0)
    printf("all-reduce, f32 sum, %d ranks, %d rounds (candidates interleaved, %s order); each cell: fastest / median "
           "ms\n%10s %18s %18s %18s %18s\n",
           bpt_comm_size(comm), rounds, rotate ? "rotating" : "fixed", "bytes", "MPI_Allreduce", "bpt (ours)",
           "MPI_Iallreduce", "ours vs MPI");
  for (int64_t bytes = min_bytes; bytes <= (64 << 20); bytes *= 4) {
    int64_t count = bytes / 4;
    float *buffer = malloc((size_t)bytes);
    for (int64_t i = 0; i < count; i++)
      buffer[i] = (float)(i % 17) * 0.25f;
    double *times[3];
    for (int c = 0; c < 3; c++)
      times[c] = malloc((size_t)rounds * sizeof(double));
    for (int round = -2; round < rounds; round++) { /* two warm-up rounds */
      for (int slot = 0; slot < 3; slot++) {
        /* Each candidate finds the caches as the one before it left them: rotating gives every candidate
         * every predecessor equally often. */
        int candidate = rotate ? (slot + round + 3) % 3 : slot;
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        if (candidate == 0) {
          MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else if (candidate == 1) {
          CHECK(context, bpt_comm_allreduce(comm, buffer, count, BPT_DTYPE_F32, BPT_REDUCE_SUM));
        } else {
          MPI_Request request;
          int done = 0;
          MPI_Iallreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
          while (!done)
            MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        }
        double elapsed = MPI_Wtime() - start, slowest;
        MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (round >= 0) times[candidate][round] = slowest;
        for (int64_t i = 0; i < count; i++)
          buffer[i] = (float)(i % 17) * 0.25f; /* keep values bounded */
      }
    }
    double middle[3], fastest[3];
    for (int c = 0; c < 3; c++) {
      middle[c] = median(times[c], rounds); /* sorts, so the fastest is first */
      fastest[c] = times[c][0];
    }
    if (rank == 0)
      printf("%10lld %8.3f / %7.3f %8.3f / %7.3f %8.3f / %7.3f %+8.1f%% / %+6.1f%%\n", (long long)bytes,
             1e3 * fastest[0], 1e3 * middle[0], 1e3 * fastest[1], 1e3 * middle[1], 1e3 * fastest[2], 1e3 * middle[2],
             100.0 * (fastest[1] / fastest[0] - 1.0), 100.0 * (middle[1] / middle[0] - 1.0));
    for (int c = 0; c < 3; c++)
      free(times[c]);
    free(buffer);
  }
}

typedef struct trainer {
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_data_parallel *parallel;
} trainer;

enum { OVERLAP_THREAD, OVERLAP_POLLING, AFTER_BACKWARD, NO_COMMUNICATION, MODES };

static void build(bpt_context *context, bpt_comm *comm, bpt_comm *polling, int mode, int64_t batch, trainer *t) {
  const int64_t features = 784;
  bpt_node *x, *labels, *h, *loss;
  CHECK(context, bpt_graph_create(context, &t->graph));
  CHECK(context, bpt_graph_input(t->graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  CHECK(context, bpt_graph_input(t->graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  CHECK(context, bpt_layer_linear(t->graph, "fc1", x, 2048, BPT_INIT_HE_UNIFORM, &h));
  CHECK(context, bpt_relu(t->graph, "relu1", h, &h));
  CHECK(context, bpt_layer_linear(t->graph, "fc2", h, 2048, BPT_INIT_HE_UNIFORM, &h));
  CHECK(context, bpt_relu(t->graph, "relu2", h, &h));
  CHECK(context, bpt_layer_linear(t->graph, "fc3", h, 512, BPT_INIT_HE_UNIFORM, &h));
  CHECK(context, bpt_relu(t->graph, "relu3", h, &h));
  CHECK(context, bpt_layer_linear(t->graph, "fc4", h, 10, BPT_INIT_HE_UNIFORM, &h));
  CHECK(context, bpt_softmax_cross_entropy(t->graph, "loss", h, labels, &loss));
  CHECK(context, bpt_graph_compile(t->graph, loss, batch));
  bpt_optimizer_options o = bpt_optimizer_options_default();
  o.momentum = 0.9f;
  CHECK(context, bpt_optimizer_create(t->graph, &o, &t->optimizer));
  t->parallel = NULL;
  if (mode != NO_COMMUNICATION) {
    bpt_data_parallel_options options = bpt_data_parallel_options_default();
    options.bucket_bytes = (size_t)4 << 20; /* several buckets, so that there is something to overlap */
    options.overlap = mode != AFTER_BACKWARD;
    CHECK(context,
          bpt_data_parallel_create(t->graph, mode == OVERLAP_POLLING ? polling : comm, &options, &t->parallel));
  }
  bpt_tensor *images, *targets;
  int64_t dims[2] = {batch, features};
  CHECK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &images));
  CHECK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &targets));
  float *pixels = bpt_tensor_data(images);
  int32_t *classes = bpt_tensor_data(targets);
  for (int64_t i = 0; i < batch * features; i++)
    pixels[i] = (float)((i * 31) % 255) / 255.0f;
  for (int64_t i = 0; i < batch; i++)
    classes[i] = (int32_t)(i % 10);
  CHECK(context, bpt_graph_set_input(t->graph, x, images));
  CHECK(context, bpt_graph_set_input(t->graph, labels, targets));
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(targets);
}

static void step(bpt_context *context, trainer *t) {
  CHECK(context, bpt_graph_forward(t->graph));
  CHECK(context, bpt_graph_backward(t->graph));
  CHECK(context, bpt_optimizer_step(t->optimizer));
}

static void step_times(bpt_context *context, bpt_comm *comm, bpt_comm *polling, int rounds, int steps, int64_t batch) {
  static const char *const names[] = {"overlapped, progress thread", "overlapped, polling only", "after backward",
                                      "no communication"};
  trainer trainers[MODES];
  for (int mode = 0; mode < MODES; mode++)
    build(context, comm, polling, mode, batch, &trainers[mode]);
  double *times[MODES], *cpu[MODES];
  for (int mode = 0; mode < MODES; mode++) {
    times[mode] = malloc((size_t)rounds * sizeof(double));
    cpu[mode] = malloc((size_t)rounds * sizeof(double));
  }
  for (int round = -1; round < rounds; round++)
    for (int mode = 0; mode < MODES; mode++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double start = MPI_Wtime(), cpu_start = thread_cpu_seconds();
      for (int s = 0; s < steps; s++)
        step(context, &trainers[mode]);
      double elapsed = (MPI_Wtime() - start) / steps, slowest;
      double used = (thread_cpu_seconds() - cpu_start) / steps, most;
      MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&used, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (round >= 0) times[mode][round] = slowest, cpu[mode][round] = most;
    }
  if (bpt_comm_rank(comm) == 0) {
    printf("\ndata-parallel step, MLP 784-2048-2048-512-10 (%lld parameters, %d buckets of <= 4 MiB), batch %lld "
           "per rank, %d threads per rank, median of %d rounds x %d steps\n",
           (long long)bpt_graph_parameter_count(trainers[0].graph),
           bpt_data_parallel_bucket_count(trainers[0].parallel), (long long)batch, bpt_context_num_threads(context),
           rounds, steps);
    double middle[MODES], fastest[MODES], work[MODES];
    for (int mode = 0; mode < MODES; mode++) {
      middle[mode] = median(times[mode], rounds);
      fastest[mode] = times[mode][0];
      work[mode] = median(cpu[mode], rounds);
    }
    printf("  %-28s %20s %20s %24s\n", "", "fastest ms/step", "median ms/step", "main thread CPU ms/step");
    for (int mode = 0; mode < MODES; mode++)
      printf("  %-28s %10.2f (%.2fx) %10.2f (%.2fx) %14.2f (%.2fx)\n", names[mode], 1e3 * fastest[mode],
             fastest[mode] / fastest[NO_COMMUNICATION], 1e3 * middle[mode], middle[mode] / middle[NO_COMMUNICATION],
             1e3 * work[mode], work[mode] / work[NO_COMMUNICATION]);
    printf("  (x: relative to the step without communication)\n");
  }
  for (int mode = 0; mode < MODES; mode++) {
    free(times[mode]);
    free(cpu[mode]);
    bpt_data_parallel_destroy(trainers[mode].parallel);
    bpt_optimizer_destroy(trainers[mode].optimizer);
    bpt_graph_destroy(trainers[mode].graph);
  }
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rounds = (int)option(argc, argv, "--rounds", 15), steps = (int)option(argc, argv, "--steps", 5);
  int64_t batch = option(argc, argv, "--batch", 64);
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = (int)option(argc, argv, "--threads", 1);
  bpt_context *context = NULL;
  CHECK(NULL, bpt_context_create(&context_options, &context));
  bpt_comm *comm = NULL, *polling = NULL;
  bpt_comm_options options = bpt_comm_options_default();
  CHECK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &options, &comm));
  options.progress_thread = 0;
  CHECK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &options, &polling));
  if (provided != MPI_THREAD_MULTIPLE) printf("note: MPI gives no MPI_THREAD_MULTIPLE, so no progress thread\n");
  /* One thread per rank on both sides: a helper thread would also win CPU share on a loaded machine. */
  /* Sizes step by 4 from --min-bytes (64 KiB = 1 << 16 for the network runs, bench/comm-netns.sh); a multiple
   * of 4 bytes, so that it is a whole number of floats. */
  int64_t min_bytes = option(argc, argv, "--min-bytes", 1 << 20);
  if (min_bytes < 4 || min_bytes > (64 << 20) || min_bytes % 4 != 0) {
    fprintf(stderr, "comm_bench: --min-bytes must be a multiple of 4 from 4 to 64 MiB, not %lld\n",
            (long long)min_bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  allreduce_overhead(context, polling, rounds, option(argc, argv, "--rotate", 1) != 0, min_bytes);
  step_times(context, comm, polling, rounds, steps, batch);
  bpt_comm_destroy(polling);
  bpt_comm_destroy(comm);
  bpt_context_destroy(context);
  MPI_Finalize();
  return 0;
}
