/* Compile time: every node's kernels are looked up once and its capability asked of the graph's backend
 * (bpt_backend_supports), so an unsupported node is a compile-time status naming node, op and backend, or,
 * with the context's cpu_fallback, runs on a CPU backend instead. The pointers found are kept in the node,
 * so a step does no lookup. */
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"

static bool uses_kernels(const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  return !definition->uses_kernels || definition->uses_kernels(node);
}

/* The description at compile time: the compiled (largest) batch, no memory yet (kernels' supports look at
 * dtypes, shapes, attributes and betas, never at pointers). */
static void describe_for_query(const bpt_node *node, bpt_kernel_node *description) {
  bpt_graph *graph = node->graph;
  const int64_t batch = graph->batch;
  graph->batch = graph->max_batch;
  bpt_node_describe(node, description);
  graph->batch = batch;
}

/* Beta 0 for every input gradient this node may be the first writer of. */
static bool accepts_overwrite(const bpt_backend *backend, const bpt_node *node, const bpt_kernel_node *query) {
  bpt_kernel_node overwrite = *query;
  for (int i = 0; i < overwrite.input_count; i++)
    if (node->inputs[i]->requires_grad) overwrite.inputs[i].beta = 0.0f;
  return bpt_backend_supports(backend, &overwrite, NULL);
}

bool bpt_node_supported_on(const bpt_node *node, const bpt_backend *backend) {
  bpt_kernel_node query;
  describe_for_query(node, &query);
  return bpt_backend_supports(backend, &query, NULL);
}

static bpt_status create_fallback(bpt_graph *graph) {
  if (graph->fallback_backend) return BPT_OK;
  const bpt_backend_vtable *table = bpt_backend_registry_find("cpu");
  bpt_backend *cpu = calloc(1, sizeof *cpu);
  if (!table || !cpu) {
    free(cpu);
    return bpt_error(graph->context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: cannot create the CPU fallback");
  }
  cpu->vtable = table;
  bpt_backend_options options = {.num_threads = 0};
  bpt_status status = table->create(cpu, &options);
  if (status != BPT_OK) {
    bpt_status reported =
        bpt_error(graph->context, status, "bpt_graph_compile: creating the CPU fallback: %s", cpu->error_message);
    free(cpu);
    return reported;
  }
  graph->fallback_backend = cpu;
  return BPT_OK;
}

static bpt_status select_node(bpt_graph *graph, bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  node->kernels = NULL;
  node->kernel_backend = graph->backend;
  node->overwrites_gradients = definition->overwrites_unset_gradients;
  if (definition->configure) definition->configure(node);
  if (node->view_source) node->overwrites_gradients = false; /* a view's backward writes nothing */
  if (!uses_kernels(node)) return BPT_OK;
  bpt_kernel_node query;
  describe_for_query(node, &query);
  const char *reason = NULL;
  bpt_backend *backend = graph->backend;
  if (!bpt_backend_supports(backend, &query, &reason)) {
    if (!graph->context->cpu_fallback)
      return bpt_node_error(node, BPT_ERR_UNSUPPORTED,
                            "not supported on backend '%s' (%s); set cpu_fallback in bpt_context_options to run it "
                            "on the CPU",
                            backend->vtable->name, reason);
    BPT_CHECK(create_fallback(graph));
    backend = graph->fallback_backend;
    if (!bpt_backend_supports(backend, &query, &reason))
      return bpt_node_error(node, BPT_ERR_UNSUPPORTED, "not supported on backend '%s' nor on the CPU (%s)",
                            graph->backend->vtable->name, reason);
  }
  node->kernels = backend->vtable->kernels(backend, node->op);
  node->kernel_backend = backend;
  node->overwrites_gradients = definition->overwrites_unset_gradients && accepts_overwrite(backend, node, &query);
  return BPT_OK;
}

bpt_status bpt_graph_select_kernels(bpt_graph *graph) {
  /* Kernels are chosen for the node's own dtype; the storage plan that follows may narrow it (storage.c). */
  for (int i = 0; i < graph->node_count; i++) graph->nodes[i]->storage = graph->nodes[i]->dtype;
  for (int i = 0; i < graph->node_count; i++)
    BPT_CHECK(select_node(graph, graph->nodes[i]));
  return BPT_OK;
}

void bpt_graph_release_kernels(bpt_graph *graph) {
  bpt_backend *cpu = graph->fallback_backend;
  if (!cpu) return;
  cpu->vtable->destroy(cpu);
  free(cpu);
  graph->fallback_backend = NULL;
  for (int i = 0; i < graph->node_count; i++) {
    graph->nodes[i]->kernels = NULL;
    graph->nodes[i]->kernel_backend = graph->backend;
  }
}
