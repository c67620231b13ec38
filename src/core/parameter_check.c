/* The per-step parameter check (robustness, issue 18 class 8): after every optimiser update, one backend
 * reduction over the flat parameter block tells whether any parameter became inf or NaN. A NaN in the input
 * can pass ReLU as 0 and leave the loss finite while the weights it touched are lost; this makes that step's
 * bpt_optimizer_step() fail with BPT_ERR_NUMERIC naming the first such parameter, instead of reporting success. */
#include "bptrain/anomaly.h"

#include <math.h>
#include <stdlib.h>

#include "core/graph.h"
#include "core/precision.h"

bpt_status bpt_graph_set_parameter_check(bpt_graph *graph, int enabled) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_parameter_check: graph is NULL");
  graph->parameter_check_off = !enabled;
  return BPT_OK;
}

int bpt_graph_parameter_check(const bpt_graph *graph) { return graph && !graph->parameter_check_off ? 1 : 0; }

/* The slow path, only once a parameter was found non-finite: which parameter, which element, how many. The
 * reduce_statistics fallback sums in float blocks, so parameters near FLT_MAX can overflow it while every
 * value is finite: then this finds none and the step stands. */
static bpt_status name_non_finite(bpt_graph *graph, int64_t step) {
  const int64_t count = graph->parameter_elements;
  float *host = bpt_calloc(graph->context, (size_t)count, sizeof *host, "parameter check buffer");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_backend *backend = graph->backend;
  if (backend->vtable->download(backend, host, graph->parameter_block, (size_t)count * sizeof *host) != BPT_OK) {
    free(host);
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: reading the parameters");
  }
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
                         "bpt_optimizer_step: step %lld made parameter '%s' non-finite (%s at element %lld, %lld "
                         "non-finite values); the update was applied: restore a checkpoint, and look for inf/NaN in "
                         "the inputs or labels (bpt_graph_set_anomaly_detection names the first op)",
                         (long long)step, parameter->name, isnan(values[first]) ? "NaN" : "inf", (long long)first,
                         (long long)bad);
  }
  free(host);
  return status;
}

/* Whether any parameter is inf or NaN, in one backend pass. unscale_check_finite with a scale of 1 leaves
 * every value as it is (x * 1 is exact) and vectorises; reduce_statistics, the fallback, runs about 4x slower
 * on the CPU (three dependent sums per element). */
static bpt_status any_non_finite(bpt_graph *graph, bool *found) {
  bpt_backend *backend = graph->backend;
  const int64_t count = graph->parameter_elements;
  *found = false;
  backend->error_message[0] = 0;
  int32_t *flag = graph->precision ? graph->precision->found_nonfinite : NULL; /* bpt_precision_before_step made it */
  if (flag && backend->vtable->unscale_check_finite) {
    int32_t host = 0;
    if (backend->vtable->memset_zero(backend, flag, sizeof host) != BPT_OK ||
        backend->vtable->unscale_check_finite(backend, count, graph->parameter_block, 1.0f, flag) != BPT_OK ||
        backend->vtable->download(backend, &host, flag, sizeof host) != BPT_OK)
      return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: checking the parameters");
    *found = host != 0;
    return BPT_OK;
  }
  if (!backend->vtable->reduce_statistics) return BPT_OK; /* nothing to check with */
  double sum = 0.0;
  if (backend->vtable->reduce_statistics(backend, count, graph->parameter_block, &sum, NULL, NULL) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_optimizer_step: checking the parameters");
  /* Any inf or NaN makes the sum non-finite (and so, rarely, do finite values near FLT_MAX: see below). */
  *found = !isfinite(sum);
  return BPT_OK;
}

bpt_status bpt_parameter_check_after_step(bpt_graph *graph, int64_t step) {
  if (graph->parameter_check_off || graph->parameter_elements == 0) return BPT_OK;
  bool found = false;
  BPT_CHECK(any_non_finite(graph, &found));
  return found ? name_non_finite(graph, step) : BPT_OK;
}
