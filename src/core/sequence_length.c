/* Sequence lengths per run (issue 24.1). A sequence input is declared with its longest length, and compile plans
 * memory, views and kernels for that; a run may feed any length from 1 up to it (bpt_graph_set_input of an
 * (N, t, ...) tensor), as it may feed any batch up to the compiled one. Before such a run the graph is fitted to
 * the fed lengths: every node's shape is inferred again, in creation order, by its op's own shape rule, the
 * strides laid out again for the views compile chose, and each node's kernels asked again whether they take the
 * new shapes. Kernels, shared primitives, the profiler and reads then see exactly the shapes of a graph declared
 * that long, and use the first elements of buffers planned for the longest.
 *
 * Why the shape rules rather than a mark on the axes: the length shows up where no mark would follow it (the
 * heads' (N, H, T, D) after a permute, the scores' (N, H, T, T), the (N, T, H, D) of a reshape), and each op's rule
 * already knows how its output follows its inputs. A node that cannot take a shorter sequence (a parameter sized
 * by it, a reshape that folds it into features, a slice past its end) fails the run with its rule's message.
 *
 * Calls that describe the graph rather than run it read the declared shape (node->declared_dims: checkpoints, the
 * signature, the summary, bpt_node_dim) or, reading every op's own shapes as ONNX export does, fit the graph back
 * to the declared lengths first; backward and reads fit it to the forward's lengths again. */
#include <stdio.h>
#include <string.h>

#include "core/graph.h"

/* The length the graph should have for sequence input `node`: the one it was last fed, or the declared one. */
static int64_t wanted_length(const bpt_node *node, bool declared) {
  return declared || node->input_length == 0 ? bpt_node_declared_length(node) : node->input_length;
}

static bool fitted(const bpt_graph *graph, bool declared) {
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->op == BPT_OP_INPUT && node->sequence && node->dims[1] != wanted_length(node, declared)) return false;
  }
  return true;
}

/* Shapes, strides and supports for the wanted lengths; a failure's message is the rule's or the kernel's. */
static bpt_status fit(bpt_graph *graph, bool declared, const char *where) {
  bool at_declared = true;
  for (int i = 0; i < graph->node_count; i++) {
    bpt_node *node = graph->nodes[i];
    const bpt_op_definition *definition = bpt_op_get(node->op);
    if (node->op == BPT_OP_INPUT) {
      if (node->sequence) node->dims[1] = wanted_length(node, declared);
    } else if (node->op != BPT_OP_PARAMETER && definition->infer_shape) {
      BPT_CHECK(bpt_node_infer_shape(node));
    }
    if (memcmp(node->dims, node->declared_dims, sizeof node->dims) != 0) at_declared = false;
    /* The memory is planned for the declared shapes: a rule whose output grows as its input shrinks has none. */
    for (int d = 0; d < node->rank; d++)
      if (node->dims[d] > node->declared_dims[d])
        return bpt_node_error(node, BPT_ERR_SHAPE, "%s: axis %d would be %lld, longer than the declared %lld", where, d,
                              (long long)node->dims[d], (long long)node->declared_dims[d]);
    const size_t saved = definition->saved_bytes ? definition->saved_bytes(node) : 0;
    if (saved > node->saved_capacity)
      return bpt_node_error(node, BPT_ERR_SHAPE, "%s: needs %zu saved bytes at this run's lengths, planned %zu", where,
                            saved, node->saved_capacity);
  }
  graph->lengths_fitted = !at_declared;
  BPT_CHECK(bpt_graph_lay_out_views(graph, where));
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->kernels && !bpt_node_supported_on(node, node->kernel_backend))
      return bpt_node_error(node, BPT_ERR_UNSUPPORTED, "%s: its kernels on backend '%s' do not take this run's shapes",
                            where, node->kernel_backend->vtable->name);
  }
  return BPT_OK;
}

/* The fed lengths, for a failure's message: "'tokens' 5, 'targets' 6". */
static void describe_lengths(const bpt_graph *graph, char *text, size_t size) {
  size_t used = 0;
  text[0] = 0;
  for (int i = 0; i < graph->node_count && used < size; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->op != BPT_OP_INPUT || !node->sequence) continue;
    const int written = snprintf(text + used, size - used, "%s'%s' %lld", used ? ", " : "", node->name,
                                 (long long)wanted_length(node, false));
    used += written > 0 ? (size_t)written : 0;
  }
}

/* Same declared length, same run length: two such inputs (tokens and targets) are one sequence. The first fed input
 * of each declared length is kept (a graph has few); beyond that the shape rules still catch a mismatch. */
static bpt_status check_fed_lengths(const bpt_graph *graph, const char *where) {
  const bpt_node *first[16];
  int firsts = 0;
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    if (node->op != BPT_OP_INPUT || !node->sequence || !node->input_length) continue;
    int f = 0;
    while (f < firsts && bpt_node_declared_length(first[f]) != bpt_node_declared_length(node))
      f++;
    if (f == firsts) {
      if (firsts < (int)(sizeof first / sizeof first[0])) first[firsts++] = node;
    } else if (first[f]->input_length != node->input_length) {
      return bpt_error(graph->context, BPT_ERR_SHAPE,
                       "%s: sequence inputs '%s' and '%s' (both declared %lld long) were fed %lld and %lld tokens",
                       where, first[f]->name, node->name, (long long)bpt_node_declared_length(node),
                       (long long)first[f]->input_length, (long long)node->input_length);
    }
  }
  return BPT_OK;
}

/* Nothing to do, the common case on every forward, backward and read, costs one pass over the nodes; the fed
 * lengths are checked only when they ask for a fit (lengths that disagree always do). */
static bpt_status fit_lengths(bpt_graph *graph, bool declared, const char *where) {
  if (fitted(graph, declared)) return BPT_OK;
  if (!declared) BPT_CHECK(check_fed_lengths(graph, where));
  bpt_status status = fit(graph, declared, where);
  if (status == BPT_OK || declared) return status;
  char message[BPT_ERROR_MESSAGE_SIZE], lengths[256];
  snprintf(message, sizeof message, "%s", bpt_context_last_error(graph->context));
  describe_lengths(graph, lengths, sizeof lengths);
  /* The declared shapes held at compile, so going back to them fails only for want of memory for the view
   * layout, which the next fit redoes. */
  (void)fit(graph, true, where);
  return bpt_error(graph->context, status, "%s (sequence lengths fed: %s; the graph was compiled for longer ones)",
                   message, lengths);
}

bpt_status bpt_graph_fit_run_lengths(bpt_graph *graph, const char *where) { return fit_lengths(graph, false, where); }

bpt_status bpt_graph_fit_declared_lengths(bpt_graph *graph, const char *where) {
  return graph->lengths_fitted ? fit_lengths(graph, true, where) : BPT_OK;
}
