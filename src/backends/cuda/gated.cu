// The CUDA gated activations, y = x sigmoid(z(x)) (see src/core/ops/silu.c and gelu_tanh.c): SiLU with z = x,
// the tanh GELU with z = 2 sqrt(2 / pi) (x + 0.044715 x^3), since 0.5 (1 + tanh(u)) = sigmoid(2u); the
// derivative is s + x s (1 - s) z'(x). Grid-stride loops over int64 indices on the backend's stream.
#include "backends/cuda/cuda.h"

// z = a x + b x^3 and z' = a + 3 b x^2 (cubic false: SiLU, where b x^2 could overflow and 0 inf is NaN).
struct gate {
  float a, b;
  bool cubic;
};

__global__ void gated_forward_kernel(gate g, int64_t count, const float *x, float *y) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i], z = g.cubic ? v * (g.a + g.b * v * v) : v;
    y[i] = v / (1.0f + expf(-z));
  }
}

__global__ void gated_backward_kernel(gate g, int64_t count, const float *x, const float *dy, float beta,
                                      float *dx) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i], z = g.cubic ? v * (g.a + g.b * v * v) : v, slope = g.cubic ? g.a + 3.0f * g.b * v * v : 1.0f;
    const float s = 1.0f / (1.0f + expf(-z));
    const float gradient = dy[i] * (s + v * s * (1.0f - s) * slope);
    dx[i] = beta == 0.0f ? gradient : dx[i] + gradient;
  }
}

static gate gate_of(const bpt_kernel_node *node) {
  // sqrt(2 / pi) and 0.044715, doubled: sigmoid(2u).
  if (node->op == BPT_OP_GELU_TANH) return gate{1.5957691216057308f, 1.5957691216057308f * 0.044715f, true};
  return gate{1.0f, 0.0f, false};
}

static bpt_status gated_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  gated_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      gate_of(node), count, (const float *)node->inputs[0].value, (float *)node->output.value);
  return bpt_cuda_check_launch(backend, node->op == BPT_OP_GELU_TANH ? "gelu_tanh_forward" : "silu_forward");
}

static bpt_status gated_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t count = node->output.count;
  if (count == 0) return BPT_OK;
  gated_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      gate_of(node), count, (const float *)node->inputs[0].value, node->output.grad, node->inputs[0].beta,
      node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, node->op == BPT_OP_GELU_TANH ? "gelu_tanh_backward" : "silu_backward");
}

BPT_REGISTER_KERNELS(cuda, GELU_TANH, gated_forward, gated_backward, NULL);
BPT_REGISTER_KERNELS(cuda, SILU, gated_forward, gated_backward, NULL);
