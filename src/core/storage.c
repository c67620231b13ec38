/* Storage dtype (issue 24.5): under the bf16 policy an activation whose producer and every consumer run kernels
 * that take bf16 storage (BPT_REGISTER_KERNELS_16BIT), or f32-only kernels of a kernels_only op that the kernel
 * call widens around (kernel_call.c), is planned, allocated and handed to kernels as 2-byte values, value and
 * gradient alike; the others stay f32 and are rounded in place after each op (precision.c), which gives the same
 * forward values. Host reads of a bf16-stored buffer are widened to f32 here. */
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/graph.h"
#include "core/precision.h"

/* Whether node's kernels take bf16 storage where they run: on the graph's own backend (the CPU fallback's
 * transfers would work too, but a node that needs the fallback is rare enough to keep f32). */
bool bpt_node_kernels_take_bf16(const bpt_node *node) {
  return node->kernels && node->kernels->bf16_storage && node->kernel_backend == node->graph->backend;
}

bool bpt_node_kernels_widen_bf16(const bpt_node *node) {
  return node->kernels && !node->kernels->bf16_storage && node->kernel_backend == node->graph->backend &&
         bpt_op_get(node->op)->kernels_only && node->graph->backend->vtable->cast;
}

/* Either way the node can be handed bf16 storage. */
static bool takes_bf16_storage(const bpt_node *node) {
  return bpt_node_kernels_take_bf16(node) || bpt_node_kernels_widen_bf16(node);
}

/* The activations of precision.c: batched f32 values other than parameters. Inputs count (the rounding path
 * rounds them after upload too): they have no producer, and bpt_graph_set_input narrows them on the host. */
static bool is_activation(const bpt_node *node) {
  return node->batched && node->dtype == BPT_DTYPE_F32 && node->op != BPT_OP_PARAMETER;
}

bool bpt_precision_stores_16bit(const bpt_graph *graph) {
  const bpt_precision_state *state = graph->precision;
  if (!state) return false;
  /* The default (negative) stores 16-bit where the kernels that read and write it directly exist and have been
   * measured (the CPU's); the CUDA backend would only widen around f32 kernels, so it keeps the rounding path. */
  const int wanted = state->options.store_activations_16bit;
  const bool on = wanted > 0 || (wanted < 0 && strcmp(graph->backend->vtable->name, "cpu") == 0);
  /* Compressed saved activations (saved_activation_storage, linear.c) read their source as f32: the two are
   * alternatives, and that one keeps today's f32 storage. */
  return on && state->options.compute_dtype == BPT_DTYPE_BF16 &&
         state->options.saved_activation_storage == BPT_ACTIVATION_STORAGE_COMPUTE;
}

bpt_status bpt_precision_plan_storage(bpt_graph *graph, bool all_f32) {
  const int n = graph->node_count;
  for (int i = 0; i < n; i++) graph->nodes[i]->storage = graph->nodes[i]->dtype;
  const bpt_precision_state *state = graph->precision;
  if (all_f32 || !bpt_precision_stores_16bit(graph)) return BPT_OK;
  int *uses = bpt_calloc(graph->context, (size_t)n, sizeof *uses, "storage plan");
  bool *capable = bpt_calloc(graph->context, (size_t)n, sizeof *capable, "storage plan");
  if (!uses || !capable) {
    free(uses);
    free(capable);
    return BPT_ERR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < n; i++)
    capable[i] = takes_bf16_storage(graph->nodes[i]) || graph->nodes[i]->op == BPT_OP_INPUT;
  bool *eligible = capable; /* reused: eligible[i] = producer and all consumers capable */
  /* A view is no reader of its own: its readers read its source's buffer, so they count for the source. */
  for (int j = 0; j < n; j++) {
    const bpt_node *consumer = graph->nodes[j];
    if (consumer->view_source) continue;
    for (int k = 0; k < consumer->input_count; k++) {
      const int i = bpt_node_buffer_owner(consumer->inputs[k])->index;
      uses[i]++;
      /* Through strides only kernels that take bf16 themselves could read it: widening copies contiguous bytes. */
      if (!takes_bf16_storage(consumer) ||
          (!bpt_node_contiguous(consumer->inputs[k]) && !bpt_node_kernels_take_bf16(consumer)))
        eligible[i] = false;
    }
  }
  /* A value with several readers is stored bf16 too: each reader's backward adds its part into the bf16
   * gradient and rounds, as PyTorch's bf16 autograd sums the parts, where the rounding path rounds the f32 sum
   * once. Forward values are the same either way. state->single_reader_storage (tests) keeps such values f32,
   * which makes the two paths agree to f32 round-off. */
  for (int i = 0; i < n; i++) {
    bpt_node *node = graph->nodes[i];
    if (node->view_source) {
      node->storage = node->view_source->storage; /* decided already: a source comes before its views */
      continue;
    }
    /* An input read by nothing stays f32: bf16 would save nothing the user's upload did not already cost. */
    const bool unread_input = node->op == BPT_OP_INPUT && uses[i] == 0;
    const bool readers_allowed = uses[i] <= 1 || !state->single_reader_storage;
    if (eligible[i] && is_activation(node) && readers_allowed && node != graph->loss && !unread_input)
      node->storage = BPT_DTYPE_BF16;
  }
  free(uses);
  free(capable);
  return BPT_OK;
}

/* count bf16 codes at device, widened into host. */
static bpt_status download_bf16_as_f32(const bpt_node *node, const void *device, int64_t count, float *host) {
  bpt_backend *backend = node->graph->backend;
  /* Downloaded into the back half of host, then widened front to back in place: element i's f32 ends at byte
   * 4 i + 4 <= 2 count + 2 (i + 1), where the bf16 elements still to be read begin. */
  uint16_t *narrow = (uint16_t *)(host + count) - count;
  if (backend->vtable->download(backend, narrow, device, (size_t)count * sizeof *narrow) != BPT_OK)
    return bpt_node_error(node, BPT_ERR_DEVICE, "reading its values: %s", backend->error_message);
  for (int64_t i = 0; i < count; i++) {
    const uint32_t bits = (uint32_t)narrow[i] << 16;
    memcpy(host + i, &bits, sizeof bits);
  }
  return BPT_OK;
}

bpt_status bpt_node_download_f32(const bpt_node *node, const void *device, int64_t count, float *host) {
  bpt_backend *backend = node->graph->backend;
  if (node->storage == BPT_DTYPE_F32) {
    if (backend->vtable->download(backend, host, device, (size_t)count * sizeof *host) != BPT_OK)
      return bpt_node_error(node, BPT_ERR_DEVICE, "reading its values: %s", backend->error_message);
    return BPT_OK;
  }
  if (node->storage != BPT_DTYPE_BF16)
    return bpt_node_error(node, BPT_ERR_INTERNAL, "storage %s cannot be read as f32", bpt_dtype_name(node->storage));
  return download_bf16_as_f32(node, device, count, host);
}

bool bpt_node_forward_read_bf16_copy(const bpt_node *node) {
  return node->value_bf16 && node->value == node->graph->parameter_block + node->param_offset;
}

bpt_status bpt_node_read_forward_f32(const bpt_node *node, int64_t count, float *host) {
  if (bpt_node_forward_read_bf16_copy(node)) return download_bf16_as_f32(node, node->value_bf16, count, host);
  return bpt_node_download_f32(node, node->value, count, host);
}

/* f32 to bf16 as bpt_cpu_round_to_dtype rounds in place: nearest even on the upper 16 bits, subnormals kept,
 * NaN kept quiet. */
static uint16_t narrow_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x0040u : rounded);
}

bpt_status bpt_node_upload_f32(const bpt_node *node, const float *host, int64_t count) {
  if (node->storage != BPT_DTYPE_BF16)
    return bpt_node_error(node, BPT_ERR_INTERNAL, "storage %s cannot be written from f32", bpt_dtype_name(node->storage));
  uint16_t *narrow = bpt_calloc(node->graph->context, (size_t)(count ? count : 1), sizeof *narrow, "bf16 input");
  if (!narrow) return BPT_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < count; i++) narrow[i] = narrow_bf16(host[i]);
  bpt_backend *backend = node->graph->backend;
  const bpt_status status = backend->vtable->upload(backend, node->value, narrow, (size_t)count * sizeof *narrow);
  free(narrow);
  return status == BPT_OK ? BPT_OK : bpt_node_error(node, BPT_ERR_DEVICE, "uploading the input: %s", backend->error_message);
}
