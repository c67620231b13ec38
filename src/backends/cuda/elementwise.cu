// Element-wise CUDA kernels: bias broadcast and its column reduction, activation pairs, y += alpha x and
// fills. Loops are grid-stride over int64 indices; reductions run in a fixed order so results are
// deterministic from run to run.
#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void bias_add_kernel(int64_t rows, int64_t cols, const float *bias, float *y) {
  GRID_STRIDE(i, rows * cols) y[i] += bias[i % cols];
}

// dbias (cols) += column sums of dy (rows, cols). A block owns 32 columns and one slice of the rows
// (blockIdx.y of gridDim.y); its 8 row lanes stride down the slice (adjacent threads read adjacent columns),
// then fold their partial sums in shared memory. With one slice the block adds into dbias directly; with
// several (few columns: 10 classes would otherwise give the whole device one block) each slice writes its
// partial row into partials, and bias_fold_kernel adds them in slice order, so the sum is deterministic.
__global__ void bias_backward_kernel(int64_t rows, int64_t cols, const float *dy, float *bias_gradient,
                                     float *partials) {
  __shared__ float partial[8][33];
  int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
  int64_t slice_rows = (rows + gridDim.y - 1) / gridDim.y;
  int64_t first = (int64_t)blockIdx.y * slice_rows;
  int64_t last = first + slice_rows < rows ? first + slice_rows : rows;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = first + threadIdx.y; r < last; r += 8) sum += dy[r * cols + col];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int lane = 1; lane < 8; lane++) sum += partial[lane][threadIdx.x];
    if (partials)
      partials[(int64_t)blockIdx.y * cols + col] = sum;
    else
      bias_gradient[col] += sum;
  }
}

__global__ void bias_fold_kernel(int64_t slices, int64_t cols, const float *partials, float *bias_gradient) {
  GRID_STRIDE(col, cols) {
    float sum = 0.0f;
    for (int64_t slice = 0; slice < slices; slice++) sum += partials[slice * cols + col];
    bias_gradient[col] += sum;
  }
}

__global__ void activation_forward_kernel(bpt_activation kind, float parameter, int64_t count, const float *x,
                                          float *y) {
  GRID_STRIDE(i, count) {
    float v = x[i];
    switch (kind) {
    case BPT_ACTIVATION_RELU: y[i] = v > 0.0f ? v : 0.0f; break;
    case BPT_ACTIVATION_LEAKY_RELU: y[i] = v > 0.0f ? v : parameter * v; break;
    case BPT_ACTIVATION_SIGMOID: y[i] = 1.0f / (1.0f + expf(-v)); break;
    case BPT_ACTIVATION_TANH: y[i] = tanhf(v); break;
    }
  }
}

__global__ void activation_backward_kernel(bpt_activation kind, float parameter, int64_t count, const float *x,
                                           const float *y, const float *dy, float *dx) {
  GRID_STRIDE(i, count) {
    switch (kind) {
    case BPT_ACTIVATION_RELU: dx[i] += x[i] > 0.0f ? dy[i] : 0.0f; break;
    case BPT_ACTIVATION_LEAKY_RELU: dx[i] += x[i] > 0.0f ? dy[i] : parameter * dy[i]; break;
    case BPT_ACTIVATION_SIGMOID: dx[i] += dy[i] * y[i] * (1.0f - y[i]); break;
    case BPT_ACTIVATION_TANH: dx[i] += dy[i] * (1.0f - y[i] * y[i]); break;
    }
  }
}

__global__ void add_scaled_kernel(int64_t count, float alpha, const float *x, float *y) {
  GRID_STRIDE(i, count) y[i] += alpha * x[i];
}

// ReLU keeping one bit per element for backward (the precision branch's member, issue 4): a thread owns a
// whole mask byte, so no two threads write the same byte.
__global__ void relu_mask_forward_kernel(int64_t count, const float *x, float *y, uint8_t *mask) {
  GRID_STRIDE(byte, (count + 7) / 8) {
    int64_t first = byte * 8, last = first + 8 < count ? first + 8 : count;
    unsigned bits = 0;
    for (int64_t i = first; i < last; i++) {
      bool positive = x[i] > 0.0f;
      y[i] = positive ? x[i] : 0.0f;
      bits |= (unsigned)positive << (i - first);
    }
    mask[byte] = (uint8_t)bits;
  }
}

__global__ void relu_mask_backward_kernel(int64_t count, const uint8_t *mask, const float *dy, float *dx,
                                          bool assign) {
  GRID_STRIDE(i, count) {
    const float gradient = mask[i / 8] >> (i % 8) & 1 ? dy[i] : 0.0f;
    dx[i] = assign ? gradient : dx[i] + gradient;
  }
}

__global__ void fill_kernel(int64_t count, float value, float *y) {
  GRID_STRIDE(i, count) y[i] = value;
}

// linear's kernels are its bias terms (its products run through the shared gemm): y (rows, out) += bias (out),
// rows the samples or a sequence's tokens.
static bpt_status linear_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  if (rows * cols == 0) return BPT_OK;
  bias_add_kernel<<<bpt_cuda_blocks(state, rows * cols), BPT_CUDA_THREADS, 0, state->stream>>>(
      rows, cols, (const float *)node->inputs[2].value, (float *)node->output.value);
  return bpt_cuda_check_launch(backend, "bias_add");
}

// bias_gradient (out) += the column sums of dy (rows, out), deterministically (bias_backward_kernel says how).
static bpt_status linear_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  const float *dy = node->output.grad;
  float *bias_gradient = node->inputs[2].grad;
  if (rows == 0 || cols == 0) return BPT_OK;
  // Enough row slices for about two blocks per multiprocessor, each slice at least 64 rows deep.
  int64_t column_blocks = (cols + 31) / 32;
  int64_t slices = 2 * (int64_t)state->multiprocessors / column_blocks;
  if (slices > (rows + 63) / 64) slices = (rows + 63) / 64;
  if (slices > 1024) slices = 1024;
  if (slices < 1) slices = 1;
  float *partials = NULL;
  if (slices > 1)
    BPT_CUDA_TRY(bpt_cuda_scratch(backend, (size_t)slices * (size_t)cols * sizeof(float), (void **)&partials));
  bias_backward_kernel<<<dim3((unsigned)column_blocks, (unsigned)slices), dim3(32, 8), 0, state->stream>>>(
      rows, cols, dy, bias_gradient, partials);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "bias_backward"));
  if (slices == 1) return BPT_OK;
  bias_fold_kernel<<<bpt_cuda_blocks(state, cols), BPT_CUDA_THREADS, 0, state->stream>>>(slices, cols, partials,
                                                                                         bias_gradient);
  return bpt_cuda_check_launch(backend, "bias_backward (fold)");
}

BPT_REGISTER_KERNELS(cuda, LINEAR, linear_forward, linear_backward, NULL);

// The launchers behind the activation kernels below (kind comes from the node's op id, so it is always known).
static bpt_status launch_activation_forward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                            const float *x, float *y) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  activation_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(kind, parameter,
                                                                                                  count, x, y);
  return bpt_cuda_check_launch(backend, "activation_forward");
}

static bpt_status launch_activation_backward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                             const float *x, const float *y, const float *dy, float *dx) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  activation_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      kind, parameter, count, x, y, dy, dx);
  return bpt_cuda_check_launch(backend, "activation_backward");
}

bpt_status bpt_cuda_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  add_scaled_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(count, alpha, x, y);
  return bpt_cuda_check_launch(backend, "add_scaled");
}

bpt_status bpt_cuda_fill(bpt_backend *backend, int64_t count, float value, float *y) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  fill_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(count, value, y);
  return bpt_cuda_check_launch(backend, "fill");
}

// y = max(x, 0) and one bit per element, set where y > 0 (x and y may be one buffer).
static bpt_status relu_mask_forward(bpt_backend *backend, int64_t count, const float *x, float *y, uint8_t *mask) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  relu_mask_forward_kernel<<<bpt_cuda_blocks(state, (count + 7) / 8), BPT_CUDA_THREADS, 0, state->stream>>>(count, x,
                                                                                                          y, mask);
  return bpt_cuda_check_launch(backend, "relu_mask_forward");
}

// dx (+)= dy where the bit is set (assign: dx = 0 elsewhere; dx may be dy).
static bpt_status relu_mask_backward(bpt_backend *backend, int64_t count, const uint8_t *mask, const float *dy,
                                     float *dx, bool assign) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  relu_mask_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(count, mask, dy,
                                                                                                  dx, assign);
  return bpt_cuda_check_launch(backend, "relu_mask_backward");
}

// relu with its 1-bit mask (or reading x when the node keeps none), and the other activations.
static bpt_status activation_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0], *y = &node->output;
  if (node->op == BPT_OP_RELU && node->saved)
    return relu_mask_forward(backend, y->count, (const float *)x->value, (float *)y->value, (uint8_t *)node->saved);
  return launch_activation_forward(backend, bpt_activation_of(node->op), node->float_attributes[0], y->count,
                                   (const float *)x->value, (float *)y->value);
}

static bpt_status activation_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0], *y = &node->output;
  if (node->op == BPT_OP_RELU && node->int_attributes[BPT_RELU_USES_MASK])
    return relu_mask_backward(backend, y->count, (const uint8_t *)node->saved, y->grad, x->grad, x->beta == 0.0f);
  return launch_activation_backward(backend, bpt_activation_of(node->op), node->float_attributes[0], y->count,
                                    (const float *)x->value, (const float *)y->value, y->grad, x->grad);
}

// The mask kernels honour beta 0; the activation pairs only accumulate.
static bool activation_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  return (node->op == BPT_OP_RELU && node->int_attributes[BPT_RELU_USES_MASK]) ||
         bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS(cuda, RELU, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(cuda, LEAKY_RELU, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(cuda, SIGMOID, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(cuda, TANH, activation_forward, activation_backward, activation_supports);

// add_relu without a fused kernel: y = a, y += b, then the ReLU with its mask in place on y.
static bpt_status add_relu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *y = &node->output;
  float *out = (float *)y->value;
  bpt_status status = bpt_cuda_copy(backend, out, node->inputs[0].value, (size_t)y->count * sizeof(float));
  if (status == BPT_OK) status = bpt_cuda_add_scaled(backend, y->count, 1.0f, (const float *)node->inputs[1].value, out);
  if (status == BPT_OK) status = relu_mask_forward(backend, y->count, out, out, (uint8_t *)node->saved);
  return status;
}

static bpt_status add_relu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *y = &node->output;
  for (int i = 0; i < 2; i++) {
    const bpt_kernel_tensor *input = &node->inputs[i];
    if (!input->grad) continue;
    bpt_status status =
        relu_mask_backward(backend, y->count, (const uint8_t *)node->saved, y->grad, input->grad, input->beta == 0.0f);
    if (status != BPT_OK) return status;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cuda, ADD_RELU, add_relu_forward, add_relu_backward, NULL);
