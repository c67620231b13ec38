/* The opt-in profiler: statistics per (phase, op, node) in a small hash table, plus a flat event list for
 * the Chrome trace. All state hangs off context->profiler, allocated on first enable. A mutex guards the
 * tables because the comm layer may record from its own thread while backward runs. */
#define _POSIX_C_SOURCE 200809L
#include "core/profiler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/graph.h"
#include "core/profiler_state.h"

uint64_t bpt_profiler_now(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static uint64_t hash_key(bpt_profile_phase phase, const char *name, const char *kind) {
  uint64_t hash = 1469598103934665603u ^ (uint64_t)phase;
  for (const char *text = name; *text; text++)
    hash = (hash ^ (unsigned char)*text) * 1099511628211u;
  hash = (hash ^ 0xff) * 1099511628211u;
  for (const char *text = kind; *text; text++)
    hash = (hash ^ (unsigned char)*text) * 1099511628211u;
  return hash;
}

static bool rehash(bpt_profiler *profiler, size_t capacity) {
  uint32_t *slots = calloc(capacity, sizeof *slots);
  if (!slots) return false;
  for (size_t i = 0; i < profiler->statistic_count; i++) {
    const profile_statistic *statistic = &profiler->statistics[i];
    size_t slot = hash_key(statistic->phase, statistic->name, statistic->kind) & (capacity - 1);
    while (slots[slot])
      slot = (slot + 1) & (capacity - 1);
    slots[slot] = (uint32_t)i + 1;
  }
  free(profiler->slots);
  profiler->slots = slots;
  profiler->slot_capacity = capacity;
  return true;
}

/* Finds or adds the statistic for a key; NULL when out of memory (the sample is then dropped). */
static profile_statistic *find_statistic(bpt_profiler *profiler, bpt_profile_phase phase, const char *name,
                                         const char *kind) {
  if (2 * (profiler->statistic_count + 1) > profiler->slot_capacity &&
      !rehash(profiler, profiler->slot_capacity ? 2 * profiler->slot_capacity : 64))
    return NULL;
  size_t mask = profiler->slot_capacity - 1;
  for (size_t slot = hash_key(phase, name, kind) & mask;; slot = (slot + 1) & mask) {
    uint32_t entry = profiler->slots[slot];
    if (!entry) {
      if (profiler->statistic_count == profiler->statistic_capacity) {
        size_t capacity = profiler->statistic_capacity ? 2 * profiler->statistic_capacity : 64;
        profile_statistic *grown = realloc(profiler->statistics, capacity * sizeof *grown);
        if (!grown) return NULL;
        profiler->statistics = grown;
        profiler->statistic_capacity = capacity;
      }
      profile_statistic *statistic = &profiler->statistics[profiler->statistic_count];
      memset(statistic, 0, sizeof *statistic);
      statistic->phase = phase;
      snprintf(statistic->name, sizeof statistic->name, "%s", name);
      snprintf(statistic->kind, sizeof statistic->kind, "%s", kind);
      statistic->min_ns = UINT64_MAX;
      profiler->slots[slot] = (uint32_t)++profiler->statistic_count;
      return statistic;
    }
    profile_statistic *statistic = &profiler->statistics[entry - 1];
    if (statistic->phase == phase && strncmp(statistic->name, name, PROFILER_NAME_SIZE - 1) == 0 &&
        strncmp(statistic->kind, kind, PROFILER_NAME_SIZE - 1) == 0)
      return statistic;
  }
}

uint64_t bpt_profiler_begin(bpt_context *context) {
  bpt_backend *backend = &context->backend;
  if (backend->vtable->synchronize) backend->vtable->synchronize(backend);
  return bpt_profiler_now();
}

void bpt_profiler_record(bpt_context *context, bpt_profile_phase phase, const char *name, const char *kind,
                         uint64_t start, double bytes, double flops) {
  bpt_profiler *profiler = context->profiler;
  if (!profiler || !profiler->enabled) return;
  /* Waiting for the device puts the region's kernels inside it; comm waits for its own work itself. */
  uint64_t end = phase == BPT_PROFILE_COMM ? bpt_profiler_now() : bpt_profiler_begin(context);
  uint64_t duration = end > start ? end - start : 0;
  pthread_mutex_lock(&profiler->lock);
  profile_statistic *statistic = find_statistic(profiler, phase, name, kind);
  if (statistic) {
    statistic->calls++;
    statistic->total_ns += duration;
    if (duration < statistic->min_ns) statistic->min_ns = duration;
    if (duration > statistic->max_ns) statistic->max_ns = duration;
    statistic->bytes += bytes;
    statistic->flops += flops;
    if (profiler->event_count == profiler->event_capacity && profiler->event_capacity < PROFILER_MAX_EVENTS) {
      size_t capacity = profiler->event_capacity ? 2 * profiler->event_capacity : 4096;
      profile_event *grown = realloc(profiler->events, capacity * sizeof *grown);
      if (grown) {
        profiler->events = grown;
        profiler->event_capacity = capacity;
      }
    }
    if (profiler->event_count < profiler->event_capacity)
      profiler->events[profiler->event_count++] =
          (profile_event){.statistic = (uint32_t)(statistic - profiler->statistics),
                          .step = profiler->step,
                          .start_ns = start > profiler->origin_ns ? start - profiler->origin_ns : 0,
                          .duration_ns = duration,
                          .bytes = bytes,
                          .flops = flops};
    else
      profiler->dropped_events++;
  }
  if (phase == BPT_PROFILE_OPTIMIZER) profiler->step++;
  pthread_mutex_unlock(&profiler->lock);
}

static double value_bytes(const bpt_node *node) {
  return (double)bpt_node_count(node) * (double)bpt_dtype_size(node->storage);
}

/* Without an op cost function: forward reads the inputs and writes the output; backward reads the inputs
 * and the output gradient and writes the input gradients. FLOPs stay unknown. A view moves nothing. */
static void estimate_cost(const bpt_node *node, bool backward, double *flops, double *bytes) {
  *flops = *bytes = 0.0;
  if (node->view_source) return;
  double inputs = 0.0;
  for (int i = 0; i < node->input_count; i++)
    if (node->inputs[i]) inputs += value_bytes(node->inputs[i]);
  *bytes = backward ? 2.0 * inputs + value_bytes(node) : inputs + value_bytes(node);
}

static bpt_status run_op(bpt_node *node, bpt_status (*run)(bpt_node *node), bpt_profile_phase phase) {
  bpt_context *context = node->graph->context;
  if (!run) return BPT_OK;
  if (!context->profiler->enabled) return run(node);
  uint64_t start = bpt_profiler_begin(context);
  bpt_status status = run(node);
  if (status != BPT_OK) return status;
  const bpt_op_definition *definition = bpt_op_get(node->op);
  double flops = 0.0, bytes = 0.0;
  bool backward = phase == BPT_PROFILE_BACKWARD;
  if (definition->cost)
    definition->cost(node, backward, &flops, &bytes);
  else
    estimate_cost(node, backward, &flops, &bytes);
  bpt_profiler_record(context, phase, node->name, definition->name, start, bytes, flops);
  return BPT_OK;
}

static bpt_status profiled_forward(bpt_node *node) {
  return run_op(node, bpt_op_get(node->op)->forward, BPT_PROFILE_FORWARD);
}

static bpt_status profiled_backward(bpt_node *node) {
  return run_op(node, bpt_op_get(node->op)->backward, BPT_PROFILE_BACKWARD);
}

const bpt_op_definition bpt_profiled_op = {
    .name = "profiled", .forward = profiled_forward, .backward = profiled_backward};

bpt_status bpt_profiler_enable(bpt_context *context, int enabled) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_profiler_enable: context is NULL");
  if (!context->profiler) {
    if (!enabled) return BPT_OK;
    bpt_profiler *profiler = bpt_calloc(context, 1, sizeof *profiler, "profiler");
    if (!profiler) return BPT_ERR_OUT_OF_MEMORY;
    if (pthread_mutex_init(&profiler->lock, NULL) != 0) {
      free(profiler);
      return bpt_error(context, BPT_ERR_INTERNAL, "bpt_profiler_enable: cannot create a mutex");
    }
    profiler->origin_ns = bpt_profiler_now();
    context->profiler = profiler;
  }
  context->profiler->enabled = enabled != 0;
  return BPT_OK;
}

int bpt_profiler_enabled(const bpt_context *context) {
  return context && context->profiler && context->profiler->enabled;
}

bpt_status bpt_profiler_reset(bpt_context *context) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_profiler_reset: context is NULL");
  bpt_profiler *profiler = context->profiler;
  if (!profiler) return BPT_OK;
  pthread_mutex_lock(&profiler->lock);
  profiler->statistic_count = profiler->event_count = 0;
  profiler->dropped_events = 0;
  profiler->step = 0;
  if (profiler->slots) memset(profiler->slots, 0, profiler->slot_capacity * sizeof *profiler->slots);
  profiler->origin_ns = bpt_profiler_now();
  pthread_mutex_unlock(&profiler->lock);
  return BPT_OK;
}

void bpt_profiler_destroy(bpt_context *context) {
  bpt_profiler *profiler = context->profiler;
  if (!profiler) return;
  pthread_mutex_destroy(&profiler->lock);
  free(profiler->statistics);
  free(profiler->slots);
  free(profiler->events);
  free(profiler);
  context->profiler = NULL;
}
