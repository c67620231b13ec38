/* Summing ranges of one device float buffer across the ranks of a communicator, the comm layer's half of
 * data-parallel training: optional compression (encoded on the host), staging through host memory when the
 * engine cannot read the backend's memory, and error feedback. It knows nothing of graphs; the core
 * (src/core/data_parallel.c) says when a range is final and when to wait. Ranges start in index order on
 * every rank, which keeps the ranks' collectives matched. */
#ifndef BPT_COMM_RANGE_REDUCE_H
#define BPT_COMM_RANGE_REDUCE_H

#include <stdbool.h>

#include "backends/backend.h"
#include "base/attachment.h"
#include "bptrain/comm.h"

/* Data-parallel handles attach to their communicator (base/attachment.h): bpt_comm_destroy() detaches them
 * first, while the engine can still finish their collectives in flight. */
void bpt_comm_attach(bpt_comm *comm, bpt_attachment *attachment, void (*detach)(void *owner), void *owner);
void bpt_comm_unattach(bpt_comm *comm, bpt_attachment *attachment);

/* count floats at element offset of the reduced buffer. */
typedef struct bpt_comm_range {
  int64_t offset, count;
} bpt_comm_range;

typedef struct bpt_range_reducer_options {
  bpt_compression compression;
  float topk_ratio;   /* top-k: entries kept per rank, as a fraction of the range */
  int error_feedback; /* lossy compression: carry what was left out into the next reduction */
  float average;      /* every rank's values are multiplied by this before the sum (1 / (ranks * micro-batches)) */
  bool zero_copy;     /* the backend's memory is host memory the engine reads in place */
  /* What the sum is, for messages ("gradient all-reduce" when NULL). */
  const char *what;
  /* Called when range index is reduced and back in the buffer (the profiler's record), or NULL. */
  void (*reduced)(void *data, int index);
  void *data;
} bpt_range_reducer_options;

typedef struct bpt_range_reducer bpt_range_reducer;

/* Plans staging and compression buffers for count ranges of buffer, backend memory of backend. Errors land on
 * comm's context. */
bpt_status bpt_range_reducer_create(bpt_comm *comm, bpt_backend *backend, float *buffer, const bpt_comm_range *ranges,
                                    int count, const bpt_range_reducer_options *options, bpt_range_reducer **out);
/* Starts the sum of the next range in index order: the caller says its values are final. */
bpt_status bpt_range_reducer_start_next(bpt_range_reducer *reducer);
/* How many ranges have started since the last reset. */
int bpt_range_reducer_started(const bpt_range_reducer *reducer);
/* One non-blocking pass: finishes the reductions that completed. */
bpt_status bpt_range_reducer_poll(bpt_range_reducer *reducer);
/* Waits (bounded by the communicator's timeout) until every started range is reduced and back. */
bpt_status bpt_range_reducer_wait(bpt_range_reducer *reducer);
/* A new cycle: every range idle again, none started. Only after a wait. */
void bpt_range_reducer_reset(bpt_range_reducer *reducer);
/* Frees the reducer; waits for in-flight ranges unless the communicator failed, in which case the buffers
 * the engine still references are left allocated. Returns whether it left any: then the reduced buffer itself
 * may still be read or written by the engine. */
bool bpt_range_reducer_destroy(bpt_range_reducer *reducer);

/* True when the engine sums device memory (NCCL) rather than host memory (MPI). */
bool bpt_comm_reads_device_memory(const bpt_comm *comm);
/* The context the communicator reports its errors on. */
bpt_context *bpt_comm_context(const bpt_comm *comm);
/* BPT_ERR_STATE, on the communicator's context, once a failure made it unusable. */
bpt_status bpt_comm_usable(bpt_comm *comm, const char *where);

/* Copies count floats of backend memory from rank 0 to every rank: in place where the engine can read the
 * backend's memory (zero_copy, or a device engine), through a host copy otherwise. */
bpt_status bpt_comm_broadcast_backend_memory(bpt_comm *comm, bpt_backend *backend, float *values, int64_t count,
                                             bool zero_copy, const char *what);

#endif
