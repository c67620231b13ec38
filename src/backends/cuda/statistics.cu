// Reductions and clamps over whole buffers for the training toolkit and the precision policy: sums and zero
// counts (gradient and activation statistics, gradient-norm clipping), scale-and-clamp of the gradient
// block, and the largest finite magnitude (per-tensor FP8 scales). Partial results per block are folded in
// a fixed order, so the numbers repeat from run to run. These serve vtable members of the CNN branch
// (issue 3: reduce_statistics, scale_clamp) and the precision branch (issue 4: absolute_max).
#include <math.h>

#include "backends/cuda/cuda.h"

#define THREADS 256
#define MAX_BLOCKS 1024

typedef struct partial {
  double sum, squares;
  unsigned long long zeros;
} partial;

__global__ void statistics_kernel(int64_t count, const float *x, partial *partials) {
  __shared__ double sums[THREADS], squares[THREADS];
  __shared__ unsigned long long zeros[THREADS];
  double sum = 0.0, square = 0.0;
  unsigned long long zero = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    double v = x[i];
    sum += v;
    square += v * v;
    zero += x[i] == 0.0f;
  }
  sums[threadIdx.x] = sum;
  squares[threadIdx.x] = square;
  zeros[threadIdx.x] = zero;
  __syncthreads();
  for (int half = THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      squares[threadIdx.x] += squares[threadIdx.x + half];
      zeros[threadIdx.x] += zeros[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = partial{sums[0], squares[0], zeros[0]};
}

// Folds the per-block partials into partials[0], one thread, in block order.
__global__ void fold_kernel(int blocks, partial *partials) {
  partial total = partials[0];
  for (int b = 1; b < blocks; b++) {
    total.sum += partials[b].sum;
    total.squares += partials[b].squares;
    total.zeros += partials[b].zeros;
  }
  partials[0] = total;
}

__global__ void scale_clamp_kernel(int64_t count, float scale, float low, float high, float *x) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    float value = x[i] * scale;
    x[i] = value < low ? low : (value > high ? high : value);
  }
}

// max |x| over finite values. Non-negative floats order like their bit patterns, so an integer atomicMax
// on the bits is an exact (and order-independent) float maximum.
__global__ void absolute_max_kernel(int64_t count, const float *x, unsigned int *maximum_bits) {
  __shared__ float block_max[THREADS];
  float best = 0.0f;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
    float magnitude = fabsf(x[i]);
    if (magnitude > best && isfinite(magnitude)) best = magnitude;
  }
  block_max[threadIdx.x] = best;
  __syncthreads();
  for (int half = THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) block_max[threadIdx.x] = fmaxf(block_max[threadIdx.x], block_max[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(maximum_bits, __float_as_uint(block_max[0]));
}

static unsigned reduction_blocks(int64_t count) {
  int64_t blocks = (count + THREADS - 1) / THREADS;
  return (unsigned)(blocks < 1 ? 1 : blocks > MAX_BLOCKS ? MAX_BLOCKS : blocks);
}

bpt_status bpt_cuda_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                      double *sum_of_squares, int64_t *zeros) {
  bpt_cuda_state *state = bpt_cuda(backend);
  unsigned blocks = reduction_blocks(count);
  partial *partials;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, blocks * sizeof(partial), (void **)&partials));
  statistics_kernel<<<blocks, THREADS, 0, state->stream>>>(count, x, partials);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "reduce_statistics"));
  fold_kernel<<<1, 1, 0, state->stream>>>((int)blocks, partials);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "reduce_statistics (fold)"));
  partial total;
  /* The caller asked for host numbers: this is one of the synchronisations it chose. */
  BPT_CUDA_TRY(bpt_cuda_download(backend, &total, partials, sizeof total));
  if (sum) *sum = total.sum;
  if (sum_of_squares) *sum_of_squares = total.squares;
  if (zeros) *zeros = (int64_t)total.zeros;
  return BPT_OK;
}

bpt_status bpt_cuda_scale_clamp(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  scale_clamp_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(count, scale, low, high, x);
  return bpt_cuda_check_launch(backend, "scale_clamp");
}

bpt_status bpt_cuda_absolute_max(bpt_backend *backend, int64_t count, const float *x, float *maximum) {
  bpt_cuda_state *state = bpt_cuda(backend);
  BPT_CUDA_TRY(bpt_cuda_memset_zero(backend, maximum, sizeof(float)));
  if (count == 0) return BPT_OK;
  absolute_max_kernel<<<reduction_blocks(count), THREADS, 0, state->stream>>>(count, x, (unsigned int *)maximum);
  return bpt_cuda_check_launch(backend, "absolute_max");
}
