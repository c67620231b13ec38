/* Data-parallel training over MPI: k SGD steps on all ranks, each with its share of a global batch B, must
 * end with the parameters of one process training on the whole batch B (within float tolerance), for one
 * bucket and for many small ones, with and without overlap, and with gradient accumulation. Compressed
 * runs must keep every rank's parameters bit-identical. Also the state errors of accumulation. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/comm_mpi.h"
#include "core/graph.h"
#include "mpi_check.h"

enum { features = 20, classes = 10, global_batch = 16, steps = 5 };

typedef struct model {
  bpt_graph *graph;
  bpt_node *x, *labels, *loss;
  bpt_optimizer *optimizer;
  bpt_tensor *x_batch, *label_batch;
} model;

static float inputs[steps][global_batch][features];
static int32_t targets[steps][global_batch];

static void make_data(void) {
  uint64_t state = 99;
  for (int s = 0; s < steps; s++)
    for (int b = 0; b < global_batch; b++) {
      float best = -1e9f;
      for (int f = 0; f < features; f++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        inputs[s][b][f] = (float)((state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
      }
      for (int c = 0; c < classes; c++) { /* label: argmax of a fixed linear map, so the task is learnable */
        float score = 0.0f;
        for (int f = 0; f < features; f++)
          score += inputs[s][b][f] * (float)(((c + 3) * (f + 5)) % 7 - 3);
        if (score > best) best = score, targets[s][b] = c;
      }
    }
}

/* precision: NULL for f32 training. */
static void build_with_precision(bpt_context *context, int64_t batch, const bpt_precision_options *precision,
                                 model *m) {
  memset(m, 0, sizeof *m);
  int64_t dims = features;
  bpt_node *h;
  MPI_CHECK_OK(context, bpt_graph_create(context, &m->graph));
  if (precision) MPI_CHECK_OK(context, bpt_graph_set_precision(m->graph, precision));
  MPI_CHECK_OK(context, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &dims, &m->x));
  MPI_CHECK_OK(context, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
  MPI_CHECK_OK(context, bpt_layer_linear(m->graph, "fc1", m->x, 64, BPT_INIT_HE_UNIFORM, &h));
  MPI_CHECK_OK(context, bpt_relu(m->graph, "relu1", h, &h));
  MPI_CHECK_OK(context, bpt_layer_linear(m->graph, "fc2", h, 48, BPT_INIT_HE_UNIFORM, &h));
  MPI_CHECK_OK(context, bpt_relu(m->graph, "relu2", h, &h));
  MPI_CHECK_OK(context, bpt_layer_linear(m->graph, "fc3", h, classes, BPT_INIT_HE_UNIFORM, &h));
  MPI_CHECK_OK(context, bpt_softmax_cross_entropy(m->graph, "loss", h, m->labels, &m->loss));
  MPI_CHECK_OK(context, bpt_graph_compile(m->graph, m->loss, batch));
  bpt_optimizer_options o = bpt_optimizer_options_default();
  o.learning_rate = 0.1f;
  o.momentum = 0.9f;
  MPI_CHECK_OK(context, bpt_optimizer_create(m->graph, &o, &m->optimizer));
  int64_t x_dims[2] = {batch, features};
  MPI_CHECK_OK(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, x_dims, &m->x_batch));
  MPI_CHECK_OK(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, x_dims, &m->label_batch));
}

static void build(bpt_context *context, int64_t batch, model *m) { build_with_precision(context, batch, NULL, m); }

static void destroy(model *m) {
  bpt_tensor_destroy(m->x_batch);
  bpt_tensor_destroy(m->label_batch);
  bpt_optimizer_destroy(m->optimizer);
  bpt_graph_destroy(m->graph);
}

/* Runs forward and backward on samples [first, first + count) of step s. */
static void forward_backward(bpt_context *context, model *m, int s, int first, int count, int accumulate) {
  MPI_CHECK_OK(context, bpt_tensor_set_batch(m->x_batch, count));
  MPI_CHECK_OK(context, bpt_tensor_set_batch(m->label_batch, count));
  memcpy(bpt_tensor_data(m->x_batch), inputs[s][first], sizeof(float) * features * (size_t)count);
  memcpy(bpt_tensor_data(m->label_batch), &targets[s][first], sizeof(int32_t) * (size_t)count);
  MPI_CHECK_OK(context, bpt_graph_set_input(m->graph, m->x, m->x_batch));
  MPI_CHECK_OK(context, bpt_graph_set_input(m->graph, m->labels, m->label_batch));
  MPI_CHECK_OK(context, bpt_graph_forward(m->graph));
  MPI_CHECK_OK(context, accumulate ? bpt_graph_backward_accumulate(m->graph) : bpt_graph_backward(m->graph));
}

/* One process, whole batch: the parameters data-parallel training must reproduce. */
static float *reference_parameters(bpt_context *context, int64_t *count) {
  model m;
  build(context, global_batch, &m);
  for (int s = 0; s < steps; s++) {
    forward_backward(context, &m, s, 0, global_batch, 0);
    MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  }
  *count = bpt_graph_parameter_count(m.graph);
  float *values = malloc((size_t)*count * sizeof *values);
  MPI_CHECK(values != NULL, "out of memory");
  MPI_CHECK_OK(context, bpt_graph_read_parameters(m.graph, values, *count));
  destroy(&m);
  return values;
}

/* Trains data-parallel with the options and returns the parameters, checking that all ranks agree. */
static float *train(bpt_context *context, bpt_comm *comm, const bpt_data_parallel_options *options, int *buckets) {
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm);
  int micro = options->accumulation_steps, share = global_batch / size / micro;
  model m;
  build(context, share, &m);
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, options, &dp));
  *buckets = bpt_data_parallel_bucket_count(dp);
  for (int s = 0; s < steps; s++) {
    for (int k = 0; k < micro; k++)
      forward_backward(context, &m, s, (rank * micro + k) * share, share, k > 0);
    MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  }
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *values = malloc((size_t)count * sizeof *values), *first = malloc((size_t)count * sizeof *first);
  MPI_CHECK(values && first, "out of memory");
  MPI_CHECK_OK(context, bpt_graph_read_parameters(m.graph, values, count));
  memcpy(first, values, (size_t)count * sizeof *values);
  MPI_Bcast(first, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_CHECK(memcmp(first, values, (size_t)count * sizeof *values) == 0, "rank %d's parameters differ from rank 0's",
            rank);
  free(first);
  bpt_data_parallel_destroy(dp);
  destroy(&m);
  return values;
}

static double largest_difference(const float *a, const float *b, int64_t count) {
  double largest = 0.0;
  for (int64_t i = 0; i < count; i++) {
    MPI_CHECK(isfinite(a[i]), "parameter %lld is %g", (long long)i, a[i]);
    double difference = fabs((double)a[i] - (double)b[i]);
    if (difference > largest) largest = difference;
  }
  return largest;
}

/* Creation copies rank 0's parameters and registered buffers (non-trainable state) to every rank. */
static void initial_state_from_rank_0(bpt_context *context, bpt_comm *comm) {
  model m;
  build(context, 2, &m);
  int rank = bpt_comm_rank(comm);
  int64_t count = bpt_graph_parameter_count(m.graph);
  float *values = malloc((size_t)count * sizeof *values);
  MPI_CHECK(values != NULL, "out of memory");
  for (int64_t i = 0; i < count; i++)
    values[i] = (float)(rank * 1000 + i % 97);
  MPI_CHECK_OK(context, bpt_graph_write_parameters(m.graph, values, count));
  float statistics[5]; /* the CPU backend's memory is host memory */
  for (int i = 0; i < 5; i++)
    statistics[i] = (float)(rank + i);
  MPI_CHECK_OK(context, bpt_graph_register_buffer(m.graph, "statistics", statistics, 5));
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, NULL, &dp));
  MPI_CHECK_OK(context, bpt_graph_read_parameters(m.graph, values, count));
  for (int64_t i = 0; i < count; i++)
    MPI_CHECK(values[i] == (float)(i % 97), "parameter %lld not rank 0's", (long long)i);
  for (int i = 0; i < 5; i++)
    MPI_CHECK(statistics[i] == (float)i, "buffer value %d is %g", i, statistics[i]);
  bpt_data_parallel_destroy(dp);
  free(values);
  destroy(&m);
}

/* With the profiler on, every bucket's all-reduce appears as a comm region. */
static void profiled(bpt_context *context, bpt_comm *comm) {
  model m;
  build(context, 4, &m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.bucket_bytes = 2048;
  options.first_bucket_bytes = 512;
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, &options, &dp));
  MPI_CHECK_OK(context, bpt_profiler_enable(context, 1));
  forward_backward(context, &m, 0, 4 * bpt_comm_rank(comm), 4, 0);
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  static char summary[1 << 16];
  bpt_profiler_summary(context, summary, sizeof summary);
  MPI_CHECK(strstr(summary, "mpi all-reduce (f32)") != NULL, "no comm region in the profile:\n%s", summary);
  MPI_CHECK_OK(context, bpt_profiler_enable(context, 0));
  bpt_data_parallel_destroy(dp);
  destroy(&m);
}

/* Reads m's parameters into a new array. */
static float *parameters_of(bpt_context *context, model *m, int64_t count) {
  float *values = malloc((size_t)count * sizeof *values);
  MPI_CHECK(values != NULL, "out of memory");
  MPI_CHECK_OK(context, bpt_graph_read_parameters(m->graph, values, count));
  return values;
}

/* Local SGD (average_every H): every rank steps on its own share and the parameters are averaged after each
 * H-th step. The reference runs every rank's model in this one process and averages by hand (each rank's
 * values times 1/ranks, summed in rank order, as the reducer does); momentum stays per rank on both sides. */
static void local_sgd(bpt_context *context, bpt_comm *comm) {
  enum { every = 2, local_steps = 4 };
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm), share = global_batch / size;
  model reference[8];
  MPI_CHECK(size <= 8, "at most 8 ranks");
  for (int r = 0; r < size; r++)
    build(context, share, &reference[r]);
  int64_t count = bpt_graph_parameter_count(reference[0].graph);
  float *average = malloc((size_t)count * sizeof *average);
  MPI_CHECK(average != NULL, "out of memory");
  model m;
  build(context, share, &m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.bucket_bytes = 4096; /* several ranges, as the gradient buckets would be */
  options.first_bucket_bytes = 1024;
  options.average_every = every;
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, &options, &dp));
  for (int s = 0; s < local_steps; s++) {
    forward_backward(context, &m, s, rank * share, share, 0);
    MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
    for (int r = 0; r < size; r++) {
      forward_backward(context, &reference[r], s, r * share, share, 0);
      MPI_CHECK_OK(context, bpt_optimizer_step(reference[r].optimizer));
    }
    bool averaged = (s + 1) % every == 0;
    if (averaged) {
      memset(average, 0, (size_t)count * sizeof *average);
      for (int r = 0; r < size; r++) {
        float *values = parameters_of(context, &reference[r], count);
        for (int64_t i = 0; i < count; i++)
          average[i] += values[i] * (1.0f / (float)size);
        free(values);
      }
      for (int r = 0; r < size; r++)
        MPI_CHECK_OK(context, bpt_graph_write_parameters(reference[r].graph, average, count));
    }
    float *ours = parameters_of(context, &m, count), *expected = parameters_of(context, &reference[rank], count);
    double difference = largest_difference(ours, expected, count);
    MPI_CHECK(difference <= 1e-6, "local SGD step %d: parameters differ from the reference by %g", s + 1, difference);
    float *first = malloc((size_t)count * sizeof *first);
    MPI_CHECK(first != NULL, "out of memory");
    memcpy(first, ours, (size_t)count * sizeof *first);
    MPI_Bcast(first, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    int agrees = memcmp(first, ours, (size_t)count * sizeof *first) == 0, all_agree = 0;
    MPI_Allreduce(&agrees, &all_agree, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    bool same = all_agree != 0;
    /* Between averagings the ranks hold their own models (their data differ); after one, the same model. */
    if (size > 1)
      MPI_CHECK(same == averaged, "local SGD step %d: ranks %s", s + 1, same ? "agree before an average" : "differ");
    free(first);
    free(ours);
    free(expected);
  }
  if (rank == 0) printf("local SGD (average every %d steps): matches %d single-process models\n", every, size);
  /* One more local step, then an explicit average: the ranks agree again, on the reference's average. */
  forward_backward(context, &m, 0, rank * share, share, 0);
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  MPI_CHECK_OK(context, bpt_data_parallel_average_parameters(dp));
  memset(average, 0, (size_t)count * sizeof *average);
  for (int r = 0; r < size; r++) {
    forward_backward(context, &reference[r], 0, r * share, share, 0);
    MPI_CHECK_OK(context, bpt_optimizer_step(reference[r].optimizer));
    float *values = parameters_of(context, &reference[r], count);
    for (int64_t i = 0; i < count; i++)
      average[i] += values[i] * (1.0f / (float)size);
    free(values);
  }
  float *ours = parameters_of(context, &m, count);
  MPI_CHECK(largest_difference(ours, average, count) <= 1e-6, "bpt_data_parallel_average_parameters: not the average");
  free(ours);
  /* Combinations it refuses, saying why. */
  bpt_data_parallel_destroy(dp);
  bpt_data_parallel *synchronous = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, NULL, &synchronous));
  MPI_CHECK(bpt_data_parallel_average_parameters(synchronous) == BPT_ERR_STATE, "averaged a synchronous run");
  bpt_data_parallel_destroy(synchronous);
  options.accumulation_steps = 2;
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &dp) == BPT_ERR_UNSUPPORTED &&
                strstr(bpt_context_last_error(context), "accumulation_steps 1"),
            "local SGD with accumulation: %s", bpt_context_last_error(context));
  options.accumulation_steps = 1;
  options.average_every = 0;
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &dp) == BPT_ERR_INVALID_ARGUMENT &&
                strstr(bpt_context_last_error(context), "average_every 0"),
            "average_every 0: %s", bpt_context_last_error(context));
  free(average);
  destroy(&m);
  for (int r = 0; r < size; r++)
    destroy(&reference[r]);
}

/* Bounded staleness (average_every H, max_staleness S): the averaging started after each H-th step is folded
 * in S steps later as parameters += average - (the rank's parameters at the launch). The reference runs every
 * rank's model in this process and applies the same correction by hand; steps run on the polling communicator
 * too (MPI progresses only inside its calls there). Ranks differ between foldings, since each keeps its own
 * steps since the launch. */
static void bounded_staleness(bpt_context *context, bpt_comm *comm, int every, int staleness) {
  enum { total_steps = 9 };
  int rank = bpt_comm_rank(comm), size = bpt_comm_size(comm), share = global_batch / size;
  model reference[8];
  MPI_CHECK(size <= 8, "at most 8 ranks");
  for (int r = 0; r < size; r++)
    build(context, share, &reference[r]);
  int64_t count = bpt_graph_parameter_count(reference[0].graph);
  float *average = malloc((size_t)count * sizeof *average), *launched[8];
  MPI_CHECK(average != NULL, "out of memory");
  model m;
  build(context, share, &m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.bucket_bytes = 4096;
  options.first_bucket_bytes = 1024;
  options.average_every = every;
  options.max_staleness = staleness;
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, &options, &dp));
  int launch = -1; /* the step whose averaging is in flight in the reference, -1 for none */
  for (int s = 0; s < total_steps; s++) {
    forward_backward(context, &m, s % steps, rank * share, share, 0);
    MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
    for (int r = 0; r < size; r++) {
      forward_backward(context, &reference[r], s % steps, r * share, share, 0);
      MPI_CHECK_OK(context, bpt_optimizer_step(reference[r].optimizer));
    }
    if (launch >= 0 && s - launch >= staleness) { /* fold in: parameters += average - launched */
      for (int r = 0; r < size; r++) {
        float *values = parameters_of(context, &reference[r], count);
        for (int64_t i = 0; i < count; i++)
          values[i] += average[i] - launched[r][i];
        MPI_CHECK_OK(context, bpt_graph_write_parameters(reference[r].graph, values, count));
        free(values);
        free(launched[r]);
      }
      launch = -1;
    }
    if ((s + 1) % every == 0) { /* launch: the average of the parameters now, each rank's own copy */
      memset(average, 0, (size_t)count * sizeof *average);
      for (int r = 0; r < size; r++) {
        launched[r] = parameters_of(context, &reference[r], count);
        for (int64_t i = 0; i < count; i++)
          average[i] += launched[r][i] * (1.0f / (float)size);
      }
      launch = s;
    }
    float *ours = parameters_of(context, &m, count), *expected = parameters_of(context, &reference[rank], count);
    double difference = largest_difference(ours, expected, count);
    MPI_CHECK(difference <= 1e-5, "H %d, S %d, step %d: parameters differ from the reference by %g", every, staleness,
              s + 1, difference);
    free(ours);
    free(expected);
  }
  /* The explicit average folds in what is in flight, then averages: every rank holds the same model. */
  MPI_CHECK_OK(context, bpt_data_parallel_average_parameters(dp));
  float *ours = parameters_of(context, &m, count), *first = malloc((size_t)count * sizeof *first);
  MPI_CHECK(first != NULL, "out of memory");
  memcpy(first, ours, (size_t)count * sizeof *first);
  MPI_Bcast(first, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  int agrees = memcmp(first, ours, (size_t)count * sizeof *first) == 0, all_agree = 0;
  MPI_Allreduce(&agrees, &all_agree, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  MPI_CHECK(all_agree, "bounded staleness: ranks differ after bpt_data_parallel_average_parameters");
  if (launch >= 0)
    for (int r = 0; r < size; r++)
      free(launched[r]);
  if (rank == 0)
    printf("bounded staleness (average every %d steps, folded in %d later): matches %d single-process models\n", every,
           staleness, size);
  bpt_data_parallel_destroy(dp);
  options.max_staleness = every + 1;
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &dp) == BPT_ERR_INVALID_ARGUMENT &&
                strstr(bpt_context_last_error(context), "max_staleness"),
            "max_staleness above average_every: %s", bpt_context_last_error(context));
  options.average_every = 1;
  options.max_staleness = 1;
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &dp) == BPT_ERR_INVALID_ARGUMENT,
            "max_staleness with synchronous data parallel: %s", bpt_context_last_error(context));
  free(ours);
  free(first);
  free(average);
  destroy(&m);
  for (int r = 0; r < size; r++)
    destroy(&reference[r]);
}

static void accumulation_errors(bpt_context *context, bpt_comm *comm) {
  model m;
  build(context, 2, &m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.accumulation_steps = 2;
  bpt_data_parallel *dp = NULL, *second = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, &options, &dp));
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &second) == BPT_ERR_STATE, "attached twice");
  forward_backward(context, &m, 0, 0, 2, 0);
  MPI_CHECK(bpt_optimizer_step(m.optimizer) == BPT_ERR_STATE && strstr(bpt_context_last_error(context), "1 done"),
            "step after 1 of 2 micro-batches: %s", bpt_context_last_error(context));
  forward_backward(context, &m, 0, 2, 2, 1);
  MPI_CHECK(bpt_graph_backward_accumulate(m.graph) == BPT_ERR_STATE &&
                strstr(bpt_context_last_error(context), "accumulation_steps is 2"),
            "a third micro-batch accepted: %s", bpt_context_last_error(context));
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer)); /* again on the same averaged gradients */
  /* Accumulating passes only (the caller clears gradients itself) start a new cycle after a step. */
  MPI_CHECK_OK(context, bpt_graph_zero_gradients(m.graph));
  forward_backward(context, &m, 0, 0, 2, 1);
  forward_backward(context, &m, 0, 2, 2, 1);
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  options.accumulation_steps = 0;
  bpt_data_parallel_destroy(dp);
  MPI_CHECK(bpt_data_parallel_create(m.graph, comm, &options, &dp) == BPT_ERR_INVALID_ARGUMENT &&
                strstr(bpt_context_last_error(context), "accumulation_steps"),
            "accumulation_steps 0 accepted");
  destroy(&m);
}

/* int8 compression (error feedback on) with dynamic f16 loss scaling: a non-finite gradient on the last rank
 * alone (a NaN input here; an f16 overflow in practice) must make every rank skip that step, whatever the
 * engine's MAX makes of NaN, and must not stay in the residual: the next, clean step trains everywhere. */
static void non_finite_gradient_with_int8(bpt_context *context, bpt_comm *comm) {
  const int rank = bpt_comm_rank(comm), last = bpt_comm_size(comm) - 1;
  bpt_precision_options precision = bpt_precision_options_default();
  precision.compute_dtype = BPT_DTYPE_F16;
  precision.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  model m;
  build_with_precision(context, 2, &precision, &m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.compression = BPT_COMPRESSION_INT8;
  options.bucket_bytes = options.first_bucket_bytes = 2048;
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m.graph, comm, &options, &dp));
  const float saved = inputs[0][2 * last][0];
  if (rank == last) inputs[0][2 * last][0] = NAN;
  forward_backward(context, &m, 0, 2 * rank, 2, 0);
  inputs[0][2 * last][0] = saved;
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  MPI_CHECK(bpt_graph_skipped_steps(m.graph) == 1, "rank %d: the step with a NaN gradient on rank %d was %s", rank,
            last, bpt_graph_skipped_steps(m.graph) ? "skipped more than once" : "applied");
  forward_backward(context, &m, 1, 2 * rank, 2, 0);
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  MPI_CHECK(bpt_graph_skipped_steps(m.graph) == 1, "rank %d: the clean step after it was skipped too", rank);
  const int64_t count = bpt_graph_parameter_count(m.graph);
  float *values = malloc((size_t)count * sizeof *values);
  MPI_CHECK(values != NULL, "out of memory");
  MPI_CHECK_OK(context, bpt_graph_read_parameters(m.graph, values, count));
  for (int64_t i = 0; i < count; i++)
    MPI_CHECK(isfinite(values[i]), "rank %d: parameter value %lld is not finite", rank, (long long)i);
  free(values);
  bpt_data_parallel_destroy(dp);
  destroy(&m);
}

/* A model on comm with 1 KiB buckets, right after a backward pass whose all-reduces may still be in flight. */
static bpt_data_parallel *backward_in_flight(bpt_context *context, bpt_comm *comm, model *m) {
  build(context, 2, m);
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.bucket_bytes = options.first_bucket_bytes = 1024;
  bpt_data_parallel *dp = NULL;
  MPI_CHECK_OK(context, bpt_data_parallel_create(m->graph, comm, &options, &dp));
  MPI_CHECK(bpt_data_parallel_bucket_count(dp) > 1, "%d buckets", bpt_data_parallel_bucket_count(dp));
  forward_backward(context, m, 0, 0, 2, 0);
  return dp;
}

/* The graph goes first, right after a backward pass whose all-reduces may still be in flight: it waits for
 * them and detaches the handle, whose calls then fail and whose destroy frees host memory (ASan, valgrind). */
static void graph_destroyed_before_data_parallel(bpt_context *context, bpt_comm *comm) {
  model m;
  bpt_data_parallel *dp = backward_in_flight(context, comm, &m);
  bpt_tensor_destroy(m.x_batch);
  bpt_tensor_destroy(m.label_batch);
  bpt_graph_destroy(m.graph);
  MPI_CHECK(bpt_data_parallel_wait(dp) == BPT_ERR_STATE && strstr(bpt_context_last_error(NULL), "graph was destroyed"),
            "wait on a detached handle: %s", bpt_context_last_error(NULL));
  MPI_CHECK(bpt_optimizer_step(m.optimizer) == BPT_ERR_STATE, "step on a detached optimizer");
  bpt_data_parallel_destroy(dp);
  bpt_optimizer_destroy(m.optimizer);
  MPI_CHECK_OK(context, bpt_comm_barrier(comm)); /* the communicator is still in step on every rank */
}

/* The communicator goes first, right after a backward pass whose all-reduces may still be in flight: they
 * finish, the handle lets go of it, and the graph's next backward pass and step fail naming the cause instead
 * of training this process alone; the handle's destroy then frees host memory (ASan, valgrind). */
static void comm_destroyed_before_data_parallel(bpt_context *context) {
  bpt_comm_options comm_options = bpt_comm_options_default();
  comm_options.timeout_seconds = 60.0;
  bpt_comm *comm = NULL;
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &comm));
  model m;
  bpt_data_parallel *dp = backward_in_flight(context, comm, &m);
  MPI_CHECK_OK(context, bpt_comm_close(comm));
  MPI_CHECK(bpt_data_parallel_wait(dp) == BPT_ERR_STATE &&
                strstr(bpt_context_last_error(context), "communicator was destroyed"),
            "wait after the communicator went: %s", bpt_context_last_error(context));
  MPI_CHECK(bpt_optimizer_step(m.optimizer) == BPT_ERR_STATE &&
                strstr(bpt_context_last_error(context), "communicator was destroyed"),
            "a step after the communicator went: %s", bpt_context_last_error(context));
  MPI_CHECK_OK(context, bpt_graph_forward(m.graph));
  MPI_CHECK(bpt_graph_backward(m.graph) == BPT_ERR_STATE &&
                strstr(bpt_context_last_error(context), "bpt_graph_backward: the data-parallel handle's communicator"),
            "a backward pass after the communicator went: %s", bpt_context_last_error(context));
  bpt_data_parallel_destroy(dp);
  /* Without the handle the graph trains again, on this process alone, as the message says. */
  forward_backward(context, &m, 0, 0, 2, 0);
  MPI_CHECK_OK(context, bpt_optimizer_step(m.optimizer));
  destroy(&m);
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  make_data();
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = 1;
  bpt_context *context = NULL;
  MPI_CHECK_OK(NULL, bpt_context_create(&context_options, &context));
  bpt_comm_options comm_options = bpt_comm_options_default();
  comm_options.timeout_seconds = 60.0;
  bpt_comm *comm = NULL, *polling = NULL; /* with a progress thread (when MPI allows), and without */
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &comm));
  comm_options.progress_thread = 0;
  MPI_CHECK_OK(context, bpt_comm_create_from_mpi(context, MPI_COMM_WORLD, &comm_options, &polling));
  int rank = bpt_comm_rank(comm);
  MPI_CHECK(global_batch % (2 * bpt_comm_size(comm)) == 0, "run with 1, 2, 4 or 8 ranks");

  int64_t count = 0;
  float *reference = reference_parameters(context, &count);
  struct {
    const char *name;
    size_t bucket_bytes, first_bucket_bytes;
    int overlap, accumulation_steps, compression;
    double tolerance;
    int polling;
  } runs[] = {
      {"one bucket", 25u << 20, 1u << 20, 1, 1, BPT_COMPRESSION_NONE, 1e-5, 0},
      {"small buckets, overlapped", 2048, 512, 1, 1, BPT_COMPRESSION_NONE, 1e-5, 0},
      {"same, no progress thread", 2048, 512, 1, 1, BPT_COMPRESSION_NONE, 1e-5, 1},
      {"small buckets, after backward", 2048, 512, 0, 1, BPT_COMPRESSION_NONE, 1e-5, 0},
      {"2 micro-batches", 4096, 1024, 1, 2, BPT_COMPRESSION_NONE, 1e-5, 0},
      {"f16 compression", 4096, 1024, 1, 1, BPT_COMPRESSION_F16, 2e-2, 0},
      {"int8 compression", 4096, 1024, 1, 1, BPT_COMPRESSION_INT8, -1.0, 0},
      {"top-k compression", 4096, 1024, 1, 1, BPT_COMPRESSION_TOPK, -1.0, 1},
  };
  for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
    bpt_data_parallel_options options = bpt_data_parallel_options_default();
    options.bucket_bytes = runs[r].bucket_bytes;
    options.first_bucket_bytes = runs[r].first_bucket_bytes;
    options.overlap = runs[r].overlap;
    options.accumulation_steps = runs[r].accumulation_steps;
    options.compression = (bpt_compression)runs[r].compression;
    options.topk_ratio = 0.1f;
    int buckets = 0;
    float *values = train(context, runs[r].polling ? polling : comm, &options, &buckets);
    double difference = largest_difference(values, reference, count);
    if (rank == 0) printf("%-32s %2d buckets, largest difference %.3g\n", runs[r].name, buckets, difference);
    if (runs[r].tolerance > 0)
      MPI_CHECK(difference <= runs[r].tolerance, "%s: parameters differ from one process by %g", runs[r].name,
                difference);
    else /* lossy: the run must still have trained (moved away from the initial parameters) */
      MPI_CHECK(difference < 1.0, "%s: parameters diverged (%g)", runs[r].name, difference);
    if (runs[r].bucket_bytes == 2048) MPI_CHECK(buckets > 4, "%s: only %d buckets", runs[r].name, buckets);
    free(values);
  }
  accumulation_errors(context, comm);
  local_sgd(context, comm);
  bounded_staleness(context, comm, 3, 2);
  bounded_staleness(context, polling, 2, 2);
  non_finite_gradient_with_int8(context, comm);
  graph_destroyed_before_data_parallel(context, comm);
  comm_destroyed_before_data_parallel(context);
  profiled(context, comm);
  initial_state_from_rank_0(context, comm);
  if (rank == 0)
    printf("data parallel over %d ranks: ok (MPI thread level %s)\n", bpt_comm_size(comm),
           provided == MPI_THREAD_MULTIPLE && bpt_comm_size(comm) > 1 ? "multiple: progress thread tested"
                                                                      : "polling only");
  free(reference);
  bpt_comm_destroy(polling);
  bpt_comm_destroy(comm);
  bpt_context_destroy(context);
  MPI_Finalize();
  return 0;
}
