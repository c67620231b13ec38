/* The MPI engine: host buffers, a duplicated communicator with MPI_ERRORS_RETURN, and every collective
 * non-blocking so comm.c can poll it with a timeout. All-reduce is our own ring (reduce-scatter then
 * all-gather over MPI_Isend/MPI_Irecv): it handles f16, bf16 and int8 without MPI user ops, and Open MPI's
 * MPI_Iallreduce is 2-3x slower than its blocking MPI_Allreduce (bench/mpi/comm.c).
 * The ring is pipelined: each rank's chunk of 1 MiB or more is cut into segments (256 KiB or more, at most
 * 16), each with its own tags, and each segment moves to its next hop as soon as its own send and receive
 * are done, reduced right after it arrives while it is still in cache. A whole-chunk ring receives a chunk
 * into a scratch as large as the chunk (cold by the time it is reduced) and starts no all-gather before the
 * slowest byte of the reduce-scatter; here segments overlap one another's transfers, all-gathers and
 * reductions, and the scratch is two segments, reused. Segments go out several at a time: 256 KiB segments
 * sent strictly one after another made 64 MiB 10x slower, each paying a full poll latency.
 * MPI moves data only inside MPI calls, so when MPI provides MPI_THREAD_MULTIPLE a progress thread advances
 * the requests in flight while the caller computes; otherwise they advance when the caller polls (between
 * backward nodes). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/compress.h"

typedef struct mpi_state {
  MPI_Comm comm;
  int tag_limit; /* tags run from 0 to tag_limit - 1 */
  /* The first tag of the next all-reduce: each takes the next hops * segments tags, in the same order on
   * every rank, so all-reduces in flight together never match each other's messages. */
  int next_tag;
  /* The last finished ring's chunk buffer, reused so that a step's buckets do not allocate and fault in
   * fresh pages for every all-reduce. */
  char *spare_scratch;
  size_t spare_bytes;
  int size, rank;
  /* Requests in flight, advanced by whoever holds the lock: the caller's polls or the progress thread. */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bpt_comm_request *active;
  bool progress_thread_running, stopping;
  pthread_t progress_thread;
} mpi_state;

typedef enum request_kind { REQUEST_RING, REQUEST_SINGLE } request_kind;

/* A chunk of SEGMENTED_CHUNK_BYTES or more travels in at most SEGMENTS_MAX segments of at least
 * SEGMENT_MIN_BYTES each; a smaller one is one message. At most RECEIVE_SLOTS segments are in the
 * reduce-scatter at once, each receiving into its own slot of the scratch buffer, and the next segment
 * starts when the one before it in that slot has left the reduce-scatter. So the scratch is two segments
 * whatever the buffer size (512 KiB up to 8 MiB buffers on 2 ranks, 4 MiB at 64 MiB, where a whole chunk
 * was 32 MiB) and is likely still in cache when reused. Measured on 2 ranks over shared memory
 * (bench/comm.sh and ad-hoc drivers): at 4 MiB, 256 KiB segments in two slots beat 512 KiB ones, 1 MiB ones
 * and whole chunks, which all left a scratch that was cold after other work; at 1 MiB two 256 KiB messages
 * lost to one (each message costs a rendezvous and a completion). */
enum { SEGMENTS_MAX = 16, RECEIVE_SLOTS = 2 };
#define SEGMENT_MIN_BYTES ((size_t)256 << 10)
#define SEGMENTED_CHUNK_BYTES ((size_t)1 << 20)

struct bpt_comm_request {
  request_kind kind;
  /* ring: segment s's send and receive of its current hop at 2 s and 2 s + 1; single: requests[0] */
  MPI_Request requests[2 * SEGMENTS_MAX];
  /* Ring all-reduce of buffer (count elements of element_size bytes) in size chunks of segments each. */
  char *buffer;
  int64_t count;
  size_t element_size;
  bpt_dtype dtype;
  bpt_comm_reduction reduction;
  char *scratch; /* segment s is received into slot s % slots (of slot_bytes each) before it is reduced */
  size_t scratch_bytes, slot_bytes;
  int segments, slots, segments_started, segments_finished;
  int hop[SEGMENTS_MAX]; /* per segment; hops = 2 (size - 1): size - 1 reduce-scatter hops, then all-gather */
  int hops;
  int tag; /* segment s at hop h uses tag + h * segments + s */
  bool finished;
  int error;              /* the MPI error code that stopped it, MPI_SUCCESS otherwise */
  const char *error_call; /* and the call that returned it */
  bpt_comm_request *next; /* in mpi_state.active */
};

/* Processes that called MPI_Init through us, so the last communicator destroyed finalises MPI. */
static int initialised_by_us;
static int open_communicators;

static mpi_state *state_of(bpt_comm *comm) { return comm->state; }

static bpt_status mpi_failure(bpt_comm *comm, int code, const char *what) {
  char message[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  MPI_Error_string(code, message, &length);
  return bpt_comm_fail(comm, BPT_ERR_COMM, "mpi: %s failed: %s", what, message);
}

static int modulo(int a, int b) { return ((a % b) + b) % b; }

static int64_t chunk_begin(const bpt_comm_request *request, int size, int chunk) {
  return request->count * chunk / size;
}

/* Element range [*begin, *end) of segment `segment` of chunk `chunk`: the same on every rank and every hop,
 * so a segment only ever touches its own slice of each chunk. */
static void segment_range(const bpt_comm_request *request, int size, int chunk, int segment, int64_t *begin,
                          int64_t *end) {
  int64_t first = chunk_begin(request, size, chunk), length = chunk_begin(request, size, chunk + 1) - first;
  *begin = first + length * segment / request->segments;
  *end = first + length * (segment + 1) / request->segments;
}

/* Posts the receive and the send of segment's current hop; returns the MPI code. */
static int post_segment(mpi_state *state, bpt_comm_request *request, int segment) {
  int size = state->size, rank = state->rank, hop = request->hop[segment];
  int right = (rank + 1) % size, left = modulo(rank - 1, size);
  int send_chunk, receive_chunk;
  if (hop < size - 1) { /* reduce-scatter: pass partial sums around the ring */
    send_chunk = modulo(rank - hop, size);
    receive_chunk = modulo(rank - hop - 1, size);
  } else { /* all-gather: pass the finished chunks around */
    int step = hop - (size - 1);
    send_chunk = modulo(rank + 1 - step, size);
    receive_chunk = modulo(rank - step, size);
  }
  int64_t send_begin, send_end, receive_begin, receive_end;
  segment_range(request, size, send_chunk, segment, &send_begin, &send_end);
  segment_range(request, size, receive_chunk, segment, &receive_begin, &receive_end);
  size_t bytes = request->element_size;
  char *receive_base = hop < size - 1 ? request->scratch + (size_t)(segment % request->slots) * request->slot_bytes
                                      : request->buffer + (size_t)receive_begin * bytes;
  int tag = (int)(((int64_t)request->tag + (int64_t)hop * request->segments + segment) % state->tag_limit);
  MPI_Request *pair = &request->requests[2 * segment];
  int code = MPI_Irecv(receive_base, (int)((size_t)(receive_end - receive_begin) * bytes), MPI_BYTE, left, tag,
                       state->comm, &pair[1]);
  if (code != MPI_SUCCESS) {
    request->error_call = "MPI_Irecv";
    return code;
  }
  code = MPI_Isend(request->buffer + (size_t)send_begin * bytes, (int)((size_t)(send_end - send_begin) * bytes),
                   MPI_BYTE, right, tag, state->comm, &pair[0]);
  if (code != MPI_SUCCESS) request->error_call = "MPI_Isend";
  return code;
}

static void reduce_segment(const mpi_state *state, bpt_comm_request *request, int segment) {
  int chunk = modulo(state->rank - request->hop[segment] - 1, state->size);
  int64_t begin, end;
  segment_range(request, state->size, chunk, segment, &begin, &end);
  char *target = request->buffer + (size_t)begin * request->element_size;
  const char *source = request->scratch + (size_t)(segment % request->slots) * request->slot_bytes;
  if (request->reduction == BPT_COMM_REDUCE_MAX)
    bpt_comm_max_into((float *)target, (const float *)source, end - begin);
  else
    bpt_comm_sum_into(request->dtype, target, source, end - begin);
}

/* Moves the request on as far as it goes without waiting; sets finished or error. Touches only the request
 * and MPI (never the context), so the progress thread may call it; the caller holds state->lock. Each
 * segment moves through the hops on its own: as soon as both halves of its hop are done it is reduced
 * (while the received bytes are still in cache) and its next hop is posted, so the all-gather of early
 * segments overlaps the reduce-scatter of later ones. */
static void advance(mpi_state *state, bpt_comm_request *request) {
  if (request->finished || request->error != MPI_SUCCESS) return;
  int flag = 0;
  if (request->kind == REQUEST_SINGLE) {
    request->error = MPI_Test(&request->requests[0], &flag, MPI_STATUS_IGNORE);
    request->error_call = "MPI_Test";
    request->finished = request->error == MPI_SUCCESS && flag;
    return;
  }
  int completed = 0, indices[2 * SEGMENTS_MAX];
  for (bool moved = true; moved && request->segments_finished < request->segments;) {
    moved = false;
    /* One segment is polled as the whole-chunk ring was (1 MiB measured a few points slower with
     * MPI_Testsome, which returns a half-done pair without advancing MPI). */
    if (request->segments == 1) {
      request->error = MPI_Testall(2, request->requests, &flag, MPI_STATUSES_IGNORE);
      request->error_call = "MPI_Testall (ring all-reduce)";
      completed = flag ? 2 : 0;
      indices[0] = 0, indices[1] = 1;
    } else {
      request->error = MPI_Testsome(2 * request->segments, request->requests, &completed, indices, MPI_STATUSES_IGNORE);
      request->error_call = "MPI_Testsome (ring all-reduce)";
    }
    if (request->error != MPI_SUCCESS) return;
    for (int i = 0; i < completed && completed != MPI_UNDEFINED; i++) {
      int segment = indices[i] / 2;
      MPI_Request *pair = &request->requests[2 * segment];
      if (request->hop[segment] >= request->hops || pair[0] != MPI_REQUEST_NULL || pair[1] != MPI_REQUEST_NULL)
        continue; /* its other half is still in flight, or both completed in this call and it moved on */
      if (request->hop[segment] < state->size - 1) reduce_segment(state, request, segment);
      moved = true;
      if (++request->hop[segment] == request->hops)
        request->segments_finished++;
      else if ((request->error = post_segment(state, request, segment)) != MPI_SUCCESS)
        return;
    }
    while (request->segments_started < request->segments &&
           request->hop[request->segments_started - request->slots] >= state->size - 1) { /* its slot is free */
      moved = true;
      if ((request->error = post_segment(state, request, request->segments_started++)) != MPI_SUCCESS) return;
    }
  }
  request->finished = request->segments_finished == request->segments;
}

/* Adds a started request to the list in flight (and wakes the progress thread); the caller holds the lock. */
static void track(mpi_state *state, bpt_comm_request *request) {
  request->next = state->active;
  state->active = request;
  pthread_cond_signal(&state->wake);
}

static void untrack(mpi_state *state, bpt_comm_request *request) {
  for (bpt_comm_request **link = &state->active; *link; link = &(*link)->next)
    if (*link == request) {
      *link = request->next;
      return;
    }
}

static void *progress_loop(void *argument) {
  mpi_state *state = argument;
  pthread_mutex_lock(&state->lock);
  while (!state->stopping) {
    if (!state->active) {
      pthread_cond_wait(&state->wake, &state->lock);
      continue;
    }
    for (bpt_comm_request *request = state->active; request; request = request->next)
      advance(state, request);
    pthread_mutex_unlock(&state->lock);
    /* Short enough that a hop starts soon after the peer posts it, long enough to leave the core to compute. */
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&state->lock);
  }
  pthread_mutex_unlock(&state->lock);
  return NULL;
}

static size_t element_size(bpt_dtype dtype) { return dtype == BPT_DTYPE_U8 ? 1 : bpt_dtype_size(dtype); }

static bpt_status mpi_allreduce_start(bpt_comm *comm, void *buffer, int64_t count, bpt_dtype dtype,
                                      bpt_comm_reduction reduction, float prescale, bpt_comm_request **out) {
  size_t bytes = element_size(dtype);
  int64_t largest_chunk = (count + comm->size - 1) / comm->size;
  if ((size_t)largest_chunk * bytes > (size_t)INT_MAX)
    return bpt_error(comm->context, BPT_ERR_UNSUPPORTED,
                     "mpi: all-reduce of %lld elements: each rank's share must stay under 2 GiB; split the buffer",
                     (long long)count);
  bpt_comm_request *request = bpt_calloc(comm->context, 1, sizeof *request, "MPI all-reduce request");
  if (!request) return BPT_ERR_OUT_OF_MEMORY;
  request->kind = REQUEST_RING;
  for (int i = 0; i < 2 * SEGMENTS_MAX; i++)
    request->requests[i] = MPI_REQUEST_NULL;
  request->buffer = buffer;
  request->count = count;
  request->element_size = bytes;
  request->dtype = dtype;
  request->reduction = reduction;
  request->hops = 2 * (comm->size - 1);
  /* Every rank derives the same segment count from count and size alone, so segments match up. */
  size_t chunk_bytes = (size_t)largest_chunk * bytes;
  size_t wanted = chunk_bytes < SEGMENTED_CHUNK_BYTES ? 1 : chunk_bytes / SEGMENT_MIN_BYTES;
  request->segments = wanted < 1 ? 1 : wanted > SEGMENTS_MAX ? SEGMENTS_MAX : (int)wanted;
  request->slot_bytes = (size_t)((largest_chunk + request->segments - 1) / request->segments) * bytes;
  mpi_state *state = state_of(comm);
  request->tag = state->next_tag;
  state->next_tag = (int)(((int64_t)state->next_tag + (int64_t)request->hops * request->segments) % state->tag_limit);
  if (dtype != BPT_DTYPE_U8) bpt_comm_scale(dtype, buffer, count, prescale);
  if (request->hops > 0 && count > 0) {
    request->slots = request->segments < RECEIVE_SLOTS ? request->segments : RECEIVE_SLOTS;
    size_t needed = (size_t)request->slots * request->slot_bytes;
    if (state->spare_scratch && state->spare_bytes >= needed) {
      request->scratch = state->spare_scratch;
      request->scratch_bytes = state->spare_bytes;
      state->spare_scratch = NULL;
      state->spare_bytes = 0;
    } else if ((request->scratch = malloc(needed))) {
      request->scratch_bytes = needed;
    } else {
      free(request);
      return bpt_error(comm->context, BPT_ERR_OUT_OF_MEMORY, "mpi: out of memory for a %zu-byte ring chunk", needed);
    }
    pthread_mutex_lock(&state->lock);
    int code = MPI_SUCCESS;
    for (; request->segments_started < request->slots && code == MPI_SUCCESS; request->segments_started++)
      code = post_segment(state, request, request->segments_started);
    if (code == MPI_SUCCESS) track(state, request);
    pthread_mutex_unlock(&state->lock);
    if (code != MPI_SUCCESS) return mpi_failure(comm, code, request->error_call); /* MPI may still use it */
  } else {
    request->finished = true;
  }
  *out = request;
  return BPT_OK;
}

static bpt_status start_single(bpt_comm *comm, int code, const char *what, MPI_Request mpi_request,
                               bpt_comm_request **out) {
  if (code != MPI_SUCCESS) return mpi_failure(comm, code, what);
  bpt_comm_request *request = bpt_calloc(comm->context, 1, sizeof *request, "MPI request");
  if (!request) return bpt_comm_fail(comm, BPT_ERR_OUT_OF_MEMORY, "mpi: out of memory tracking %s", what);
  request->kind = REQUEST_SINGLE;
  request->requests[0] = mpi_request;
  mpi_state *state = state_of(comm);
  pthread_mutex_lock(&state->lock);
  track(state, request);
  pthread_mutex_unlock(&state->lock);
  *out = request;
  return BPT_OK;
}

static bpt_status mpi_allgather_start(bpt_comm *comm, const void *send, void *receive, size_t bytes,
                                      bpt_comm_request **out) {
  if (bytes > (size_t)INT_MAX)
    return bpt_error(comm->context, BPT_ERR_UNSUPPORTED, "mpi: all-gather of %zu bytes per rank is over 2 GiB", bytes);
  MPI_Request request;
  int code = MPI_Iallgather(send, (int)bytes, MPI_BYTE, receive, (int)bytes, MPI_BYTE, state_of(comm)->comm, &request);
  return start_single(comm, code, "MPI_Iallgather", request, out);
}

static bpt_status mpi_broadcast_start(bpt_comm *comm, void *buffer, size_t bytes, int root, bpt_comm_request **out) {
  if (bytes > (size_t)INT_MAX)
    return bpt_error(comm->context, BPT_ERR_UNSUPPORTED, "mpi: broadcast of %zu bytes is over 2 GiB", bytes);
  MPI_Request request;
  int code = MPI_Ibcast(buffer, (int)bytes, MPI_BYTE, root, state_of(comm)->comm, &request);
  return start_single(comm, code, "MPI_Ibcast", request, out);
}

static bpt_status mpi_barrier_start(bpt_comm *comm, bpt_comm_request **out) {
  MPI_Request request;
  int code = MPI_Ibarrier(state_of(comm)->comm, &request);
  return start_single(comm, code, "MPI_Ibarrier", request, out);
}

static bpt_status mpi_test(bpt_comm *comm, bpt_comm_request *request, bool *done) {
  *done = false;
  mpi_state *state = state_of(comm);
  /* When the progress thread holds the lock it is advancing (maybe reducing a large chunk): do not wait for
   * it in the middle of backward; the caller polls again. */
  if (state->progress_thread_running) {
    if (pthread_mutex_trylock(&state->lock) != 0) return BPT_OK;
  } else {
    pthread_mutex_lock(&state->lock);
  }
  advance(state, request);
  if (request->error != MPI_SUCCESS) {
    untrack(state, request); /* left allocated: MPI may still reference its buffers */
    pthread_mutex_unlock(&state->lock);
    return mpi_failure(comm, request->error, request->error_call);
  }
  if (!request->finished) {
    pthread_mutex_unlock(&state->lock);
    return BPT_OK;
  }
  untrack(state, request);
  if (request->scratch && request->scratch_bytes >= state->spare_bytes) {
    free(state->spare_scratch);
    state->spare_scratch = request->scratch;
    state->spare_bytes = request->scratch_bytes;
  } else {
    free(request->scratch);
  }
  pthread_mutex_unlock(&state->lock);
  free(request);
  *done = true;
  return BPT_OK;
}

static void mpi_destroy(bpt_comm *comm) {
  mpi_state *state = state_of(comm);
  if (!state) return;
  if (state->progress_thread_running) { /* it never blocks inside MPI, so it stops promptly */
    pthread_mutex_lock(&state->lock);
    state->stopping = true;
    pthread_cond_signal(&state->wake);
    pthread_mutex_unlock(&state->lock);
    pthread_join(state->progress_thread, NULL);
  }
  pthread_mutex_destroy(&state->lock);
  pthread_cond_destroy(&state->wake);
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* After a failure a peer may be gone: freeing the communicator or finalising could wait for it. */
  if (!comm->failed && !finalized) MPI_Comm_free(&state->comm);
  free(state->spare_scratch);
  free(state);
  comm->state = NULL;
  if (--open_communicators == 0 && initialised_by_us && !comm->failed && !finalized) {
    MPI_Finalize();
    initialised_by_us = 0;
  }
}

static void mpi_abort_job(bpt_comm *comm, int exit_code) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Abort(comm->state ? state_of(comm)->comm : MPI_COMM_WORLD, exit_code);
}

static const bpt_comm_engine_table mpi_engine = {
    /* .name = */ "mpi",
    /* .device_memory = */ false,
    /* .allreduce_start = */ mpi_allreduce_start,
    /* .allgather_start = */ mpi_allgather_start,
    /* .broadcast_start = */ mpi_broadcast_start,
    /* .barrier_start = */ mpi_barrier_start,
    /* .order_after = */ NULL,
    /* .test = */ mpi_test,
    /* .destroy = */ mpi_destroy,
    /* .abort_job = */ mpi_abort_job,
};

/* Turns the caller's handle into an MPI_Comm, initialising MPI for BPT_COMM_MPI_WORLD when needed. */
static bpt_status resolve(bpt_context *context, int64_t handle, MPI_Comm *out, const char *where) {
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (finalized) return bpt_error(context, BPT_ERR_STATE, "%s: MPI was already finalised", where);
  if (handle == BPT_COMM_MPI_WORLD) {
    if (!initialised) {
      int provided = 0;
      if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return bpt_error(context, BPT_ERR_COMM, "%s: MPI_Init_thread failed", where);
      initialised_by_us = 1;
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    *out = MPI_COMM_WORLD;
    return BPT_OK;
  }
  if (!initialised)
    return bpt_error(context, BPT_ERR_STATE, "%s: MPI is not initialised (call MPI_Init or pass BPT_COMM_MPI_WORLD)",
                     where);
  if (handle < INT_MIN || handle > INT_MAX)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: %lld is not an MPI_Comm_c2f handle", where,
                     (long long)handle);
  *out = MPI_Comm_f2c((MPI_Fint)handle);
  if (*out == MPI_COMM_NULL)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: handle %lld is MPI_COMM_NULL", where, (long long)handle);
  return BPT_OK;
}

bpt_status bpt_comm_mpi_open(bpt_comm *comm, int64_t handle, bool progress_thread) {
  const char *where = "bpt_comm_create_mpi";
  MPI_Comm parent;
  BPT_CHECK(resolve(comm->context, handle, &parent, where));
  mpi_state *state = bpt_calloc(comm->context, 1, sizeof *state, "MPI communicator state");
  if (!state) return BPT_ERR_OUT_OF_MEMORY;
  int code = MPI_Comm_dup(parent, &state->comm);
  if (code != MPI_SUCCESS) {
    free(state);
    char message[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    MPI_Error_string(code, message, &length);
    return bpt_error(comm->context, BPT_ERR_COMM, "%s: MPI_Comm_dup failed: %s", where, message);
  }
  MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state->comm, &comm->rank);
  MPI_Comm_size(state->comm, &comm->size);
  int *tag_upper_bound = NULL, found = 0;
  MPI_Comm_get_attr(state->comm, MPI_TAG_UB, &tag_upper_bound, &found);
  state->tag_limit = found && tag_upper_bound && *tag_upper_bound > 0 ? *tag_upper_bound : 32767;
  state->rank = comm->rank;
  state->size = comm->size;
  pthread_mutex_init(&state->lock, NULL);
  pthread_cond_init(&state->wake, NULL);
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (progress_thread && provided == MPI_THREAD_MULTIPLE && comm->size > 1)
    state->progress_thread_running = pthread_create(&state->progress_thread, NULL, progress_loop, state) == 0;
  comm->state = state;
  comm->engine = &mpi_engine;
  open_communicators++;
  return BPT_OK;
}

bpt_status bpt_comm_mpi_share_id(bpt_context *context, int64_t handle, bpt_comm_unique_id *id, int *rank, int *size,
                                 int *local_rank) {
  const char *where = "bpt_comm_create_nccl_mpi";
  MPI_Comm parent;
  BPT_CHECK(resolve(context, handle, &parent, where));
  MPI_Comm_rank(parent, rank);
  MPI_Comm_size(parent, size);
  /* Rank 0's status travels with the id, so that a failure there fails every rank instead of hanging them. */
  struct {
    int32_t status;
    bpt_comm_unique_id id;
  } message;
  memset(&message, 0, sizeof message);
  if (*rank == 0) message.status = bpt_comm_nccl_unique_id(context, &message.id);
  if (MPI_Bcast(&message, (int)sizeof message, MPI_BYTE, 0, parent) != MPI_SUCCESS)
    return bpt_error(context, BPT_ERR_COMM, "%s: broadcasting the NCCL id failed", where);
  if (message.status != BPT_OK)
    return *rank == 0 ? (bpt_status)message.status
                      : bpt_error(context, (bpt_status)message.status, "%s: rank 0 could not make an NCCL id", where);
  *id = message.id;
  MPI_Comm node;
  if (MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return bpt_error(context, BPT_ERR_COMM, "%s: finding the ranks on this node failed", where);
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_free(&node);
  return BPT_OK;
}
