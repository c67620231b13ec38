/* The shape-inference fuzz target's body (see fuzz_targets.h; robustness, issue 18 class 1): random op sequences
 * with random, often hostile, sizes. Every shape rule must refuse what does not fit with a status; a graph it
 * accepts is compiled and, when its memory is small, run forward once, so a size that wrapped to a small
 * count shows up as an ASan or UBSan report. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bptrain.h"
#include "core/checked.h"
#include "core/graph.h"
#include "fuzz_targets.h"

typedef struct reader {
  const uint8_t *data;
  size_t size, at;
} reader;

static uint8_t next_byte(reader *r) { return r->at < r->size ? r->data[r->at++] : 0; }

/* Mostly small sizes (0-31), sometimes one from a table of values near the limits and the wrap points. */
static int64_t next_size(reader *r) {
  static const int64_t hostile[] = {-1, 0, 1 << 16, INT64_C(1) << 29, INT64_C(1) << 30, INT32_MAX,
                                    INT64_C(1) << 31, INT64_C(1) << 32, (INT64_C(1) << 62) + 1, INT64_MAX / 2,
                                    INT64_MAX, INT64_MIN, 3, 7, 1 << 20, (INT64_C(1) << 40) + 1};
  const uint8_t b = next_byte(r);
  if (b & 0x80) return hostile[b % (sizeof hostile / sizeof hostile[0])];
  return b & 31;
}

/* Elements the compiled graph would hold for batch in total, and in its largest node; saturating at INT64_MAX. */
static int64_t planned_elements(const bpt_graph *graph, int64_t batch, int64_t *largest) {
  int64_t total = 0, elements;
  *largest = 0;
  for (int i = 0; i < graph->node_count; i++) {
    const bpt_node *node = graph->nodes[i];
    if (!bpt_checked_mul(bpt_node_inner_count(node), node->batched ? batch : 1, &elements)) elements = INT64_MAX;
    if (elements > *largest) *largest = elements;
    if (!bpt_checked_add(total, elements, &total)) total = INT64_MAX;
  }
  return total;
}

static void add_op(bpt_graph *graph, reader *r, int index, bpt_node **x) {
  char name[32], weight_name[40];
  snprintf(name, sizeof name, "n%d", index);
  snprintf(weight_name, sizeof weight_name, "n%d.w", index);
  bpt_node *y = NULL, *weight = NULL;
  switch (next_byte(r) % 11) {
  case 0: bpt_layer_linear(graph, name, *x, next_size(r), BPT_INIT_HE_NORMAL, &y); break;
  case 1: {
    const int64_t dims[4] = {next_size(r), bpt_node_rank(*x) == 4 ? bpt_node_dim(*x, 1) : 1, next_size(r),
                             next_size(r)};
    bpt_conv2d_options options = bpt_conv2d_options_default();
    options.stride_height = next_size(r);
    options.stride_width = next_size(r);
    options.padding_height = next_size(r);
    options.padding_width = next_size(r);
    options.dilation_height = next_size(r);
    options.dilation_width = next_size(r);
    options.groups = next_byte(r) & 1 ? next_size(r) : 1;
    if (bpt_graph_parameter(graph, weight_name, 4, dims, BPT_INIT_HE_NORMAL, &weight) == BPT_OK)
      bpt_conv2d(graph, name, *x, weight, NULL, &options, &y);
    break;
  }
  case 2: bpt_max_pool2d(graph, name, *x, next_size(r), next_size(r), next_size(r), &y); break;
  case 3: bpt_avg_pool2d(graph, name, *x, next_size(r), next_size(r), next_size(r), &y); break;
  case 4: bpt_global_avg_pool(graph, name, *x, &y); break;
  case 5: {
    const int rank = 1 + next_byte(r) % 4;
    int64_t dims[4];
    for (int i = 0; i < rank; i++) dims[i] = next_size(r);
    bpt_reshape(graph, name, *x, rank, dims, &y);
    break;
  }
  case 6: bpt_flatten(graph, name, *x, &y); break;
  case 7: bpt_layer_batch_norm(graph, name, *x, &y); break;
  case 8: bpt_dropout(graph, name, *x, (float)(next_byte(r) % 10) / 10.0f, &y); break;
  case 9: bpt_relu(graph, name, *x, &y); break;
  default: bpt_add_relu(graph, name, *x, *x, &y); break;
  }
  if (y) *x = y;
}

int bpt_fuzz_shape(const uint8_t *data, size_t size) {
  static bpt_context *context;
  if (!context) {
    bpt_context_options options = bpt_context_options_default();
    options.num_threads = 1;
    if (bpt_context_create(&options, &context) != BPT_OK) abort();
  }
  reader r = {data, size, 0};
  bpt_graph *graph = NULL;
  bpt_tensor *tensor = NULL;
  if (bpt_graph_create(context, &graph) != BPT_OK) abort();
  int64_t dims[BPT_MAX_RANK];
  const int rank = 1 + next_byte(&r) % 3;
  for (int i = 0; i < rank; i++) dims[i] = next_size(&r);
  bpt_node *x = NULL, *input = NULL;
  if (bpt_graph_input(graph, "x", BPT_DTYPE_F32, rank, dims, &input) != BPT_OK) goto done;
  x = input;
  for (int i = 0; i < 12 && r.at < r.size; i++) add_op(graph, &r, i, &x);
  int64_t largest;
  const int64_t batch = next_size(&r), elements = planned_elements(graph, batch < 1 ? 1 : batch, &largest);
  /* A node past 2^40 elements: compile must refuse before allocating. Otherwise, past 1 Mi elements in all,
   * compile would ask for gigabytes or terabytes legitimately (and get BPT_ERR_OUT_OF_MEMORY from a real
   * allocator, but an abort from libFuzzer's malloc limit): skip those. */
  const bool oversized_node = largest > BPT_MAX_ELEMENTS;
  if (!oversized_node && elements > (INT64_C(1) << 20)) goto done;
  if (bpt_graph_compile(graph, NULL, batch) != BPT_OK) goto done;
  if (oversized_node) abort(); /* compile accepted a node past the element limit */
  int64_t tensor_dims[BPT_MAX_RANK] = {batch};
  for (int i = 0; i < rank; i++) tensor_dims[i + 1] = dims[i];
  if (bpt_tensor_create(context, BPT_DTYPE_F32, rank + 1, tensor_dims, &tensor) != BPT_OK) goto done;
  float *values = bpt_tensor_data(tensor);
  for (int64_t i = 0; i < bpt_tensor_element_count(tensor); i++) values[i] = (float)(i % 17) * 0.125f - 1.0f;
  if (bpt_graph_set_input(graph, input, tensor) == BPT_OK) bpt_graph_forward(graph);
done:
  bpt_tensor_destroy(tensor);
  bpt_graph_destroy(graph);
  return 0;
}
