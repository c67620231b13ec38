// slice on the GPU (src/core/ops/slice.c): x seen as (outer, extent, inner) around the sliced axis, y as
// (outer, length, inner). Forward runs over y; backward over all of dx, so beta 0 writes the zeros outside the
// slice in the same pass. Grid-stride loops over int64 indices on the backend's stream.
#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count)                                                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void slice_forward_kernel(int64_t count, int64_t extent, int64_t inner, int64_t start, int64_t length,
                                     const float *x, float *y) {
  GRID_STRIDE(i, count) {
    const int64_t k = i % inner, j = i / inner % length, o = i / inner / length;
    y[i] = x[(o * extent + start + j) * inner + k];
  }
}

__global__ void slice_backward_kernel(int64_t count, int64_t extent, int64_t inner, int64_t start, int64_t length,
                                      const float *dy, float beta, float *dx) {
  GRID_STRIDE(i, count) {
    const int64_t k = i % inner, j = i / inner % extent, o = i / inner / extent;
    const bool inside = j >= start && j < start + length;
    const float gradient = inside ? dy[(o * length + j - start) * inner + k] : 0.0f;
    if (beta == 0.0f)
      dx[i] = gradient;
    else if (inside)
      dx[i] += gradient;
  }
}

typedef struct slice_layout {
  int64_t extent, inner, start, length;
} slice_layout;

static slice_layout layout(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int axis = (int)node->int_attributes[0];
  slice_layout l = {x->dims[axis], 1, node->int_attributes[1], node->int_attributes[2]};
  for (int i = axis + 1; i < x->rank; i++)
    l.inner *= x->dims[i];
  return l;
}

static bpt_status slice_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const slice_layout l = layout(node);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  slice_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, l.extent, l.inner, l.start, l.length, (const float *)node->inputs[0].value, (float *)node->output.value);
  return bpt_cuda_check_launch(backend, "slice_forward");
}

static bpt_status slice_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const slice_layout l = layout(node);
  const int64_t count = node->inputs[0].count;
  if (count == 0) return BPT_OK;
  slice_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, l.extent, l.inner, l.start, l.length, node->output.grad, node->inputs[0].beta, node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, "slice_backward");
}

BPT_REGISTER_KERNELS(cuda, SLICE, slice_forward, slice_backward, NULL);
