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
#include <stdio.h>
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

/* The tag of the roll calls on the caller's communicator (create) and on ours (destroy): MPI guarantees tags
 * up to 32767. On our duplicate no ring is in flight by the time destroy calls it. */
enum { ROLL_CALL_TAG = 32766 };

/* Set once a blocking MPI call (MPI_Init_thread, MPI_Finalize) was left running on its helper thread after
 * the timeout: that thread may still be inside MPI, so nothing here calls MPI again. */
static const char *wedged_call;

static bpt_status check_not_wedged(bpt_context *context, const char *where) {
  if (!wedged_call) return BPT_OK;
  return bpt_error(context, BPT_ERR_STATE,
                   "%s: an earlier %s did not return within its timeout and is still blocked; MPI cannot be used "
                   "again in this process (exit, or let the launcher end the job)",
                   where, wedged_call);
}

static void pause_after(double waited) {
  if (waited < 0.01) return; /* a peer a little behind usually answers within milliseconds */
  struct timespec pause = {0, waited < 1.0 ? 20000 : 200000};
  nanosleep(&pause, NULL);
}

/* A blocking MPI call that cannot be made non-blocking, run on its own thread so the caller can stop
 * waiting after the timeout. Abandoned, the thread frees the call when (if ever) MPI returns. */
typedef struct blocking_call {
  pthread_mutex_t lock;
  pthread_cond_t finished;
  bool done, abandoned;
  bool initialise; /* MPI_Init_thread; MPI_Finalize otherwise */
  int result, provided;
} blocking_call;

static void *run_blocking_call(void *argument) {
  blocking_call *call = argument;
  int result = call->initialise ? MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &call->provided) : MPI_Finalize();
  pthread_mutex_lock(&call->lock);
  call->result = result;
  call->done = true;
  bool abandoned = call->abandoned;
  pthread_cond_signal(&call->finished);
  pthread_mutex_unlock(&call->lock);
  if (abandoned) {
    pthread_mutex_destroy(&call->lock);
    pthread_cond_destroy(&call->finished);
    free(call);
  }
  return NULL;
}

/* Runs MPI_Init_thread (initialise) or MPI_Finalize on a helper thread and waits at most timeout seconds
 * (0: forever). Returns 1 with *result when it returned in time, 0 when abandoned (then wedged_call is
 * set), -1 when no thread could be started (then the call ran on this thread). */
static int call_bounded(bool initialise, double timeout, int *result, int *provided) {
  /* (long long)timeout below is undefined from 2^63 s, and a 32-bit time_t overflows within decades; waiting
   * over 30 years is waiting forever. */
  if (timeout > 1e9) timeout = 0;
  blocking_call *call = calloc(1, sizeof *call);
  pthread_condattr_t attributes;
  pthread_attr_t thread_attributes;
  pthread_t thread;
  if (call) {
    call->initialise = initialise;
    pthread_mutex_init(&call->lock, NULL);
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(&call->finished, &attributes);
    pthread_condattr_destroy(&attributes);
    pthread_attr_init(&thread_attributes);
    pthread_attr_setdetachstate(&thread_attributes, PTHREAD_CREATE_DETACHED);
  }
  if (!call || pthread_create(&thread, &thread_attributes, run_blocking_call, call) != 0) {
    if (call) {
      pthread_attr_destroy(&thread_attributes);
      pthread_mutex_destroy(&call->lock);
      pthread_cond_destroy(&call->finished);
      free(call);
    }
    *result = initialise ? MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided) : MPI_Finalize();
    return -1;
  }
  pthread_attr_destroy(&thread_attributes);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  double whole = (double)(long long)timeout;
  deadline.tv_sec += (time_t)whole;
  deadline.tv_nsec += (long)((timeout - whole) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&call->lock);
  while (!call->done) {
    if (timeout <= 0)
      pthread_cond_wait(&call->finished, &call->lock);
    else if (pthread_cond_timedwait(&call->finished, &call->lock, &deadline) != 0 && !call->done)
      break;
  }
  bool done = call->done;
  if (!done) {
    call->abandoned = true;
    wedged_call = initialise ? "MPI_Init_thread" : "MPI_Finalize";
  }
  *result = call->result;
  if (provided) *provided = call->provided;
  pthread_mutex_unlock(&call->lock);
  if (done) {
    pthread_mutex_destroy(&call->lock);
    pthread_cond_destroy(&call->finished);
    free(call);
  }
  return done ? 1 : 0;
}

/* "rank 1" or "ranks 1, 3, 4" into text. */
static void list_ranks(const int *ranks, int count, char *text, size_t size) {
  size_t used = (size_t)snprintf(text, size, "rank%s", count == 1 ? "" : "s");
  for (int i = 0; i < count && used < size; i++) {
    if (i == 8 && count > 9) {
      snprintf(text + used, size - used, " and %d more", count - i);
      return;
    }
    used += (size_t)snprintf(text + used, size - used, "%s %d", i ? "," : "", ranks[i]);
  }
}

/* Before MPI_Init_thread returns only the launcher's environment says who we are: the ranks that did not
 * answer are the others. */
static void describe_other_launch_ranks(char *text, size_t size) {
  const char *rank_text = getenv("OMPI_COMM_WORLD_RANK"), *size_text = getenv("OMPI_COMM_WORLD_SIZE");
  if (!rank_text) rank_text = getenv("PMI_RANK");
  if (!size_text) size_text = getenv("PMI_SIZE");
  int rank = rank_text ? atoi(rank_text) : -1, world = size_text ? atoi(size_text) : 0;
  if (rank < 0 || world < 2 || rank >= world) {
    snprintf(text, size, "another rank of the job (the launcher's environment does not say which)");
    return;
  }
  int others[9] = {0}, count = 0;
  for (int r = 0; r < world && count < 9; r++)
    if (r != rank) others[count++] = r;
  char listed[128];
  list_ranks(others, count, listed, sizeof listed);
  snprintf(text, size, "%s%s%s (this is rank %d of %d)", count > 1 ? "one or more of " : "", listed,
           world - 1 > count ? ", ..." : "", rank, world);
}

/* Exchanges an empty message with every other rank of comm on tag and waits at most timeout seconds (0:
 * forever). Returns MPI_SUCCESS when all answered; MPI_ERR_PENDING when some did not, named in missing;
 * another MPI code on error (with *call naming the MPI call). Requests still open at the timeout are
 * cancelled or freed, so nothing is left that refers to this function's memory. */
static int roll_call(MPI_Comm comm, int tag, double timeout, char *missing, size_t missing_size, const char **call) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size <= 1) return MPI_SUCCESS;
  MPI_Request *requests = malloc(sizeof *requests * 2 * (size_t)(size - 1));
  int *silent = malloc(sizeof *silent * (size_t)size);
  if (!requests || !silent) {
    free(requests);
    free(silent);
    *call = "malloc (roll call)";
    return MPI_ERR_NO_MEM;
  }
  int code = MPI_SUCCESS, posted = 0;
  static char empty[1];
  for (int peer = 0; peer < size && code == MPI_SUCCESS; peer++) {
    if (peer == rank) continue;
    code = MPI_Irecv(empty, 0, MPI_BYTE, peer, tag, comm, &requests[posted]);
    *call = "MPI_Irecv (roll call)";
    if (code != MPI_SUCCESS) break;
    posted++;
    code = MPI_Isend(empty, 0, MPI_BYTE, peer, tag, comm, &requests[posted]);
    *call = "MPI_Isend (roll call)";
    if (code == MPI_SUCCESS) posted++;
  }
  double start = bpt_comm_seconds();
  int flag = 0;
  while (code == MPI_SUCCESS) {
    code = MPI_Testall(posted, requests, &flag, MPI_STATUSES_IGNORE);
    *call = "MPI_Testall (roll call)";
    if (code != MPI_SUCCESS || flag) break;
    double waited = bpt_comm_seconds() - start;
    if (timeout > 0 && waited > timeout) {
      code = MPI_ERR_PENDING;
      break;
    }
    pause_after(waited);
  }
  int count = 0;
  for (int i = 0; i < posted; i++) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    if (i % 2 == 0) { /* a receive nobody sent: its peer did not answer */
      int peer = i / 2 < rank ? i / 2 : i / 2 + 1;
      silent[count++] = peer;
      MPI_Cancel(&requests[i]);
    }
    MPI_Request_free(&requests[i]);
  }
  if (code == MPI_ERR_PENDING && count > 0) list_ranks(silent, count, missing, missing_size);
  if (code == MPI_ERR_PENDING && count == 0) snprintf(missing, missing_size, "a rank that has not taken our message");
  free(requests);
  free(silent);
  return code;
}


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

/* Frees our communicator and, when the library initialised MPI and this is the last one, finalises MPI, but
 * only after every rank answered a roll call within the timeout: MPI_Finalize waits for every rank, and a
 * stopped one would hold it forever. MPI_Finalize itself runs on a helper thread, bounded by the timeout
 * too. When a rank does not answer MPI is left initialised: the process cannot use MPI again and should
 * exit (the launcher then ends the job) or call bpt_comm_abort_job(). */
static bpt_status mpi_destroy(bpt_comm *comm) {
  mpi_state *state = state_of(comm);
  if (!state) return BPT_OK;
  const char *where = "bpt_comm_destroy";
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
  bpt_status status = BPT_OK;
  /* After a failure a peer may be gone: freeing the communicator or finalising could wait for it. */
  if (!comm->failed && !finalized && !wedged_call) {
    char missing[160] = "";
    const char *call = "";
    int code = roll_call(state->comm, ROLL_CALL_TAG, comm->timeout_seconds, missing, sizeof missing, &call);
    if (code == MPI_ERR_PENDING)
      status = bpt_comm_fail(comm, BPT_ERR_COMM,
                             "%s: no answer from %s within the %.3g s timeout (stopped, hung or not destroying its "
                             "communicator); MPI was not finalised: exit, or end the job with bpt_comm_abort_job()",
                             where, missing, comm->timeout_seconds);
    else if (code != MPI_SUCCESS)
      status = mpi_failure(comm, code, call);
  }
  if (!comm->failed && !finalized && !wedged_call) MPI_Comm_free(&state->comm);
  free(state->spare_scratch);
  free(state);
  comm->state = NULL;
  if (--open_communicators == 0 && initialised_by_us && !comm->failed && !finalized && !wedged_call) {
    int code = MPI_SUCCESS;
    if (call_bounded(false, comm->timeout_seconds, &code, NULL) == 0)
      status = bpt_comm_fail(comm, BPT_ERR_COMM,
                             "%s: MPI_Finalize did not return within the %.3g s timeout (a rank stopped after the "
                             "closing roll call); MPI cannot be used again in this process: exit, or let the "
                             "launcher end the job",
                             where, comm->timeout_seconds);
    initialised_by_us = 0;
  }
  return status;
}

static void mpi_abort_job(bpt_comm *comm, int exit_code) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !wedged_call) MPI_Abort(comm->state ? state_of(comm)->comm : MPI_COMM_WORLD, exit_code);
}

static void mpi_describe_waiting(bpt_comm *comm, bpt_comm_request *request, char *text, size_t size) {
  mpi_state *state = state_of(comm);
  int left = modulo(state->rank - 1, state->size), right = (state->rank + 1) % state->size;
  if (request->kind == REQUEST_RING) {
    bool receiving = false, sending = false;
    pthread_mutex_lock(&state->lock);
    for (int s = 0; s < request->segments; s++) {
      sending = sending || request->requests[2 * s] != MPI_REQUEST_NULL;
      receiving = receiving || request->requests[2 * s + 1] != MPI_REQUEST_NULL;
    }
    pthread_mutex_unlock(&state->lock);
    if (receiving || sending) { /* the ring waits on its neighbours: the left one sends to us */
      snprintf(text, size, "rank %d (its ring message %s)", receiving ? left : right,
               receiving ? "has not arrived" : "was not taken");
      return;
    }
  }
  int others[8] = {0}, count = 0;
  for (int r = 0; r < state->size && count < 8; r++)
    if (r != state->rank) others[count++] = r;
  char listed[96];
  list_ranks(others, count, listed, sizeof listed);
  snprintf(text, size, "%s%s%s", count > 1 ? "one or more of " : "", listed, state->size - 1 > count ? ", ..." : "");
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
    /* .describe_waiting = */ mpi_describe_waiting,
};

/* Turns the caller's handle into an MPI_Comm, initialising MPI for BPT_COMM_MPI_WORLD when needed (on a
 * helper thread, so that a rank that never arrives costs the timeout, not a hang). */
static bpt_status resolve(bpt_context *context, int64_t handle, double timeout, MPI_Comm *out, const char *where) {
  BPT_CHECK(check_not_wedged(context, where));
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (finalized) return bpt_error(context, BPT_ERR_STATE, "%s: MPI was already finalised", where);
  if (handle == BPT_COMM_MPI_WORLD) {
    if (!initialised) {
      int provided = 0, code = MPI_SUCCESS;
      if (call_bounded(true, timeout, &code, &provided) == 0) {
        char others[192];
        describe_other_launch_ranks(others, sizeof others);
        return bpt_error(context, BPT_ERR_COMM,
                         "%s: MPI_Init_thread did not return within the %.3g s timeout: no answer from %s (stopped, "
                         "hung or never started); MPI cannot be used again in this process: exit, or let the "
                         "launcher end the job",
                         where, timeout, others);
      }
      if (code != MPI_SUCCESS) return bpt_error(context, BPT_ERR_COMM, "%s: MPI_Init_thread failed", where);
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

static bpt_status describe_mpi_error(bpt_context *context, int code, const char *call, const char *where) {
  char message[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  MPI_Error_string(code, message, &length);
  return bpt_error(context, BPT_ERR_COMM, "%s: %s failed: %s", where, call, message);
}

/* Every rank of parent answers within the timeout, or BPT_ERR_COMM names those that did not. Collective
 * calls that cannot time out (MPI_Comm_split_type) are safe to make after it, short of a rank stopping in
 * between. */
static bpt_status all_present(bpt_context *context, MPI_Comm parent, double timeout, const char *where) {
  char missing[160] = "";
  const char *call = "";
  int code = roll_call(parent, ROLL_CALL_TAG, timeout, missing, sizeof missing, &call);
  if (code == MPI_ERR_PENDING) {
    int rank = 0, size = 0;
    MPI_Comm_rank(parent, &rank);
    MPI_Comm_size(parent, &size);
    return bpt_error(context, BPT_ERR_COMM,
                     "%s: no answer from %s within the %.3g s timeout (stopped, hung or not calling %s) (rank %d of "
                     "%d)",
                     where, missing, timeout, where, rank, size);
  }
  return code == MPI_SUCCESS ? BPT_OK : describe_mpi_error(context, code, call, where);
}

/* MPI_Comm_idup polled against the deadline (MPI_Comm_dup blocks while any rank is away). */
static bpt_status duplicate(bpt_context *context, MPI_Comm parent, double timeout, MPI_Comm *out, bool *abandoned,
                            const char *where) {
  MPI_Request request = MPI_REQUEST_NULL;
  int code = MPI_Comm_idup(parent, out, &request), flag = 0;
  double start = bpt_comm_seconds();
  while (code == MPI_SUCCESS && !flag) {
    code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    double waited = bpt_comm_seconds() - start;
    if (code == MPI_SUCCESS && !flag && timeout > 0 && waited > timeout) {
      /* The request stays open (MPI may still write *out), so out must outlive it: the caller leaks it. */
      *abandoned = true;
      return bpt_error(context, BPT_ERR_COMM,
                       "%s: MPI_Comm_idup did not complete within the %.3g s timeout: every rank had answered, so one "
                       "stopped or left since",
                       where, timeout);
    }
    if (!flag) pause_after(waited);
  }
  return code == MPI_SUCCESS ? BPT_OK : describe_mpi_error(context, code, "MPI_Comm_idup", where);
}

bpt_status bpt_comm_mpi_open(bpt_comm *comm, int64_t handle, bool progress_thread) {
  const char *where = "bpt_comm_create_mpi";
  MPI_Comm parent;
  BPT_CHECK(resolve(comm->context, handle, comm->timeout_seconds, &parent, where));
  BPT_CHECK(all_present(comm->context, parent, comm->timeout_seconds, where));
  mpi_state *state = bpt_calloc(comm->context, 1, sizeof *state, "MPI communicator state");
  if (!state) return BPT_ERR_OUT_OF_MEMORY;
  bool abandoned = false;
  bpt_status status = duplicate(comm->context, parent, comm->timeout_seconds, &state->comm, &abandoned, where);
  if (status != BPT_OK) {
    if (!abandoned) free(state); /* abandoned, it stays: the open MPI_Comm_idup may still write to it */
    return status;
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

bpt_status bpt_comm_mpi_share_id(bpt_context *context, int64_t handle, double timeout, bpt_comm_unique_id *id,
                                 int *rank, int *size, int *local_rank) {
  const char *where = "bpt_comm_create_nccl_mpi";
  MPI_Comm parent;
  BPT_CHECK(resolve(context, handle, timeout, &parent, where));
  BPT_CHECK(all_present(context, parent, timeout, where));
  MPI_Comm_rank(parent, rank);
  MPI_Comm_size(parent, size);
  /* Rank 0's status travels with the id, so that a failure there fails every rank instead of hanging them. */
  struct {
    int32_t status;
    bpt_comm_unique_id id;
  } message;
  memset(&message, 0, sizeof message);
  if (*rank == 0) message.status = bpt_comm_nccl_unique_id(context, &message.id);
  /* Non-blocking, polled against the deadline; static because an abandoned broadcast may still write it. */
  static struct {
    int32_t status;
    bpt_comm_unique_id id;
  } received;
  if (*rank == 0) memcpy(&received, &message, sizeof message);
  MPI_Request request = MPI_REQUEST_NULL;
  int code = MPI_Ibcast(&received, (int)sizeof received, MPI_BYTE, 0, parent, &request), flag = 0;
  for (double start = bpt_comm_seconds(); code == MPI_SUCCESS && !flag;) {
    code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    double waited = bpt_comm_seconds() - start;
    if (code == MPI_SUCCESS && !flag && timeout > 0 && waited > timeout)
      return bpt_error(context, BPT_ERR_COMM, "%s: broadcasting the NCCL id did not complete within %.3g s (rank %d)",
                       where, timeout, *rank);
    if (!flag) pause_after(waited);
  }
  if (code != MPI_SUCCESS) return bpt_error(context, BPT_ERR_COMM, "%s: broadcasting the NCCL id failed", where);
  memcpy(&message, &received, sizeof message);
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
