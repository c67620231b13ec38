/* The communicator API: argument checks, dispatch to the engine, and the one waiting loop every collective
 * goes through, which polls the engine and gives up after the timeout so a dead peer cannot hang us. */
#define _POSIX_C_SOURCE 200809L
#include "comm/comm.h"
#include "comm/range_reduce.h"
#include "modules/module.h"

#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bpt_comm_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

bpt_status bpt_comm_fail(bpt_comm *comm, bpt_status status, const char *format, ...) {
  char message[BPT_ERROR_MESSAGE_SIZE];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  comm->failed = true;
  return bpt_error(comm->context, status, "%s (rank %d of %d)", message, comm->rank, comm->size);
}

bpt_status bpt_comm_check_usable(bpt_comm *comm, const char *where) {
  if (!comm) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: communicator is NULL", where);
  if (comm->failed)
    return bpt_error(comm->context, BPT_ERR_STATE,
                     "%s: the communicator failed earlier; destroy it (peers may be gone)", where);
  return BPT_OK;
}

bpt_status bpt_comm_poll(bpt_comm *comm, bpt_comm_request **requests, int count) {
  for (int i = 0; i < count; i++) {
    if (!requests[i]) continue;
    bool done = false;
    BPT_CHECK(comm->engine->test(comm, requests[i], &done));
    if (done) requests[i] = NULL;
  }
  return BPT_OK;
}

static void pause_briefly(double waited) {
  /* Spin first (latency: a peer a little behind arrives within milliseconds), then yield (the peer may
   * share our core when oversubscribed), then sleep so a long wait for a slow or dead peer does not burn
   * a core. */
  if (waited < 0.01) return;
  if (waited < 1.0) {
    sched_yield();
    return;
  }
  struct timespec pause = {0, 100000};
  nanosleep(&pause, NULL);
}

bpt_status bpt_comm_wait_all(bpt_comm *comm, bpt_comm_request **requests, int count, const char *what) {
  double start = bpt_comm_seconds();
  for (long rounds = 0;; rounds++) {
    BPT_CHECK(bpt_comm_poll(comm, requests, count));
    int pending = 0;
    for (int i = 0; i < count; i++)
      pending += requests[i] != NULL;
    if (!pending) return BPT_OK;
    if ((rounds & 63) != 0) continue;
    double waited = bpt_comm_seconds() - start;
    if (comm->timeout_seconds > 0 && waited > comm->timeout_seconds) {
      char waiting[160];
      snprintf(waiting, sizeof waiting, "a peer");
      for (int i = 0; i < count && comm->engine->describe_waiting; i++)
        if (requests[i]) {
          comm->engine->describe_waiting(comm, requests[i], waiting, sizeof waiting);
          break;
        }
      return bpt_comm_fail(comm, BPT_ERR_COMM,
                           "%s: %s did not complete within the %.3g s timeout: no answer from %s (died, hung, stopped "
                           "or not calling the same collectives)",
                           comm->engine->name, what, comm->timeout_seconds, waiting);
    }
    pause_briefly(waited);
  }
}

static bpt_status wait_one(bpt_comm *comm, bpt_comm_request *request, const char *what) {
  return bpt_comm_wait_all(comm, &request, 1, what);
}

bpt_comm_options bpt_comm_options_default(void) {
  bpt_comm_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.timeout_seconds = 300.0;
  options.progress_thread = 1;
  return options;
}

static bpt_status prepare(bpt_context *context, const bpt_comm_options *options, bpt_comm **out, bpt_comm **comm,
                          bpt_comm_options *copied, const char *where) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: context is NULL", where);
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: out is NULL", where);
  *out = NULL;
  bpt_comm_options copy = bpt_comm_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                               offsetof(bpt_comm_options, timeout_seconds) + sizeof copy.timeout_seconds, where));
  if (!(copy.timeout_seconds >= 0.0) || !isfinite(copy.timeout_seconds))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: timeout_seconds %g must be finite and >= 0 (0: none)",
                     where, copy.timeout_seconds);
  *comm = bpt_calloc(context, 1, sizeof **comm, "communicator");
  if (!*comm) return BPT_ERR_OUT_OF_MEMORY;
  (*comm)->context = context;
  bpt_context_retain(context);
  (*comm)->timeout_seconds = copy.timeout_seconds;
  (*comm)->rank = -1;
  *copied = copy;
  return BPT_OK;
}

static bpt_status finish(bpt_comm *comm, bpt_status status, bpt_comm **out) {
  if (status != BPT_OK) {
    bpt_context_release(comm->context);
    free(comm);
    return status;
  }
  *out = comm;
  return BPT_OK;
}

/* Loads the engine module (libbptrain-mpi.so, libbptrain-nccl.so) on first use, so that the core library
 * and `import bptrain` need neither MPI nor NCCL. */
static bpt_status load_engine(bpt_context *context, const char *name, const bpt_module_interface **out,
                              const char *where) {
  char why[BPT_MODULE_MESSAGE_SIZE];
  if (bpt_module_load(name, out, why, sizeof why) != BPT_OK)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: the %s engine is not available: %s", where, name, why);
  return BPT_OK;
}

bpt_status bpt_comm_create_mpi(bpt_context *context, int64_t mpi_comm, const bpt_comm_options *options,
                               bpt_comm **out) {
  bpt_comm *comm = NULL;
  bpt_comm_options copy = bpt_comm_options_default();
  BPT_CHECK(prepare(context, options, out, &comm, &copy, "bpt_comm_create_mpi"));
  const bpt_module_interface *mpi = NULL;
  bpt_status status = load_engine(context, "mpi", &mpi, "bpt_comm_create_mpi");
  if (status == BPT_OK) status = mpi->mpi_open(comm, mpi_comm, copy.progress_thread != 0);
  return finish(comm, status, out);
}

bpt_status bpt_comm_nccl_unique_id(bpt_context *context, bpt_comm_unique_id *out) {
  if (out) memset(out, 0, sizeof *out);
  const bpt_module_interface *nccl = NULL;
  BPT_CHECK(load_engine(context, "nccl", &nccl, "bpt_comm_nccl_unique_id"));
  return nccl->nccl_unique_id(context, out);
}

bpt_status bpt_comm_create_nccl(bpt_context *context, const bpt_comm_unique_id *id, int rank, int world_size,
                                int device, const bpt_comm_options *options, bpt_comm **out) {
  bpt_comm *comm = NULL;
  bpt_comm_options copy = bpt_comm_options_default();
  BPT_CHECK(prepare(context, options, out, &comm, &copy, "bpt_comm_create_nccl"));
  if (!id || world_size < 1 || rank < 0 || rank >= world_size || device < 0)
    return finish(comm,
                  bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                            "bpt_comm_create_nccl: need an id, 0 <= rank (%d) < world_size (%d) and device (%d) >= 0",
                            rank, world_size, device),
                  out);
  const bpt_module_interface *nccl = NULL;
  bpt_status status = load_engine(context, "nccl", &nccl, "bpt_comm_create_nccl");
  if (status == BPT_OK) status = nccl->nccl_open(comm, id, rank, world_size, device);
  return finish(comm, status, out);
}

bpt_status bpt_comm_create_nccl_mpi(bpt_context *context, int64_t mpi_comm, int device, const bpt_comm_options *options,
                                    bpt_comm **out) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_comm_create_nccl_mpi: context is NULL");
  if (out) *out = NULL;
  const bpt_module_interface *mpi = NULL, *nccl = NULL;
  /* Both modules first, so a missing one fails every rank alike, before any rank starts a collective. */
  BPT_CHECK(load_engine(context, "mpi", &mpi, "bpt_comm_create_nccl_mpi"));
  BPT_CHECK(load_engine(context, "nccl", &nccl, "bpt_comm_create_nccl_mpi"));
  bpt_comm_unique_id id;
  int rank = 0, size = 0, local_rank = 0;
  bpt_comm_options copy = bpt_comm_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                               offsetof(bpt_comm_options, timeout_seconds) + sizeof copy.timeout_seconds,
                               "bpt_comm_create_nccl_mpi"));
  if (!(copy.timeout_seconds >= 0.0) || !isfinite(copy.timeout_seconds))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "bpt_comm_create_nccl_mpi: timeout_seconds %g must be finite and >= 0 (0: none)",
                     copy.timeout_seconds);
  BPT_CHECK(mpi->mpi_share_id(context, mpi_comm, copy.timeout_seconds, &id, &rank, &size, &local_rank));
  return bpt_comm_create_nccl(context, &id, rank, size, device >= 0 ? device : local_rank, options, out);
}

void bpt_comm_attach(bpt_comm *comm, bpt_attachment *attachment, void (*detach)(void *owner), void *owner) {
  bpt_attach(&comm->attachments, attachment, detach, owner);
}

void bpt_comm_unattach(bpt_comm *comm, bpt_attachment *attachment) { bpt_unattach(&comm->attachments, attachment); }

/* Data-parallel handles let go first (each waits for its collectives in flight, while the engine can still
 * finish them). A wait of theirs that timed out failed the communicator, so the engine skipped its closing
 * roll call: that is reported too. */
bpt_status bpt_comm_close(bpt_comm *comm) {
  if (!comm) return BPT_OK;
  const bool failed_before = comm->failed;
  bpt_detach_all(&comm->attachments);
  bpt_status status = comm->engine && comm->engine->destroy ? comm->engine->destroy(comm) : BPT_OK;
  if (status == BPT_OK && comm->failed && !failed_before) status = BPT_ERR_COMM;
  bpt_context_release(comm->context);
  free(comm);
  return status;
}

void bpt_comm_destroy(bpt_comm *comm) { (void)bpt_comm_close(comm); }

void bpt_comm_abort_job(bpt_comm *comm, int exit_code) {
  if (comm && comm->engine && comm->engine->abort_job) comm->engine->abort_job(comm, exit_code);
}

int bpt_comm_rank(const bpt_comm *comm) { return comm ? comm->rank : -1; }

int bpt_comm_size(const bpt_comm *comm) { return comm ? comm->size : 0; }

const char *bpt_comm_engine(const bpt_comm *comm) { return comm && comm->engine ? comm->engine->name : ""; }

bpt_status bpt_comm_allreduce(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype, bpt_reduce_op op) {
  const char *where = "bpt_comm_allreduce";
  BPT_CHECK(bpt_comm_check_usable(comm, where));
  if (count < 0 || (count > 0 && !buffer))
    return bpt_error(comm->context, BPT_ERR_INVALID_ARGUMENT, "%s: count %lld with buffer %p", where, (long long)count,
                     buffer);
  if (dtype != BPT_DTYPE_F32 && dtype != BPT_DTYPE_F16 && dtype != BPT_DTYPE_BF16)
    return bpt_error(comm->context, BPT_ERR_DTYPE, "%s: dtype %s is not f32, f16 or bf16", where,
                     bpt_dtype_name(dtype));
  if (op != BPT_REDUCE_SUM && op != BPT_REDUCE_AVERAGE)
    return bpt_error(comm->context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %d", where, (int)op);
  if (count == 0) return BPT_OK;
  bpt_comm_request *request = NULL;
  float prescale = op == BPT_REDUCE_AVERAGE ? 1.0f / (float)comm->size : 1.0f;
  BPT_CHECK(comm->engine->allreduce_start(comm, buffer, count, dtype, BPT_COMM_REDUCE_SUM, prescale, &request));
  return wait_one(comm, request, "all-reduce");
}

bpt_status bpt_comm_broadcast(bpt_comm *comm, void *buffer, size_t bytes, int root) {
  const char *where = "bpt_comm_broadcast";
  BPT_CHECK(bpt_comm_check_usable(comm, where));
  if (root < 0 || root >= comm->size || (bytes > 0 && !buffer))
    return bpt_error(comm->context, BPT_ERR_INVALID_ARGUMENT, "%s: root %d of %d ranks, %zu bytes at %p", where, root,
                     comm->size, bytes, buffer);
  if (bytes == 0) return BPT_OK;
  bpt_comm_request *request = NULL;
  BPT_CHECK(comm->engine->broadcast_start(comm, buffer, bytes, root, &request));
  return wait_one(comm, request, "broadcast");
}

bpt_status bpt_comm_barrier(bpt_comm *comm) {
  BPT_CHECK(bpt_comm_check_usable(comm, "bpt_comm_barrier"));
  bpt_comm_request *request = NULL;
  BPT_CHECK(comm->engine->barrier_start(comm, &request));
  return wait_one(comm, request, "barrier");
}
