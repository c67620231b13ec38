/* Data-parallel training: the flat gradient block is cut into buckets in reverse parameter order, and a
 * graph hook starts each bucket's all-reduce during backward as soon as the last node that writes its
 * gradients has run, polls the in-flight ones between nodes (MPI progresses only inside MPI calls), and
 * waits for all of them before the optimiser step. Buckets start in index order on every rank, which
 * keeps the ranks' collectives matched. Compression encodes a bucket on the host before it is sent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "core/graph.h"
#include "core/graph_signature.h"
#include "core/profiler.h"

typedef enum bucket_phase { BUCKET_IDLE, BUCKET_IN_FLIGHT, BUCKET_DONE } bucket_phase;

typedef struct bucket {
  int64_t offset, count; /* elements of the flat gradient block, padding between parameters included */
  int ready_position;    /* its gradients are final once backward has run the node at this position */
  bucket_phase phase;
  float *host;      /* the gradients in host memory: the block itself on the CPU backend, else staging */
  float *residual;  /* error feedback: what compression left out, added to the next step's gradients */
  void *payload;    /* the encoded bucket that is sent (f16, int8 or top-k entries) */
  void *gathered;   /* top-k: every rank's entries */
  float *scratch;   /* top-k: magnitudes for the selection */
  int64_t k;        /* top-k: entries per rank */
  float step;       /* int8: the value of one quantisation step, agreed by all ranks */
  uint64_t started; /* profiler timestamp of the launch, when the context profiles */
} bucket;

struct bpt_data_parallel {
  bpt_graph *graph;
  bpt_comm *comm;
  bpt_data_parallel_options options;
  bucket *buckets;
  bpt_comm_request **requests; /* per bucket, NULL unless in flight */
  int bucket_count;
  int next_launch;  /* buckets start strictly in index order */
  int micro_batch;  /* backward passes since the last non-accumulating one */
  bool communicate; /* this backward pass is the last micro-batch, so it reduces */
  bool reduced;     /* the last cycle's gradients are averaged and a step has used them */
  bool zero_copy;   /* the engine can read the backend's gradient memory directly */
  float average;    /* 1 / (ranks * micro-batches) */
};

bpt_data_parallel_options bpt_data_parallel_options_default(void) {
  bpt_data_parallel_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.bucket_bytes = (size_t)25 << 20;
  options.first_bucket_bytes = (size_t)1 << 20;
  options.overlap = 1;
  options.accumulation_steps = 1;
  options.compression = BPT_COMPRESSION_NONE;
  options.topk_ratio = 0.01f;
  options.error_feedback = 1;
  options.broadcast_parameters = 1;
  return options;
}

static bpt_context *context_of(bpt_data_parallel *dp) { return dp->graph->context; }

/* The comm reports on its own context; carry the message over when the graph uses another one. */
static bpt_status relay(bpt_data_parallel *dp, bpt_status status) {
  if (status != BPT_OK && dp->comm->context != context_of(dp))
    bpt_error(context_of(dp), status, "%s", bpt_context_last_error(dp->comm->context));
  return status;
}

static bpt_status device_error(bpt_data_parallel *dp, const char *what) {
  return bpt_backend_error(context_of(dp), BPT_ERR_DEVICE, what);
}

/* The smallest position of a node reading the parameter: its gradient is final once that node ran. */
static int ready_position(const bpt_graph *graph, const bpt_node *parameter) {
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->order[i];
    for (int j = 0; j < node->input_count; j++)
      if (node->inputs[j] == parameter) return i;
  }
  return graph->node_count; /* unused: final from the start */
}

static bpt_status plan_buckets(bpt_data_parallel *dp) {
  bpt_graph *graph = dp->graph;
  int parameters = graph->parameter_count;
  dp->buckets = bpt_calloc(context_of(dp), (size_t)parameters, sizeof *dp->buckets, "buckets");
  dp->requests = bpt_calloc(context_of(dp), (size_t)parameters, sizeof *dp->requests, "bucket requests");
  if (!dp->buckets || !dp->requests) return BPT_ERR_OUT_OF_MEMORY;
  int p = parameters - 1;
  while (p >= 0) {
    size_t cap = dp->bucket_count == 0 ? dp->options.first_bucket_bytes : dp->options.bucket_bytes;
    int64_t end = p + 1 < parameters ? graph->parameters[p + 1]->param_offset : graph->parameter_elements;
    bucket *b = &dp->buckets[dp->bucket_count++];
    b->ready_position = graph->node_count;
    do { /* at least one parameter, then more while they fit under the cap */
      int position = ready_position(graph, graph->parameters[p]);
      if (position < b->ready_position) b->ready_position = position;
      b->offset = graph->parameters[p]->param_offset;
      p--;
    } while (p >= 0 && (size_t)(end - graph->parameters[p]->param_offset) * sizeof(float) <= cap);
    b->count = end - b->offset;
  }
  return BPT_OK;
}

static bpt_status allocate_bucket_buffers(bpt_data_parallel *dp) {
  bpt_context *context = context_of(dp);
  const bpt_data_parallel_options *o = &dp->options;
  bool lossy = o->compression != BPT_COMPRESSION_NONE;
  for (int i = 0; i < dp->bucket_count; i++) {
    bucket *b = &dp->buckets[i];
    size_t count = (size_t)b->count;
    if (dp->zero_copy)
      b->host = dp->graph->gradient_block + b->offset;
    else if (!dp->comm->engine->device_memory && !(b->host = bpt_calloc(context, count, sizeof(float), "staging")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (lossy && o->error_feedback && !(b->residual = bpt_calloc(context, count, sizeof(float), "residual")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_F16 && !(b->payload = bpt_calloc(context, count, 2, "f16 payload")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_INT8 && !(b->payload = bpt_calloc(context, count, 1, "int8 payload")))
      return BPT_ERR_OUT_OF_MEMORY;
    if (o->compression == BPT_COMPRESSION_TOPK) {
      b->k = (int64_t)ceil((double)o->topk_ratio * (double)b->count);
      if (b->k < 1) b->k = 1;
      if (b->k > b->count) b->k = b->count;
      size_t entry = sizeof(bpt_comm_sparse_entry);
      if (!(b->payload = bpt_calloc(context, (size_t)b->k, entry, "top-k entries")) ||
          !(b->gathered = bpt_calloc(context, (size_t)b->k * (size_t)dp->comm->size, entry, "gathered entries")) ||
          !(b->scratch = bpt_calloc(context, count, sizeof(float), "top-k scratch")))
        return BPT_ERR_OUT_OF_MEMORY;
    }
  }
  return BPT_OK;
}

/* Encodes the bucket's gradients plus the carried error into its payload and keeps the new error. */
static void encode(bpt_data_parallel *dp, bucket *b) {
  bpt_comm_codec codec = {.kind = dp->options.compression,
                          .f16_scale = dp->average,
                          .int8_step = b->step,
                          .int8_limit = 127 / dp->comm->size,
                          .top_k = b->k,
                          .top_k_scratch = b->scratch};
  bpt_comm_compress(&codec, b->host, b->count, b->residual, b->payload);
}

static bpt_status launch(bpt_data_parallel *dp, int index) {
  bucket *b = &dp->buckets[index];
  bpt_comm *comm = dp->comm;
  bpt_graph *graph = dp->graph;
  bpt_backend *backend = graph->backend;
  float *gradients = graph->gradient_block + b->offset;
  bpt_comm_request **request = &dp->requests[index];
  b->started = graph->context->profiler ? bpt_profiler_now() : 0;
  if (comm->engine->device_memory) {
    /* The gradients must be written before the comm stream reads them: an event on the backend's stream
     * when it shows it, else wait for the device. */
    void *stream = NULL;
    if (backend->vtable->native_stream && comm->engine->order_after &&
        backend->vtable->native_stream(backend, &stream) == BPT_OK && stream) {
      BPT_CHECK(relay(dp, comm->engine->order_after(comm, stream)));
    } else if (backend->vtable->synchronize && backend->vtable->synchronize(backend) != BPT_OK) {
      return device_error(dp, "data parallel: synchronising before an all-reduce");
    }
    BPT_CHECK(relay(dp, comm->engine->allreduce_start(comm, gradients, b->count, BPT_DTYPE_F32, BPT_COMM_REDUCE_SUM,
                                                      dp->average, request)));
    b->phase = BUCKET_IN_FLIGHT;
    return BPT_OK;
  }
  if (!dp->zero_copy &&
      backend->vtable->download(backend, b->host, gradients, (size_t)b->count * sizeof(float)) != BPT_OK)
    return device_error(dp, "data parallel: copying gradients to the host");
  bpt_status status = BPT_OK;
  switch (dp->options.compression) {
  case BPT_COMPRESSION_NONE:
    status = comm->engine->allreduce_start(comm, b->host, b->count, BPT_DTYPE_F32, BPT_COMM_REDUCE_SUM, dp->average,
                                           request);
    break;
  case BPT_COMPRESSION_F16:
    encode(dp, b);
    status =
        comm->engine->allreduce_start(comm, b->payload, b->count, BPT_DTYPE_F16, BPT_COMM_REDUCE_SUM, 1.0f, request);
    break;
  case BPT_COMPRESSION_INT8: {
    /* One scale for all ranks: the largest |work| anywhere. A small blocking all-reduce, started here so that
     * every rank issues its collectives in the same order. */
    float largest = bpt_comm_max_abs(b->host, b->count);
    if (b->residual) {
      largest = 0.0f;
      for (int64_t i = 0; i < b->count; i++) {
        float magnitude = fabsf(b->host[i] + b->residual[i]);
        if (magnitude > largest || isnan(magnitude)) largest = magnitude;
      }
    }
    bpt_comm_request *scale_request = NULL;
    status = comm->engine->allreduce_start(comm, &largest, 1, BPT_DTYPE_F32, BPT_COMM_REDUCE_MAX, 1.0f, &scale_request);
    if (status == BPT_OK) status = bpt_comm_wait_all(comm, &scale_request, 1, "int8 scale all-reduce");
    if (status != BPT_OK) break;
    b->step = largest > 0.0f ? largest / (float)(127 / comm->size) : 1.0f;
    encode(dp, b);
    status =
        comm->engine->allreduce_start(comm, b->payload, b->count, BPT_DTYPE_U8, BPT_COMM_REDUCE_SUM, 1.0f, request);
    break;
  }
  case BPT_COMPRESSION_TOPK:
    encode(dp, b);
    status = comm->engine->allgather_start(comm, b->payload, b->gathered, (size_t)b->k * sizeof(bpt_comm_sparse_entry),
                                           request);
    break;
  }
  BPT_CHECK(relay(dp, status));
  b->phase = BUCKET_IN_FLIGHT;
  return BPT_OK;
}

/* Turns a reduced bucket back into averaged f32 gradients in the gradient block. */
static void profile(bpt_data_parallel *dp, const bucket *b) {
  bpt_context *context = context_of(dp);
  if (!context->profiler) return;
  static const char *const kinds[] = {"f32", "f16", "int8", "top-k"};
  char name[48], kind[48];
  snprintf(name, sizeof name, "bucket %d", (int)(b - dp->buckets));
  snprintf(kind, sizeof kind, "%s all-reduce (%s)", dp->comm->engine->name, kinds[dp->options.compression]);
  bpt_profiler_record(context, BPT_PROFILE_COMM, name, kind, b->started, (double)b->count * sizeof(float), 0.0);
}

static bpt_status finish(bpt_data_parallel *dp, bucket *b) {
  b->phase = BUCKET_DONE;
  if (dp->comm->engine->device_memory) {
    profile(dp, b);
    return BPT_OK;
  }
  switch (dp->options.compression) {
  case BPT_COMPRESSION_NONE: break;
  case BPT_COMPRESSION_F16: bpt_comm_decode_f16(b->payload, b->count, 1.0f, b->host); break;
  case BPT_COMPRESSION_INT8: bpt_comm_decode_int8(b->payload, b->count, b->step * dp->average, b->host); break;
  case BPT_COMPRESSION_TOPK:
    memset(b->host, 0, (size_t)b->count * sizeof(float));
    bpt_comm_scatter_add(b->gathered, b->k * dp->comm->size, dp->average, b->host);
    break;
  }
  bpt_backend *backend = dp->graph->backend;
  if (!dp->zero_copy && backend->vtable->upload(backend, dp->graph->gradient_block + b->offset, b->host,
                                                (size_t)b->count * sizeof(float)) != BPT_OK)
    return device_error(dp, "data parallel: copying reduced gradients back");
  profile(dp, b);
  return BPT_OK;
}

static bpt_status finish_completed(bpt_data_parallel *dp) {
  for (int i = 0; i < dp->next_launch; i++)
    if (dp->buckets[i].phase == BUCKET_IN_FLIGHT && !dp->requests[i]) BPT_CHECK(finish(dp, &dp->buckets[i]));
  return BPT_OK;
}

static bpt_status poll(bpt_data_parallel *dp) {
  BPT_CHECK(relay(dp, bpt_comm_poll(dp->comm, dp->requests, dp->next_launch)));
  return finish_completed(dp);
}

static bpt_status launch_ready(bpt_data_parallel *dp, int position) {
  while (dp->next_launch < dp->bucket_count && dp->buckets[dp->next_launch].ready_position >= position)
    BPT_CHECK(launch(dp, dp->next_launch++));
  return BPT_OK;
}

bpt_status bpt_data_parallel_wait(bpt_data_parallel *dp) {
  if (!dp) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_data_parallel_wait: NULL");
  bool in_flight = false;
  for (int i = 0; i < dp->next_launch; i++)
    in_flight |= dp->requests[i] != NULL;
  if (!in_flight) return finish_completed(dp);
  BPT_CHECK(relay(dp, bpt_comm_check_usable(dp->comm, "bpt_data_parallel_wait")));
  BPT_CHECK(relay(dp, bpt_comm_wait_all(dp->comm, dp->requests, dp->next_launch, "gradient all-reduce")));
  return finish_completed(dp);
}

static bpt_status on_event(void *data, bpt_graph *graph, bpt_graph_event event, int position) {
  bpt_data_parallel *dp = data;
  int steps = dp->options.accumulation_steps;
  switch (event) {
  case BPT_GRAPH_EVENT_BACKWARD_BEGIN:
    /* A previous pass's buckets may still be reading the gradients that are about to be cleared. */
    BPT_CHECK(bpt_data_parallel_wait(dp));
    BPT_CHECK(relay(dp, bpt_comm_check_usable(dp->comm, "data parallel backward")));
    /* A pass that does not accumulate starts a new cycle; one that does continues it (after a step, a new one). */
    if (position && dp->micro_batch >= steps)
      return bpt_error(graph->context, BPT_ERR_STATE,
                       "data parallel: an accumulating backward pass after %d micro-batches; run bpt_optimizer_step "
                       "first (accumulation_steps is %d)",
                       dp->micro_batch, steps);
    dp->micro_batch = position ? dp->micro_batch + 1 : 1;
    dp->reduced = false;
    dp->communicate = dp->micro_batch == steps;
    dp->next_launch = 0;
    for (int i = 0; i < dp->bucket_count; i++)
      dp->buckets[i].phase = BUCKET_IDLE;
    return BPT_OK;
  case BPT_GRAPH_EVENT_NODE_BACKWARD:
    if (!dp->communicate) return BPT_OK;
    if (dp->options.overlap) BPT_CHECK(launch_ready(dp, position));
    return poll(dp);
  case BPT_GRAPH_EVENT_BACKWARD_END:
    if (!dp->communicate) return BPT_OK;
    BPT_CHECK(launch_ready(dp, -1));
    return poll(dp);
  case BPT_GRAPH_EVENT_BEFORE_UPDATE:
    if (dp->reduced) return BPT_OK; /* another step on the same averaged gradients */
    if (dp->micro_batch != steps)
      return bpt_error(graph->context, BPT_ERR_STATE,
                       "bpt_optimizer_step: data parallel training accumulates %d micro-batches, %d done so far", steps,
                       dp->micro_batch);
    BPT_CHECK(bpt_data_parallel_wait(dp));
    dp->micro_batch = 0;
    dp->reduced = true;
    return BPT_OK;
  }
  return BPT_OK;
}

static bpt_status validate(bpt_context *context, const bpt_data_parallel_options *o, const bpt_comm *comm) {
  const char *where = "bpt_data_parallel_create";
  if (o->bucket_bytes < 64 || o->first_bucket_bytes < 64)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: bucket_bytes %zu and first_bucket_bytes %zu must be >= 64",
                     where, o->bucket_bytes, o->first_bucket_bytes);
  if (o->accumulation_steps < 1)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: accumulation_steps %d must be >= 1", where,
                     o->accumulation_steps);
  if ((unsigned)o->compression > (unsigned)BPT_COMPRESSION_TOPK)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown compression %d", where, (int)o->compression);
  if (o->compression == BPT_COMPRESSION_TOPK && !(o->topk_ratio > 0.0f && o->topk_ratio <= 1.0f))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: topk_ratio %g must be in (0, 1]", where,
                     (double)o->topk_ratio);
  if (o->compression == BPT_COMPRESSION_INT8 && comm->size > 127)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: int8 compression sums in int8, so at most 127 ranks (%d)",
                     where, comm->size);
  if (o->compression != BPT_COMPRESSION_NONE && comm->engine->device_memory)
    return bpt_error(context, BPT_ERR_UNSUPPORTED,
                     "%s: compression runs on the host; the %s engine supports BPT_COMPRESSION_NONE only", where,
                     comm->engine->name);
  return BPT_OK;
}

/* Copies count floats of backend memory from rank 0 to every rank: in place where the engine can read the
 * backend's memory, through a host copy otherwise. */
static bpt_status broadcast_block(bpt_data_parallel *dp, float *device, int64_t count, const char *what) {
  bpt_graph *graph = dp->graph;
  bpt_backend *backend = graph->backend;
  size_t bytes = (size_t)count * sizeof(float);
  if (dp->zero_copy) return relay(dp, bpt_comm_broadcast(dp->comm, device, bytes, 0));
  if (dp->comm->engine->device_memory) { /* the initial upload may still be queued on the backend's stream */
    if (backend->vtable->synchronize && backend->vtable->synchronize(backend) != BPT_OK)
      return device_error(dp, "bpt_data_parallel_create: waiting for the device");
    return relay(dp, bpt_comm_broadcast(dp->comm, device, bytes, 0));
  }
  float *host = bpt_calloc(graph->context, (size_t)(count ? count : 1), sizeof *host, what);
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = backend->vtable->download(backend, host, device, bytes) == BPT_OK
                          ? relay(dp, bpt_comm_broadcast(dp->comm, host, bytes, 0))
                          : device_error(dp, "bpt_data_parallel_create: reading the values to broadcast");
  if (status == BPT_OK && backend->vtable->upload(backend, device, host, bytes) != BPT_OK)
    status = device_error(dp, "bpt_data_parallel_create: writing the broadcast values");
  free(host);
  return status;
}

/* Rank 0's parameters and registered buffers (such as batch-norm running statistics) for every rank. The
 * buffers are copied once here, not averaged during training. */
static bpt_status broadcast_state(bpt_data_parallel *dp) {
  bpt_graph *graph = dp->graph;
  BPT_CHECK(broadcast_block(dp, graph->parameter_block, graph->parameter_elements, "parameter broadcast"));
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    float *values = buffer->owner ? (float *)((char *)buffer->owner->saved + buffer->byte_offset) : buffer->values;
    if (values && buffer->count > 0) BPT_CHECK(broadcast_block(dp, values, buffer->count, "buffer broadcast"));
  }
  return BPT_OK;
}

bpt_status bpt_data_parallel_create(bpt_graph *graph, bpt_comm *comm, const bpt_data_parallel_options *options,
                                    bpt_data_parallel **out) {
  const char *where = "bpt_data_parallel_create";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  bpt_context *context = graph->context;
  if (!out || !comm) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: NULL communicator or out", where);
  *out = NULL;
  if (!graph->compiled || !graph->loss)
    return bpt_error(context, BPT_ERR_STATE, "%s: the graph must be compiled with a loss", where);
  if (graph->hook) return bpt_error(context, BPT_ERR_STATE, "%s: the graph already has data-parallel training", where);
  if (comm->failed) return bpt_error(context, BPT_ERR_STATE, "%s: the communicator failed earlier", where);
  bpt_data_parallel_options copy = bpt_data_parallel_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(
        context, &copy, sizeof copy, options, options->size,
        offsetof(bpt_data_parallel_options, broadcast_parameters) + sizeof copy.broadcast_parameters, where));
  BPT_CHECK(validate(context, &copy, comm));
  bool cpu = strcmp(graph->backend->vtable->name, "cpu") == 0;
  if (comm->engine->device_memory && cpu)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: the %s engine reduces device memory; use the cuda backend",
                     where, comm->engine->name);
  BPT_CHECK(bpt_graph_signature_check(graph, comm, where)); /* the same model on every rank (issue 18) */
  bpt_data_parallel *dp = bpt_calloc(context, 1, sizeof *dp, "data parallel state");
  if (!dp) return BPT_ERR_OUT_OF_MEMORY;
  dp->graph = graph;
  dp->comm = comm;
  dp->options = copy;
  dp->zero_copy = cpu && !comm->engine->device_memory;
  dp->average = 1.0f / ((float)comm->size * (float)copy.accumulation_steps);
  bpt_status status = plan_buckets(dp);
  if (status == BPT_OK) status = allocate_bucket_buffers(dp);
  if (status == BPT_OK && copy.broadcast_parameters) status = broadcast_state(dp);
  if (status != BPT_OK) {
    bpt_data_parallel_destroy(dp);
    return status;
  }
  graph->hook = on_event;
  graph->hook_data = dp;
  *out = dp;
  return BPT_OK;
}

int bpt_data_parallel_bucket_count(const bpt_data_parallel *dp) { return dp ? dp->bucket_count : 0; }

void bpt_data_parallel_destroy(bpt_data_parallel *dp) {
  if (!dp) return;
  if (dp->graph->hook_data == dp) {
    dp->graph->hook = NULL;
    dp->graph->hook_data = NULL;
  }
  if (dp->requests && !dp->comm->failed) bpt_data_parallel_wait(dp);
  /* Buffers of in-flight buckets are still referenced by the engine after a failure: leave them. */
  bool in_flight = false;
  for (int i = 0; dp->requests && i < dp->bucket_count; i++)
    in_flight |= dp->requests[i] != NULL;
  if (!in_flight && dp->buckets) {
    for (int i = 0; i < dp->bucket_count; i++) {
      bucket *b = &dp->buckets[i];
      if (!dp->zero_copy) free(b->host);
      free(b->residual);
      free(b->payload);
      free(b->gathered);
      free(b->scratch);
    }
  }
  if (!in_flight) {
    free(dp->buckets);
    free(dp->requests);
  }
  free(dp);
}
