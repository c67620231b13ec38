/* Running a compiled graph: feeding inputs, forward in topological order, backward in reverse,
 * and copying values and parameters in and out of device memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/graph.h"
#include "core/graph_owner.h"
#include "core/precision.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "core/thread_guard.h"

static bpt_status require_compiled(bpt_graph *graph, const char *where) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  if (!graph->compiled) return bpt_error(graph->context, BPT_ERR_STATE, "%s: compile the graph first", where);
  return BPT_OK;
}

bpt_status bpt_graph_set_input(bpt_graph *graph, bpt_node *node, const bpt_tensor *tensor) {
  BPT_CHECK(require_compiled(graph, "bpt_graph_set_input"));
  bpt_context *context = graph->context;
  if (!node || !tensor) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_input: NULL node or tensor");
  if (node->graph != graph)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_input: node '%s' belongs to another graph",
                     node->name);
  if (node->op != BPT_OP_INPUT)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_input: node '%s' is not an input", node->name);
  if (tensor->dtype != node->dtype)
    return bpt_error(context, BPT_ERR_DTYPE, "bpt_graph_set_input: input '%s' is %s, tensor is %s", node->name,
                     bpt_dtype_name(node->dtype), bpt_dtype_name(tensor->dtype));
  /* Only the per-sample element count must match: a (N, 28, 28) batch feeds a (N, 784) input as is. A sequence
   * input also takes (N, t, ...) for a shorter t (sequence_length.c). */
  int64_t batch = tensor->dims[0];
  int64_t inner = 1, declared_inner = 1;
  for (int i = 1; i < tensor->rank; i++)
    inner *= tensor->dims[i];
  for (int i = 1; i < node->rank; i++)
    declared_inner *= node->declared_dims[i];
  int64_t length = 0;
  if (node->sequence) {
    const int64_t declared = bpt_node_declared_length(node);
    if (inner == declared_inner) {
      length = declared;
    } else if (tensor->rank >= 2 && tensor->dims[1] >= 1 && tensor->dims[1] < declared &&
               inner == tensor->dims[1] * (declared_inner / declared)) {
      length = tensor->dims[1];
    } else {
      char expected[96];
      return bpt_error(context, BPT_ERR_SHAPE,
                       "bpt_graph_set_input: sequence input '%s' has shape %s (batch first): up to %lld tokens of "
                       "%lld values each, fed as (N, tokens, ...); the tensor has %lld values per sample",
                       node->name, bpt_declared_shape_string(node, expected, sizeof expected), (long long)declared,
                       (long long)(declared_inner / declared), (long long)inner);
    }
  } else if (inner != declared_inner) {
    char expected[96];
    return bpt_error(context, BPT_ERR_SHAPE,
                     "bpt_graph_set_input: input '%s' has shape %s (batch first) so %lld values per sample; the "
                     "tensor has %lld",
                     node->name, bpt_shape_string(node, expected, sizeof expected), (long long)declared_inner,
                     (long long)inner);
  }
  if (batch < 1 || batch > graph->max_batch)
    return bpt_error(context, BPT_ERR_SHAPE, "bpt_graph_set_input: input '%s': batch %lld is outside [1, %lld]",
                     node->name, (long long)batch, (long long)graph->max_batch);
  size_t bytes = (size_t)(batch * inner) * bpt_dtype_size(node->dtype);
  bpt_backend *backend = graph->backend;
  if (node->storage != node->dtype) {
    BPT_CHECK(bpt_node_upload_f32(node, tensor->data, batch * inner)); /* stored as bf16 (storage.c) */
  } else if (backend->vtable->upload(backend, node->value, tensor->data, bytes) != BPT_OK) {
    return bpt_backend_error(context, BPT_ERR_DEVICE, "bpt_graph_set_input");
  }
  node->input_batch = batch;
  node->input_length = length;
  graph->forward_done = false;
  graph->backward_done = false;
  return BPT_OK;
}

/* One node's forward as the pass runs it: the op, the precision policy's rounding, the anomaly check. */
static bpt_status forward_node(bpt_graph *graph, bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_to_run(graph->context, node->op);
  if (definition->forward) BPT_CHECK(definition->forward(node));
  BPT_CHECK(bpt_precision_after_forward_node(node));
  if (graph->anomaly_detection) BPT_CHECK(bpt_anomaly_check(node)); /* robustness (issue 9) */
  return BPT_OK;
}

static bpt_status forward(bpt_graph *graph) {
  int64_t batch = 0;
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->order[i];
    if (node->op != BPT_OP_INPUT) continue;
    if (node->input_batch == 0)
      return bpt_error(graph->context, BPT_ERR_STATE, "bpt_graph_forward: input '%s' was not set", node->name);
    if (batch && node->input_batch != batch)
      return bpt_error(graph->context, BPT_ERR_SHAPE, "bpt_graph_forward: input '%s' has batch %lld, others %lld",
                       node->name, (long long)node->input_batch, (long long)batch);
    batch = node->input_batch;
  }
  graph->batch = batch ? batch : 1;
  graph->forward_done = false;
  BPT_CHECK(bpt_graph_fit_run_lengths(graph, "bpt_graph_forward"));
  graph->loss_on_host = false;
  graph->forward_seed = bpt_rng_next(&graph->rng); /* stochastic ops (issue 4) */
  BPT_CHECK(bpt_precision_before_forward(graph));
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->order[i];
    BPT_CHECK(forward_node(graph, node));
    if (node->recomputed) graph->recompute_resident = node->recompute_segment;
  }
  graph->forward_count = bpt_saturating_increment(graph->forward_count);
  graph->forward_done = true;
  graph->transient_values_overwritten = false;
  graph->backward_done = false;
  return BPT_OK;
}

bpt_status bpt_graph_forward(bpt_graph *graph) {
  BPT_CHECK(require_compiled(graph, "bpt_graph_forward"));
  BPT_CHECK(bpt_graph_enter(graph, "bpt_graph_forward"));
  bpt_status status = bpt_thread_guard_enter(graph->context, "bpt_graph_forward");
  if (status != BPT_OK) return bpt_graph_leave(graph, status);
  graph->forward_error[0] = 0;
  status = forward(graph);
  if (status != BPT_OK)
    snprintf(graph->forward_error, sizeof graph->forward_error, "%s", bpt_context_last_error(graph->context));
  return bpt_graph_leave(graph, status);
}

/* The calls that need a finished forward: after one that failed, repeat its error rather than "run forward". */
static bpt_status require_forward(const bpt_graph *graph, const char *where, const char *what) {
  if (graph->forward_done) return BPT_OK;
  if (graph->forward_error[0])
    return bpt_error(graph->context, BPT_ERR_STATE, "%s: the last bpt_graph_forward failed, so there is no %s (%s)",
                     where, what, graph->forward_error);
  return bpt_error(graph->context, BPT_ERR_STATE, "%s: run bpt_graph_forward first", where);
}

/* Activation gradients share memory (memory_plan.c), so each is cleared just before the backward that first
 * adds into it, rather than all of them before backward starts; that is also while the bytes are about to
 * be touched anyway. A first writer that can overwrite instead (op.h's overwrites_unset_gradients, when its
 * kernels accept beta 0: node->overwrites_gradients, kernel_select.c) is left the gradient unset: that saves
 * writing zeros and reading them back, about 4% of a ResNet-8 step on the CPU. */
static bpt_status clear_gradient(bpt_graph *graph, bpt_node *node, int writer, bool overwritten) {
  node = bpt_node_buffer_owner(node); /* a view's gradient is its source's */
  if (!node->requires_grad || node->op == BPT_OP_PARAMETER || node->gradient_first_writer != writer) return BPT_OK;
  if (overwritten) {
    node->gradient_unset = true;
    return BPT_OK;
  }
  bpt_backend *backend = graph->backend;
  node->gradient_unset = false;
  if (backend->vtable->memset_zero(backend, node->grad, (size_t)bpt_node_count(node) * bpt_dtype_size(node->storage)) !=
      BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "backward: clearing an activation gradient");
  return BPT_OK;
}

static bpt_status clear_gradients_first_written_by(bpt_graph *graph, bpt_node *node, int position) {
  const bool overwritten = node->requires_grad && node->overwrites_gradients;
  BPT_CHECK(clear_gradient(graph, node, position, false)); /* a node no backward writes into (not the loss) */
  /* A writer through a slice covers only part of the source's gradient: the rest must read as zero. */
  for (int k = 0; k < node->input_count; k++)
    BPT_CHECK(clear_gradient(graph, node->inputs[k], position, overwritten && !bpt_node_partial_view(node->inputs[k])));
  return BPT_OK;
}

/* A gradient left unset for a backward that did not run or did not write it still has to read as zero. */
static bpt_status clear_gradients_left_unset(bpt_graph *graph, bpt_node *node, int position) {
  for (int k = 0; k < node->input_count; k++)
    if (bpt_node_buffer_owner(node->inputs[k])->gradient_unset)
      BPT_CHECK(clear_gradient(graph, node->inputs[k], position, false));
  return BPT_OK;
}

/* Before the backward of a recompute segment's last node: its recomputed values, again, into the shared region
 * (the same inputs and the same forward seed give the same values, dropout masks included), unless the region
 * still holds them from forward. */
static bpt_status recompute_segment(bpt_graph *graph, int position) {
  const int segment = graph->order[position]->recompute_segment;
  if (!segment || segment == graph->recompute_resident) return BPT_OK;
  int first = position;
  while (first > 0 && graph->order[first - 1]->recompute_segment == segment)
    first--;
  for (int i = first; i <= position; i++)
    if (graph->order[i]->recomputed) BPT_CHECK(forward_node(graph, graph->order[i]));
  graph->recompute_resident = segment;
  return BPT_OK;
}

static bpt_status backward_pass(bpt_graph *graph, bool accumulate, const char *where) {
  BPT_CHECK(require_forward(graph, where, "forward pass to differentiate"));
  BPT_CHECK(bpt_graph_fit_run_lengths(graph, where)); /* the forward's, should a call since have gone back */
  BPT_CHECK(bpt_thread_guard_enter(graph->context, where));
  if (graph->hook) BPT_CHECK(graph->hook(graph->hook_data, graph, BPT_GRAPH_EVENT_BACKWARD_BEGIN, accumulate));
  if (!accumulate) BPT_CHECK(bpt_graph_zero_gradients(graph));
  graph->transient_values_overwritten = true;
  bpt_backend *backend = graph->backend;
  if (graph->loss->requires_grad &&
      backend->vtable->copy(backend, graph->loss->grad, graph->loss_gradient, sizeof(float)) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, where);
  for (int i = graph->node_count - 1; i >= 0; i--) {
    bpt_node *node = graph->order[i];
    const bpt_op_definition *definition = bpt_op_to_run(graph->context, node->op);
    BPT_CHECK(clear_gradients_first_written_by(graph, node, i));
    BPT_CHECK(recompute_segment(graph, i));
    if (node->requires_grad && definition->backward) {
      BPT_CHECK(bpt_precision_before_backward_node(node));
      BPT_CHECK(definition->backward(node));
    }
    BPT_CHECK(clear_gradients_left_unset(graph, node, i));
    if (graph->anomaly_detection) BPT_CHECK(bpt_anomaly_check_backward(node)); /* robustness (issue 9) */
    if (graph->hook) BPT_CHECK(graph->hook(graph->hook_data, graph, BPT_GRAPH_EVENT_NODE_BACKWARD, i));
  }
  if (graph->hook) BPT_CHECK(graph->hook(graph->hook_data, graph, BPT_GRAPH_EVENT_BACKWARD_END, -1));
  graph->backward_done = true;
  return BPT_OK;
}

static bpt_status backward(bpt_graph *graph, bool accumulate, const char *where) {
  BPT_CHECK(require_compiled(graph, where));
  if (!graph->loss) return bpt_error(graph->context, BPT_ERR_STATE, "%s: the graph was compiled without a loss", where);
  BPT_CHECK(bpt_graph_enter(graph, where));
  return bpt_graph_leave(graph, backward_pass(graph, accumulate, where));
}

bpt_status bpt_graph_backward(bpt_graph *graph) { return backward(graph, false, "bpt_graph_backward"); }

bpt_status bpt_graph_backward_accumulate(bpt_graph *graph) {
  return backward(graph, true, "bpt_graph_backward_accumulate");
}

bpt_status bpt_graph_zero_gradients(bpt_graph *graph) {
  BPT_CHECK(require_compiled(graph, "bpt_graph_zero_gradients"));
  bpt_backend *backend = graph->backend;
  if (backend->vtable->memset_zero(backend, graph->gradient_block, (size_t)graph->parameter_elements * sizeof(float)) !=
      BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_graph_zero_gradients");
  return BPT_OK;
}

bpt_status bpt_graph_loss(bpt_graph *graph, float *loss) {
  BPT_CHECK(require_compiled(graph, "bpt_graph_loss"));
  if (!loss) return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_loss: loss is NULL");
  if (!graph->loss) return bpt_error(graph->context, BPT_ERR_STATE, "bpt_graph_loss: the graph has no loss");
  BPT_CHECK(require_forward(graph, "bpt_graph_loss", "loss to read"));
  /* Only a forward writes the loss, and it clears the copy when it begins. */
  if (graph->loss_on_host) {
    *loss = graph->host_loss;
    return BPT_OK;
  }
  bpt_backend *backend = graph->backend;
  if (backend->vtable->download(backend, loss, graph->loss->value, sizeof *loss) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "bpt_graph_loss");
  graph->host_loss = *loss;
  graph->loss_on_host = true;
  return BPT_OK;
}

bpt_status bpt_node_check_value_readable(const bpt_node *node, const char *where) {
  const bpt_graph *graph = node->graph;
  if (!graph->forward_done && node->op != BPT_OP_PARAMETER) {
    if (graph->forward_error[0])
      return bpt_error(graph->context, BPT_ERR_STATE,
                       "%s: the last bpt_graph_forward failed, so '%s' has no value to read (%s)", where, node->name,
                       graph->forward_error);
    return bpt_error(graph->context, BPT_ERR_STATE, "%s: run forward before reading '%s'", where, node->name);
  }
  if (node->value_reused_by)
    return bpt_error(graph->context, BPT_ERR_STATE,
                     "%s: the value of '%s' is not kept after forward (its memory is reused by '%s'); "
                     "set keep_all_values in bpt_precision_options to keep every value",
                     where, node->name, node->value_reused_by->name);
  if (node->value_transient && graph->transient_values_overwritten)
    return bpt_error(graph->context, BPT_ERR_STATE,
                     "%s: the value of '%s' is not kept after backward (its memory holds activation gradients); "
                     "read it before backward, or set keep_all_values in bpt_precision_options",
                     where, node->name);
  return BPT_OK;
}

bpt_status bpt_graph_read(bpt_graph *graph, const bpt_node *node, bpt_tensor *tensor) {
  BPT_CHECK(require_compiled(graph, "bpt_graph_read"));
  bpt_context *context = graph->context;
  if (!node || !tensor) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_read: NULL node or tensor");
  if (node->graph != graph)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_read: node '%s' belongs to another graph",
                     node->name);
  BPT_CHECK(bpt_node_check_value_readable(node, "bpt_graph_read"));
  if (node->op != BPT_OP_PARAMETER) BPT_CHECK(bpt_graph_fit_run_lengths(graph, "bpt_graph_read"));
  if (tensor->dtype != node->dtype)
    return bpt_error(context, BPT_ERR_DTYPE, "bpt_graph_read: node '%s' is %s, tensor is %s", node->name,
                     bpt_dtype_name(node->dtype), bpt_dtype_name(tensor->dtype));
  int64_t count = bpt_node_count(node);
  if (count > tensor->capacity)
    return bpt_error(context, BPT_ERR_SHAPE, "bpt_graph_read: node '%s' has %lld values, tensor holds %lld", node->name,
                     (long long)count, (long long)tensor->capacity);
  if (node->batched) {
    /* After a run at a shorter sequence the node's per-sample shape is the run's ((N, t, ...), the heads'
     * (N, H, t, D)): a tensor of its rank takes that shape, one of another rank must hold as many values a
     * sample, so that its shape never claims a layout the values do not have. */
    int64_t tensor_inner = 1;
    for (int i = 1; i < tensor->rank; i++) tensor_inner *= tensor->dims[i];
    if (tensor_inner != bpt_node_inner_count(node)) {
      if (tensor->rank == node->rank) {
        memcpy(tensor->dims + 1, node->dims + 1, (size_t)(node->rank - 1) * sizeof *node->dims);
      } else if (graph->lengths_fitted) {
        char shape[96];
        return bpt_error(context, BPT_ERR_SHAPE,
                         "bpt_graph_read: node '%s' is %s at this run's sequence length (%lld values a sample); the "
                         "tensor, of rank %d, has %lld a sample: pass a tensor of rank %d",
                         node->name, bpt_shape_string(node, shape, sizeof shape),
                         (long long)bpt_node_inner_count(node), tensor->rank, (long long)tensor_inner, node->rank);
      }
    }
    BPT_CHECK(bpt_tensor_set_batch(tensor, graph->batch));
  }
  /* A bf16-stored activation is widened: the caller sees the node's dtype whatever its storage; so is the bf16
   * copy of a weight that has no f32 copy, since that is what forward read. */
  if (node->view_source && !bpt_node_contiguous(node)) return bpt_node_download_strided(node, (float *)tensor->data, "bpt_graph_read");
  if (node->storage != node->dtype || bpt_node_forward_read_bf16_copy(node))
    return bpt_node_read_forward_f32(node, count, tensor->data);
  bpt_backend *backend = graph->backend;
  if (backend->vtable->download(backend, tensor->data, node->value, (size_t)count * bpt_dtype_size(node->dtype)) !=
      BPT_OK)
    return bpt_backend_error(context, BPT_ERR_DEVICE, "bpt_graph_read");
  return BPT_OK;
}

/* Copies between the packed user layout and the padded flat block, one parameter at a time. */
static bpt_status transfer_parameters(bpt_graph *graph, float *block, float *values, int64_t count, bool to_device,
                                      const char *where) {
  BPT_CHECK(require_compiled(graph, where));
  if (!values) return bpt_error(graph->context, BPT_ERR_INVALID_ARGUMENT, "%s: values is NULL", where);
  if (count != bpt_graph_parameter_count(graph))
    return bpt_error(graph->context, BPT_ERR_SHAPE, "%s: count is %lld, the graph has %lld parameters", where,
                     (long long)count, (long long)bpt_graph_parameter_count(graph));
  bpt_backend *backend = graph->backend;
  int64_t packed = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    bpt_node *node = graph->parameters[p];
    size_t bytes = (size_t)bpt_node_inner_count(node) * sizeof(float);
    float *device = block + node->param_offset;
    bpt_status status = to_device ? backend->vtable->upload(backend, device, values + packed, bytes)
                                  : backend->vtable->download(backend, values + packed, device, bytes);
    if (status != BPT_OK) return bpt_backend_error(graph->context, status, where);
    packed += bpt_node_inner_count(node);
  }
  return BPT_OK;
}

bpt_status bpt_graph_read_parameters(bpt_graph *graph, float *values, int64_t count) {
  return transfer_parameters(graph, graph ? graph->parameter_block : NULL, values, count, false,
                             "bpt_graph_read_parameters");
}

bpt_status bpt_graph_write_parameters(bpt_graph *graph, const float *values, int64_t count) {
  return transfer_parameters(graph, graph ? graph->parameter_block : NULL, (float *)values, count, true,
                             "bpt_graph_write_parameters");
}

bpt_status bpt_graph_read_gradients(bpt_graph *graph, float *values, int64_t count) {
  return transfer_parameters(graph, graph ? graph->gradient_block : NULL, values, count, false,
                             "bpt_graph_read_gradients");
}
