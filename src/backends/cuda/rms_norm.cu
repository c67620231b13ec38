// The CUDA RMS-norm kernels (see src/core/ops/rms_norm.c): one block per row for rstd, y and dx (block sums
// through warp shuffles, in a fixed order); dgamma is a column sum over the rows, one block per 32 columns
// whose 8 row lanes fold in shared memory in lane order, so results are deterministic.
#include "backends/cuda/cuda.h"

#define NORM_THREADS 256

// The sum of v over the block (every thread gets it). shared holds one float per warp.
static __device__ float block_sum(float v, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < (int)(blockDim.x / 32); w++) total += shared[w];
  return total;
}

__global__ void rms_norm_forward_kernel(int64_t rows, int64_t C, const float *x, const float *gamma, float epsilon,
                                        float *y, float *rstd) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * C;
    float *yr = y + r * C;
    float squares = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) squares += xr[c] * xr[c];
    const float scale = rsqrtf(block_sum(squares, shared) / (float)C + epsilon);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = xr[c] * scale * gamma[c];
    if (threadIdx.x == 0) rstd[r] = scale;
  }
}

// dx = beta dx + rstd (g - xhat mean(g xhat)), g = dy gamma, xhat = x rstd.
__global__ void rms_norm_dx_kernel(int64_t rows, int64_t C, const float *x, const float *gamma, const float *dy,
                                   const float *rstd, float beta, float *dx) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * C, *dyr = dy + r * C;
    float *dxr = dx + r * C;
    const float scale = rstd[r];
    float sum_gx = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum_gx += dyr[c] * gamma[c] * xr[c] * scale;
    const float mean_gx = block_sum(sum_gx, shared) / (float)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float gradient = scale * (dyr[c] * gamma[c] - xr[c] * scale * mean_gx);
      dxr[c] = beta == 0.0f ? gradient : dxr[c] + gradient;
    }
  }
}

// dgamma = beta dgamma + sum over rows of dy xhat.
__global__ void rms_norm_gamma_kernel(int64_t rows, int64_t C, const float *x, const float *dy, const float *rstd,
                                      float beta, float *dgamma) {
  __shared__ float lanes[8][33];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
  float sum = 0.0f;
  if (c < C)
    for (int64_t r = threadIdx.y; r < rows; r += 8) sum += dy[r * C + c] * x[r * C + c] * rstd[r];
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int lane = 1; lane < 8; lane++) sum += lanes[lane][threadIdx.x];
  dgamma[c] = beta == 0.0f ? sum : dgamma[c] + sum;
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65535 ? rows : 65535); }

static bpt_status rms_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  if (rows == 0) return BPT_OK;
  rms_norm_forward_kernel<<<row_blocks(rows), NORM_THREADS, 0, state->stream>>>(
      rows, C, (const float *)node->inputs[0].value, (const float *)node->inputs[1].value, node->float_attributes[0],
      (float *)out->value, (float *)node->saved);
  return bpt_cuda_check_launch(backend, "rms_norm_forward");
}

static bpt_status rms_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const float *x = (const float *)node->inputs[0].value, *rstd = (const float *)node->saved;
  if (node->inputs[0].grad && rows > 0) {
    rms_norm_dx_kernel<<<row_blocks(rows), NORM_THREADS, 0, state->stream>>>(
        rows, C, x, (const float *)node->inputs[1].value, out->grad, rstd, node->inputs[0].beta, node->inputs[0].grad);
    const bpt_status status = bpt_cuda_check_launch(backend, "rms_norm_backward (dx)");
    if (status != BPT_OK) return status;
  }
  if (!node->inputs[1].grad) return BPT_OK;
  rms_norm_gamma_kernel<<<(unsigned)((C + 31) / 32), dim3(32, 8), 0, state->stream>>>(
      rows, C, x, out->grad, rstd, node->inputs[1].beta, node->inputs[1].grad);
  return bpt_cuda_check_launch(backend, "rms_norm_backward (dgamma)");
}

BPT_REGISTER_KERNELS(cuda, RMS_NORM, rms_norm_forward, rms_norm_backward, NULL);
