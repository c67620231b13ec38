/* slice on the CPU (src/core/ops/slice.c): x seen as (outer, extent, inner) around the sliced axis, y as
 * (outer, length, inner); each outer row is one contiguous block of length * inner floats in both. */
#include <string.h>

#include "backends/cpu/cpu.h"

typedef struct slice_layout {
  int64_t outer, extent, inner, start, length;
} slice_layout;

static slice_layout layout(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int axis = (int)node->int_attributes[0];
  slice_layout l = {.outer = 1,
                    .extent = x->dims[axis],
                    .inner = 1,
                    .start = node->int_attributes[1],
                    .length = node->int_attributes[2]};
  for (int i = 0; i < axis; i++)
    l.outer *= x->dims[i];
  for (int i = axis + 1; i < x->rank; i++)
    l.inner *= x->dims[i];
  return l;
}

static bpt_status slice_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const slice_layout l = layout(node);
  const float *x = node->inputs[0].value; /* (outer, extent, inner) */
  float *y = node->output.value;          /* (outer, length, inner) */
  const size_t block = (size_t)(l.length * l.inner);
#pragma omp parallel for if (node->output.count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t o = 0; o < l.outer; o++)
    memcpy(y + o * (int64_t)block, x + (o * l.extent + l.start) * l.inner, block * sizeof(float));
  return BPT_OK;
}

/* dx[o, start + j, :] (+)= dy[o, j, :]; with beta 0 every other element of dx is set to 0. */
static bpt_status slice_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const slice_layout l = layout(node);
  const bool assign = node->inputs[0].beta == 0.0f;
  const float *dy = node->output.grad; /* (outer, length, inner) */
  float *dx = node->inputs[0].grad;    /* (outer, extent, inner) */
  const int64_t block = l.length * l.inner, before = l.start * l.inner,
                after = (l.extent - l.start - l.length) * l.inner;
#pragma omp parallel for if (node->inputs[0].count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t o = 0; o < l.outer; o++) {
    float *row = dx + o * l.extent * l.inner;
    const float *source = dy + o * block;
    if (assign) {
      memset(row, 0, (size_t)before * sizeof(float));
      memcpy(row + before, source, (size_t)block * sizeof(float));
      memset(row + before + block, 0, (size_t)after * sizeof(float));
    } else {
      for (int64_t i = 0; i < block; i++)
        row[before + i] += source[i];
    }
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, SLICE, slice_forward, slice_backward, NULL);
