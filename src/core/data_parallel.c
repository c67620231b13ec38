/* Data-parallel training, the graph's half: the gradient block is cut into ranges in the order backward
 * finalises them (gradient_ranges.c), and a graph hook hands each range to the comm layer's reducer
 * (src/comm/range_reduce.c) as soon as the last node that writes it has run, polls the in-flight ones
 * between nodes (MPI progresses only inside MPI calls), and waits for all of them before the optimiser
 * step. The comm layer only sums buffers; micro-batch accounting and profiling live here.
 * Local SGD (average_every > 1) reduces the parameter block instead, over the same ranges (parameters and
 * gradients share one layout), after every H-th step. With bounded staleness (max_staleness S) it reduces a
 * snapshot of the parameters in the background while the rank trains on, and folds the average in S steps
 * later as a correction (average - the snapshot's own values): a rank waits there for the slowest to have
 * reached the launch, which is what bounds how far ahead it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/range_reduce.h"
#include "core/gradient_ranges.h"
#include "core/graph_signature.h"
#include "core/profiler.h"

struct bpt_data_parallel {
  bpt_graph *graph; /* NULL once the graph was destroyed (bpt_graph_destroy detaches us) */
  bpt_attachment graph_attachment;
  bpt_comm *comm; /* NULL once the communicator was destroyed (bpt_comm_destroy detaches us) */
  bpt_attachment comm_attachment;
  bpt_data_parallel_options options;
  bpt_gradient_range *ranges;
  int range_count;
  bpt_range_reducer *reducer;
  uint64_t *started; /* per range: profiler timestamp of its launch, when the context profiles */
  int micro_batch;   /* backward passes since the last non-accumulating one */
  bool communicate;  /* this backward pass is the last micro-batch, so it reduces */
  bool reduced;      /* the last cycle's gradients are averaged and a step has used them */
  bool zero_copy;    /* the engine can read the backend's gradient memory directly */
  bool local;        /* local SGD: the reducer sums parameters every average_every steps, not gradients */
  int local_steps;   /* local SGD: steps since the last averaging */
  /* Bounded staleness: the reducer's buffer (the parameters at the launch, then their average over the ranks)
   * and this rank's parameters at the launch, backend memory; whether an averaging is in flight, and the steps
   * taken since it started. */
  float *snapshot, *launched;
  bool in_flight;
  int since_launch;
  bool abandoned; /* the reducer left ranges to the engine after a failure (bpt_range_reducer_destroy) */
  float average;     /* 1 / (ranks * micro-batches) */
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
  options.average_every = 1;
  return options;
}

static bpt_context *context_of(bpt_data_parallel *dp) { return dp->graph->context; }

/* The comm reports on its own context; carry the message over when the graph uses another one. */
static bpt_status relay(bpt_data_parallel *dp, bpt_status status) {
  if (status != BPT_OK && bpt_comm_context(dp->comm) != context_of(dp))
    bpt_error(context_of(dp), status, "%s", bpt_context_last_error(bpt_comm_context(dp->comm)));
  return status;
}

static void profile(void *data, int index) {
  bpt_data_parallel *dp = data;
  bpt_context *context = context_of(dp);
  if (!context->profiler) return;
  static const char *const kinds[] = {"f32", "f16", "int8", "top-k"};
  char name[48], kind[48];
  snprintf(name, sizeof name, "bucket %d", index);
  if (dp->local)
    snprintf(kind, sizeof kind, "%s parameter average (every %d steps)", bpt_comm_engine(dp->comm),
             dp->options.average_every);
  else
    snprintf(kind, sizeof kind, "%s all-reduce (%s)", bpt_comm_engine(dp->comm), kinds[dp->options.compression]);
  bpt_profiler_record(context, BPT_PROFILE_COMM, name, kind, dp->started[index],
                      (double)dp->ranges[index].count * sizeof(float), 0.0);
}

/* Starts every range that is final once backward has run the node at position (-1: all of them). */
static bpt_status launch_ready(bpt_data_parallel *dp, int position) {
  for (int next = bpt_range_reducer_started(dp->reducer);
       next < dp->range_count && dp->ranges[next].final_position >= position; next++) {
    dp->started[next] = context_of(dp)->profiler ? bpt_profiler_now() : 0;
    BPT_CHECK(relay(dp, bpt_range_reducer_start_next(dp->reducer)));
  }
  return BPT_OK;
}

static bpt_status poll(bpt_data_parallel *dp) { return relay(dp, bpt_range_reducer_poll(dp->reducer)); }

/* BPT_ERR_STATE, naming where, once the graph or the communicator went first and detached the handle. */
static bpt_status check_attached(bpt_data_parallel *dp, const char *where) {
  if (!dp->graph)
    return bpt_error(NULL, BPT_ERR_STATE, "%s: the graph was destroyed; only bpt_data_parallel_destroy is valid",
                     where);
  if (!dp->comm)
    return bpt_error(context_of(dp), BPT_ERR_STATE,
                     "%s: the data-parallel handle's communicator was destroyed; bpt_data_parallel_destroy the "
                     "handle to train this process alone",
                     where);
  return BPT_OK;
}

static bpt_status wait_all(bpt_data_parallel *dp) { return relay(dp, bpt_range_reducer_wait(dp->reducer)); }

bpt_status bpt_data_parallel_wait(bpt_data_parallel *dp) {
  if (!dp) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_data_parallel_wait: NULL");
  BPT_CHECK(check_attached(dp, "bpt_data_parallel_wait"));
  return wait_all(dp);
}

static bpt_status backend_result(bpt_data_parallel *dp, bpt_status status, const char *what) {
  if (status == BPT_OK) return BPT_OK;
  return bpt_error(context_of(dp), status, "data parallel (bounded staleness): %s failed on backend '%s': %s", what,
                   dp->graph->backend->vtable->name, dp->graph->backend->error_message);
}

static size_t parameter_bytes(const bpt_data_parallel *dp) {
  return (size_t)dp->graph->parameter_elements * sizeof(float);
}

/* One parameter-sized block of backend memory copied into another. */
static bpt_status copy_parameters(bpt_data_parallel *dp, float *to, const float *from, const char *what) {
  bpt_backend *backend = dp->graph->backend;
  return backend_result(dp, backend->vtable->copy(backend, to, from, parameter_bytes(dp)), what);
}

/* Bounded staleness: starts averaging a copy of the parameters, and keeps this rank's own copy. */
static bpt_status launch_average(bpt_data_parallel *dp) {
  BPT_CHECK(copy_parameters(dp, dp->snapshot, dp->graph->parameter_block, "copying the parameters"));
  BPT_CHECK(copy_parameters(dp, dp->launched, dp->graph->parameter_block, "copying the parameters"));
  dp->local_steps = 0;
  bpt_range_reducer_reset(dp->reducer);
  BPT_CHECK(launch_ready(dp, -1));
  dp->in_flight = true;
  dp->since_launch = 0;
  return poll(dp);
}

/* Waits for the averaging in flight (bounded by the communicator's timeout) and adds what it changes:
 * parameters += average - launched, so the steps taken since the launch are kept. */
static bpt_status fold_in_average(bpt_data_parallel *dp) {
  if (!dp->in_flight) return BPT_OK;
  BPT_CHECK(wait_all(dp));
  dp->in_flight = false;
  bpt_backend *backend = dp->graph->backend;
  const int64_t count = dp->graph->parameter_elements;
  BPT_CHECK(backend_result(dp, backend->vtable->add_scaled(backend, count, -1.0f, dp->launched, dp->snapshot),
                           "subtracting the launched parameters"));
  return backend_result(dp, backend->vtable->add_scaled(backend, count, 1.0f, dp->snapshot, dp->graph->parameter_block),
                        "adding the average's correction");
}

/* Local SGD: the parameter block summed over the ranks, each rank's values times 1 / ranks, now. Under bounded
 * staleness the reducer's buffer is the snapshot: the parameters go there and back. */
static bpt_status average_parameters(bpt_data_parallel *dp) {
  BPT_CHECK(fold_in_average(dp));
  BPT_CHECK(wait_all(dp));
  dp->local_steps = 0;
  if (dp->snapshot) BPT_CHECK(copy_parameters(dp, dp->snapshot, dp->graph->parameter_block, "copying the parameters"));
  bpt_range_reducer_reset(dp->reducer);
  BPT_CHECK(launch_ready(dp, -1));
  BPT_CHECK(wait_all(dp));
  if (dp->snapshot) BPT_CHECK(copy_parameters(dp, dp->graph->parameter_block, dp->snapshot, "copying the average back"));
  return BPT_OK;
}

static bpt_status on_event(void *data, bpt_graph *graph, bpt_graph_event event, int position) {
  bpt_data_parallel *dp = data;
  int steps = dp->options.accumulation_steps;
  switch (event) {
  case BPT_GRAPH_EVENT_BACKWARD_BEGIN:
    BPT_CHECK(check_attached(dp, "bpt_graph_backward"));
    /* A previous pass's ranges may still be reading the gradients that are about to be cleared. Local SGD's
     * reducer reads parameters (or their snapshot, which may be in flight past this backward). */
    if (!dp->local) BPT_CHECK(wait_all(dp));
    BPT_CHECK(relay(dp, bpt_comm_usable(dp->comm, "data parallel backward")));
    /* A pass that does not accumulate starts a new cycle; one that does continues it (after a step, a new one). */
    if (position && dp->micro_batch >= steps)
      return bpt_error(graph->context, BPT_ERR_STATE,
                       "data parallel: an accumulating backward pass after %d micro-batches; run bpt_optimizer_step "
                       "first (accumulation_steps is %d)",
                       dp->micro_batch, steps);
    dp->micro_batch = position ? dp->micro_batch + 1 : 1;
    dp->reduced = false;
    dp->communicate = !dp->local && dp->micro_batch == steps;
    if (!dp->local) bpt_range_reducer_reset(dp->reducer);
    return BPT_OK;
  case BPT_GRAPH_EVENT_NODE_BACKWARD:
    if (!dp->communicate) return dp->in_flight ? poll(dp) : BPT_OK; /* MPI progresses inside MPI calls */
    if (dp->options.overlap) BPT_CHECK(launch_ready(dp, position));
    return poll(dp);
  case BPT_GRAPH_EVENT_BACKWARD_END:
    if (!dp->communicate) return BPT_OK;
    BPT_CHECK(launch_ready(dp, -1));
    return poll(dp);
  case BPT_GRAPH_EVENT_BEFORE_UPDATE:
    BPT_CHECK(check_attached(dp, "bpt_optimizer_step"));
    if (dp->reduced) return BPT_OK; /* another step on the same averaged gradients */
    if (dp->micro_batch != steps)
      return bpt_error(graph->context, BPT_ERR_STATE,
                       "bpt_optimizer_step: data parallel training accumulates %d micro-batches, %d done so far", steps,
                       dp->micro_batch);
    if (!dp->local) BPT_CHECK(wait_all(dp));
    dp->micro_batch = 0;
    dp->reduced = true;
    return BPT_OK;
  case BPT_GRAPH_EVENT_AFTER_UPDATE:
    if (!dp->local) return BPT_OK;
    BPT_CHECK(check_attached(dp, "bpt_optimizer_step"));
    if (dp->in_flight) {
      if (++dp->since_launch >= dp->options.max_staleness)
        BPT_CHECK(fold_in_average(dp));
      else
        BPT_CHECK(poll(dp));
    }
    if (++dp->local_steps < dp->options.average_every) return BPT_OK;
    /* Every rank reaches its H-th step, then the average: the same collectives in the same order. */
    return dp->options.max_staleness ? launch_average(dp) : average_parameters(dp);
  }
  return BPT_OK;
}

bpt_status bpt_data_parallel_average_parameters(bpt_data_parallel *dp) {
  if (!dp) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_data_parallel_average_parameters: NULL");
  BPT_CHECK(check_attached(dp, "bpt_data_parallel_average_parameters"));
  if (!dp->local)
    return bpt_error(context_of(dp), BPT_ERR_STATE,
                     "bpt_data_parallel_average_parameters: only for local SGD (average_every > 1); synchronous "
                     "data parallel keeps every rank's parameters equal already");
  return average_parameters(dp);
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
  if (o->compression == BPT_COMPRESSION_INT8 && bpt_comm_size(comm) > 127)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: int8 compression sums in int8, so at most 127 ranks (%d)",
                     where, bpt_comm_size(comm));
  if (o->average_every < 1)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: average_every %d must be >= 1", where, o->average_every);
  if (o->average_every > 1 && (o->accumulation_steps != 1 || o->compression != BPT_COMPRESSION_NONE))
    return bpt_error(context, BPT_ERR_UNSUPPORTED,
                     "%s: local SGD (average_every %d) averages f32 parameters, so it takes accumulation_steps 1 "
                     "(%d) and BPT_COMPRESSION_NONE (%d)",
                     where, o->average_every, o->accumulation_steps, (int)o->compression);
  if (o->max_staleness < 0 || o->max_staleness > o->average_every || (o->max_staleness && o->average_every == 1))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: max_staleness %d must be 0, or in [1, average_every] with local SGD (average_every %d)", where,
                     o->max_staleness, o->average_every);
  if (o->compression != BPT_COMPRESSION_NONE && bpt_comm_reads_device_memory(comm))
    return bpt_error(context, BPT_ERR_UNSUPPORTED,
                     "%s: compression runs on the host; the %s engine supports BPT_COMPRESSION_NONE only", where,
                     bpt_comm_engine(comm));
  return BPT_OK;
}

/* Rank 0's parameters and registered buffers (such as batch-norm running statistics) for every rank. The
 * buffers are copied once here, not averaged during training. */
static bpt_status broadcast_state(bpt_data_parallel *dp) {
  bpt_graph *graph = dp->graph;
  BPT_CHECK(
      relay(dp, bpt_comm_broadcast_backend_memory(dp->comm, graph->backend, graph->parameter_block,
                                                  graph->parameter_elements, dp->zero_copy, "parameter broadcast")));
  for (int i = 0; i < graph->buffer_count; i++) {
    const bpt_graph_buffer *buffer = &graph->buffers[i];
    float *values = buffer->owner ? (float *)((char *)buffer->owner->saved + buffer->byte_offset) : buffer->values;
    if (values && buffer->count > 0)
      BPT_CHECK(relay(dp, bpt_comm_broadcast_backend_memory(dp->comm, graph->backend, values, buffer->count,
                                                            dp->zero_copy, "buffer broadcast")));
  }
  return BPT_OK;
}

/* The ranges become the reducer's buffers; the comm layer sees offsets and counts only. */
static bpt_status create_reducer(bpt_data_parallel *dp) {
  bpt_graph *graph = dp->graph;
  BPT_CHECK(bpt_graph_gradient_ranges(graph, dp->options.first_bucket_bytes, dp->options.bucket_bytes, &dp->ranges,
                                      &dp->range_count));
  dp->started = bpt_calloc(graph->context, (size_t)dp->range_count, sizeof *dp->started, "bucket timestamps");
  bpt_comm_range *ranges = bpt_calloc(graph->context, (size_t)dp->range_count, sizeof *ranges, "bucket ranges");
  if (!dp->started || !ranges) {
    free(ranges);
    return BPT_ERR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < dp->range_count; i++)
    ranges[i] = (bpt_comm_range){.offset = dp->ranges[i].offset, .count = dp->ranges[i].count};
  bpt_range_reducer_options options = {.compression = dp->options.compression,
                                       .topk_ratio = dp->options.topk_ratio,
                                       .error_feedback = dp->options.error_feedback,
                                       .average = dp->average,
                                       .zero_copy = dp->zero_copy,
                                       .what = dp->local ? "parameter average" : "gradient all-reduce",
                                       .reduced = profile,
                                       .data = dp};
  if (dp->options.max_staleness) {
    bpt_backend *backend = graph->backend;
    if (backend->vtable->alloc(backend, parameter_bytes(dp), (void **)&dp->snapshot) != BPT_OK ||
        backend->vtable->alloc(backend, parameter_bytes(dp), (void **)&dp->launched) != BPT_OK)
      return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY,
                       "bpt_data_parallel_create: two copies of the %lld parameters for bounded staleness on backend "
                       "'%s': %s",
                       (long long)graph->parameter_elements, backend->vtable->name, backend->error_message);
  }
  float *buffer = dp->snapshot ? dp->snapshot : dp->local ? graph->parameter_block : graph->gradient_block;
  bpt_status status = relay(
      dp, bpt_range_reducer_create(dp->comm, graph->backend, buffer, ranges, dp->range_count, &options, &dp->reducer));
  free(ranges);
  return status;
}

/* The graph is going: finish (or, after a failure, abandon) the all-reduces that read its gradient block. */
static void detach_from_graph(void *owner) {
  bpt_data_parallel *dp = owner;
  dp->abandoned |= bpt_range_reducer_destroy(dp->reducer);
  dp->reducer = NULL;
  /* The snapshot of an averaging the engine still holds after a failure is left to it, like the reducer's own
   * buffers. */
  bpt_backend *backend = dp->graph->backend;
  if (dp->snapshot && !dp->abandoned) backend->vtable->free(backend, dp->snapshot);
  if (dp->launched) backend->vtable->free(backend, dp->launched);
  dp->snapshot = dp->launched = NULL;
  if (dp->graph->hook_data == dp) {
    dp->graph->hook = NULL;
    dp->graph->hook_data = NULL;
  }
  dp->graph = NULL;
}

/* The communicator goes first: its all-reduces in flight finish (the reducer waits), then the graph's hook
 * stays, so its next backward pass or step fails naming the cause instead of training one process alone.
 * Never while the graph is inside backward or a step on another thread (handles are not thread-safe). */
static void detach_from_comm(void *owner) {
  bpt_data_parallel *dp = owner;
  dp->abandoned |= bpt_range_reducer_destroy(dp->reducer);
  dp->reducer = NULL;
  dp->comm = NULL;
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
  if (bpt_comm_usable(comm, where) != BPT_OK)
    return bpt_error(context, BPT_ERR_STATE, "%s: the communicator failed earlier", where);
  bpt_data_parallel_options copy = bpt_data_parallel_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(
        context, &copy, sizeof copy, options, options->size,
        offsetof(bpt_data_parallel_options, broadcast_parameters) + sizeof copy.broadcast_parameters, where));
  BPT_CHECK(validate(context, &copy, comm));
  bool cpu = graph->backend->vtable->is_host;
  if (bpt_comm_reads_device_memory(comm) && cpu)
    return bpt_error(context, BPT_ERR_UNSUPPORTED, "%s: the %s engine reduces device memory; use the cuda backend",
                     where, bpt_comm_engine(comm));
  BPT_CHECK(bpt_graph_signature_check(graph, comm, where)); /* the same model on every rank */
  bpt_data_parallel *dp = bpt_calloc(context, 1, sizeof *dp, "data parallel state");
  if (!dp) return BPT_ERR_OUT_OF_MEMORY;
  dp->graph = graph;
  dp->comm = comm;
  dp->options = copy;
  dp->zero_copy = cpu && !bpt_comm_reads_device_memory(comm);
  dp->local = copy.average_every > 1;
  dp->average = 1.0f / ((float)bpt_comm_size(comm) * (float)copy.accumulation_steps);
  bpt_attach(&graph->attachments, &dp->graph_attachment, detach_from_graph, dp);
  bpt_comm_attach(comm, &dp->comm_attachment, detach_from_comm, dp);
  bpt_status status = create_reducer(dp);
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

int bpt_data_parallel_bucket_count(const bpt_data_parallel *dp) { return dp ? dp->range_count : 0; }

void bpt_data_parallel_destroy(bpt_data_parallel *dp) {
  if (!dp) return;
  if (dp->comm) bpt_comm_unattach(dp->comm, &dp->comm_attachment);
  if (dp->graph) {
    bpt_unattach(&dp->graph->attachments, &dp->graph_attachment);
    detach_from_graph(dp);
  }
  free(dp->ranges);
  free(dp->started);
  free(dp);
}
