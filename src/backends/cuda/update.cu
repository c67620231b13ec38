// Fused optimiser updates over the flat parameter block: one pass reads each weight, gradient and state
// value once. Same formulas as the CPU backend (PyTorch's conventions), so trajectories match.
#include <math.h>

#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void sgd_kernel(int64_t count, float *w, const float *g, float lr, float decay) {
  GRID_STRIDE(i, count) w[i] -= lr * (g[i] + decay * w[i]);
}

// v = mu v + g (+ decay w); Nesterov steps along g + mu v.
__global__ void sgd_momentum_kernel(int64_t count, float *w, const float *g, float *velocity, float lr, float decay,
                                    float mu, bool nesterov) {
  GRID_STRIDE(i, count) {
    float gradient = g[i] + decay * w[i];
    float v = mu * velocity[i] + gradient;
    velocity[i] = v;
    w[i] -= lr * (nesterov ? gradient + mu * v : v);
  }
}

// Adam / AdamW with the bias corrections folded into step_size and correction2_root (computed on the host).
__global__ void adam_kernel(int64_t count, float *w, const float *g, float *m, float *v, float b1, float b2, float eps,
                            float step_size, float correction2_root, float lr_decay, float l2_decay) {
  GRID_STRIDE(i, count) {
    float weight = w[i];
    float gradient = g[i] + l2_decay * weight;
    weight -= lr_decay * weight;
    float first = b1 * m[i] + (1.0f - b1) * gradient;
    float second = b2 * v[i] + (1.0f - b2) * gradient * gradient;
    m[i] = first;
    v[i] = second;
    w[i] = weight - step_size * first / (sqrtf(second) / correction2_root + eps);
  }
}

bpt_status bpt_cuda_sgd_update(bpt_backend *backend, const bpt_update_args *args) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (args->count == 0) return BPT_OK;
  unsigned blocks = bpt_cuda_blocks(state, args->count);
  if (!args->state0 || args->momentum == 0.0f)
    sgd_kernel<<<blocks, BPT_CUDA_THREADS, 0, state->stream>>>(args->count, args->parameters, args->gradients,
                                                              args->learning_rate, args->weight_decay);
  else
    sgd_momentum_kernel<<<blocks, BPT_CUDA_THREADS, 0, state->stream>>>(
        args->count, args->parameters, args->gradients, args->state0, args->learning_rate, args->weight_decay,
        args->momentum, args->nesterov);
  bpt_status status = bpt_cuda_check_launch(backend, "sgd_update");
  if (status != BPT_OK) return status;
  /* The parameter check's flag: the same stream, so no synchronisation (a second pass, in device bandwidth). */
  if (args->found_nonfinite)
    return bpt_cuda_unscale_check_finite(backend, args->count, args->parameters, 1.0f, args->found_nonfinite);
  return BPT_OK;
}

bpt_status bpt_cuda_adam_update(bpt_backend *backend, const bpt_update_args *args) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (args->count == 0) return BPT_OK;
  const float correction1 = 1.0f - powf(args->beta1, (float)args->step);
  const float correction2_root = sqrtf(1.0f - powf(args->beta2, (float)args->step));
  const float lr_decay = args->decoupled_weight_decay ? args->learning_rate * args->weight_decay : 0.0f;
  const float l2_decay = args->decoupled_weight_decay ? 0.0f : args->weight_decay;
  adam_kernel<<<bpt_cuda_blocks(state, args->count), BPT_CUDA_THREADS, 0, state->stream>>>(
      args->count, args->parameters, args->gradients, args->state0, args->state1, args->beta1, args->beta2,
      args->epsilon, args->learning_rate / correction1, correction2_root, lr_decay, l2_decay);
  bpt_status status = bpt_cuda_check_launch(backend, "adam_update");
  if (status != BPT_OK) return status;
  if (args->found_nonfinite)
    return bpt_cuda_unscale_check_finite(backend, args->count, args->parameters, 1.0f, args->found_nonfinite);
  return BPT_OK;
}
