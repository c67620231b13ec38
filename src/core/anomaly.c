/* Anomaly detection: after each node of the forward pass, copy its value to the host and look for inf/NaN,
 * so the first op to produce one is named (with its inputs' state) instead of a NaN loss many ops later. */
#include "bptrain/anomaly.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/checked.h"
#include "core/graph.h"
#include "core/precision.h"

bpt_status bpt_graph_set_anomaly_detection(bpt_graph *graph, int enabled) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_anomaly_detection: graph is NULL");
  graph->anomaly_detection = enabled != 0;
  return BPT_OK;
}

int bpt_graph_anomaly_detection(const bpt_graph *graph) { return graph && graph->anomaly_detection ? 1 : 0; }

/* Scans count device floats; returns the number of non-finite ones and the first one's index and kind. */
static bpt_status scan(const bpt_node *node, const void *values, int64_t count, int64_t *bad, int64_t *first,
                       const char **kind) {
  bpt_graph *graph = node->graph;
  *bad = 0;
  *first = -1;
  *kind = "";
  if (!values) return BPT_OK;
  float *host = bpt_calloc(graph->context, (size_t)(count ? count : 1), sizeof *host, "anomaly check buffer");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  /* Widened from the node's storage (bf16 under the bf16 policy, storage.c). */
  const bpt_status status = bpt_node_download_f32(node, values, count, host);
  if (status != BPT_OK) {
    free(host);
    return status;
  }
  for (int64_t i = 0; i < count; i++)
    if (!isfinite(host[i])) {
      if (*first < 0) {
        *first = i;
        *kind = isnan(host[i]) ? "NaN" : host[i] > 0 ? "+inf" : "-inf";
      }
      (*bad)++;
    }
  free(host);
  return BPT_OK;
}

static bpt_status scan_value(bpt_node *node, int64_t *bad, int64_t *first, const char **kind) {
  /* A strided view's elements are its source's, scanned when the source was written. */
  const float *values = node->dtype == BPT_DTYPE_F32 && bpt_node_contiguous(node) ? node->value : NULL;
  return scan(node, values, bpt_node_count(node), bad, first, kind);
}

/* The node's shape with the current batch in place of the compiled maximum. */
static const char *run_shape(const bpt_node *node, char *buffer, size_t size) {
  size_t used = 0;
  buffer[0] = 0;
  if (node->rank == 0) snprintf(buffer, size, "scalar");
  for (int i = 0; i < node->rank && used < size; i++) {
    long long dim = node->batched && i == 0 ? (long long)node->graph->batch : (long long)node->dims[i];
    used += (size_t)snprintf(buffer + used, size - used, i ? "x%lld" : "%lld", dim);
  }
  return buffer;
}

bpt_status bpt_anomaly_check(bpt_node *node) {
  int64_t bad, first;
  const char *kind;
  BPT_CHECK(scan_value(node, &bad, &first, &kind));
  if (bad == 0) return BPT_OK;
  const char *blame = "its inputs are finite";
  if (node->op == BPT_OP_INPUT)
    blame = "the batch fed by bpt_graph_set_input holds it";
  else if (node->op == BPT_OP_PARAMETER)
    blame = "the parameter itself holds it (an earlier update diverged?)";
  for (int i = 0; i < node->input_count; i++) {
    int64_t input_bad, input_first;
    const char *input_kind;
    BPT_CHECK(scan_value(node->inputs[i], &input_bad, &input_first, &input_kind));
    if (input_bad) blame = "an input was already non-finite";
  }
  char shape[96];
  return bpt_error(node->graph->context, BPT_ERR_NUMERIC,
                   "anomaly: %s '%s' (shape %s) produced %s at element %lld (%lld non-finite values) in forward pass "
                   "%lld; %s",
                   bpt_op_get(node->op)->name, node->name, run_shape(node, shape, sizeof shape), kind, (long long)first,
                   (long long)bad, (long long)bpt_saturating_increment(node->graph->forward_count), blame);
}

/* Gradients accumulate, so the first input gradient found non-finite right after a node's backward was made
 * so by that backward: any earlier contributor was checked after its own backward. */
bpt_status bpt_anomaly_check_backward(bpt_node *node) {
  if (!node->requires_grad || !bpt_op_get(node->op)->backward) return BPT_OK;
  for (int i = 0; i < node->input_count; i++) {
    bpt_node *input = node->inputs[i];
    if (!input->requires_grad || !input->grad) continue;
    /* Through a strided view the gradient written is spread over the source's: scan all of that. */
    if (!bpt_node_contiguous(input)) input = input->view_source;
    int64_t bad, first;
    const char *kind;
    BPT_CHECK(scan(input, input->grad, bpt_node_count(input), &bad, &first, &kind));
    if (bad == 0) continue;
    char shape[96];
    return bpt_error(node->graph->context, BPT_ERR_NUMERIC,
                     "anomaly: backward of %s '%s' produced %s in the gradient of %s '%s' (shape %s) at element %lld "
                     "(%lld non-finite values) in backward pass %lld",
                     bpt_op_get(node->op)->name, node->name, kind, bpt_op_get(input->op)->name, input->name,
                     run_shape(input, shape, sizeof shape), (long long)first, (long long)bad,
                     (long long)node->graph->forward_count);
  }
  return BPT_OK;
}
