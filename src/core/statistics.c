/* Gradient clipping (by global norm, by value) and the statistics a caller reads each step to spot
 * exploding or vanishing gradients and dead units: per-parameter gradient norms and per-node value
 * statistics. All reductions run on the backend (reduce_statistics) and return a few numbers. */
#include <math.h>
#include <stdlib.h>

#include "bptrain/cnn.h"
#include "core/checked.h"
#include "core/graph.h"
#include "core/precision.h"
#include "core/thread_guard.h"

static bpt_status require_backward(bpt_graph *graph, const char *where) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!graph->compiled) return bpt_error(graph->context, BPT_ERR_STATE, "%s: compile the graph first", where);
  if (!graph->backward_done) return bpt_error(graph->context, BPT_ERR_STATE, "%s: run bpt_graph_backward first", where);
  return BPT_OK;
}

static bpt_status statistics_of(bpt_graph *graph, int64_t count, const float *values, double *sum,
                                double *sum_of_squares, int64_t *zeros, const char *where) {
  bpt_backend *backend = graph->backend;
  if (!backend->vtable->reduce_statistics)
    return bpt_error(graph->context, BPT_ERR_UNSUPPORTED, "%s: backend '%s' has no reduce_statistics kernel", where,
                     backend->vtable->name);
  BPT_CHECK(bpt_thread_guard_enter(graph->context, where));
  backend->error_message[0] = 0;
  bpt_status status = backend->vtable->reduce_statistics(backend, count, values, sum, sum_of_squares, zeros);
  return status == BPT_OK ? BPT_OK : bpt_backend_error(graph->context, status, where);
}

static bpt_status scale_clamp(bpt_graph *graph, float scale, float low, float high, const char *where) {
  bpt_backend *backend = graph->backend;
  if (!backend->vtable->scale_clamp)
    return bpt_error(graph->context, BPT_ERR_UNSUPPORTED, "%s: backend '%s' has no scale_clamp kernel", where,
                     backend->vtable->name);
  BPT_CHECK(bpt_thread_guard_enter(graph->context, where));
  backend->error_message[0] = 0;
  bpt_status status =
      backend->vtable->scale_clamp(backend, graph->parameter_elements, scale, low, high, graph->gradient_block);
  return status == BPT_OK ? BPT_OK : bpt_backend_error(graph->context, status, where);
}

bpt_status bpt_graph_clip_gradient_norm(bpt_graph *graph, float max_norm, float *norm) {
  const char *where = "bpt_graph_clip_gradient_norm";
  BPT_CHECK(require_backward(graph, where));
  if (!(max_norm > 0.0f) || !isfinite(max_norm))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: max_norm %g must be finite and > 0", where,
                     (double)max_norm);
  /* Buffers and alignment padding hold zero gradients, so the whole block gives the norm. */
  double squares = 0.0;
  BPT_CHECK(statistics_of(graph, graph->parameter_elements, graph->gradient_block, NULL, &squares, NULL, where));
  const double total = sqrt(squares);
  if (norm) *norm = (float)total;
  if (!isfinite(total)) return bpt_error(graph->context, BPT_ERR_NUMERIC, "%s: the gradient norm is not finite", where);
  /* PyTorch's clip_grad_norm_ convention: scale by max_norm / (norm + 1e-6) only when that is below 1. */
  const double factor = (double)max_norm / (total + 1e-6);
  if (factor < 1.0) BPT_CHECK(scale_clamp(graph, (float)factor, -INFINITY, INFINITY, where));
  return BPT_OK;
}

bpt_status bpt_graph_clip_gradient_value(bpt_graph *graph, float limit) {
  const char *where = "bpt_graph_clip_gradient_value";
  BPT_CHECK(require_backward(graph, where));
  if (!(limit > 0.0f))
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: limit %g must be > 0", where, (double)limit);
  return scale_clamp(graph, 1.0f, -limit, limit, where);
}

bpt_status bpt_graph_gradient_norm(bpt_graph *graph, const bpt_node *parameter, float *norm) {
  const char *where = "bpt_graph_gradient_norm";
  BPT_CHECK(require_backward(graph, where));
  if (!parameter || !norm || parameter->graph != graph || parameter->op != BPT_OP_PARAMETER)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: needs a parameter of this graph and a result",
                     where);
  double squares = 0.0;
  BPT_CHECK(statistics_of(graph, bpt_node_inner_count(parameter), parameter->grad, NULL, &squares, NULL, where));
  *norm = (float)sqrt(squares);
  return BPT_OK;
}

/* A bf16-stored value (storage.c) or a weight's bf16 copy, widened on the host: the backend's reduction reads
 * f32. */
static bpt_status host_statistics(const bpt_node *node, int64_t count, double *sum, double *squares, int64_t *zeros) {
  float *host = bpt_calloc(node->graph->context, (size_t)(count ? count : 1), sizeof *host, "value statistics");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  const bpt_status status = bpt_node_read_forward_f32(node, count, host);
  *sum = *squares = 0.0;
  *zeros = 0;
  for (int64_t i = 0; status == BPT_OK && i < count; i++) {
    *sum += host[i];
    *squares += (double)host[i] * host[i];
    *zeros += host[i] == 0.0f;
  }
  free(host);
  return status;
}

bpt_status bpt_graph_value_statistics(bpt_graph *graph, const bpt_node *node, bpt_value_statistics *statistics) {
  const char *where = "bpt_graph_value_statistics";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!node || !statistics || node->graph != graph)
    return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: needs a node of this graph and a result", where);
  BPT_CHECK(bpt_node_check_value_readable(node, where));
  if (node->op != BPT_OP_PARAMETER) BPT_CHECK(bpt_graph_fit_run_lengths(graph, where));
  if (node->dtype != BPT_DTYPE_F32)
    return bpt_error(graph->context, BPT_ERR_DTYPE, "%s: node '%s' is not f32", where, node->name);
  const int64_t count = bpt_node_count(node);
  double sum = 0.0, squares = 0.0;
  int64_t zeros = 0;
  if (node->storage == node->dtype && !bpt_node_forward_read_bf16_copy(node)) {
    BPT_CHECK(statistics_of(graph, count, node->value, &sum, &squares, &zeros, where));
  } else {
    BPT_CHECK(host_statistics(node, count, &sum, &squares, &zeros));
  }
  const double mean = sum / (double)count;
  const double variance = squares / (double)count - mean * mean;
  bpt_value_statistics full = {.size = sizeof full,
                               .mean = mean,
                               .standard_deviation = variance > 0.0 ? sqrt(variance) : 0.0,
                               .zero_fraction = (double)zeros / (double)count,
                               .count = count};
  return bpt_copy_output(graph->context, statistics, &full, sizeof full,
                         offsetof(bpt_value_statistics, count) + sizeof statistics->count, where);
}
