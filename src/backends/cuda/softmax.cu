// The CUDA softmax kernels (src/core/ops/softmax.c): one warp per row of the last axis, shuffles for the row's
// max and sums. Causal rows see columns j <= i + (Tk - Tq) only; the rest, and rows with nothing visible (or
// only -inf), are zeros. dx = beta dx + y (dy - sum_j dy_j y_j).
#include <math.h>

#include "backends/cuda/cuda.h"

enum { SOFTMAX_WARPS = BPT_CUDA_THREADS / 32 };

__device__ static float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ static float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void softmax_forward_kernel(int64_t rows, int64_t columns, int64_t mask_rows, int causal, const float *x,
                                       float *y) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = (int64_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32; r < rows;
       r += (int64_t)gridDim.x * SOFTMAX_WARPS) {
    const float *xr = x + r * columns;
    float *yr = y + r * columns;
    int64_t visible = columns;
    if (causal) {
      const int64_t last = r % mask_rows + (columns - mask_rows);
      visible = last < 0 ? 0 : (last + 1 < columns ? last + 1 : columns);
    }
    float top = -INFINITY;
    for (int64_t j = lane; j < visible; j += 32)
      top = fmaxf(top, xr[j]);
    top = warp_max(top);
    if (top == -INFINITY) visible = 0;
    float sum = 0.0f;
    for (int64_t j = lane; j < visible; j += 32)
      sum += expf(xr[j] - top);
    sum = warp_sum(sum);
    const float inverse = visible ? 1.0f / sum : 0.0f;
    for (int64_t j = lane; j < columns; j += 32)
      yr[j] = j < visible ? expf(xr[j] - top) * inverse : 0.0f;
  }
}

__global__ void softmax_backward_kernel(int64_t rows, int64_t columns, const float *y, const float *dy, float beta,
                                        float *dx) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = (int64_t)blockIdx.x * SOFTMAX_WARPS + threadIdx.x / 32; r < rows;
       r += (int64_t)gridDim.x * SOFTMAX_WARPS) {
    const float *yr = y + r * columns, *dyr = dy + r * columns;
    float *dxr = dx + r * columns;
    float dot = 0.0f;
    for (int64_t j = lane; j < columns; j += 32)
      dot += yr[j] * dyr[j];
    dot = warp_sum(dot);
    for (int64_t j = lane; j < columns; j += 32) {
      const float gradient = yr[j] * (dyr[j] - dot);
      dxr[j] = beta == 0.0f ? gradient : dxr[j] + gradient;
    }
  }
}

static unsigned row_blocks(const bpt_cuda_state *state, int64_t rows) {
  return bpt_cuda_blocks(state, (rows + SOFTMAX_WARPS - 1) / SOFTMAX_WARPS * BPT_CUDA_THREADS);
}

static bpt_status softmax_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int64_t columns = x->dims[x->rank - 1], rows = columns ? x->count / columns : 0;
  if (rows == 0) return BPT_OK;
  const int causal = node->int_attributes[0] != 0;
  const int64_t mask_rows = x->rank >= 2 ? x->dims[x->rank - 2] : 1;
  softmax_forward_kernel<<<row_blocks(state, rows), BPT_CUDA_THREADS, 0, state->stream>>>(
      rows, columns, mask_rows, causal, (const float *)x->value, (float *)node->output.value);
  return bpt_cuda_check_launch(backend, "softmax_forward");
}

static bpt_status softmax_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int64_t columns = x->dims[x->rank - 1], rows = columns ? x->count / columns : 0;
  if (rows == 0) return BPT_OK;
  softmax_backward_kernel<<<row_blocks(state, rows), BPT_CUDA_THREADS, 0, state->stream>>>(
      rows, columns, (const float *)node->output.value, node->output.grad, x->beta, x->grad);
  return bpt_cuda_check_launch(backend, "softmax_backward");
}

BPT_REGISTER_KERNELS(cuda, SOFTMAX, softmax_forward, softmax_backward, NULL);
