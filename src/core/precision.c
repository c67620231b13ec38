/* A graph's precision policy: options, f16/bf16 storage emulation at op boundaries, weight copies, and
 * dynamic loss scaling with its one-pass unscale-and-check. The design is in docs/precision.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/graph.h"
#include "core/precision.h"

bpt_precision_options bpt_precision_options_default(void) {
  bpt_precision_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.compute_dtype = BPT_DTYPE_F32;
  options.loss_scaling = BPT_LOSS_SCALING_AUTO;
  options.initial_loss_scale = 65536.0f;
  options.growth_interval = 2000;
  options.growth_factor = 2.0f;
  options.backoff_factor = 0.5f;
  options.saved_activation_storage = BPT_ACTIVATION_STORAGE_COMPUTE;
  options.keep_all_values = 0;
  options.store_activations_16bit = -1; /* on the CPU backend */
  return options;
}

static bpt_status validate(bpt_context *context, const bpt_precision_options *o) {
  const char *where = "bpt_graph_set_precision";
  if (o->compute_dtype != BPT_DTYPE_F32 && o->compute_dtype != BPT_DTYPE_F16 && o->compute_dtype != BPT_DTYPE_BF16)
    return bpt_error(context, BPT_ERR_DTYPE, "%s: compute dtype %s is not f32, f16 or bf16", where,
                     bpt_dtype_name(o->compute_dtype));
  if ((unsigned)o->loss_scaling > (unsigned)BPT_LOSS_SCALING_DYNAMIC)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown loss scaling %d", where, (int)o->loss_scaling);
  if (!(o->initial_loss_scale >= 1.0f) || !isfinite(o->initial_loss_scale))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: initial_loss_scale %g must be finite and >= 1", where,
                     (double)o->initial_loss_scale);
  BPT_CHECK(bpt_precision_check_scaler(context, o->initial_loss_scale, 0, 0, where));
  if (o->growth_interval < 1)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: growth_interval %lld must be >= 1", where,
                     (long long)o->growth_interval);
  if (!(o->growth_factor >= 1.0f) || !isfinite(o->growth_factor) || !(o->backoff_factor > 0.0f) ||
      !(o->backoff_factor < 1.0f))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: growth_factor %g must be >= 1 and backoff_factor %g in (0, 1)", where,
                     (double)o->growth_factor, (double)o->backoff_factor);
  if ((unsigned)o->saved_activation_storage > (unsigned)BPT_ACTIVATION_STORAGE_FP8)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: unknown saved activation storage %d", where,
                     (int)o->saved_activation_storage);
  return BPT_OK;
}

bpt_status bpt_graph_set_precision(bpt_graph *graph, const bpt_precision_options *options) {
  const char *where = "bpt_graph_set_precision";
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: graph is NULL", where);
  bpt_context *context = graph->context;
  if (graph->compiled) return bpt_error(context, BPT_ERR_STATE, "%s: set the precision before compiling", where);
  bpt_precision_options copy = bpt_precision_options_default();
  if (options)
    BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                               offsetof(bpt_precision_options, keep_all_values) + sizeof copy.keep_all_values, where));
  BPT_CHECK(validate(context, &copy));
  if (!graph->precision) {
    graph->precision = bpt_calloc(context, 1, sizeof *graph->precision, "precision state");
    if (!graph->precision) return BPT_ERR_OUT_OF_MEMORY;
  }
  graph->precision->options = copy;
  return BPT_OK;
}

bpt_status bpt_graph_memory(const bpt_graph *graph, bpt_graph_memory_stats *stats) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_memory: graph is NULL");
  bpt_context *context = graph->context;
  if (!stats) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_memory: stats is NULL");
  if (!graph->compiled) return bpt_error(context, BPT_ERR_STATE, "bpt_graph_memory: compile the graph first");
  const size_t parameter_bytes = (size_t)graph->parameter_elements * sizeof(float);
  const size_t copy_bytes = graph->precision && graph->precision->weight_copies ? graph->precision->copy_bytes : 0;
  bpt_graph_memory_stats full = {.size = sizeof full,
                                 .max_batch = graph->max_batch,
                                 .activation_bytes_held = graph->held_bytes,
                                 .transient_bytes = graph->transient_bytes,
                                 .gradient_bytes = graph->gradient_bytes,
                                 .parameter_bytes = 2 * parameter_bytes + copy_bytes,
                                 .input_bytes = graph->input_bytes,
                                 .recompute_bytes = graph->recompute_bytes,
                                 .activation_bytes = graph->activation_bytes,
                                 .activation_bytes_f32 = graph->activation_bytes_f32};
  return bpt_copy_output(context, stats, &full, sizeof full,
                         offsetof(bpt_graph_memory_stats, input_bytes) + sizeof stats->input_bytes,
                         "bpt_graph_memory");
}

float bpt_graph_loss_scale(const bpt_graph *graph) {
  if (!graph) return 0.0f;
  return graph->precision && graph->precision->scaling ? graph->precision->loss_scale : 1.0f;
}

int64_t bpt_graph_skipped_steps(const bpt_graph *graph) {
  return graph && graph->precision ? graph->precision->skipped_steps : 0;
}

bpt_status bpt_graph_set_deterministic(bpt_graph *graph, int deterministic) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_set_deterministic: graph is NULL");
  graph->deterministic = deterministic != 0;
  return BPT_OK;
}

static bpt_dtype compute_dtype(const bpt_graph *graph) {
  return graph->precision ? graph->precision->options.compute_dtype : BPT_DTYPE_F32;
}

bool bpt_graph_bf16_products(const bpt_graph *graph) { return compute_dtype(graph) == BPT_DTYPE_BF16; }

static bpt_status upload_loss_scale(bpt_graph *graph) {
  bpt_backend *backend = graph->backend;
  float scale = graph->precision->loss_scale;
  if (backend->vtable->upload(backend, graph->loss_gradient, &scale, sizeof scale) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "loss scaling: uploading the scale");
  return BPT_OK;
}

bpt_status bpt_precision_check_scaler(bpt_context *context, float loss_scale, int64_t clean_steps,
                                      int64_t skipped_steps, const char *where) {
  /* Backing off never goes below 2^-24 (before_step); any finite scale at or above it is one the scaler can hold,
   * the initial scale (>= 1, unbounded above but finite) included. */
  if (!(loss_scale >= 0x1p-24f) || !isfinite(loss_scale) || clean_steps < 0 || skipped_steps < 0)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: loss scaler state (scale %g, %lld clean steps, %lld skipped) is invalid: the scale must be "
                     "finite and >= 2^-24, the counts >= 0",
                     where, (double)loss_scale, (long long)clean_steps, (long long)skipped_steps);
  return BPT_OK;
}

bpt_status bpt_precision_restore_scaler(bpt_graph *graph, float loss_scale, int64_t clean_steps,
                                        int64_t skipped_steps) {
  bpt_precision_state *state = graph->precision;
  state->loss_scale = loss_scale;
  state->clean_steps = clean_steps;
  state->skipped_steps = skipped_steps;
  return upload_loss_scale(graph);
}

/* Whether node is a linear whose products read its weight (input 1) through the weight's bf16 copy
 * (bpt_precision_weight_bf16). */
static bool reads_bf16_weight(const bpt_node *node) {
  return node->op == BPT_OP_LINEAR && bpt_node_kernels_take_bf16(node);
}

/* Whether every reader of each node takes it as its bf16 weight: such a weight needs no rounded f32 copy.
 * Indexed by node index; caller frees. */
static bool *read_only_as_bf16_weight(bpt_graph *graph) {
  bool *only = bpt_calloc(graph->context, (size_t)graph->node_count, sizeof *only, "weight readers");
  if (!only) return NULL;
  for (int i = 0; i < graph->node_count; i++)
    only[i] = true;
  for (int j = 0; j < graph->node_count; j++) {
    const bpt_node *consumer = graph->nodes[j];
    for (int k = 0; k < consumer->input_count; k++)
      if (!reads_bf16_weight(consumer) || k != 1) only[consumer->inputs[k]->index] = false;
  }
  return only;
}

/* The bf16 policy with linears reading bf16: every trainable parameter gets a bf16 copy (weight_bf16, at its
 * master offset). Only those some other op reads (biases, norms, embeddings, a weight shared with another op)
 * get a rounded f32 copy too, packed into weight_copies; the rest point at their f32 master, which then only
 * whole-tensor readers (bpt_graph_read, statistics) see. That saves a pass and four bytes per weight. */
static bpt_status compile_bf16_copies(bpt_graph *graph) {
  bpt_precision_state *state = graph->precision;
  bpt_backend *backend = graph->backend;
  size_t narrow_bytes = (size_t)graph->parameter_elements * sizeof(uint16_t);
  if (backend->vtable->alloc(backend, narrow_bytes ? narrow_bytes : 64, (void **)&state->weight_bf16) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: allocating bf16 weight copies");
  bool *only = read_only_as_bf16_weight(graph);
  if (!only) return BPT_ERR_OUT_OF_MEMORY;
  int64_t copy_elements = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    bpt_node *parameter = graph->parameters[p];
    if (parameter->requires_grad && !only[parameter->index]) /* 64-byte aligned, as in the master block */
      copy_elements += (bpt_node_inner_count(parameter) + 15) / 16 * 16;
  }
  const size_t bytes = (size_t)copy_elements * sizeof(float);
  state->copy_bytes = narrow_bytes + bytes;
  if (backend->vtable->alloc(backend, bytes ? bytes : 64, (void **)&state->weight_copies) != BPT_OK) {
    free(only);
    return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: allocating weight copies");
  }
  int64_t at = 0;
  for (int p = 0; p < graph->parameter_count; p++) {
    bpt_node *parameter = graph->parameters[p];
    if (!parameter->requires_grad) continue; /* keeps the master block, as above */
    parameter->value_bf16 = state->weight_bf16 + parameter->param_offset;
    if (only[parameter->index]) continue; /* value stays the master */
    parameter->value = state->weight_copies + at;
    at += (bpt_node_inner_count(parameter) + 15) / 16 * 16;
  }
  free(only);
  return bpt_precision_before_forward(graph);
}

bpt_status bpt_precision_compile(bpt_graph *graph) {
  bpt_precision_state *state = graph->precision;
  if (!state) return BPT_OK;
  bpt_backend *backend = graph->backend;
  const bpt_precision_options *o = &state->options;
  state->scaling = o->loss_scaling == BPT_LOSS_SCALING_DYNAMIC ||
                   (o->loss_scaling == BPT_LOSS_SCALING_AUTO && o->compute_dtype == BPT_DTYPE_F16);
  state->loss_scale = state->scaling ? o->initial_loss_scale : 1.0f;
  state->clean_steps = state->skipped_steps = 0;
  if (backend->vtable->alloc(backend, sizeof(int32_t), (void **)&state->found_nonfinite) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: allocating a flag");
  if (state->scaling) BPT_CHECK(upload_loss_scale(graph));
  if (o->compute_dtype == BPT_DTYPE_F32) return BPT_OK;
  if (!backend->vtable->round_to_dtype)
    return bpt_error(graph->context, BPT_ERR_UNSUPPORTED, "bpt_graph_compile: backend '%s' cannot compute in %s",
                     backend->vtable->name, bpt_dtype_name(o->compute_dtype));
  /* bf16 copies where a linear reads them: its products then take 2-byte weights without a conversion of their
   * own, twice a step. */
  bool linear_reads_bf16 = false;
  for (int i = 0; i < graph->node_count; i++)
    linear_reads_bf16 |= reads_bf16_weight(graph->nodes[i]);
  if (o->compute_dtype == BPT_DTYPE_BF16 && backend->vtable->cast && linear_reads_bf16)
    return compile_bf16_copies(graph);
  size_t bytes = (size_t)graph->parameter_elements * sizeof(float);
  state->copy_bytes = bytes;
  if (backend->vtable->alloc(backend, bytes ? bytes : 64, (void **)&state->weight_copies) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: allocating weight copies");
  /* Weights read the rounded copies. Non-trainable parameters (batch norm's running statistics) keep the f32
   * master block: forward updates them there, checkpoints save them from there, and a copy would be refreshed
   * over each step's update by the next forward. */
  for (int p = 0; p < graph->parameter_count; p++)
    if (graph->parameters[p]->requires_grad)
      graph->parameters[p]->value = state->weight_copies + graph->parameters[p]->param_offset;
  return bpt_precision_before_forward(graph);
}

void bpt_precision_release(bpt_graph *graph) {
  bpt_precision_state *state = graph->precision;
  if (!state) return;
  bpt_backend *backend = graph->backend;
  if (state->weight_copies) backend->vtable->free(backend, state->weight_copies);
  if (state->weight_bf16) backend->vtable->free(backend, state->weight_bf16);
  if (state->found_nonfinite) backend->vtable->free(backend, state->found_nonfinite);
  if (state->widen_scratch) backend->vtable->free(backend, state->widen_scratch);
  for (int p = 0; p < graph->parameter_count; p++)
    graph->parameters[p]->value_bf16 = NULL;
  state->weight_copies = NULL;
  state->weight_bf16 = NULL;
  state->found_nonfinite = NULL;
  state->widen_scratch = NULL;
  state->widen_scratch_bytes = 0;
}

bpt_status bpt_precision_widen_scratch(bpt_graph *graph, size_t bytes, float **scratch) {
  bpt_precision_state *state = graph->precision;
  bpt_backend *backend = graph->backend;
  if (!state) return bpt_error(graph->context, BPT_ERR_INTERNAL, "widening bf16 storage without a precision policy");
  if (bytes > state->widen_scratch_bytes) {
    if (state->widen_scratch) backend->vtable->free(backend, state->widen_scratch);
    state->widen_scratch = NULL;
    state->widen_scratch_bytes = 0;
    backend->error_message[0] = 0;
    if (backend->vtable->alloc(backend, bytes, (void **)&state->widen_scratch) != BPT_OK)
      return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY,
                       "allocating %zu bytes of f32 scratch for bf16 storage: %s", bytes, backend->error_message);
    state->widen_scratch_bytes = bytes;
  }
  *scratch = state->widen_scratch;
  return BPT_OK;
}

void bpt_precision_destroy(bpt_graph *graph) {
  free(graph->precision);
  graph->precision = NULL;
}

static bpt_status round_buffer(bpt_graph *graph, float *values, int64_t count, const char *what, const char *name) {
  bpt_backend *backend = graph->backend;
  backend->error_message[0] = 0;
  if (backend->vtable->round_to_dtype(backend, count, compute_dtype(graph), values) != BPT_OK)
    return bpt_error(graph->context, BPT_ERR_DEVICE, "rounding %s '%s' to %s: %s", what, name,
                     bpt_dtype_name(compute_dtype(graph)), backend->error_message);
  return BPT_OK;
}

bpt_status bpt_precision_before_forward(bpt_graph *graph) {
  bpt_precision_state *state = graph->precision;
  if (!state || !state->weight_copies) return BPT_OK;
  bpt_backend *backend = graph->backend;
  if (state->weight_bf16) {
    /* Narrowed once; the f32 copies widened from it get the bits round_to_dtype would give them (the two casts
     * are the reference's encode and decode), in fewer passes than a copy and a rounding. */
    backend->error_message[0] = 0;
    if (backend->vtable->cast(backend, graph->parameter_elements, BPT_DTYPE_F32, graph->parameter_block, BPT_DTYPE_BF16,
                              state->weight_bf16, 1.0f) != BPT_OK)
      return bpt_error(graph->context, BPT_ERR_DEVICE, "forward: casting the weights to bf16: %s",
                       backend->error_message);
    for (int p = 0; p < graph->parameter_count; p++) {
      bpt_node *parameter = graph->parameters[p];
      if (!parameter->value_bf16 || bpt_node_forward_read_bf16_copy(parameter)) continue; /* no f32 copy */
      if (backend->vtable->cast(backend, bpt_node_inner_count(parameter), BPT_DTYPE_BF16, parameter->value_bf16,
                                BPT_DTYPE_F32, parameter->value, 1.0f) != BPT_OK)
        return bpt_error(graph->context, BPT_ERR_DEVICE, "forward: widening the bf16 copy of '%s': %s",
                         parameter->name, backend->error_message);
    }
    return BPT_OK;
  }
  size_t bytes = (size_t)graph->parameter_elements * sizeof(float);
  if (backend->vtable->copy(backend, state->weight_copies, graph->parameter_block, bytes) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "forward: copying weights");
  return round_buffer(graph, state->weight_copies, graph->parameter_elements, "weight copies", "all");
}

const void *bpt_precision_weight_bf16(const bpt_node *consumer, const bpt_node *weight) {
  return weight->value_bf16 && bpt_node_kernels_take_bf16(consumer) ? weight->value_bf16 : NULL;
}

/* Values and gradients of batched f32 nodes other than parameters are activations; unbatched results
 * (the loss) stay f32, as autocast keeps reductions and losses in f32. */
static bool is_activation(const bpt_node *node) {
  return node->batched && node->dtype == BPT_DTYPE_F32 && node->op != BPT_OP_PARAMETER;
}

/* A value stored in bf16 was written rounded by its kernels: only f32-stored activations need the pass. A view's
 * buffers are its source's, rounded there: its value after the source's forward, its gradient (summed over the
 * readers of both) before the source's backward. */
bpt_status bpt_precision_after_forward_node(bpt_node *node) {
  if (compute_dtype(node->graph) == BPT_DTYPE_F32 || !is_activation(node) || node->storage != BPT_DTYPE_F32 ||
      node->view_source)
    return BPT_OK;
  return round_buffer(node->graph, node->value, bpt_node_count(node), "value", node->name);
}

bpt_status bpt_precision_before_backward_node(bpt_node *node) {
  if (compute_dtype(node->graph) == BPT_DTYPE_F32 || !is_activation(node) || !node->grad ||
      node->storage != BPT_DTYPE_F32 || node->view_source)
    return BPT_OK;
  return round_buffer(node->graph, node->grad, bpt_node_count(node), "gradient", node->name);
}

bpt_status bpt_precision_round_gradients(bpt_graph *graph) {
  if (compute_dtype(graph) == BPT_DTYPE_F32) return BPT_OK;
  return round_buffer(graph, graph->gradient_block, graph->parameter_elements, "parameter gradients", "all");
}

/* A finiteness check in three parts, so that several buffers share one device flag and one read-back:
 * clear the flag, run unscale_check_finite over each buffer (values *= inverse_scale; 1 is a pure check),
 * then read the flag. */
static bpt_status clear_flag(bpt_graph *graph) {
  bpt_backend *backend = graph->backend;
  backend->error_message[0] = 0;
  if (!backend->vtable->unscale_check_finite)
    return bpt_error(graph->context, BPT_ERR_UNSUPPORTED, "backend '%s' has no unscale_check_finite kernel",
                     backend->vtable->name);
  if (backend->vtable->memset_zero(backend, graph->precision->found_nonfinite, sizeof(int32_t)) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "checking values are finite");
  return BPT_OK;
}

static bpt_status check_values(bpt_graph *graph, float *values, int64_t count, float inverse_scale) {
  bpt_backend *backend = graph->backend;
  if (backend->vtable->unscale_check_finite(backend, count, values, inverse_scale, graph->precision->found_nonfinite) !=
      BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "checking values are finite");
  return BPT_OK;
}

static bpt_status read_flag(bpt_graph *graph, bool *found) {
  bpt_backend *backend = graph->backend;
  int32_t flag = 0;
  if (backend->vtable->download(backend, &flag, graph->precision->found_nonfinite, sizeof flag) != BPT_OK)
    return bpt_backend_error(graph->context, BPT_ERR_DEVICE, "checking values are finite");
  *found = flag != 0;
  return BPT_OK;
}

static bpt_status check_finite(bpt_graph *graph, float *values, int64_t count, float inverse_scale, bool *found) {
  BPT_CHECK(clear_flag(graph));
  BPT_CHECK(check_values(graph, values, count, inverse_scale));
  return read_flag(graph, found);
}

/* A bf16-stored value, checked on the host (this runs only when a step was refused). */
static bpt_status host_nonfinite(const bpt_node *node, bool *found) {
  const int64_t count = bpt_node_count(node);
  float *host = bpt_calloc(node->graph->context, (size_t)(count ? count : 1), sizeof *host, "finiteness check");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = bpt_node_download_f32(node, node->value, count, host);
  *found = false;
  for (int64_t i = 0; status == BPT_OK && i < count && !*found; i++) *found = !isfinite(host[i]);
  free(host);
  return status;
}

/* Replays forward with the same inputs and random numbers, checking each op's output, and reports the first
 * op whose output is not finite. Only runs when a step is refused, so forward itself pays nothing. */
static bpt_status report_nonfinite(bpt_graph *graph, const char *what) {
  const char *where = "bpt_optimizer_step";
  if (!graph->backend->vtable->unscale_check_finite)
    return bpt_error(graph->context, BPT_ERR_NUMERIC, "%s: %s (backend '%s' cannot check which op went non-finite)",
                     where, what, graph->backend->vtable->name);
  BPT_CHECK(bpt_graph_fit_run_lengths(graph, where)); /* the forward's, should a call since have gone back */
  BPT_CHECK(bpt_precision_before_forward(graph));
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->order[i];
    const bpt_op_definition *definition = bpt_op_get(node->op);
    if (definition->forward) BPT_CHECK(definition->forward(node));
    BPT_CHECK(bpt_precision_after_forward_node(node));
    if (node->dtype != BPT_DTYPE_F32 || !bpt_node_contiguous(node)) continue; /* a strided view: its source's */
    bool found = false;
    if (node->storage == BPT_DTYPE_F32)
      BPT_CHECK(check_finite(graph, node->value, bpt_node_count(node), 1.0f, &found));
    else
      BPT_CHECK(host_nonfinite(node, &found));
    if (found && node->op == BPT_OP_PARAMETER)
      return bpt_error(graph->context, BPT_ERR_NUMERIC, "%s: %s; parameter '%s' is not finite", where, what,
                       node->name);
    if (found && node->op == BPT_OP_INPUT)
      return bpt_error(graph->context, BPT_ERR_NUMERIC, "%s: %s; input '%s' holds inf or NaN", where, what,
                       node->name);
    if (found)
      return bpt_error(graph->context, BPT_ERR_NUMERIC, "%s: %s; the first op whose output went non-finite is %s '%s'",
                       where, what, definition->name, node->name);
  }
  return bpt_error(graph->context, BPT_ERR_NUMERIC,
                   "%s: %s; every op's output is finite, so the overflow happened in backward", where, what);
}

static bpt_status refuse_nonfinite_loss(bpt_graph *graph, float loss) {
  char what[96];
  snprintf(what, sizeof what, "the loss '%s' is %g", graph->loss->name, (double)loss);
  return report_nonfinite(graph, what);
}

bpt_status bpt_precision_before_step(bpt_graph *graph, bool *skip) {
  *skip = false;
  bpt_precision_state *state = graph->precision;
  if (!state || !state->found_nonfinite)
    return bpt_error(graph->context, BPT_ERR_INTERNAL, "bpt_optimizer_step: precision step without a compiled policy");
  /* Parameter gradients in the compute dtype, as a device would hold them before the unscale. Done here rather
   * than at the end of backward so that data-parallel all-reduces (started during backward) are finished. */
  BPT_CHECK(bpt_precision_round_gradients(graph));
  /* A policy's step synchronises with the device once: the host decides whether to refuse or skip it.
   * Without scaling only the loss is checked (read back): a pass over every gradient would cost each f32 step
   * as much as the update itself, and a non-finite gradient with a finite loss is what anomaly mode is for. */
  float loss = 0.0f;
  if (!state->scaling) {
    BPT_CHECK(bpt_graph_loss(graph, &loss));
    return isfinite(loss) ? BPT_OK : refuse_nonfinite_loss(graph, loss);
  }
  /* With scaling the loss and the gradients (unscaled on the way) raise one device flag, and only the flag is
   * read back; the loss itself only when the flag is up, to tell a bad loss from an overflow. */
  bool found = false;
  BPT_CHECK(clear_flag(graph));
  BPT_CHECK(check_values(graph, (float *)graph->loss->value, 1, 1.0f));
  BPT_CHECK(check_values(graph, graph->gradient_block, graph->parameter_elements, 1.0f / state->loss_scale));
  BPT_CHECK(read_flag(graph, &found));
  if (found) {
    BPT_CHECK(bpt_graph_loss(graph, &loss));
    if (!isfinite(loss)) return refuse_nonfinite_loss(graph, loss);
  }
  const bpt_precision_options *o = &state->options;
  if (found) {
    /* Overflow at this scale: drop the update and retry the next batch at a smaller scale. */
    state->skipped_steps = bpt_saturating_increment(state->skipped_steps);
    state->clean_steps = 0;
    state->loss_scale = fmaxf(state->loss_scale * o->backoff_factor, 0x1p-24f);
    *skip = true;
    return upload_loss_scale(graph);
  }
  state->clean_steps = bpt_saturating_increment(state->clean_steps);
  if (state->clean_steps >= o->growth_interval) {
    state->clean_steps = 0;
    float grown = state->loss_scale * o->growth_factor;
    if (isfinite(grown) && grown <= 0x1p64f) state->loss_scale = grown;
    return upload_loss_scale(graph);
  }
  return BPT_OK;
}
