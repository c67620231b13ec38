/* Batch-norm folding for inference: a convolution followed by batch norm is one convolution with
 * w' = w gamma / sqrt(var + eps) and b' = (b - mean) gamma / sqrt(var + eps) + beta, which saves the batch
 * norm's full pass over the activations. The folded batch norm keeps its node but shares the convolution's
 * output buffer and does nothing (int attribute 0 of batch_norm), so callers' node handles stay valid; a folded
 * batch_norm_relu still applies its ReLU, in place. */
#include <math.h>
#include <stdlib.h>

#include "bptrain/cnn.h"
#include "core/graph.h"

static int consumers(const bpt_graph *graph, const bpt_node *node) {
  int count = 0;
  for (int i = 0; i < graph->node_count; i++)
    for (int j = 0; j < graph->nodes[i]->input_count; j++)
      count += graph->nodes[i]->inputs[j] == node;
  return count;
}

/* Parameters are read and written in the f32 master block: under a precision policy a trainable one's value is
 * a rounded copy that the next forward refreshes from the master (precision.c). */
static bpt_status transfer(bpt_graph *graph, bpt_node *node, double *values, bool to_device) {
  bpt_backend *backend = graph->backend;
  const int64_t count = bpt_node_inner_count(node);
  float *device = graph->parameter_block + node->param_offset;
  float *host = malloc((size_t)count * sizeof *host);
  if (!host) return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_fold_batch_norm: out of memory");
  bpt_status status = BPT_OK;
  if (to_device) {
    for (int64_t i = 0; i < count; i++)
      host[i] = (float)values[i];
    status = backend->vtable->upload(backend, device, host, (size_t)count * sizeof *host);
  } else {
    status = backend->vtable->download(backend, host, device, (size_t)count * sizeof *host);
    for (int64_t i = 0; status == BPT_OK && i < count; i++)
      values[i] = host[i];
  }
  free(host);
  return status == BPT_OK ? BPT_OK : bpt_backend_error(graph->context, status, "bpt_graph_fold_batch_norm");
}

/* Folds one batch norm into its convolution; the parameters are read and written in double. */
static bpt_status fold(bpt_graph *graph, bpt_node *norm, bpt_node *conv) {
  bpt_node *weight = conv->inputs[1], *bias = conv->input_count > 2 ? conv->inputs[2] : NULL;
  bpt_node *gamma = norm->inputs[1], *beta = norm->inputs[2], *mean = norm->inputs[3], *variance = norm->inputs[4];
  const int64_t channels = weight->dims[0], per_channel = bpt_node_inner_count(weight) / channels;
  double *w = malloc((size_t)(channels * per_channel) * sizeof *w);
  double *p = malloc((size_t)(5 * channels) * sizeof *p);
  bpt_status status = w && p ? BPT_OK : bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_fold_batch_norm");
  double *g = p, *b = p + channels, *m = p + 2 * channels, *v = p + 3 * channels, *c = p + 4 * channels;
  if (status == BPT_OK) status = transfer(graph, weight, w, false);
  if (status == BPT_OK) status = transfer(graph, gamma, g, false);
  if (status == BPT_OK) status = transfer(graph, beta, b, false);
  if (status == BPT_OK) status = transfer(graph, mean, m, false);
  if (status == BPT_OK) status = transfer(graph, variance, v, false);
  for (int64_t o = 0; o < channels; o++)
    c[o] = 0.0;
  if (status == BPT_OK && bias) status = transfer(graph, bias, c, false);
  if (status == BPT_OK) {
    const double epsilon = bpt_node_float_parameter(norm, "epsilon");
    for (int64_t o = 0; o < channels; o++) {
      const double scale = g[o] / sqrt(v[o] + epsilon);
      for (int64_t i = 0; i < per_channel; i++)
        w[o * per_channel + i] *= scale;
      c[o] = (c[o] - m[o]) * scale + b[o];
    }
    status = transfer(graph, weight, w, true);
  }
  if (status == BPT_OK) {
    /* Without a bias of its own the convolution borrows beta's storage for b'. */
    if (!bias) {
      conv->inputs[2] = beta;
      conv->input_count = 3;
      bias = beta;
    }
    status = transfer(graph, bias, c, true);
  }
  if (status == BPT_OK) status = bpt_node_set_parameter(norm, "folded", 1);
  if (status == BPT_OK) {
    norm->value = conv->value;
    for (int i = norm->index + 1; i < graph->node_count; i++) /* views of the norm read where it now writes */
      if (graph->nodes[i]->view_source == norm)
        graph->nodes[i]->value = (char *)conv->value + graph->nodes[i]->view_offset * bpt_dtype_size(norm->storage);
  }
  free(w);
  free(p);
  return status;
}

bpt_status bpt_graph_fold_batch_norm(bpt_graph *graph, int *folded_count) {
  const char *where = "bpt_graph_fold_batch_norm";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!graph->compiled) return bpt_error(graph->context, BPT_ERR_STATE, "%s: compile the graph first", where);
  int folded = 0;
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *norm = graph->nodes[i];
    if ((norm->op != BPT_OP_BATCH_NORM && norm->op != BPT_OP_BATCH_NORM_RELU) ||
        bpt_node_int_parameter(norm, "folded", 0))
      continue;
    bpt_node *conv = norm->inputs[0];
    if (conv->op != BPT_OP_CONV2D || consumers(graph, conv) != 1) continue;
    /* The folded norm shares the convolution's buffer, so both must hold the same storage dtype (storage.c). */
    if (conv->storage != norm->storage) continue;
    bool statistics_are_parameters = true; /* gamma, beta and the running statistics are rewritten in place */
    for (int k = 1; k < 5; k++)
      statistics_are_parameters &= norm->inputs[k]->op == BPT_OP_PARAMETER;
    if (!statistics_are_parameters) continue;
    bpt_node *weight = conv->inputs[1], *bias = conv->input_count > 2 ? conv->inputs[2] : NULL;
    /* Shared parameters would change another layer too; a borrowed beta must belong to this norm alone. */
    if (weight->op != BPT_OP_PARAMETER || consumers(graph, weight) != 1) continue;
    if (bias && (bias->op != BPT_OP_PARAMETER || consumers(graph, bias) != 1)) continue;
    if (!bias && consumers(graph, norm->inputs[2]) != 1) continue;
    BPT_CHECK(fold(graph, norm, conv));
    folded++;
  }
  graph->folded = graph->folded || folded > 0;
  graph->evaluation = true;
  graph->forward_done = false;
  graph->backward_done = false;
  if (folded_count) *folded_count = folded;
  return BPT_OK;
}
