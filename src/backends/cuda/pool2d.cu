// 2-D max and average pooling over NCHW. Own kernels rather than cuDNN: the vtable keeps the argmax (each
// output's winner as an index inside its H x W plane) for backward, which cuDNN does not expose. Backward gathers
// (one thread per input element walks the outputs whose windows cover it) instead of scattering with
// atomics, so overlapping windows still give deterministic sums.
#include <float.h>

#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

// Same rules as the CPU backend: ties and NaN go to the first value in row-major window order; the argmax
// is the winner's index inside its H x W plane.
__global__ void pool2d_forward_kernel(bpt_pool2d_args a, const float *x, float *y, int32_t *argmax) {
  const float inverse_area = 1.0f / ((float)a.kernel_height * (float)a.kernel_width);
  GRID_STRIDE(o, a.batch * a.channels * a.out_height * a.out_width) {
    int64_t ow = o % a.out_width, oh = (o / a.out_width) % a.out_height, plane = o / (a.out_width * a.out_height);
    const float *input = x + plane * a.in_height * a.in_width;
    const int64_t h0 = oh * a.stride_height - a.padding_height, w0 = ow * a.stride_width - a.padding_width;
    const int64_t h_begin = h0 < 0 ? 0 : h0, w_begin = w0 < 0 ? 0 : w0;
    const int64_t h_end = h0 + a.kernel_height < a.in_height ? h0 + a.kernel_height : a.in_height;
    const int64_t w_end = w0 + a.kernel_width < a.in_width ? w0 + a.kernel_width : a.in_width;
    if (a.kind == BPT_POOL_MAX) {
      float best = -FLT_MAX;
      int64_t best_index = h_begin * a.in_width + w_begin;
      for (int64_t h = h_begin; h < h_end; h++)
        for (int64_t w = w_begin; w < w_end; w++)
          if (input[h * a.in_width + w] > best) {
            best = input[h * a.in_width + w];
            best_index = h * a.in_width + w;
          }
      y[o] = input[best_index];
      if (argmax) argmax[o] = (int32_t)best_index;
    } else {
      float sum = 0.0f;
      for (int64_t h = h_begin; h < h_end; h++)
        for (int64_t w = w_begin; w < w_end; w++) sum += input[h * a.in_width + w];
      y[o] = sum * inverse_area;
    }
  }
}

// Outputs whose window covers input row ih: oh with oh*stride - pad <= ih <= oh*stride - pad + kernel - 1.
__device__ void covering(int64_t i, int64_t kernel, int64_t stride, int64_t padding, int64_t out, int64_t *first,
                         int64_t *last) {
  int64_t shifted = i + padding;
  int64_t lowest = shifted - kernel + 1;
  *first = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  *last = shifted / stride;
  if (*last > out - 1) *last = out - 1;
}

__global__ void pool2d_backward_kernel(bpt_pool2d_args a, const float *dy, const int32_t *argmax, float *dx) {
  const float inverse_area = 1.0f / ((float)a.kernel_height * (float)a.kernel_width);
  GRID_STRIDE(i, a.batch * a.channels * a.in_height * a.in_width) {
    int64_t iw = i % a.in_width, ih = (i / a.in_width) % a.in_height, plane = i / (a.in_width * a.in_height);
    const int64_t in_plane = ih * a.in_width + iw;
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, a.kernel_height, a.stride_height, a.padding_height, a.out_height, &oh0, &oh1);
    covering(iw, a.kernel_width, a.stride_width, a.padding_width, a.out_width, &ow0, &ow1);
    const int64_t out_plane = plane * a.out_height * a.out_width;
    float sum = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        int64_t o = out_plane + oh * a.out_width + ow;
        if (a.kind == BPT_POOL_MAX) {
          if (argmax[o] == in_plane) sum += dy[o];
        } else {
          sum += dy[o] * inverse_area;
        }
      }
    dx[i] += sum;
  }
}

static bpt_status check_pool(bpt_backend *backend, const bpt_pool2d_args *args) {
  if (args->kernel_height <= 0 || args->kernel_width <= 0 || args->stride_height <= 0 || args->stride_width <= 0 ||
      args->padding_height < 0 || args->padding_width < 0)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld",
                            (long long)args->kernel_height, (long long)args->kernel_width, (long long)args->stride_height,
                            (long long)args->stride_width, (long long)args->padding_height, (long long)args->padding_width);
  if (args->in_height * args->in_width > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "pool2d: a %lld x %lld plane is too large for 32-bit argmax indices",
                            (long long)args->in_height, (long long)args->in_width);
  return BPT_OK;
}

// max_pool2d (winning indices in saved), avg_pool2d and global_avg_pool.
static bpt_status pool2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_pool2d_args args = bpt_pool2d_args_of(node);
  int32_t *argmax = (int32_t *)node->saved;
  BPT_CUDA_TRY(check_pool(backend, &args));
  if (args.kind == BPT_POOL_MAX && !argmax)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: max pooling needs an argmax buffer");
  int64_t count = args.batch * args.channels * args.out_height * args.out_width;
  if (count == 0) return BPT_OK;
  pool2d_forward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      args, (const float *)node->inputs[0].value, (float *)node->output.value, argmax);
  return bpt_cuda_check_launch(backend, "pool2d_forward");
}

static bpt_status pool2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_pool2d_args args = bpt_pool2d_args_of(node);
  const int32_t *argmax = (const int32_t *)node->saved;
  BPT_CUDA_TRY(check_pool(backend, &args));
  if (args.kind == BPT_POOL_MAX && !argmax)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: max pooling needs an argmax buffer");
  int64_t count = args.batch * args.channels * args.in_height * args.in_width;
  if (count == 0) return BPT_OK;
  pool2d_backward_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      args, node->output.grad, argmax, node->inputs[0].grad);
  return bpt_cuda_check_launch(backend, "pool2d_backward");
}

BPT_REGISTER_KERNELS(cuda, MAX_POOL2D, pool2d_forward, pool2d_backward, NULL);
BPT_REGISTER_KERNELS(cuda, AVG_POOL2D, pool2d_forward, pool2d_backward, NULL);
BPT_REGISTER_KERNELS(cuda, GLOBAL_AVG_POOL, pool2d_forward, pool2d_backward, NULL);
