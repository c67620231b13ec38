/* Sums ranges of a backend's float buffer across ranks (see range_reduce.h): each range is staged on the
 * host unless the engine reads the backend's memory, encoded when compressed, started as a non-blocking
 * collective, and decoded and written back once complete. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "comm/range_reduce.h"

typedef enum range_phase { RANGE_IDLE, RANGE_IN_FLIGHT, RANGE_DONE } range_phase;

typedef struct range_state {
  int64_t offset, count;
  range_phase phase;
  float *host;     /* the values in host memory: the buffer itself when zero-copy, else staging */
  float *residual; /* error feedback: what compression left out, added to the next reduction */
  void *payload;   /* the encoded range that is sent (f16, int8 or top-k entries) */
  void *gathered;  /* top-k: every rank's entries */
  float *scratch;  /* top-k: magnitudes for the selection */
  int64_t k;       /* top-k: entries per rank */
  float step;      /* int8: the value of one quantisation step, agreed by all ranks */
} range_state;

struct bpt_range_reducer {
  bpt_comm *comm;
  bpt_backend *backend;
  float *buffer;
  bpt_range_reducer_options options;
  range_state *ranges;
  bpt_comm_request **requests; /* per range, NULL unless in flight */
  int count;
  int next; /* ranges start strictly in index order */
};

static bpt_status device_error(bpt_range_reducer *reducer, const char *what) {
  const bpt_backend *backend = reducer->backend;
  return bpt_error(reducer->comm->context, BPT_ERR_DEVICE, "%s: backend '%s': %s", what, backend->vtable->name,
                   backend->error_message[0] ? backend->error_message : "device error");
}

static bpt_status allocate_buffers(bpt_range_reducer *reducer) {
  bpt_context *context = reducer->comm->context;
  const bpt_range_reducer_options *o = &reducer->options;
  bool lossy = o->compression != BPT_COMPRESSION_NONE;
  for (int i = 0; i < reducer->count; i++) {
    range_state *r = &reducer->ranges[i];
    size_t count = (size_t)r->count;
    if (o->compression == BPT_COMPRESSION_TOPK && r->count > INT32_MAX) /* bpt_comm_sparse_entry's index */
      return bpt_error(context, BPT_ERR_UNSUPPORTED,
                       "data parallel: top-k compression indexes a bucket in 32 bits, and bucket %d holds %lld values "
                       "(a parameter over 8 GiB); use another compression for this model",
                       i, (long long)r->count);
    if (o->zero_copy)
      r->host = reducer->buffer + r->offset;
    else if (!reducer->comm->engine->device_memory && !(r->host = bpt_calloc(context, count, sizeof(float), "staging")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (lossy && o->error_feedback && !(r->residual = bpt_calloc(context, count, sizeof(float), "residual")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_F16 && !(r->payload = bpt_calloc(context, count, 2, "f16 payload")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_INT8 && !(r->payload = bpt_calloc(context, count, 1, "int8 payload")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_TOPK) {
      r->k = (int64_t)ceil((double)o->topk_ratio * (double)r->count);
      if (r->k < 1) r->k = 1;
      if (r->k > r->count) r->k = r->count;
      size_t entry = sizeof(bpt_comm_sparse_entry);
      if (!(r->payload = bpt_calloc(context, (size_t)r->k, entry, "top-k entries")) ||
          !(r->gathered = bpt_calloc(context, (size_t)r->k * (size_t)reducer->comm->size, entry, "gathered entries")) ||
          !(r->scratch = bpt_calloc(context, count, sizeof(float), "top-k scratch")))
        return BPT_ERR_OUT_OF_MEMORY;
    }
  }
  return BPT_OK;
}

bpt_status bpt_range_reducer_create(bpt_comm *comm, bpt_backend *backend, float *buffer, const bpt_comm_range *ranges,
                                    int count, const bpt_range_reducer_options *options, bpt_range_reducer **out) {
  *out = NULL;
  bpt_range_reducer *reducer = bpt_calloc(comm->context, 1, sizeof *reducer, "range reducer");
  if (!reducer) return BPT_ERR_OUT_OF_MEMORY;
  reducer->comm = comm;
  reducer->backend = backend;
  reducer->buffer = buffer;
  reducer->options = *options;
  reducer->count = count;
  reducer->ranges = bpt_calloc(comm->context, (size_t)count, sizeof *reducer->ranges, "ranges");
  reducer->requests = bpt_calloc(comm->context, (size_t)count, sizeof *reducer->requests, "range requests");
  bpt_status status = reducer->ranges && reducer->requests ? BPT_OK : BPT_ERR_OUT_OF_MEMORY;
  for (int i = 0; status == BPT_OK && i < count; i++) {
    reducer->ranges[i].offset = ranges[i].offset;
    reducer->ranges[i].count = ranges[i].count;
  }
  if (status == BPT_OK) status = allocate_buffers(reducer);
  if (status != BPT_OK) {
    bpt_range_reducer_destroy(reducer);
    return status;
  }
  *out = reducer;
  return BPT_OK;
}

/* Encodes the range's values plus the carried error into its payload and keeps the new error. */
static void encode(bpt_range_reducer *reducer, range_state *r) {
  bpt_comm_codec codec = {.kind = reducer->options.compression,
                          .f16_scale = reducer->options.average,
                          .int8_step = r->step,
                          .int8_limit = 127 / reducer->comm->size,
                          .top_k = r->k,
                          .top_k_scratch = r->scratch};
  bpt_comm_compress(&codec, r->host, r->count, r->residual, r->payload);
}

/* Device engines: the values must be written before the comm stream reads them, ordered by an event on the
 * backend's stream when it shows one, else by waiting for the device. */
static bpt_status start_on_device(bpt_range_reducer *reducer, range_state *r, bpt_comm_request **request) {
  bpt_comm *comm = reducer->comm;
  bpt_backend *backend = reducer->backend;
  void *stream = NULL;
  if (backend->vtable->native_stream && comm->engine->order_after &&
      backend->vtable->native_stream(backend, &stream) == BPT_OK && stream) {
    BPT_CHECK(comm->engine->order_after(comm, stream));
  } else if (backend->vtable->synchronize && backend->vtable->synchronize(backend) != BPT_OK) {
    return device_error(reducer, "data parallel: synchronising before an all-reduce");
  }
  return comm->engine->allreduce_start(comm, reducer->buffer + r->offset, r->count, BPT_DTYPE_F32, BPT_COMM_REDUCE_SUM,
                                       reducer->options.average, request);
}

/* int8: one scale for all ranks, the largest |value| anywhere. A small blocking all-reduce, started here so
 * that every rank issues its collectives in the same order. A non-finite gradient anywhere (an f16 overflow
 * that the loss scaler must see, or divergence) makes the step NaN on every rank, so the reduced gradients are
 * NaN everywhere rather than finite integers; NaN goes into the maximum as inf, which no MAX can drop. */
static bpt_status agree_int8_step(bpt_range_reducer *reducer, range_state *r) {
  bpt_comm *comm = reducer->comm;
  float largest = bpt_comm_max_abs(r->host, r->count);
  if (r->residual) {
    largest = 0.0f;
    for (int64_t i = 0; i < r->count; i++) {
      float magnitude = fabsf(r->host[i] + r->residual[i]);
      if (magnitude > largest || isnan(magnitude)) largest = magnitude;
    }
  }
  if (isnan(largest)) largest = INFINITY;
  bpt_comm_request *scale_request = NULL;
  BPT_CHECK(comm->engine->allreduce_start(comm, &largest, 1, BPT_DTYPE_F32, BPT_COMM_REDUCE_MAX, 1.0f, &scale_request));
  BPT_CHECK(bpt_comm_wait_all(comm, &scale_request, 1, "int8 scale all-reduce"));
  r->step = !isfinite(largest) ? NAN : largest > 0.0f ? largest / (float)(127 / comm->size) : 1.0f;
  return BPT_OK;
}

static bpt_status start_on_host(bpt_range_reducer *reducer, range_state *r, bpt_comm_request **request) {
  bpt_comm *comm = reducer->comm;
  bpt_backend *backend = reducer->backend;
  if (!reducer->options.zero_copy && backend->vtable->download(backend, r->host, reducer->buffer + r->offset,
                                                               (size_t)r->count * sizeof(float)) != BPT_OK)
    return device_error(reducer, "data parallel: copying gradients to the host");
  switch (reducer->options.compression) {
  case BPT_COMPRESSION_NONE:
    return comm->engine->allreduce_start(comm, r->host, r->count, BPT_DTYPE_F32, BPT_COMM_REDUCE_SUM,
                                         reducer->options.average, request);
  case BPT_COMPRESSION_F16:
    encode(reducer, r);
    return comm->engine->allreduce_start(comm, r->payload, r->count, BPT_DTYPE_F16, BPT_COMM_REDUCE_SUM, 1.0f, request);
  case BPT_COMPRESSION_INT8:
    BPT_CHECK(agree_int8_step(reducer, r));
    encode(reducer, r);
    return comm->engine->allreduce_start(comm, r->payload, r->count, BPT_DTYPE_U8, BPT_COMM_REDUCE_SUM, 1.0f, request);
  case BPT_COMPRESSION_TOPK:
    encode(reducer, r);
    return comm->engine->allgather_start(comm, r->payload, r->gathered, (size_t)r->k * sizeof(bpt_comm_sparse_entry),
                                         request);
  }
  return bpt_error(comm->context, BPT_ERR_INTERNAL, "data parallel: unknown compression %d",
                   (int)reducer->options.compression);
}

bpt_status bpt_range_reducer_start_next(bpt_range_reducer *reducer) {
  if (reducer->next >= reducer->count)
    return bpt_error(reducer->comm->context, BPT_ERR_INTERNAL, "data parallel: all %d ranges already started",
                     reducer->count);
  int index = reducer->next++;
  range_state *r = &reducer->ranges[index];
  bpt_comm_request **request = &reducer->requests[index];
  BPT_CHECK(reducer->comm->engine->device_memory ? start_on_device(reducer, r, request)
                                                 : start_on_host(reducer, r, request));
  r->phase = RANGE_IN_FLIGHT;
  return BPT_OK;
}

int bpt_range_reducer_started(const bpt_range_reducer *reducer) { return reducer->next; }

/* Turns a reduced range back into averaged f32 values in the buffer. */
static bpt_status finish(bpt_range_reducer *reducer, int index) {
  range_state *r = &reducer->ranges[index];
  r->phase = RANGE_DONE;
  if (!reducer->comm->engine->device_memory) {
    float average = reducer->options.average;
    switch (reducer->options.compression) {
    case BPT_COMPRESSION_NONE: break;
    case BPT_COMPRESSION_F16: bpt_comm_decode_f16(r->payload, r->count, 1.0f, r->host); break;
    case BPT_COMPRESSION_INT8: bpt_comm_decode_int8(r->payload, r->count, r->step * average, r->host); break;
    case BPT_COMPRESSION_TOPK:
      memset(r->host, 0, (size_t)r->count * sizeof(float));
      bpt_comm_scatter_add(r->gathered, r->k * reducer->comm->size, average, r->host);
      break;
    }
    bpt_backend *backend = reducer->backend;
    if (!reducer->options.zero_copy && backend->vtable->upload(backend, reducer->buffer + r->offset, r->host,
                                                               (size_t)r->count * sizeof(float)) != BPT_OK)
      return device_error(reducer, "data parallel: copying reduced gradients back");
  }
  if (reducer->options.reduced) reducer->options.reduced(reducer->options.data, index);
  return BPT_OK;
}

static bpt_status finish_completed(bpt_range_reducer *reducer) {
  for (int i = 0; i < reducer->next; i++)
    if (reducer->ranges[i].phase == RANGE_IN_FLIGHT && !reducer->requests[i]) BPT_CHECK(finish(reducer, i));
  return BPT_OK;
}

bpt_status bpt_range_reducer_poll(bpt_range_reducer *reducer) {
  BPT_CHECK(bpt_comm_poll(reducer->comm, reducer->requests, reducer->next));
  return finish_completed(reducer);
}

static bool any_in_flight(const bpt_range_reducer *reducer) {
  for (int i = 0; i < reducer->next; i++)
    if (reducer->requests[i]) return true;
  return false;
}

bpt_status bpt_range_reducer_wait(bpt_range_reducer *reducer) {
  if (!any_in_flight(reducer)) return finish_completed(reducer);
  BPT_CHECK(bpt_comm_check_usable(reducer->comm, "bpt_data_parallel_wait"));
  BPT_CHECK(bpt_comm_wait_all(reducer->comm, reducer->requests, reducer->next,
                              reducer->options.what ? reducer->options.what : "gradient all-reduce"));
  return finish_completed(reducer);
}

void bpt_range_reducer_reset(bpt_range_reducer *reducer) {
  reducer->next = 0;
  for (int i = 0; i < reducer->count; i++)
    reducer->ranges[i].phase = RANGE_IDLE;
}

bool bpt_range_reducer_destroy(bpt_range_reducer *reducer) {
  if (!reducer) return false;
  if (reducer->requests && !reducer->comm->failed) bpt_range_reducer_wait(reducer);
  /* Buffers of in-flight ranges are still referenced by the engine after a failure: leave them. */
  bool in_flight = false;
  for (int i = 0; reducer->requests && i < reducer->count; i++)
    in_flight |= reducer->requests[i] != NULL;
  if (in_flight) {
    free(reducer);
    return true;
  }
  for (int i = 0; reducer->ranges && i < reducer->count; i++) {
    range_state *r = &reducer->ranges[i];
    if (!reducer->options.zero_copy) free(r->host);
    free(r->residual);
    free(r->payload);
    free(r->gathered);
    free(r->scratch);
  }
  free(reducer->ranges);
  free(reducer->requests);
  free(reducer);
  return false;
}

bool bpt_comm_reads_device_memory(const bpt_comm *comm) { return comm->engine->device_memory; }

bpt_context *bpt_comm_context(const bpt_comm *comm) { return comm->context; }

bpt_status bpt_comm_usable(bpt_comm *comm, const char *where) { return bpt_comm_check_usable(comm, where); }

bpt_status bpt_comm_broadcast_backend_memory(bpt_comm *comm, bpt_backend *backend, float *values, int64_t count,
                                             bool zero_copy, const char *what) {
  size_t bytes = (size_t)count * sizeof(float);
  if (zero_copy) return bpt_comm_broadcast(comm, values, bytes, 0);
  if (comm->engine->device_memory) { /* the initial upload may still be queued on the backend's stream */
    if (backend->vtable->synchronize && backend->vtable->synchronize(backend) != BPT_OK)
      return bpt_error(comm->context, BPT_ERR_DEVICE, "bpt_data_parallel_create: waiting for the device: %s",
                       backend->error_message);
    return bpt_comm_broadcast(comm, values, bytes, 0);
  }
  float *host = bpt_calloc(comm->context, (size_t)(count ? count : 1), sizeof *host, what);
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = BPT_OK;
  if (backend->vtable->download(backend, host, values, bytes) != BPT_OK)
    status = bpt_error(comm->context, BPT_ERR_DEVICE, "bpt_data_parallel_create: reading the values to broadcast: %s",
                       backend->error_message);
  if (status == BPT_OK) status = bpt_comm_broadcast(comm, host, bytes, 0);
  if (status == BPT_OK && backend->vtable->upload(backend, values, host, bytes) != BPT_OK)
    status = bpt_error(comm->context, BPT_ERR_DEVICE, "bpt_data_parallel_create: writing the broadcast values: %s",
                       backend->error_message);
  free(host);
  return status;
}
