/* The NCCL engine: one process per GPU, a non-blocking communicator (so initialisation and collectives can
 * be abandoned after the timeout with ncclCommAbort), collectives on the engine's own stream and an event
 * per request that comm.c polls. Plain C against the CUDA runtime and NCCL: no CUDA language needed. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/compress.h"

_Static_assert(sizeof(ncclUniqueId) == BPT_COMM_UNIQUE_ID_BYTES, "bpt_comm_unique_id must hold an ncclUniqueId");

typedef struct nccl_state {
  ncclComm_t comm;
  cudaStream_t stream; /* collectives run here, beside the backend's compute stream */
  int device;
  int32_t *barrier_word;    /* device: the one value a barrier all-reduces */
  cudaEvent_t compute_done; /* recorded on the backend's stream, waited for by ours (order_after) */
} nccl_state;

struct bpt_comm_request {
  cudaEvent_t done;
  ncclRedOp_t op;
  bool custom_op; /* a PreMulSum op to destroy once done */
};

static nccl_state *state_of(bpt_comm *comm) { return comm->state; }

static bpt_status nccl_failure(bpt_comm *comm, ncclResult_t result, const char *what) {
  nccl_state *state = state_of(comm);
  const char *detail = state && state->comm ? ncclGetLastError(state->comm) : "";
  bpt_status status = bpt_comm_fail(comm, BPT_ERR_COMM, "nccl: %s failed: %s%s%s", what, ncclGetErrorString(result),
                                    detail && detail[0] ? ": " : "", detail ? detail : "");
  if (state && state->comm) { /* an NCCL error leaves the communicator unusable: free its peers' waits too */
    ncclCommAbort(state->comm);
    state->comm = NULL;
  }
  return status;
}

static bpt_status cuda_failure(bpt_comm *comm, cudaError_t error, const char *what) {
  return bpt_comm_fail(comm, BPT_ERR_COMM, "nccl: %s failed: %s", what, cudaGetErrorString(error));
}

/* Device rule: one device per communicator, fixed at creation (the caller's `device`, by default the MPI local
 * rank). Every entry point makes it current for its own CUDA calls and gives the caller's current device
 * back on the way out, so a host thread that drives a CUDA context on another device (BPT_CUDA_DEVICE) is
 * not moved under it. */
static bpt_status enter_device(bpt_comm *comm, int *previous) {
  *previous = -1;
  cudaError_t error = cudaGetDevice(previous);
  if (error == cudaSuccess) error = cudaSetDevice(state_of(comm)->device);
  return error == cudaSuccess ? BPT_OK : cuda_failure(comm, error, "cudaSetDevice");
}

static void leave_device(int previous) {
  if (previous >= 0) cudaSetDevice(previous);
}

static void request_free(bpt_comm_request *request) {
  if (request->done) cudaEventDestroy(request->done);
  free(request);
}

/* A non-blocking communicator may answer ncclInProgress; wait (bounded) until the call is really issued. */
static bpt_status settle(bpt_comm *comm, ncclResult_t result, const char *what) {
  nccl_state *state = state_of(comm);
  double start = bpt_comm_seconds();
  while (result == ncclInProgress) {
    if (comm->timeout_seconds > 0 && bpt_comm_seconds() - start > comm->timeout_seconds)
      return nccl_failure(comm, ncclInProgress, what);
    ncclCommGetAsyncError(state->comm, &result);
  }
  return result == ncclSuccess ? BPT_OK : nccl_failure(comm, result, what);
}

static bpt_status select_type(bpt_comm *comm, bpt_dtype dtype, ncclDataType_t *out) {
  switch (dtype) {
  case BPT_DTYPE_F32: *out = ncclFloat32; return BPT_OK;
  case BPT_DTYPE_F16: *out = ncclFloat16; return BPT_OK;
  case BPT_DTYPE_BF16: *out = ncclBfloat16; return BPT_OK;
  case BPT_DTYPE_U8: *out = ncclInt8; return BPT_OK;
  default: return bpt_error(comm->context, BPT_ERR_DTYPE, "nccl: cannot reduce %s", bpt_dtype_name(dtype));
  }
}

/* Called with the communicator's device current (enter_device). */
static bpt_status begin(bpt_comm *comm, bpt_comm_request **out) {
  bpt_comm_request *request = bpt_calloc(comm->context, 1, sizeof *request, "NCCL request");
  if (!request) return BPT_ERR_OUT_OF_MEMORY;
  cudaError_t error = cudaEventCreateWithFlags(&request->done, cudaEventDisableTiming);
  if (error != cudaSuccess) {
    request->done = NULL;
    request_free(request);
    return cuda_failure(comm, error, "cudaEventCreate");
  }
  *out = request;
  return BPT_OK;
}

/* Records the request's completion event once the collective is issued, and hands the request out. When
 * the collective failed (the communicator is aborted then) the request is freed here: the caller gets none
 * to wait for, so nobody else would. */
static bpt_status issued(bpt_comm *comm, bpt_comm_request *request, ncclResult_t result, const char *what,
                         bpt_comm_request **out) {
  bpt_status status = settle(comm, result, what);
  if (status == BPT_OK) {
    cudaError_t error = cudaEventRecord(request->done, state_of(comm)->stream);
    if (error != cudaSuccess) status = cuda_failure(comm, error, "cudaEventRecord");
  }
  if (status != BPT_OK) {
    if (request->custom_op && state_of(comm)->comm) ncclRedOpDestroy(request->op, state_of(comm)->comm);
    request_free(request);
    return status;
  }
  *out = request;
  return BPT_OK;
}

static bpt_status allreduce(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype, bpt_comm_reduction reduction,
                            float prescale, bpt_comm_request **out) {
  ncclDataType_t type = ncclFloat32;
  BPT_CHECK(select_type(comm, dtype, &type));
  nccl_state *state = state_of(comm);
  bpt_comm_request *request = NULL;
  BPT_CHECK(begin(comm, &request));
  request->op = reduction == BPT_COMM_REDUCE_MAX ? ncclMax : ncclSum;
  if (reduction == BPT_COMM_REDUCE_SUM && prescale != 1.0f) {
    /* The scalar is read in the buffer's type, so give it in that type. */
    uint16_t half = dtype == BPT_DTYPE_F16 ? bpt_float_to_f16(prescale) : bpt_float_to_bf16(prescale);
    void *scalar = dtype == BPT_DTYPE_F32 ? (void *)&prescale : (void *)&half;
    ncclResult_t result = ncclRedOpCreatePreMulSum(&request->op, scalar, type, ncclScalarHostImmediate, state->comm);
    bpt_status status = settle(comm, result, "ncclRedOpCreatePreMulSum");
    if (status != BPT_OK) { /* no op to destroy: the request is ours alone to free */
      request_free(request);
      return status;
    }
    request->custom_op = true;
  }
  ncclResult_t result = ncclAllReduce(buffer, buffer, (size_t)count, type, request->op, state->comm, state->stream);
  return issued(comm, request, result, "ncclAllReduce", out);
}

static bpt_status nccl_allreduce_start(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype,
                                       bpt_comm_reduction reduction, float prescale, bpt_comm_request **out) {
  int previous;
  BPT_CHECK(enter_device(comm, &previous));
  bpt_status status = allreduce(comm, buffer, count, dtype, reduction, prescale, out);
  leave_device(previous);
  return status;
}

static bpt_status nccl_allgather_start(bpt_comm *comm, const void *send, void *receive, size_t bytes,
                                       bpt_comm_request **out) {
  int previous;
  BPT_CHECK(enter_device(comm, &previous));
  bpt_comm_request *request = NULL;
  bpt_status status = begin(comm, &request);
  if (status == BPT_OK) {
    nccl_state *state = state_of(comm);
    status = issued(comm, request, ncclAllGather(send, receive, bytes, ncclUint8, state->comm, state->stream),
                    "ncclAllGather", out);
  }
  leave_device(previous);
  return status;
}

static bpt_status nccl_broadcast_start(bpt_comm *comm, void *buffer, size_t bytes, int root, bpt_comm_request **out) {
  int previous;
  BPT_CHECK(enter_device(comm, &previous));
  bpt_comm_request *request = NULL;
  bpt_status status = begin(comm, &request);
  if (status == BPT_OK) {
    nccl_state *state = state_of(comm);
    status = issued(comm, request, ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, state->comm, state->stream),
                    "ncclBroadcast", out);
  }
  leave_device(previous);
  return status;
}

static bpt_status nccl_barrier_start(bpt_comm *comm, bpt_comm_request **out) {
  int previous;
  BPT_CHECK(enter_device(comm, &previous));
  bpt_comm_request *request = NULL;
  bpt_status status = begin(comm, &request);
  if (status == BPT_OK) {
    nccl_state *state = state_of(comm);
    status = issued(
        comm, request,
        ncclAllReduce(state->barrier_word, state->barrier_word, 1, ncclInt32, ncclSum, state->comm, state->stream),
        "barrier (ncclAllReduce)", out);
  }
  leave_device(previous);
  return status;
}

/* The compute stream must live on the communicator's device: an event recorded on another device's stream
 * would order nothing here, and the buckets would be reduced from the wrong device's memory. */
static bpt_status check_stream_device(bpt_comm *comm, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  int device = -1;
  cudaError_t error = cudaStreamGetDevice(stream, &device);
  if (error != cudaSuccess) return cuda_failure(comm, error, "cudaStreamGetDevice");
  if (device != state_of(comm)->device)
    return bpt_comm_fail(comm, BPT_ERR_DEVICE,
                         "nccl: the CUDA context computes on device %d but the communicator is on device %d; give "
                         "every rank its own device (BPT_CUDA_DEVICE=<local rank> for the context, the same number "
                         "as bpt_comm_create_nccl's device)",
                         device, state_of(comm)->device);
#else
  (void)comm;
  (void)stream;
#endif
  return BPT_OK;
}

static bpt_status nccl_order_after(bpt_comm *comm, void *stream) {
  nccl_state *state = state_of(comm);
  int previous;
  BPT_CHECK(enter_device(comm, &previous));
  bpt_status status = check_stream_device(comm, (cudaStream_t)stream);
  if (status == BPT_OK) {
    cudaError_t error = cudaEventRecord(state->compute_done, (cudaStream_t)stream);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(state->stream, state->compute_done, 0);
    if (error != cudaSuccess) status = cuda_failure(comm, error, "ordering after the compute stream");
  }
  leave_device(previous);
  return status;
}

static bpt_status nccl_test(bpt_comm *comm, bpt_comm_request *request, bool *done) {
  *done = false;
  nccl_state *state = state_of(comm);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(state->comm, &async);
  if (async != ncclSuccess && async != ncclInProgress) return nccl_failure(comm, async, "a collective");
  cudaError_t error = cudaEventQuery(request->done);
  if (error == cudaErrorNotReady) return BPT_OK;
  if (error != cudaSuccess) return cuda_failure(comm, error, "waiting for a collective");
  bpt_status status = BPT_OK;
  if (request->custom_op) /* non-blocking: the destroy may itself be in progress */
    status = settle(comm, ncclRedOpDestroy(request->op, state->comm), "ncclRedOpDestroy");
  request_free(request);
  *done = true;
  return status;
}

static bpt_status nccl_destroy(bpt_comm *comm) {
  nccl_state *state = state_of(comm);
  if (!state) return BPT_OK;
  bpt_status status = BPT_OK;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  cudaSetDevice(state->device);
  if (state->comm) {
    bool clean = false;
    if (!comm->failed) { /* finalise politely, but never wait past the timeout for peers */
      ncclResult_t result = ncclCommFinalize(state->comm);
      double start = bpt_comm_seconds();
      while (result == ncclInProgress &&
             (comm->timeout_seconds == 0 || bpt_comm_seconds() - start < comm->timeout_seconds))
        ncclCommGetAsyncError(state->comm, &result);
      clean = result == ncclSuccess;
      if (result == ncclInProgress)
        status = bpt_comm_fail(comm, BPT_ERR_COMM,
                               "bpt_comm_destroy: ncclCommFinalize did not complete within the %.3g s timeout (a peer "
                               "stopped or is not destroying its communicator); the communicator was aborted",
                               comm->timeout_seconds);
      else if (!clean)
        status = bpt_comm_fail(comm, BPT_ERR_COMM, "bpt_comm_destroy: ncclCommFinalize failed: %s",
                               ncclGetErrorString(result));
    }
    if (clean)
      ncclCommDestroy(state->comm);
    else
      ncclCommAbort(state->comm);
  }
  if (state->barrier_word) cudaFree(state->barrier_word);
  if (state->compute_done) cudaEventDestroy(state->compute_done);
  if (state->stream) cudaStreamDestroy(state->stream);
  free(state);
  comm->state = NULL;
  leave_device(previous);
  return status;
}

static void nccl_abort_job(bpt_comm *comm, int exit_code) {
  (void)exit_code;
  nccl_state *state = state_of(comm);
  comm->failed = true;
  if (state && state->comm) {
    ncclCommAbort(state->comm);
    state->comm = NULL;
  }
}

static const bpt_comm_engine_table nccl_engine = {
    /* .name = */ "nccl",
    /* .device_memory = */ true,
    /* .allreduce_start = */ nccl_allreduce_start,
    /* .allgather_start = */ nccl_allgather_start,
    /* .broadcast_start = */ nccl_broadcast_start,
    /* .barrier_start = */ nccl_barrier_start,
    /* .order_after = */ nccl_order_after,
    /* .test = */ nccl_test,
    /* .destroy = */ nccl_destroy,
    /* .abort_job = */ nccl_abort_job,
    /* .describe_waiting = */ NULL,
};

bpt_status bpt_comm_nccl_unique_id(bpt_context *context, bpt_comm_unique_id *out) {
  if (!out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_comm_nccl_unique_id: out is NULL");
  ncclUniqueId id;
  ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess)
    return bpt_error(context, BPT_ERR_COMM, "bpt_comm_nccl_unique_id: ncclGetUniqueId failed: %s",
                     ncclGetErrorString(result));
  memcpy(out->bytes, &id, sizeof id);
  return BPT_OK;
}

bpt_status bpt_comm_nccl_open(bpt_comm *comm, const bpt_comm_unique_id *id, int rank, int world_size, int device) {
  const char *where = "bpt_comm_create_nccl";
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0)
    return bpt_error(comm->context, BPT_ERR_DEVICE, "%s: no CUDA device (%s)", where,
                     error != cudaSuccess ? cudaGetErrorString(error) : "none found");
  if (device >= devices)
    return bpt_error(comm->context, BPT_ERR_INVALID_ARGUMENT, "%s: device %d, but only %d found", where, device,
                     devices);
  nccl_state *state = bpt_calloc(comm->context, 1, sizeof *state, "NCCL communicator state");
  if (!state) return BPT_ERR_OUT_OF_MEMORY;
  state->device = device;
  comm->state = state;
  comm->engine = &nccl_engine;
  comm->rank = rank;
  comm->size = world_size;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  /* The barrier word is zeroed once (a synchronous memset: creation may wait) so that the first barrier
   * reduces defined values; sums of zeros stay zero. */
  if ((error = cudaSetDevice(device)) != cudaSuccess ||
      (error = cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (error = cudaMalloc((void **)&state->barrier_word, sizeof *state->barrier_word)) != cudaSuccess ||
      (error = cudaMemset(state->barrier_word, 0, sizeof *state->barrier_word)) != cudaSuccess ||
      (error = cudaEventCreateWithFlags(&state->compute_done, cudaEventDisableTiming)) != cudaSuccess) {
    comm->failed = true;
    nccl_destroy(comm);
    comm->engine = NULL;
    leave_device(previous);
    return bpt_error(comm->context, BPT_ERR_DEVICE, "%s: setting up device %d: %s", where, device,
                     cudaGetErrorString(error));
  }
  ncclUniqueId nccl_id;
  memcpy(&nccl_id, id->bytes, sizeof nccl_id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&state->comm, world_size, nccl_id, rank, &config);
  bpt_status status = settle(comm, result, "ncclCommInitRankConfig");
  if (status != BPT_OK) {
    nccl_destroy(comm);
    comm->engine = NULL;
  }
  leave_device(previous);
  return status == BPT_OK ? BPT_OK : BPT_ERR_COMM;
}
