/* The per-step parameter check: every update kernel sets a flag when a parameter it writes is inf or NaN
 * (bpt_update_args.found_nonfinite, inside the update's own pass), and the step reads the flag. A NaN in the input
 * can pass ReLU as 0 and leave the loss finite while the weights it touched are lost; this makes that step's
 * bpt_optimizer_step() fail with BPT_ERR_NUMERIC naming the first such parameter, instead of reporting success. */
#include "bptrain/anomaly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/checked.h"
#include "core/graph.h"

bpt_status bpt_graph_set_parameter_check(bpt_graph *graph, int enabled) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_parameter_check: graph is NULL");
  graph->parameter_check_off = !enabled;
  return BPT_OK;
}

int bpt_graph_parameter_check(const bpt_graph *graph) { return graph && !graph->parameter_check_off ? 1 : 0; }

/* How often a device backend's flag is read back. The update kernels set it on the device every step, and it
 * stays set; reading it is a host-device synchronisation, which a step without a precision
 * policy must not pay every time (so a device step reports a lost parameter up to this many steps late, and
 * says which steps). On a backend whose memory is host memory the flag is read every step, for free. */
#define DEVICE_READ_INTERVAL 64

/* The slow path, only once a parameter was found non-finite: which parameter, which element, how many. */
static bpt_status name_non_finite(bpt_graph *graph, int64_t first_step, int64_t step) {
  const int64_t count = graph->parameter_elements;
  float *host = bpt_calloc(graph->context, (size_t)count, sizeof *host, "parameter check buffer");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_backend *backend = graph->backend;
  if (backend->vtable->download(backend, host, graph->parameter_block, (size_t)count * sizeof *host) != BPT_OK) {
    free(host);
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: reading the parameters");
  }
  char steps[64];
  if (first_step == step)
    snprintf(steps, sizeof steps, "step %lld", (long long)step);
  else
    snprintf(steps, sizeof steps, "a step from %lld to %lld", (long long)first_step, (long long)step);
  bpt_status status = BPT_OK;
  for (int p = 0; p < graph->parameter_count && status == BPT_OK; p++) {
    const bpt_node *parameter = graph->parameters[p];
    const float *values = host + parameter->param_offset;
    const int64_t n = bpt_node_inner_count(parameter);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(values[i])) {
        if (first < 0) first = i;
        bad++;
      }
    if (bad)
      status = bpt_error(graph->context, BPT_ERR_NUMERIC,
                         "bpt_optimizer_step: %s made parameter '%s' non-finite (%s at element %lld, %lld "
                         "non-finite values); the update was applied: restore a checkpoint, and look for inf/NaN in "
                         "the inputs or labels (bpt_graph_set_anomaly_detection names the first op)",
                         steps, parameter->name, isnan(values[first]) ? "NaN" : "inf", (long long)first,
                         (long long)bad);
  }
  free(host);
  return status;
}

bpt_status bpt_parameter_check_prepare(bpt_graph *graph, int32_t **flag) {
  *flag = NULL;
  if (graph->parameter_check_off || graph->parameter_elements == 0) return BPT_OK;
  if (!graph->parameter_check_flag) { /* once per compiled graph, not per step */
    bpt_backend *backend = graph->backend;
    void *memory = NULL;
    if (backend->vtable->alloc(backend, sizeof(int32_t), &memory) != BPT_OK ||
        backend->vtable->memset_zero(backend, memory, sizeof(int32_t)) != BPT_OK) {
      if (memory) backend->vtable->free(backend, memory);
      return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_optimizer_step: the parameter check's flag");
    }
    graph->parameter_check_flag = memory;
  }
  *flag = graph->parameter_check_flag;
  return BPT_OK;
}

/* Whether the update kernels flagged a parameter, read every step where the memory is host memory and every
 * DEVICE_READ_INTERVAL steps elsewhere; *read is false between device read-backs. */
static bpt_status flagged(bpt_graph *graph, int64_t step, bool *found, bool *read) {
  bpt_backend *backend = graph->backend;
  const bpt_backend_vtable *vtable = backend->vtable;
  int32_t *flag = graph->parameter_check_flag, value = 0;
  *found = false;
  *read = true;
  if (vtable->is_host) {
    value = *flag;
  } else {
    if (step % DEVICE_READ_INTERVAL != 0) {
      *read = false;
      return BPT_OK;
    }
    if (vtable->download(backend, &value, flag, sizeof value) != BPT_OK)
      return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: reading the parameter check");
  }
  *found = value != 0;
  /* Cleared once seen, so that parameters restored from a checkpoint are not reported again. */
  if (*found && vtable->memset_zero(backend, flag, sizeof value) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: clearing the parameter check");
  return BPT_OK;
}

bpt_status bpt_parameter_check_after_step(bpt_graph *graph, int64_t step) {
  if (graph->parameter_check_off || !graph->parameter_check_flag) return BPT_OK;
  bool found = false, read = true;
  BPT_CHECK(flagged(graph, step, &found, &read));
  if (!read) return BPT_OK;
  const int64_t since = graph->parameter_check_since > 0 ? graph->parameter_check_since : step;
  graph->parameter_check_since = bpt_saturating_increment(step); /* step may be the last, INT64_MAX */
  return found ? name_non_finite(graph, since < step ? since : step, step) : BPT_OK;
}

void bpt_parameter_check_release(bpt_graph *graph) {
  if (graph->parameter_check_flag) graph->backend->vtable->free(graph->backend, graph->parameter_check_flag);
  graph->parameter_check_flag = NULL;
  graph->parameter_check_since = 0;
}
