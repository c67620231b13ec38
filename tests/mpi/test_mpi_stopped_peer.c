/* A rank that stops (SIGSTOP: as if paused by a debugger, swapped out or stuck) must cost the others at
 * most their timeout in every comm call, never a hang. Rank 1 stops itself for STOPPED_SECONDS (a forked
 * helper continues it) at the point the mode names; rank 0 must get BPT_ERR_COMM within the 2 s timeout
 * plus a margin, from a message that names the call and rank 1:
 *   "init":    before MPI is initialised; rank 0's bpt_comm_create_mpi(BPT_COMM_MPI_WORLD) initialises it
 *              (before the fix: blocked in MPI_Init_thread until the peer came back);
 *   "dup":     both initialised MPI themselves; rank 0 creates from MPI_COMM_WORLD (before: blocked in
 *              MPI_Comm_dup, forever since the peer never calls it);
 *   "destroy": after the last collective; rank 0's bpt_comm_close must not wait in MPI_Finalize (before:
 *              blocked forever).
 * Judged by rank 0's line (CTest PASS_REGULAR_EXPRESSION): the job itself ends without MPI_Finalize. An alarm
 * ends rank 0 with "check failed" long before CTest's own TIMEOUT. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bptrain.h"

enum { STOPPED_SECONDS = 6, ALARM_SECONDS = 20 };
static const double timeout = 2.0, margin = 2.0;

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void on_alarm(int signal) {
  (void)signal;
  static const char text[] = "check failed: rank 0 still blocked after the alarm\n";
  if (write(STDOUT_FILENO, text, sizeof text - 1) < 0) _exit(2);
  _exit(1);
}

/* Stops this process; a forked helper continues it after STOPPED_SECONDS. */
static void stop_for_a_while(void) {
  pid_t self = getpid(), helper = fork();
  if (helper == 0) {
    sleep(STOPPED_SECONDS);
    if (getppid() == self) kill(self, SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  if (helper > 0) waitpid(helper, NULL, 0);
}

static void report(const char *mode, const char *call, bpt_status status, double waited, bpt_context *context) {
  const char *message = bpt_context_last_error(context);
  bool ok = status == BPT_ERR_COMM && waited <= timeout + margin && strstr(message, call) && strstr(message, "rank 1");
  printf("%s: %s after %.2f s: %s\n", ok ? "stopped peer" : "check failed", bpt_status_string(status), waited,
         message);
  printf("mode %s: %s\n", mode, ok ? "bounded" : "not bounded or wrong message");
  fflush(stdout);
  _exit(ok ? 0 : 1); /* without MPI_Finalize, which would wait for the stopped peer: the launcher ends the job */
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "destroy";
  const char *rank_text = getenv("OMPI_COMM_WORLD_RANK");
  int rank = rank_text ? atoi(rank_text) : 0;
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = 1;
  bpt_context *context = NULL;
  if (bpt_context_create(&context_options, &context) != BPT_OK) return 1;
  if (rank == 0) {
    signal(SIGALRM, on_alarm);
    alarm(ALARM_SECONDS);
  }
  bpt_comm_options options = bpt_comm_options_default();
  options.timeout_seconds = timeout;
  bpt_comm *comm = NULL;
  if (strcmp(mode, "init") == 0) {
    if (rank == 1) {
      stop_for_a_while();
      _exit(0); /* the job is over by now */
    }
    double start = seconds();
    bpt_status status = bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &options, &comm);
    report(mode, "MPI_Init_thread", status, seconds() - start, context);
  }
  if (strcmp(mode, "dup") == 0) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      stop_for_a_while();
      _exit(0);
    }
    double start = seconds();
    bpt_status status = bpt_comm_create_mpi(context, MPI_Comm_c2f(MPI_COMM_WORLD), &options, &comm);
    report(mode, "bpt_comm_create_mpi", status, seconds() - start, context);
  }
  /* destroy */
  if (bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, &options, &comm) != BPT_OK) {
    printf("check failed: %s\n", bpt_context_last_error(context));
    return 1;
  }
  float values[64] = {0};
  if (bpt_comm_allreduce(comm, values, 64, BPT_DTYPE_F32, BPT_REDUCE_SUM) != BPT_OK) {
    printf("check failed: %s\n", bpt_context_last_error(context));
    return 1;
  }
  if (rank == 1) {
    stop_for_a_while();
    _exit(0);
  }
  double start = seconds();
  bpt_status status = bpt_comm_close(comm);
  report(mode, "bpt_comm_destroy", status, seconds() - start, context);
  return 1;
}
