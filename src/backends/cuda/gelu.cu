// The CUDA GELU kernels (exact erf form, see src/core/ops/gelu.c): y = 0.5 x (1 + erf(x / sqrt 2)), and
// dx = beta dx + dy (Phi(x) + x phi(x)). Grid-stride loops over int64 indices on the backend's stream.
#include "backends/cuda/cuda.h"

__global__ void gelu_forward_kernel(int64_t count, const float *x, float *y) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

__global__ void gelu_backward_kernel(int64_t count, const float *x, const float *dy, float beta, float *dx) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * 0.70710678118654752f));
    const float pdf = 0.3989422804014327f * expf(-0.5f * x[i] * x[i]);
    const float gradient = dy[i] * (cdf + x[i] * pdf);
    dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
  }
}

static bpt_status gelu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  gelu_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, (const float *)node->inputs[0].value, (float *)node->output.value);
  return bpt_cuda_check_launch(backend, "gelu_forward");
}

static bpt_status gelu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  gelu_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, (const float *)node->inputs[0].value, node->output.grad, node->inputs[0].beta, node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, "gelu_backward");
}

BPT_REGISTER_KERNELS(cuda, GELU, gelu_forward, gelu_backward, NULL);
