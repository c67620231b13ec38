/* Planning activation memory (see memory_plan.h). A value is held when backward reads it (asked of each
 * consumer's op definition, conservatively yes when an op does not say), when it is an input or a graph
 * output, or when it is not batched; all other values are transient and placed first-fit in a shared region
 * by their forward lifetime [creation, last consumer]. Saved buffers keep their own space.
 *
 * Activation gradients are placed the same way by their backward lifetime: backward visits nodes from the last
 * to the first, and node i's gradient is live from the backward of its latest consumer (the first to add into
 * it) until its own backward has read it. A ResNet then holds the gradients of a block or two at a time
 * instead of one per node, which for a deep network is most of the memory. They share bytes with the
 * transient values, which are dead by the time backward starts.
 *
 * A recompute segment's values that only the segment itself reads go to one more region instead, shared by all
 * segments: forward writes each segment's there in turn, and backward computes a segment's again just before
 * its backward (run.c). A segment value read outside the segment is held, so recomputing never touches the
 * transient or gradient bytes, and the region costs one segment's values rather than one per segment.
 *
 * A view (reshape) has no bytes of its own: it is placed where its source is, and the source is planned for
 * both: held when either is, live until the last reader of either, its gradient born at the first writer into
 * either. */
#include <stdlib.h>

#include "core/checked.h"
#include "core/memory_plan.h"

#define BPT_PLAN_ALIGNMENT 64

static size_t align_up(size_t bytes) {
  return (bytes + BPT_PLAN_ALIGNMENT - 1) / BPT_PLAN_ALIGNMENT * BPT_PLAN_ALIGNMENT;
}

static size_t value_bytes(const bpt_node *node) {
  return (size_t)bpt_node_inner_count(node) * (node->batched ? (size_t)node->graph->max_batch : 1) *
         bpt_dtype_size(node->storage);
}

static bool backward_reads_input(const bpt_node *consumer, int input) {
  if (!consumer->requires_grad) return false; /* its backward never runs */
  const bpt_op_definition *definition = bpt_op_get(consumer->op);
  if (!definition->backward) return false;
  return !definition->backward_reads_input || definition->backward_reads_input(consumer, input);
}

static bool backward_reads_output(const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  if (!node->requires_grad || !definition->backward) return false;
  return !definition->backward_reads_output || definition->backward_reads_output(node);
}

typedef struct block {
  size_t offset, bytes;
  int last_use; /* in the lifetime's own clock: forward step, or backward step counted from the end */
} block;

static int by_offset(const void *a, const void *b) {
  size_t x = ((const block *)a)->offset, y = ((const block *)b)->offset;
  return x < y ? -1 : x > y;
}

/* Places bytes live from step now to step last_use at the lowest offset free of the blocks still live, given
 * blocks are placed in order of their first step; returns the offset and grows *region to cover it. */
static size_t first_fit(block *active, int *active_count, size_t bytes, int now, int last_use, size_t *region) {
  int kept = 0;
  for (int b = 0; b < *active_count; b++)
    if (active[b].last_use >= now) active[kept++] = active[b];
  qsort(active, (size_t)kept, sizeof *active, by_offset);
  size_t offset = 0;
  for (int b = 0; b < kept && active[b].offset < offset + bytes; b++)
    if (active[b].offset + active[b].bytes > offset) offset = active[b].offset + active[b].bytes;
  active[kept++] = (block){.offset = offset, .bytes = bytes, .last_use = last_use};
  *active_count = kept;
  if (offset + bytes > *region) *region = offset + bytes;
  return offset;
}

/* Backward step (0 first) at which node's gradient is first written, and after which it is last read. */
static int gradient_first_step(const bpt_graph *graph, const bpt_node *node) {
  return graph->node_count - node->gradient_first_writer;
}

static int gradient_last_step(const bpt_graph *graph, const bpt_node *node) {
  /* Without a backward of its own nothing reads it in backward; keep it to the end all the same (tests and
   * anomaly reports look at leaves' gradients). */
  return bpt_op_get(node->op)->backward ? graph->node_count - node->index : graph->node_count;
}

static int by_first_step(const void *a, const void *b) {
  const bpt_node *x = *(bpt_node *const *)a, *y = *(bpt_node *const *)b;
  if (x->gradient_first_writer != y->gradient_first_writer)
    return x->gradient_first_writer > y->gradient_first_writer ? -1 : 1;
  return x->index > y->index ? -1 : x->index < y->index;
}

void bpt_memory_plan_free(bpt_memory_plan *plan) {
  free(plan->value_offset);
  free(plan->grad_offset);
  free(plan->saved_offset);
  plan->value_offset = plan->grad_offset = plan->saved_offset = NULL;
}

bpt_status bpt_memory_plan_build(bpt_graph *graph, bool keep_all, bpt_memory_plan *plan) {
  int n = graph->node_count;
  bpt_context *context = graph->context;
  plan->value_offset = bpt_calloc(context, (size_t)n, sizeof(size_t), "memory plan");
  plan->grad_offset = bpt_calloc(context, (size_t)n, sizeof(size_t), "memory plan");
  plan->saved_offset = bpt_calloc(context, (size_t)n, sizeof(size_t), "memory plan");
  int *last_use = bpt_calloc(context, (size_t)n, sizeof(int), "memory plan");
  bool *held = bpt_calloc(context, (size_t)n, sizeof(bool), "memory plan");
  block *active = bpt_calloc(context, (size_t)n, sizeof(block), "memory plan");
  bpt_node **by_gradient_start = bpt_calloc(context, (size_t)n, sizeof(bpt_node *), "memory plan");
  bpt_status status = BPT_OK;
  if (!plan->value_offset || !plan->grad_offset || !plan->saved_offset || !last_use || !held || !active ||
      !by_gradient_start) {
    status = BPT_ERR_OUT_OF_MEMORY;
    goto done;
  }
  /* Lifetimes and who reads what in backward. Creation order is topological. */
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    last_use[i] = i;
    node->gradient_first_writer = node == graph->loss ? n : i;
    held[i] = keep_all || !graph->loss || node->op == BPT_OP_INPUT || !node->batched || backward_reads_output(node);
  }
  for (int j = 0; j < n; j++) {
    bpt_node *consumer = graph->nodes[j];
    for (int k = 0; k < consumer->input_count; k++) {
      int i = consumer->inputs[k]->index;
      last_use[i] = j;
      if (backward_reads_input(consumer, k)) held[i] = true;
      if (consumer->requires_grad && bpt_op_get(consumer->op)->backward &&
          consumer->inputs[k]->gradient_first_writer < j)
        consumer->inputs[k]->gradient_first_writer = j;
    }
  }
  /* Views hand what their readers need to their source (a view read by nothing is an output: held). */
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i], *source = node->view_source;
    if (!source) continue;
    if (last_use[i] == i) held[i] = true;
    held[source->index] |= held[i];
    if (last_use[i] > last_use[source->index]) last_use[source->index] = last_use[i];
    if (node->gradient_first_writer > source->gradient_first_writer)
      source->gradient_first_writer = node->gradient_first_writer;
  }
  /* Recompute segments: a value only its own segment reads is recomputed; one read outside is held. */
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    node->recomputed = false;
    if (!node->recompute_segment || keep_all || !graph->loss || node->op == BPT_OP_INPUT ||
        node->op == BPT_OP_PARAMETER || node->view_source || last_use[i] == i)
      continue;
    bool inside = true;
    for (int j = i + 1; j < n && inside; j++)
      for (int k = 0; k < graph->nodes[j]->input_count; k++)
        if (bpt_node_buffer_owner(graph->nodes[j]->inputs[k]) == node &&
            graph->nodes[j]->recompute_segment != node->recompute_segment)
          inside = false;
    if (inside)
      node->recomputed = true;
    else
      held[i] = true;
  }
  /* Dedicated space: held values, gradients, saved buffers. */
  size_t cursor = 0;
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    plan->value_offset[i] = plan->grad_offset[i] = plan->saved_offset[i] = BPT_NO_OFFSET;
    node->value_reused_by = NULL;
    if (node->op == BPT_OP_PARAMETER || node->view_source) continue;
    if (last_use[i] == i) held[i] = true; /* a graph output: the caller reads it */
    if (held[i] && !node->recomputed) {
      plan->value_offset[i] = cursor;
      if (!bpt_checked_add_bytes(cursor, align_up(value_bytes(node)), &cursor)) goto too_big;
      plan->held_bytes += align_up(value_bytes(node));
      if (node->op == BPT_OP_INPUT) plan->input_bytes += align_up(value_bytes(node));
    }
    const bpt_op_definition *definition = bpt_op_get(node->op);
    size_t saved = definition->saved_bytes ? definition->saved_bytes(node) : 0;
    node->saved_capacity = saved;
    if (saved) {
      plan->saved_offset[i] = cursor;
      if (saved > BPT_MAX_BYTES || !bpt_checked_add_bytes(cursor, align_up(saved), &cursor)) goto too_big;
      plan->held_bytes += align_up(saved);
    }
  }
  /* The gradient region, first fit by backward lifetime. */
  int gradient_count = 0;
  for (int i = 0; i < n; i++)
    if (graph->nodes[i]->requires_grad && graph->nodes[i]->op != BPT_OP_PARAMETER && !graph->nodes[i]->view_source)
      by_gradient_start[gradient_count++] = graph->nodes[i];
  qsort(by_gradient_start, (size_t)gradient_count, sizeof *by_gradient_start, by_first_step);
  size_t gradient_region = 0;
  int active_count = 0;
  for (int g = 0; g < gradient_count; g++) {
    const bpt_node *node = by_gradient_start[g];
    size_t offset = first_fit(active, &active_count, align_up(value_bytes(node)), gradient_first_step(graph, node),
                              gradient_last_step(graph, node), &gradient_region);
    plan->grad_offset[node->index] = cursor + offset;
    if (gradient_region > BPT_MAX_BYTES) goto too_big; /* each first_fit adds at most one node's bytes to it */
  }
  plan->gradient_bytes = gradient_region;
  /* The transient region, first fit by forward lifetime, over the same bytes as the gradients: transient values
   * are dead once forward is over, and gradients are born in backward. */
  size_t region = 0;
  active_count = 0;
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    node->value_transient = node->op != BPT_OP_PARAMETER && !node->view_source && !held[i] && !node->recomputed;
    if (!node->value_transient) continue;
    plan->value_offset[i] =
        cursor + first_fit(active, &active_count, align_up(value_bytes(node)), i, last_use[i], &region);
    if (region > BPT_MAX_BYTES) goto too_big;
  }
  plan->transient_bytes = region;
  if (!bpt_checked_add_bytes(cursor, region > gradient_region ? region : gradient_region, &cursor)) goto too_big;
  /* The recompute region: each segment's recomputed values one after another from its start. */
  size_t segment_bytes = 0;
  for (int i = 0, segment = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    if (!node->recomputed) continue;
    if (node->recompute_segment != segment) segment_bytes = 0, segment = node->recompute_segment;
    plan->value_offset[i] = cursor + segment_bytes;
    if (!bpt_checked_add_bytes(segment_bytes, align_up(value_bytes(node)), &segment_bytes)) goto too_big;
    if (segment_bytes > plan->recompute_bytes) plan->recompute_bytes = segment_bytes;
  }
  plan->held_bytes += plan->recompute_bytes;
  if (!bpt_checked_add_bytes(cursor, plan->recompute_bytes, &plan->arena_bytes)) goto too_big;
  /* A transient value is overwritten once a later node (created after its last consumer) shares its bytes. */
  for (int i = 0; i < n; i++) {
    if (held[i] || graph->nodes[i]->op == BPT_OP_PARAMETER || graph->nodes[i]->view_source) continue;
    size_t start = plan->value_offset[i], end = start + align_up(value_bytes(graph->nodes[i]));
    for (int j = last_use[i] + 1; j < n && !graph->nodes[i]->value_reused_by; j++) {
      if (held[j] || graph->nodes[j]->op == BPT_OP_PARAMETER || graph->nodes[j]->view_source) continue;
      size_t other = plan->value_offset[j], other_end = other + align_up(value_bytes(graph->nodes[j]));
      if (other < end && start < other_end) graph->nodes[i]->value_reused_by = graph->nodes[j];
    }
  }
  /* A recomputed value is overwritten in forward by the next segment's first recomputed value. */
  for (int i = 0; i < n; i++) {
    if (!graph->nodes[i]->recomputed) continue;
    graph->nodes[i]->value_transient = true; /* and after backward it holds the first segment's */
    for (int j = i + 1; j < n && !graph->nodes[i]->value_reused_by; j++)
      if (graph->nodes[j]->recomputed && graph->nodes[j]->recompute_segment != graph->nodes[i]->recompute_segment)
        graph->nodes[i]->value_reused_by = graph->nodes[j];
  }
  /* A view lives where its source does, and is overwritten when it is. */
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i], *source = node->view_source;
    if (!source) continue;
    plan->value_offset[i] = plan->value_offset[source->index];
    plan->grad_offset[i] = plan->grad_offset[source->index];
    node->value_transient = source->value_transient;
    node->value_reused_by = source->value_reused_by;
  }
  goto done;
too_big:
  status = bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "bpt_graph_compile: the activation memory plan exceeds 2^46 bytes");
done:
  free(last_use);
  free(held);
  free(active);
  free(by_gradient_start);
  if (status != BPT_OK) bpt_memory_plan_free(plan);
  return status;
}
