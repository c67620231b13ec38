/* The communicator's private layout and the engine table behind it. An engine (mpi.c, nccl.c) only knows
 * how to start collectives and test them for completion; comm.c owns waiting, timeouts and the failed
 * state, so every engine times out the same way. */
#ifndef BPT_COMM_COMM_H
#define BPT_COMM_COMM_H

#include <stdbool.h>

#include "base/attachment.h"
#include "bptrain/comm.h"
#include "base/report.h"

/* An in-flight collective, owned by its engine and freed by the test that reports it done. */
typedef struct bpt_comm_request bpt_comm_request;

typedef enum bpt_comm_reduction { BPT_COMM_REDUCE_SUM, BPT_COMM_REDUCE_MAX } bpt_comm_reduction;

typedef struct bpt_comm_engine_table {
  const char *name;
  bool device_memory; /* buffers are device memory (NCCL) rather than host memory (MPI) */
  /* In-place all-reduce of count elements, each rank's buffer multiplied by prescale first. SUM takes f32,
   * f16, bf16 and (engines that can) u8 holding int8; MAX takes f32. */
  bpt_status (*allreduce_start)(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype,
                                bpt_comm_reduction reduction, float prescale, bpt_comm_request **out);
  /* receive gets size * bytes: rank r's send buffer at offset r * bytes. NULL when unsupported. */
  bpt_status (*allgather_start)(bpt_comm *comm, const void *send, void *receive, size_t bytes, bpt_comm_request **out);
  bpt_status (*broadcast_start)(bpt_comm *comm, void *buffer, size_t bytes, int root, bpt_comm_request **out);
  bpt_status (*barrier_start)(bpt_comm *comm, bpt_comm_request **out);
  /* Optional (device engines): collectives started from now on run after the work already queued on the
   * native stream (a cudaStream_t), ordered by an event rather than by waiting on the host. */
  bpt_status (*order_after)(bpt_comm *comm, void *stream);
  /* Advances the request; sets *done (and frees it) once complete. An error marks the comm failed. */
  bpt_status (*test)(bpt_comm *comm, bpt_comm_request *request, bool *done);
  /* Frees local resources without talking to peers when comm->failed; otherwise at most the timeout waiting
   * for them, then BPT_ERR_COMM (recorded with bpt_comm_fail) naming those that did not answer. */
  bpt_status (*destroy)(bpt_comm *comm);
  void (*abort_job)(bpt_comm *comm, int exit_code);
  /* Optional: writes which ranks the unfinished request is still waiting for ("rank 1") into text. */
  void (*describe_waiting)(bpt_comm *comm, bpt_comm_request *request, char *text, size_t size);
} bpt_comm_engine_table;

struct bpt_comm {
  const bpt_comm_engine_table *engine;
  bpt_context *context;
  void *state; /* the engine's */
  int rank, size;
  double timeout_seconds;
  bool failed; /* a collective failed or timed out: peers may be gone, only destroy is allowed */
  /* Data-parallel handles on the communicator: detached (each waits for its collectives in flight) before
   * the engine closes, so they never reach a freed communicator. */
  bpt_attachment *attachments;
};

/* The engines, defined in their modules (libbptrain-mpi.so, libbptrain-nccl.so; src/modules/) and reached
 * through the module interface only. Each fills comm->state, rank and size. */
bpt_status bpt_comm_mpi_open(bpt_comm *comm, int64_t mpi_comm, bool progress_thread);
bpt_status bpt_comm_nccl_open(bpt_comm *comm, const bpt_comm_unique_id *id, int rank, int world_size, int device);
/* MPI helpers for NCCL's bootstrap: rank and node-local rank of mpi_comm, and a broadcast of the id. */
bpt_status bpt_comm_mpi_share_id(bpt_context *context, int64_t mpi_comm, double timeout, bpt_comm_unique_id *id,
                                 int *rank, int *size, int *local_rank);

/* Records a failure on the communicator: it becomes unusable and the message lands on its context. */
bpt_status bpt_comm_fail(bpt_comm *comm, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* BPT_ERR_STATE when a previous failure made the communicator unusable. */
bpt_status bpt_comm_check_usable(bpt_comm *comm, const char *where);
/* Tests every non-NULL request until all are done (slots become NULL) or the timeout passes, which fails
 * the communicator with BPT_ERR_COMM naming what. Calls progress between rounds when non-NULL. */
bpt_status bpt_comm_wait_all(bpt_comm *comm, bpt_comm_request **requests, int count, const char *what);
/* One non-blocking pass over the requests (for progress during backward). */
bpt_status bpt_comm_poll(bpt_comm *comm, bpt_comm_request **requests, int count);
double bpt_comm_seconds(void);

#endif
