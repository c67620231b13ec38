/* A minimal check macro for tests that run as several MPI ranks: a failed check prints the rank, the
 * expression and the context's last error, then aborts the whole job so no rank waits for a dead peer. */
#ifndef BPT_MPI_CHECK_H
#define BPT_MPI_CHECK_H

#include <mpi.h>
#include <stdio.h>

#include "bptrain.h"

#define MPI_CHECK(condition, ...)                                                                                      \
  do {                                                                                                                 \
    if (!(condition)) {                                                                                                \
      int check_rank_ = -1;                                                                                            \
      MPI_Comm_rank(MPI_COMM_WORLD, &check_rank_);                                                                     \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", check_rank_, __FILE__, __LINE__, #condition);              \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fprintf(stderr, "\n");                                                                                           \
      fflush(stderr);                                                                                                  \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                                    \
    }                                                                                                                  \
  } while (0)

#define MPI_CHECK_OK(context, expression)                                                                              \
  do {                                                                                                                 \
    bpt_status check_status_ = (expression);                                                                           \
    MPI_CHECK(check_status_ == BPT_OK, "%s: %s", bpt_status_string(check_status_), bpt_context_last_error(context));   \
  } while (0)

#endif
