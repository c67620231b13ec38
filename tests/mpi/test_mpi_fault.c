/* A peer that fails mid-training must not hang the others. "hang": rank 1 stops (SIGSTOP) as if stuck in a
 * kernel or a deadlock, so only our timeout can notice; rank 0 must get BPT_ERR_COMM within its 2 s timeout,
 * destroy the communicator without blocking, and end the job (bpt_comm_abort_job). "kill": rank 1 dies
 * (SIGKILL); whichever notices first, the launcher or our timeout, the job must end with an error. */
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

int main(int argc, char **argv) {
  int kill_peer = argc > 1 && strcmp(argv[1], "kill") == 0;
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
  static float gradients[1 << 16];
  for (int step = 0; step < 1000; step++) {
    if (step == 3 && rank == 1) raise(kill_peer ? SIGKILL : SIGSTOP);
    double start = seconds();
    bpt_status status = bpt_comm_allreduce(comm, gradients, 1 << 16, BPT_DTYPE_F32, BPT_REDUCE_AVERAGE);
    double waited = seconds() - start;
    if (status == BPT_OK) continue;
    printf("survivor: %s after %.2f s: %s\n", status == BPT_ERR_COMM ? "BPT_ERR_COMM" : bpt_status_string(status),
           waited, bpt_context_last_error(context));
    if (status != BPT_ERR_COMM || waited > 10.0) printf("check failed: wrong status or too slow\n");
    float one = 1.0f;
    if (bpt_comm_allreduce(comm, &one, 1, BPT_DTYPE_F32, BPT_REDUCE_SUM) != BPT_ERR_STATE)
      printf("check failed: a failed communicator accepted another collective\n");
    start = seconds();
    bpt_comm_destroy(comm);
    printf("survivor: destroy took %.3f s\n", seconds() - start);
    fflush(stdout);
    bpt_context_destroy(context);
    return 3; /* without MPI_Finalize, which would wait for the dead peer: the launcher ends the job */
  }
  printf("check failed: rank %d never saw the failure\n", rank);
  return 1;
}
