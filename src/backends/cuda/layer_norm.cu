// The CUDA layer-norm kernels (see src/core/ops/layer_norm.c): one block per row for the statistics, y and dx
// (block sums through warp shuffles, in a fixed order); dgamma and dbeta are column sums over the rows, one
// block per 32 columns whose 8 row lanes fold in shared memory in lane order, so results are deterministic.
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

__global__ void layer_norm_forward_kernel(int64_t rows, int64_t C, const float *x, const float *gamma,
                                          const float *beta, float epsilon, float *y, float *statistics) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * C;
    float *yr = y + r * C;
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
    const float mean = block_sum(sum, shared) / (float)C;
    float squares = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) squares += (xr[c] - mean) * (xr[c] - mean);
    const float rstd = rsqrtf(block_sum(squares, shared) / (float)C + epsilon);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      yr[c] = (xr[c] - mean) * rstd * gamma[c] + (beta ? beta[c] : 0.0f);
    if (threadIdx.x == 0) {
      statistics[2 * r] = mean;
      statistics[2 * r + 1] = rstd;
    }
  }
}

// dx = beta dx + rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
__global__ void layer_norm_dx_kernel(int64_t rows, int64_t C, const float *x, const float *gamma, const float *dy,
                                     const float *statistics, float beta, float *dx) {
  __shared__ float shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * C, *dyr = dy + r * C;
    float *dxr = dx + r * C;
    const float mean = statistics[2 * r], rstd = statistics[2 * r + 1];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * (xr[c] - mean) * rstd;
    }
    const float mean_g = block_sum(sum_g, shared) / (float)C;
    const float mean_gx = block_sum(sum_gx, shared) / (float)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float gradient = rstd * (dyr[c] * gamma[c] - mean_g - (xr[c] - mean) * rstd * mean_gx);
      dxr[c] = beta == 0.0f ? gradient : dxr[c] + gradient;
    }
  }
}

// dgamma = beta dgamma + sum over rows of dy xhat; dbeta likewise with dy (either may be NULL).
__global__ void layer_norm_affine_kernel(int64_t rows, int64_t C, const float *x, const float *dy,
                                         const float *statistics, float gamma_beta, float *dgamma, float beta_beta,
                                         float *dbeta) {
  __shared__ float gamma_lanes[8][33], beta_lanes[8][33];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
  float sum_gamma = 0.0f, sum_beta = 0.0f;
  if (c < C)
    for (int64_t r = threadIdx.y; r < rows; r += 8) {
      const float d = dy[r * C + c];
      sum_gamma += d * (x[r * C + c] - statistics[2 * r]) * statistics[2 * r + 1];
      sum_beta += d;
    }
  gamma_lanes[threadIdx.y][threadIdx.x] = sum_gamma;
  beta_lanes[threadIdx.y][threadIdx.x] = sum_beta;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int lane = 1; lane < 8; lane++) {
    sum_gamma += gamma_lanes[lane][threadIdx.x];
    sum_beta += beta_lanes[lane][threadIdx.x];
  }
  if (dgamma) dgamma[c] = gamma_beta == 0.0f ? sum_gamma : dgamma[c] + sum_gamma;
  if (dbeta) dbeta[c] = beta_beta == 0.0f ? sum_beta : dbeta[c] + sum_beta;
}

static unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65535 ? rows : 65535); }

static bpt_status layer_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  if (rows == 0) return BPT_OK;
  const float *beta = node->input_count > 2 ? (const float *)node->inputs[2].value : NULL;
  layer_norm_forward_kernel<<<row_blocks(rows), NORM_THREADS, 0, state->stream>>>(
      rows, C, (const float *)node->inputs[0].value, (const float *)node->inputs[1].value, beta,
      node->float_attributes[0], (float *)out->value, (float *)node->saved);
  return bpt_cuda_check_launch(backend, "layer_norm_forward");
}

static bpt_status layer_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const float *x = (const float *)node->inputs[0].value, *statistics = (const float *)node->saved;
  if (node->inputs[0].grad && rows > 0) {
    layer_norm_dx_kernel<<<row_blocks(rows), NORM_THREADS, 0, state->stream>>>(
        rows, C, x, (const float *)node->inputs[1].value, out->grad, statistics, node->inputs[0].beta,
        node->inputs[0].grad);
    const bpt_status status = bpt_cuda_check_launch(backend, "layer_norm_backward (dx)");
    if (status != BPT_OK) return status;
  }
  float *dgamma = node->inputs[1].grad, *dbeta = node->input_count > 2 ? node->inputs[2].grad : NULL;
  if (!dgamma && !dbeta) return BPT_OK;
  const float beta_beta = node->input_count > 2 ? node->inputs[2].beta : 1.0f;
  layer_norm_affine_kernel<<<(unsigned)((C + 31) / 32), dim3(32, 8), 0, state->stream>>>(
      rows, C, x, out->grad, statistics, node->inputs[1].beta, dgamma, beta_beta, dbeta);
  return bpt_cuda_check_launch(backend, "layer_norm_backward (dgamma, dbeta)");
}

BPT_REGISTER_KERNELS(cuda, LAYER_NORM, layer_norm_forward, layer_norm_backward, NULL);
