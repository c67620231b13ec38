/* slice on the CPU (src/core/ops/slice.c) where it copies (it is a view where its readers take strides): x seen
 * as (outer, extent, inner) around the sliced axis, y as (outer, length, inner); each outer row is one contiguous
 * block of length * inner values in both, f32 or bf16 (16-bit storage: copied as stored, widened or rounded
 * where x and y are stored differently). */
#include "backends/cpu/bf16_storage.h"
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
  const void *x = node->inputs[0].value; /* (outer, extent, inner) */
  void *y = node->output.value;          /* (outer, length, inner) */
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t block = l.length * l.inner;
#pragma omp parallel for if (node->output.count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t o = 0; o < l.outer; o++)
    bpt_cpu_storage_copy(y, y16, o * block, x, x16, (o * l.extent + l.start) * l.inner, block);
  return BPT_OK;
}

/* dx[o, start + j, :] (+)= dy[o, j, :]; with beta 0 every other element of dx is set to 0. */
static bpt_status slice_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const slice_layout l = layout(node);
  const bool assign = node->inputs[0].beta == 0.0f;
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(&node->output);
  const void *dy = node->output.grad; /* (outer, length, inner) */
  void *dx = node->inputs[0].grad;    /* (outer, extent, inner) */
  const int64_t block = l.length * l.inner, before = l.start * l.inner,
                after = (l.extent - l.start - l.length) * l.inner;
#pragma omp parallel for if (node->inputs[0].count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t o = 0; o < l.outer; o++) {
    const int64_t row = o * l.extent * l.inner;
    if (assign) {
      bpt_cpu_storage_zero(dx, x16, row, before);
      bpt_cpu_storage_copy(dx, x16, row + before, dy, y16, o * block, block);
      bpt_cpu_storage_zero(dx, x16, row + before + block, after);
    } else {
      bpt_cpu_storage_add(dx, x16, row + before, dy, y16, o * block, block);
    }
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, SLICE, slice_forward, slice_backward, NULL);
