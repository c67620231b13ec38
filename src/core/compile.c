/* Compiling a graph: fix the batch dimension, plan one flat block for parameters (and one for their
 * gradients), one arena for everything else, allocate them on the backend and initialise parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/graph.h"
#include "core/memory_plan.h"
#include "core/precision.h"

#define BPT_ALIGNMENT 64

static size_t align_up(size_t bytes) { return (bytes + BPT_ALIGNMENT - 1) / BPT_ALIGNMENT * BPT_ALIGNMENT; }

/* Fills a parameter with its initialiser. Fan-in is the product of dims[1..]; fan-out is dims[0] times
 * the receptive field (dims[2..]), the convention He and Glorot use for linear and conv weights. */
static void initialise(const bpt_node *node, bpt_rng *rng, float *values) {
  int64_t count = bpt_node_inner_count(node);
  int64_t receptive = 1;
  for (int i = 2; i < node->rank; i++) receptive *= node->dims[i];
  double fan_in = node->rank > 1 ? (double)(count / node->dims[0]) : (double)count;
  double fan_out = node->rank > 1 ? (double)(node->dims[0] * receptive) : (double)count;
  double bound = 0.0, deviation = 0.0;
  switch (node->initializer) {
  case BPT_INIT_ZEROS: memset(values, 0, (size_t)count * sizeof *values); return;
  case BPT_INIT_ONES:
    for (int64_t i = 0; i < count; i++) values[i] = 1.0f;
    return;
  case BPT_INIT_HE_NORMAL: deviation = sqrt(2.0 / fan_in); break;
  case BPT_INIT_HE_UNIFORM: bound = sqrt(6.0 / fan_in); break;
  case BPT_INIT_XAVIER_NORMAL: deviation = sqrt(2.0 / (fan_in + fan_out)); break;
  case BPT_INIT_XAVIER_UNIFORM: bound = sqrt(6.0 / (fan_in + fan_out)); break;
  case BPT_INIT_NORMAL_SMALL: deviation = 0.02; break; /* GPT-2's fixed scale, whatever the fan */
  }
  for (int64_t i = 0; i < count; i++)
    values[i] = deviation > 0.0 ? (float)(deviation * bpt_rng_normal(rng))
                                : (float)(bound * (2.0 * bpt_rng_uniform(rng) - 1.0));
}

void bpt_graph_release_memory(bpt_graph *graph) {
  bpt_backend *backend = graph->backend;
  bpt_precision_release(graph);
  bpt_parameter_check_release(graph);
  bpt_graph_release_kernels(graph);
  void *blocks[] = {graph->parameter_block, graph->gradient_block, graph->activation_arena, graph->loss_gradient};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
    if (blocks[i]) backend->vtable->free(backend, blocks[i]);
  graph->parameter_block = graph->gradient_block = graph->loss_gradient = NULL;
  graph->activation_arena = NULL;
  free(graph->parameters);
  graph->parameters = NULL;
  free(graph->order);
  graph->order = NULL;
}

static bpt_status allocate(bpt_graph *graph, size_t bytes, void **out, const char *what) {
  bpt_backend *backend = graph->backend;
  backend->error_message[0] = 0;
  bpt_status status = backend->vtable->alloc(backend, bytes ? bytes : BPT_ALIGNMENT, out);
  if (status != BPT_OK) {
    *out = NULL;
    return bpt_error(graph->context, status, "bpt_graph_compile: allocating %zu bytes for %s: %s", bytes, what,
                     backend->error_message);
  }
  return BPT_OK;
}

static bpt_status plan_and_allocate(bpt_graph *graph) {
  bpt_context *context = graph->context;
  int parameter_count = 0;
  for (int i = 0; i < graph->node_count; i++) parameter_count += graph->nodes[i]->op == BPT_OP_PARAMETER;
  graph->parameters = bpt_calloc(context, (size_t)parameter_count, sizeof *graph->parameters, "parameter list");
  graph->order = bpt_calloc(context, (size_t)graph->node_count, sizeof *graph->order, "node order");
  if (!graph->parameters || !graph->order) return BPT_ERR_OUT_OF_MEMORY;

  /* Nodes can only be built from existing nodes, so creation order is already topological. */
  int64_t parameter_elements = 0;
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->nodes[i];
    graph->order[i] = node;
    if (node->batched) node->dims[0] = node->declared_dims[0] = graph->max_batch;
    if (node->op == BPT_OP_PARAMETER) {
      graph->parameters[graph->parameter_count++] = node;
      node->param_offset = parameter_elements;
      /* Keep every parameter 64-byte aligned inside the block for vector loads. */
      const int64_t aligned = (int64_t)(align_up((size_t)bpt_node_inner_count(node) * sizeof(float)) / sizeof(float));
      if (!bpt_checked_add(parameter_elements, aligned, &parameter_elements) || parameter_elements > BPT_MAX_ELEMENTS)
        return bpt_error(context, BPT_ERR_OUT_OF_MEMORY,
                         "bpt_graph_compile: the parameters up to '%s' hold more than 2^40 values", node->name);
      continue;
    }
  }
  graph->parameter_elements = parameter_elements;
  /* Activation memory (issue 4): values backward does not need share a reused region (memory_plan.c). */
  const bool keep_all = graph->precision && graph->precision->options.keep_all_values;
  bpt_memory_plan plan = {0};
  /* The same plan with every activation in f32 first, for bpt_graph_memory's comparison (storage.c). */
  BPT_CHECK(bpt_precision_plan_storage(graph, true));
  BPT_CHECK(bpt_memory_plan_build(graph, keep_all, &plan));
  graph->activation_bytes_f32 = plan.arena_bytes;
  bpt_memory_plan_free(&plan);
  plan = (bpt_memory_plan){0};
  BPT_CHECK(bpt_precision_plan_storage(graph, false));
  BPT_CHECK(bpt_memory_plan_build(graph, keep_all, &plan));
  size_t arena_bytes = plan.arena_bytes;
  graph->activation_bytes = arena_bytes;
  graph->held_bytes = plan.held_bytes;
  graph->transient_bytes = plan.transient_bytes;
  graph->gradient_bytes = plan.gradient_bytes;
  graph->input_bytes = plan.input_bytes;
  graph->recompute_bytes = plan.recompute_bytes;
  graph->recompute_resident = 0;

  size_t parameter_bytes = (size_t)parameter_elements * sizeof(float);
  bpt_status status = allocate(graph, parameter_bytes, (void **)&graph->parameter_block, "parameters");
  if (status == BPT_OK) status = allocate(graph, parameter_bytes, (void **)&graph->gradient_block, "gradients");
  if (status == BPT_OK) status = allocate(graph, arena_bytes, &graph->activation_arena, "activations");
  if (status == BPT_OK) status = allocate(graph, sizeof(float), (void **)&graph->loss_gradient, "loss gradient");
  if (status != BPT_OK) {
    bpt_memory_plan_free(&plan);
    return status;
  }

  char *arena = graph->activation_arena;
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->nodes[i];
    if (node->op == BPT_OP_PARAMETER) {
      node->value = graph->parameter_block + node->param_offset;
      node->grad = graph->gradient_block + node->param_offset;
      continue;
    }
    node->value = arena + plan.value_offset[i];
    node->grad = plan.grad_offset[i] != BPT_NO_OFFSET ? (float *)(arena + plan.grad_offset[i]) : NULL;
    node->saved = plan.saved_offset[i] != BPT_NO_OFFSET ? arena + plan.saved_offset[i] : NULL;
    if (node->view_source && node->view_offset) { /* a slice: its first element inside the source's buffers */
      const size_t skip = (size_t)node->view_offset * bpt_dtype_size(node->view_source->storage);
      node->value = (char *)node->value + skip;
      if (node->grad) node->grad = (float *)((char *)node->grad + skip);
    }
  }
  bpt_memory_plan_free(&plan);
  bpt_backend *backend = graph->backend;
  if (backend->vtable->memset_zero(backend, graph->gradient_block, parameter_bytes) != BPT_OK ||
      backend->vtable->memset_zero(backend, graph->activation_arena, arena_bytes) != BPT_OK)
    return bpt_backend_error(context, BPT_ERR_DEVICE, "bpt_graph_compile: clearing memory");
  const float one = 1.0f;
  if (backend->vtable->upload(backend, graph->loss_gradient, &one, sizeof one) != BPT_OK)
    return bpt_backend_error(context, BPT_ERR_DEVICE, "bpt_graph_compile: uploading the loss gradient");

  float *host = bpt_calloc(context, (size_t)(parameter_elements ? parameter_elements : 1), sizeof *host,
                           "parameter initialisation buffer");
  if (!host) return BPT_ERR_OUT_OF_MEMORY;
  bpt_rng rng;
  bpt_rng_seed(&rng, context->seed);
  /* Stochastic ops draw from their own stream, so adding one does not change the initial weights. */
  bpt_rng_seed(&graph->rng, context->seed ^ UINT64_C(0x5851f42d4c957f2d));
  graph->dropout_seed = context->seed;
  for (int p = 0; p < graph->parameter_count; p++)
    initialise(graph->parameters[p], &rng, host + graph->parameters[p]->param_offset);
  status = backend->vtable->upload(backend, graph->parameter_block, host, parameter_bytes);
  free(host);
  if (status != BPT_OK) return bpt_backend_error(context, status, "bpt_graph_compile: uploading parameters");
  return BPT_OK;
}

bpt_status bpt_graph_compile(bpt_graph *graph, bpt_node *loss, int64_t max_batch) {
  if (!graph) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_compile: graph is NULL");
  bpt_context *context = graph->context;
  if (graph->compiled) return bpt_error(context, BPT_ERR_STATE, "bpt_graph_compile: the graph is already compiled");
  if (max_batch < 1 || max_batch > (INT64_C(1) << 24))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_compile: max_batch is %lld, must be in [1, 2^24]",
                     (long long)max_batch);
  if (graph->node_count == 0) return bpt_error(context, BPT_ERR_STATE, "bpt_graph_compile: the graph has no nodes");
  if (loss) {
    if (loss->graph != graph)
      return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_graph_compile: loss '%s' belongs to another graph",
                       loss->name);
    if (loss->batched || bpt_node_inner_count(loss) != 1 || loss->dtype != BPT_DTYPE_F32)
      return bpt_error(context, BPT_ERR_SHAPE, "bpt_graph_compile: loss '%s' is not a scalar f32", loss->name);
  }
  /* Robustness (issue 9): refuse nodes whose batch-sized buffers cannot exist before size arithmetic overflows. */
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    int64_t inner = bpt_node_inner_count(node), batch = node->batched ? max_batch : 1, total;
    if (!bpt_checked_mul(inner, batch, &total) || total > BPT_MAX_ELEMENTS)
      return bpt_error(context, BPT_ERR_OUT_OF_MEMORY,
                       "bpt_graph_compile: %s '%s' needs %lld x %lld elements, more than 2^40",
                       bpt_op_get(node->op)->name, node->name, (long long)batch, (long long)inner);
  }
  graph->loss = loss;
  graph->max_batch = max_batch;
  /* Views first, since a view needs no kernels; then kernels: the choice of variant (relu's mask) decides saved
   * buffers and what backward reads. */
  bpt_status status = bpt_graph_plan_strided_views(graph);
  if (status == BPT_OK) status = bpt_graph_select_kernels(graph);
  if (status == BPT_OK) status = plan_and_allocate(graph);
  /* Precision policy (issue 4): weight copies and the loss scale. */
  if (status == BPT_OK) status = bpt_precision_compile(graph);
  if (status != BPT_OK) {
    bpt_graph_release_memory(graph);
    graph->parameter_count = 0;
    return status;
  }
  graph->compiled = true;
  return BPT_OK;
}

int64_t bpt_graph_parameter_count(const bpt_graph *graph) {
  if (!graph || !graph->compiled) return 0;
  int64_t count = 0;
  for (int p = 0; p < graph->parameter_count; p++) count += bpt_node_inner_count(graph->parameters[p]);
  return count;
}
