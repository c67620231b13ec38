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

// out = sum(partials) / sum(weights), or 0 when every weight is 0 (every position ignored), the two sums in
// one fixed-order tree; the count of positions also goes to *count (the backward's divisor).
__global__ void weighted_mean_kernel(int64_t count, const double *partials, const double *weights, float *out,
                                     float *counted) {
  __shared__ double sums[REDUCE_THREADS], totals[REDUCE_THREADS];
  double sum = 0.0, total = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += REDUCE_THREADS) {
    sum += partials[i];
    total += weights[i];
  }
  sums[threadIdx.x] = sum;
  totals[threadIdx.x] = total;
  __syncthreads();
  for (int half = REDUCE_THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      totals[threadIdx.x] += totals[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *out = totals[0] > 0.0 ? (float)(sums[0] / totals[0]) : 0.0f;
    *counted = (float)totals[0];
  }
}

typedef bpt_cross_entropy_options cross_entropy_options;

__device__ bool ignored(const cross_entropy_options o, int32_t label) {
  return o.has_ignore && label == o.ignore_index;
}

// One warp per row of logits (batch, classes): subtracting the row maximum keeps exp() finite, and the
// loss comes from log-sum-exp so it never takes log(0). A label outside [0, classes) that is not the ignore
// index makes the loss NaN (checking on the host would need a synchronisation every step). row_weights (NULL
// without an ignore index) gets 1 for a position that counts, 0 for an ignored one.
__global__ void softmax_cross_entropy_kernel(int64_t batch, int64_t classes, const float *logits,
                                             const int32_t *labels, const cross_entropy_options o,
                                             float *probabilities, double *row_losses, double *row_weights) {
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
  double mean = 0.0; // mean_c x[c], for label smoothing: mean_c -log p[c] = log-sum-exp - mean
  if (o.smoothing != 0.0f) {
    for (int64_t c = lane; c < classes; c += 32) mean += (double)x[c];
    for (int offset = 16; offset > 0; offset /= 2) mean += __shfl_xor_sync(0xffffffffu, mean, offset);
    mean /= (double)classes;
  }
  if (lane == 0) {
    int32_t label = labels[row];
    const bool skip = ignored(o, label);
    if (row_weights) row_weights[row] = skip ? 0.0 : 1.0;
    const double eps = (double)o.smoothing;
    if (skip)
      row_losses[row] = 0.0;
    else if (label < 0 || label >= classes)
      row_losses[row] = NAN;
    else if (eps == 0.0)
      row_losses[row] = log((double)sum) + (double)maximum - (double)x[label];
    else
      row_losses[row] = log((double)sum) + (double)maximum - (1.0 - eps) * (double)x[label] - eps * mean;
  }
}

// counted: NULL without an ignore index (the divisor is then batch), else the device count of positions.
__global__ void softmax_cross_entropy_backward_kernel(int64_t batch, int64_t classes, const float *probabilities,
                                                      const int32_t *labels, const cross_entropy_options o,
                                                      const float *counted, const float *loss_gradient,
                                                      float *dlogits) {
  const float divisor = counted ? *counted : (float)batch;
  if (divisor == 0.0f) return; // every position ignored: no gradient, rather than 0/0
  float scale = *loss_gradient / divisor;
  const float eps = o.smoothing, uniform = eps / (float)classes;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < batch * classes;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = i % classes;
    const int32_t label = labels[i / classes];
    if (ignored(o, label)) continue;
    if (eps == 0.0f)
      dlogits[i] += scale * (probabilities[i] - (c == label ? 1.0f : 0.0f));
    else
      dlogits[i] += scale * (probabilities[i] - (uniform + (c == label ? 1.0f - eps : 0.0f)));
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


// counted: with an ignore index, the device float after the probabilities where the count of positions goes.
static bpt_status cross_entropy_forward(bpt_backend *backend, int64_t batch, int64_t classes, const float *logits,
                                        const int32_t *labels, const cross_entropy_options &o, float *probabilities,
                                        float *loss, float *counted) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (batch <= 0 || classes <= 0)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "softmax_cross_entropy: batch %lld, classes %lld", (long long)batch,
                            (long long)classes);
  void *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, (size_t)batch * (o.has_ignore ? 2 : 1) * sizeof(double), &scratch));
  double *row_losses = (double *)scratch, *row_weights = o.has_ignore ? row_losses + batch : NULL;
  const int rows_per_block = REDUCE_THREADS / 32;
  softmax_cross_entropy_kernel<<<(unsigned)((batch + rows_per_block - 1) / rows_per_block), REDUCE_THREADS, 0,
                                 state->stream>>>(batch, classes, logits, labels, o, probabilities, row_losses,
                                                  row_weights);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "softmax_cross_entropy_forward"));
  if (o.has_ignore)
    weighted_mean_kernel<<<1, REDUCE_THREADS, 0, state->stream>>>(batch, row_losses, row_weights, loss, counted);
  else
    mean_kernel<<<1, REDUCE_THREADS, 0, state->stream>>>(batch, row_losses, (double)batch, loss);
  return bpt_cuda_check_launch(backend, "softmax_cross_entropy_forward (mean)");
}

static bpt_status cross_entropy_backward(bpt_backend *backend, int64_t batch, int64_t classes,
                                         const float *probabilities, const int32_t *labels,
                                         const cross_entropy_options &o, const float *counted,
                                         const float *loss_gradient, float *dlogits) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (batch * classes == 0) return BPT_OK;
  softmax_cross_entropy_backward_kernel<<<bpt_cuda_blocks(state, batch * classes), BPT_CUDA_THREADS, 0,
                                          state->stream>>>(batch, classes, probabilities, labels, o,
                                                           o.has_ignore ? counted : NULL, loss_gradient, dlogits);
  return bpt_cuda_check_launch(backend, "softmax_cross_entropy_backward");
}

// softmax_cross_entropy (kernel_args.h gives the layout and the options); with an ignore index, the count of
// positions goes in the device float after the probabilities.
static bpt_status softmax_cross_entropy_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args a = bpt_softmax_cross_entropy_args_of(node);
  return cross_entropy_forward(backend, a.rows, a.classes, a.logits, a.labels, a.options, a.probabilities,
                               (float *)node->output.value, a.probabilities + a.rows * a.classes);
}

static bpt_status softmax_cross_entropy_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args a = bpt_softmax_cross_entropy_args_of(node);
  return cross_entropy_backward(backend, a.rows, a.classes, a.probabilities, a.labels, a.options,
                                a.probabilities + a.rows * a.classes, node->output.grad, node->inputs[0].grad);
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
