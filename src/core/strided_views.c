/* Strided views (issue 24.2): a permute or slice whose readers all take strided input becomes a view of its
 * input, the same buffer seen through reordered or offset strides, so neither forward nor backward moves a value
 * for it; with any reader that needs contiguous input it stays a copy, shown in the profile under its name.
 * Which readers take strides: ops built on shared primitives that say so (matmul, whose gemm takes leading
 * dimensions), and ops whose kernels on the graph's backend are registered strided and accept the layout in
 * their supports (the CPU's attention). A view's readers may be views again (a slice of a permute); every view
 * names the first source, whose buffers it shares, as reshape's contiguous views do (graph.h's view_source).
 *
 * The choice is a fixed point: start with every permute and slice a view, compute the strides that gives, and
 * turn into copies the ones a reader refuses (last to first: a copy's reader that was a view becomes a copy in
 * the same round), until nothing changes. Each round only turns views into copies, so it ends. */
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "core/precision.h"

static void contiguous_strides(const bpt_node *node, int64_t *strides) {
  int64_t step = 1;
  for (int i = node->rank - 1; i >= 0; i--) {
    strides[i] = step;
    step *= node->dims[i];
  }
}

bool bpt_node_contiguous(const bpt_node *node) {
  int64_t step = 1;
  for (int i = node->rank - 1; i >= 0; i--) {
    /* A batched axis 0 counts even at extent 1: the batch of a run may be larger than the compiled one. */
    const bool counts = node->dims[i] != 1 || (i == 0 && node->batched);
    if (counts && node->strides[i] != step) return false;
    step *= node->dims[i];
  }
  return true;
}

bool bpt_node_partial_view(const bpt_node *node) {
  return node->view_source && bpt_node_inner_count(node) < bpt_node_inner_count(node->view_source);
}

static bool may_be_view(const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  if (!definition->strided_view || node->graph->strided_views_off || node == node->graph->loss) return false;
  const bpt_node *source = bpt_node_buffer_owner(node->inputs[0]);
  /* Parameters live in the flat blocks, not the arena the views' offsets index. */
  return source->op != BPT_OP_PARAMETER && source->dtype == BPT_DTYPE_F32;
}

/* A reshape of a strided input is a view too when the new shape can be read through strides: each run of input
 * axes that steps evenly (axis i's step is axis i+1's step times its extent) can be split or merged into new axes
 * of the same element count, as PyTorch's view() allows; a split of a slice's last axis into heads is one. Axis 0,
 * the batch, keeps its step (reshape never touches it). False when some new axis would straddle two runs. */
static bool reshape_strides(const bpt_node *node, int64_t *strides) {
  const bpt_node *x = node->inputs[0];
  strides[0] = x->strides[0];
  int out = node->rank - 1;
  int64_t run_elements = 1, out_elements = 1, base = x->strides[x->rank - 1];
  for (int in = x->rank - 1; in >= 1; in--) {
    run_elements *= x->dims[in];
    const bool run_ends = in == 1 || (x->dims[in - 1] != 1 && x->strides[in - 1] != run_elements * base);
    if (!run_ends) continue;
    while (out >= 1 && (out_elements < run_elements || node->dims[out] == 1)) {
      strides[out] = out_elements * base;
      out_elements *= node->dims[out];
      out--;
    }
    if (out_elements != run_elements) return false;
    if (in > 1) base = x->strides[in - 1], run_elements = out_elements = 1;
  }
  return out == 0;
}

/* Strides, offsets and view sources for the views chosen so far, in creation order (a source comes first). */
static void lay_out(bpt_graph *graph, const bool *view) {
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->nodes[i];
    const bpt_op_definition *definition = bpt_op_get(node->op);
    node->view_offset = 0;
    if (definition->strided_view && view[i]) {
      bpt_node *input = node->inputs[0];
      int64_t offset = 0;
      node->view_source = bpt_node_buffer_owner(input);
      definition->strided_view(node, input->strides, node->strides, &offset);
      node->view_offset = input->view_offset + offset;
      continue;
    }
    if (definition->strided_view) node->view_source = NULL;
    contiguous_strides(node, node->strides);
    /* reshape: a view of whatever its input shares, strided when its input is (readers_take refuses those it
     * cannot express, so its input becomes a copy). */
    if (definition->view_of_input) {
      node->view_source = bpt_node_buffer_owner(node->inputs[0]);
      node->view_offset = node->inputs[0]->view_offset;
      if (!bpt_node_contiguous(node->inputs[0]) && !reshape_strides(node, node->strides))
        contiguous_strides(node, node->strides);
    }
  }
}

static bool readers_take(const bpt_graph *graph, const bpt_node *node, const bool *view);

/* Whether reader takes its input slot as laid out now. */
static bool reader_takes(const bpt_node *reader, int slot, const bool *view) {
  const bpt_op_definition *definition = bpt_op_get(reader->op);
  if (definition->strided_view && slot == 0 && view[reader->index]) return true; /* a view of a view */
  /* A reshape is always a view: of a strided input when it can say it in strides and its readers take that. */
  if (definition->view_of_input) {
    int64_t strides[BPT_MAX_RANK];
    return reshape_strides(reader, strides) && readers_take(reader->graph, reader, view);
  }
  if (definition->reads_strided_input) return definition->reads_strided_input(reader, slot);
  const bpt_backend *backend = reader->graph->backend;
  const bpt_op_kernels *kernels = backend->vtable->kernels ? backend->vtable->kernels(backend, reader->op) : NULL;
  if (!kernels || !kernels->strided_inputs) return false;
  /* Under 16-bit storage a reader that takes f32 only is handed a widened contiguous copy, so its view's source
   * would stay f32 (storage.c): the copy, stored in 16 bits, then costs fewer bytes than the view saves. */
  if (bpt_precision_stores_16bit(reader->graph) && !kernels->bf16_storage) return false;
  return bpt_node_supported_on(reader, backend);
}

/* Whether every reader of node takes it; a node nothing reads is an output the caller reads: contiguous. */
static bool readers_take(const bpt_graph *graph, const bpt_node *node, const bool *view) {
  bool read = false;
  for (int j = node->index + 1; j < graph->node_count; j++) {
    const bpt_node *reader = graph->nodes[j];
    for (int k = 0; k < reader->input_count; k++) {
      if (reader->inputs[k] != node) continue;
      read = true;
      if (!bpt_node_contiguous(node) && !reader_takes(reader, k, view)) return false;
    }
  }
  return read;
}

bpt_status bpt_graph_plan_strided_views(bpt_graph *graph) {
  const int n = graph->node_count;
  bool *view = bpt_calloc(graph->context, (size_t)n, sizeof *view, "strided view plan");
  if (!view) return BPT_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < n; i++) {
    graph->nodes[i]->storage = graph->nodes[i]->dtype; /* what the readers' supports are shown */
    view[i] = may_be_view(graph->nodes[i]);
  }
  /* A copy changes only the strides of what comes after it, which this round has checked already: the next
   * round, laid out afresh, checks them again. */
  for (bool changed = true; changed;) {
    changed = false;
    lay_out(graph, view);
    for (int i = n - 1; i >= 0; i--)
      if (view[i] && !readers_take(graph, graph->nodes[i], view)) view[i] = false, changed = true;
  }
  lay_out(graph, view);
  free(view);
  return BPT_OK;
}

bpt_status bpt_graph_lay_out_views(bpt_graph *graph, const char *where) {
  const int n = graph->node_count;
  bool *view = bpt_calloc(graph->context, (size_t)n, sizeof *view, "strided view layout");
  if (!view) return BPT_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < n; i++) view[i] = bpt_op_get(graph->nodes[i]->op)->strided_view && graph->nodes[i]->view_source;
  lay_out(graph, view);
  bpt_status status = BPT_OK;
  for (int i = 0; i < n && status == BPT_OK; i++)
    if (view[i] && !readers_take(graph, graph->nodes[i], view))
      status = bpt_node_error(graph->nodes[i], BPT_ERR_UNSUPPORTED,
                              "%s: a reader of this view does not take its strides at this run's shapes", where);
  free(view);
  return status;
}

bpt_status bpt_node_download_strided(const bpt_node *node, float *host, const char *where) {
  const bpt_node *source = node->view_source;
  const int64_t source_count = bpt_node_count(source), count = bpt_node_count(node);
  float *all = bpt_calloc(node->graph->context, (size_t)source_count, sizeof *all, where);
  if (!all) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = bpt_node_download_f32(source, source->value, source_count, all);
  int64_t dims[BPT_MAX_RANK], index[BPT_MAX_RANK] = {0};
  for (int i = 0; i < node->rank; i++)
    dims[i] = i == 0 && node->batched ? node->graph->batch : node->dims[i];
  for (int64_t e = 0; status == BPT_OK && e < count; e++) {
    int64_t at = node->view_offset;
    for (int i = 0; i < node->rank; i++)
      at += index[i] * node->strides[i];
    host[e] = all[at];
    for (int i = node->rank - 1; i >= 0 && ++index[i] == dims[i]; i--)
      index[i] = 0;
  }
  free(all);
  return status;
}
