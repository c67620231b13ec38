// Loss kernels on the GPU: fused softmax + cross-entropy and mean squared error. The loss stays on the
// device (the caller downloads it only when it asks); per-row or per-block partial sums go to scratch in
// double and one block folds them in a fixed order, so the loss is deterministic.
#include <math.h>

#include "backends/cuda/cuda.h"

#define REDUCE_THREADS 256
#define MSE_BLOCKS 1024

// out = sum(partials) / divisor, one block, fixed-order tree.
__global__ void mean_kernel(int64_t count, const double *partials, double divisor, float *out) {
  __shared__ double sums[REDUCE_THREADS];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += REDUCE_THREADS) sum += partials[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = REDUCE_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = (float)(sums[0] / divisor);
}

// One warp per row of logits (batch, classes): subtracting the row maximum keeps exp() finite, and the
// loss comes from log-sum-exp so it never takes log(0). A label outside [0, classes) makes the loss NaN
// (checking on the host would need a synchronisation every step).
__global__ void softmax_cross_entropy_kernel(int64_t batch, int64_t classes, const float *logits,
                                             const int32_t *labels, float *probabilities, double *row_losses) {
  int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= batch) return;
  const float *x = logits + row * classes;
  float *p = probabilities + row * classes;
  float maximum = -INFINITY;
  for (int64_t c = lane; c < classes; c += 32) maximum = fmaxf(maximum, x[c]);
  for (int offset = 16; offset > 0; offset /= 2) maximum = fmaxf(maximum, __shfl_xor_sync(0xffffffffu, maximum, offset));
  float sum = 0.0f;
  for (int64_t c = lane; c < classes; c += 32) sum += expf(x[c] - maximum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  float inverse = 1.0f / sum;
  for (int64_t c = lane; c < classes; c += 32) p[c] = expf(x[c] - maximum) * inverse;
  if (lane == 0) {
    int32_t label = labels[row];
    row_losses[row] = label >= 0 && label < classes ? log((double)sum) + (double)maximum - (double)x[label] : NAN;
  }
}

__global__ void softmax_cross_entropy_backward_kernel(int64_t batch, int64_t classes, const float *probabilities,
                                                      const int32_t *labels, const float *loss_gradient,
                                                      float *dlogits) {
  float scale = *loss_gradient / (float)batch;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < batch * classes;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % classes;
    dlogits[i] += scale * (probabilities[i] - (c == labels[i / classes] ? 1.0f : 0.0f));
  }
}

__global__ void squared_error_kernel(int64_t count, const float *prediction, const float *target, double *partials) {
  __shared__ double sums[REDUCE_THREADS];
  double sum = 0.0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    double difference = (double)prediction[i] - (double)target[i];
    sum += difference * difference;
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = REDUCE_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void mse_backward_kernel(int64_t count, const float *prediction, const float *target,
                                    const float *loss_gradient, float *dprediction, float *dtarget) {
  float scale = 2.0f * *loss_gradient / (float)count;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    float g = scale * (prediction[i] - target[i]);
    if (dprediction) dprediction[i] += g;
    if (dtarget) dtarget[i] -= g;
  }
}

// softmax_cross_entropy (kernel_args.h gives the layout). Labels stay on the device: a bad one makes the loss NaN.
static bpt_status softmax_cross_entropy_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args args = bpt_softmax_cross_entropy_args_of(node);
  const int64_t batch = args.rows, classes = args.classes;
  const float *logits = args.logits;
  const int32_t *labels = args.labels;
  float *probabilities = args.probabilities, *loss = (float *)node->output.value;
  bpt_cuda_state *state = bpt_cuda(backend);
  if (batch <= 0 || classes <= 0)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "softmax_cross_entropy: batch %lld, classes %lld", (long long)batch,
                            (long long)classes);
  void *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, (size_t)batch * sizeof(double), &scratch));
  const int rows_per_block = REDUCE_THREADS / 32;
  softmax_cross_entropy_kernel<<<(unsigned)((batch + rows_per_block - 1) / rows_per_block), REDUCE_THREADS, 0,
                                 state->stream>>>(batch, classes, logits, labels, probabilities, (double *)scratch);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "softmax_cross_entropy_forward"));
  mean_kernel<<<1, REDUCE_THREADS, 0, state->stream>>>(batch, (const double *)scratch, (double)batch, loss);
  return bpt_cuda_check_launch(backend, "softmax_cross_entropy_forward (mean)");
}

static bpt_status softmax_cross_entropy_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args args = bpt_softmax_cross_entropy_args_of(node);
  bpt_cuda_state *state = bpt_cuda(backend);
  if (args.rows * args.classes == 0) return BPT_OK;
  softmax_cross_entropy_backward_kernel<<<bpt_cuda_blocks(state, args.rows * args.classes), BPT_CUDA_THREADS, 0,
                                          state->stream>>>(args.rows, args.classes, args.probabilities, args.labels,
                                                           node->output.grad, node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, "softmax_cross_entropy_backward");
}

BPT_REGISTER_KERNELS(cuda, SOFTMAX_CROSS_ENTROPY, softmax_cross_entropy_forward, softmax_cross_entropy_backward, NULL);

// mse: prediction and target of one shape; the output is the mean squared difference.
static bpt_status mse_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->inputs[0].count;
  const float *prediction = (const float *)node->inputs[0].value, *target = (const float *)node->inputs[1].value;
  float *loss = (float *)node->output.value;
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count <= 0) return bpt_backend_fail(backend, BPT_ERR_SHAPE, "mse: %lld values", (long long)count);
  int64_t blocks = (count + REDUCE_THREADS - 1) / REDUCE_THREADS;
  if (blocks > MSE_BLOCKS) blocks = MSE_BLOCKS;
  void *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, (size_t)blocks * sizeof(double), &scratch));
  squared_error_kernel<<<(unsigned)blocks, REDUCE_THREADS, 0, state->stream>>>(count, prediction, target,
                                                                             (double *)scratch);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "mse_forward"));
  mean_kernel<<<1, REDUCE_THREADS, 0, state->stream>>>(blocks, (const double *)scratch, (double)count, loss);
  return bpt_cuda_check_launch(backend, "mse_forward (mean)");
}

static bpt_status mse_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->inputs[0].count;
  const float *prediction = (const float *)node->inputs[0].value, *target = (const float *)node->inputs[1].value;
  const float *loss_gradient = node->output.grad;
  float *dprediction = node->inputs[0].grad, *dtarget = node->inputs[1].grad;
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0 || (!dprediction && !dtarget)) return BPT_OK;
  mse_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, prediction, target, loss_gradient, dprediction, dtarget);
  return bpt_cuda_check_launch(backend, "mse_backward");
}

BPT_REGISTER_KERNELS(cuda, MSE, mse_forward, mse_backward, NULL);
