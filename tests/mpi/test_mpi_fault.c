/* A peer that fails mid-training must not hang the others. "hang": rank 1 stops (SIGSTOP) as if stuck in a
 * kernel or a deadlock, so only our timeout can notice; rank 0 must get BPT_ERR_COMM within its 2 s timeout,
 * destroy the communicator without blocking, and end the job (bpt_comm_abort_job). "kill": rank 1 dies
 * (SIGKILL); whichever notices first, the launcher or our timeout, the job must end with an error. "stale":
 * as "hang", in local SGD with bounded staleness (average every 2 steps, folded in 2 later): rank 0 trains on
 * past the averaging rank 1 never joins and must get BPT_ERR_COMM from the step that folds it in, within the
 * timeout. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bptrain.h"

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* The survivor's report: the status, how long the failing call waited, and that the communicator is done. */
static int report(bpt_context *context, bpt_comm *comm, bpt_status status, double waited) {
  printf("survivor: %s after %.2f s: %s\n", status == BPT_ERR_COMM ? "BPT_ERR_COMM" : bpt_status_string(status), waited,
         bpt_context_last_error(context));
  if (status != BPT_ERR_COMM || waited > 10.0) printf("check failed: wrong status or too slow\n");
  float one = 1.0f;
  if (bpt_comm_allreduce(comm, &one, 1, BPT_DTYPE_F32, BPT_REDUCE_SUM) != BPT_ERR_STATE)
    printf("check failed: a failed communicator accepted another collective\n");
  double start = seconds();
  bpt_comm_destroy(comm);
  printf("survivor: destroy took %.3f s\n", seconds() - start);
  fflush(stdout);
  bpt_context_destroy(context);
  return 3; /* without MPI_Finalize, which would wait for the dead peer: the launcher ends the job */
}

#define FAULT_CHECK(call)                                                                                              \
  do {                                                                                                                 \
    if ((call) != BPT_OK) {                                                                                            \
      printf("check failed: %s: %s\n", #call, bpt_context_last_error(context));                                        \
      return 1;                                                                                                        \
    }                                                                                                                  \
  } while (0)

/* A linear classifier trained with bounded staleness; rank 1 stops at its third step. */
static int stale_peer(bpt_context *context, bpt_comm *comm, int rank) {
  enum { batch = 4, features = 8, classes = 3 };
  bpt_graph *graph = NULL;
  bpt_node *x, *labels, *logits, *loss;
  const int64_t dims = features, x_dims[2] = {batch, features}, label_dims[1] = {batch};
  FAULT_CHECK(bpt_graph_create(context, &graph));
  FAULT_CHECK(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &dims, &x));
  FAULT_CHECK(bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  FAULT_CHECK(bpt_layer_linear(graph, "fc", x, classes, BPT_INIT_XAVIER_UNIFORM, &logits));
  FAULT_CHECK(bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  FAULT_CHECK(bpt_graph_compile(graph, loss, batch));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  bpt_optimizer *optimizer = NULL;
  FAULT_CHECK(bpt_optimizer_create(graph, &optimizer_options, &optimizer));
  bpt_data_parallel_options options = bpt_data_parallel_options_default();
  options.average_every = 2;
  options.max_staleness = 2;
  bpt_data_parallel *parallel = NULL;
  FAULT_CHECK(bpt_data_parallel_create(graph, comm, &options, &parallel));
  bpt_tensor *values = NULL, *ids = NULL;
  FAULT_CHECK(bpt_tensor_create(context, BPT_DTYPE_F32, 2, x_dims, &values));
  FAULT_CHECK(bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &ids));
  float *v = bpt_tensor_data(values);
  int32_t *l = bpt_tensor_data(ids);
  for (int i = 0; i < batch * features; i++)
    v[i] = (float)((i * 7 + rank) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < batch; i++)
    l[i] = i % classes;
  FAULT_CHECK(bpt_graph_set_input(graph, x, values));
  FAULT_CHECK(bpt_graph_set_input(graph, labels, ids));
  for (int step = 0; step < 100; step++) {
    if (step == 2 && rank == 1) raise(SIGSTOP);
    FAULT_CHECK(bpt_graph_forward(graph));
    FAULT_CHECK(bpt_graph_backward(graph));
    double start = seconds();
    bpt_status status = bpt_optimizer_step(optimizer);
    double waited = seconds() - start;
    if (status == BPT_OK) continue;
    /* The graph and its handles are left to the job's end: the comm's state after a failure is the test. */
    return report(context, comm, status, waited);
  }
  printf("check failed: rank %d never saw the failure\n", rank);
  return 1;
}

int main(int argc, char **argv) {
  int kill_peer = argc > 1 && strcmp(argv[1], "kill") == 0;
  int stale = argc > 1 && strcmp(argv[1], "stale") == 0;
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = 1;
  bpt_context *context = NULL;
  if (bpt_context_create(&context_options, &context) != BPT_OK) return 1;
  bpt_comm_options options = bpt_comm_options_default();
  options.timeout_seconds = 2.0;
  bpt_comm *comm = NULL;
  if (bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &options, &comm) != BPT_OK) {
    fprintf(stderr, "check failed: %s\n", bpt_context_last_error(context));
    return 1;
  }
  int rank = bpt_comm_rank(comm);
  if (stale) return stale_peer(context, comm, rank);
  static float gradients[1 << 16];
  for (int step = 0; step < 1000; step++) {
    if (step == 3 && rank == 1) raise(kill_peer ? SIGKILL : SIGSTOP);
    double start = seconds();
    bpt_status status = bpt_comm_allreduce(comm, gradients, 1 << 16, BPT_DTYPE_F32, BPT_REDUCE_AVERAGE);
    double waited = seconds() - start;
    if (status == BPT_OK) continue;
    return report(context, comm, status, waited);
  }
  printf("check failed: rank %d never saw the failure\n", rank);
  return 1;
}
