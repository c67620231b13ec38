// concat on the GPU (src/core/ops/concat.c): around the joined axis input i is (outer, extent_i, inner) and y
// (outer, sum extent_i, inner); one grid-stride launch per input, in order on the backend's stream, so an input
// given twice gets its second part added after the first was written.
#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count)                                                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

// y[o, offset + k] = x[o, k] for k < block, rows of y being row long.
__global__ void concat_forward_kernel(int64_t count, int64_t block, int64_t row, int64_t offset, const float *x,
                                      float *y) {
  GRID_STRIDE(i, count) y[i / block * row + offset + i % block] = x[i];
}

__global__ void concat_backward_kernel(int64_t count, int64_t block, int64_t row, int64_t offset, const float *dy,
                                       float beta, float *dx) {
  GRID_STRIDE(i, count) {
    const float gradient = dy[i / block * row + offset + i % block];
    dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
  }
}

static int64_t inner_of(const bpt_kernel_node *node) {
  int64_t inner = 1;
  for (int d = (int)node->int_attributes[0] + 1; d < node->output.rank; d++)
    inner *= node->output.dims[d];
  return inner;
}

static bpt_status concat_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int axis = (int)node->int_attributes[0];
  const int64_t inner = inner_of(node), row = node->output.dims[axis] * inner;
  int64_t offset = 0;
  for (int i = 0; i < node->input_count; i++) {
    const bpt_kernel_tensor *x = &node->inputs[i];
    const int64_t block = x->dims[axis] * inner;
    if (x->count > 0) {
      concat_forward_kernel<<<bpt_cuda_blocks(state, x->count), BPT_CUDA_THREADS, 0, state->stream>>>(
          x->count, block, row, offset, (const float *)x->value, (float *)node->output.value);
      BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "concat_forward"));
    }
    offset += block;
  }
  return BPT_OK;
}

static bpt_status concat_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int axis = (int)node->int_attributes[0];
  const int64_t inner = inner_of(node), row = node->output.dims[axis] * inner;
  int64_t offset = 0;
  for (int i = 0; i < node->input_count; i++) {
    const bpt_kernel_tensor *x = &node->inputs[i];
    const int64_t block = x->dims[axis] * inner;
    if (x->grad && x->count > 0) {
      concat_backward_kernel<<<bpt_cuda_blocks(state, x->count), BPT_CUDA_THREADS, 0, state->stream>>>(
          x->count, block, row, offset, node->output.grad, x->beta, x->grad);
      BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "concat_backward"));
    }
    offset += block;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cuda, CONCAT, concat_forward, concat_backward, NULL);
