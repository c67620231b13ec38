// Dropout on the GPU, drawing exactly the CPU backend's mask: element i keeps with the top 24 bits of
// splitmix64's finaliser of seed + i * golden ratio compared with probability * 2^24 (the vtable member
// of the CNN branch, issue 3), so a graph trains the same on either backend for the same seed.
#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__device__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void dropout_forward_kernel(int64_t count, uint32_t threshold, float keep_scale, uint64_t seed,
                                       const float *x, float *y, float *mask) {
  GRID_STRIDE(i, count) {
    uint32_t draw = (uint32_t)(mix(seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL) >> 40);
    float m = draw < threshold ? 0.0f : keep_scale;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

__global__ void dropout_backward_kernel(int64_t count, const float *mask, const float *dy, float *dx) {
  GRID_STRIDE(i, count) dx[i] += dy[i] * mask[i];
}

// dropout in training mode: probability in float attribute 0, the mask in saved.
static bpt_status dropout_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  const float probability = node->float_attributes[0];
  if (!(probability >= 0.0f && probability < 1.0f))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "dropout: probability %g is outside [0, 1)",
                            (double)probability);
  if (count == 0) return BPT_OK;
  const uint32_t threshold = (uint32_t)((double)probability * 16777216.0);
  dropout_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, threshold, 1.0f / (1.0f - probability), node->seed, (const float *)node->inputs[0].value,
      (float *)node->output.value, (float *)node->saved);
  return bpt_cuda_check_launch(backend, "dropout_forward");
}

static bpt_status dropout_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  dropout_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, (const float *)node->saved, node->output.grad, node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, "dropout_backward");
}

BPT_REGISTER_KERNELS(cuda, DROPOUT, dropout_forward, dropout_backward, NULL);
