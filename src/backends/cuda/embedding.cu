// embedding on the GPU (src/core/ops/embedding.c). Forward gathers one table row per token; an id outside
// [0, V) writes zeros and lowers a device flag to its token index (atomicMin, so the first bad token wins
// whatever the scheduling), which the launcher downloads after the kernel: that costs one synchronisation per
// forward, the price of naming the position and value as the CPU does. Backward gives each column to one
// thread, which adds dy into dtable token by token in order: no atomics, so the sums are deterministic.
#include <stdint.h>

#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count)                                                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void embedding_forward_kernel(int64_t tokens, int64_t vocabulary, int64_t dim, const int32_t *ids,
                                         const float *table, float *out, unsigned long long *first_bad) {
  GRID_STRIDE(i, tokens * dim) {
    const int64_t t = i / dim, c = i % dim;
    const int32_t id = ids[t];
    if (id < 0 || id >= vocabulary) {
      out[i] = 0.0f;
      if (c == 0) atomicMin(first_bad, (unsigned long long)t);
    } else {
      out[i] = table[(int64_t)id * dim + c];
    }
  }
}

__global__ void embedding_backward_kernel(int64_t tokens, int64_t vocabulary, int64_t dim, const int32_t *ids,
                                          const float *dy, float *dtable) {
  GRID_STRIDE(c, dim) {
    for (int64_t t = 0; t < tokens; t++) {
      const int32_t id = ids[t];
      if (id >= 0 && id < vocabulary) dtable[(int64_t)id * dim + c] += dy[t * dim + c];
    }
  }
}

static bpt_status embedding_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *ids = &node->inputs[0], *table = &node->inputs[1];
  const int64_t vocabulary = table->dims[0], dim = table->dims[1], tokens = ids->count;
  if (tokens * dim == 0) return BPT_OK;
  void *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, sizeof(unsigned long long), &scratch));
  unsigned long long *first_bad = (unsigned long long *)scratch;
  BPT_CUDA_TRY(bpt_cuda_check(backend, cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, state->stream),
                              "embedding_forward (flag)"));
  embedding_forward_kernel<<<bpt_cuda_blocks(state, tokens * dim), BPT_CUDA_THREADS, 0, state->stream>>>(
      tokens, vocabulary, dim, (const int32_t *)ids->value, (const float *)table->value, (float *)node->output.value,
      first_bad);
  BPT_CUDA_TRY(bpt_cuda_check_launch(backend, "embedding_forward"));
  unsigned long long bad = 0;
  BPT_CUDA_TRY(bpt_cuda_download(backend, &bad, first_bad, sizeof bad));
  if (bad == ~0ULL) return BPT_OK;
  int32_t value = 0;
  BPT_CUDA_TRY(bpt_cuda_download(backend, &value, (const int32_t *)ids->value + bad, sizeof value));
  const long long t = (long long)bad, length = ids->rank == 2 ? (long long)ids->dims[1] : 1;
  if (ids->rank == 2)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                            "id %d at sample %lld, token %lld is outside the table's [0, %lld)", value, t / length,
                            t % length, (long long)vocabulary);
  return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "id %d at sample %lld is outside the table's [0, %lld)",
                          value, t, (long long)vocabulary);
}

static bpt_status embedding_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bpt_kernel_tensor *ids = &node->inputs[0], *table = &node->inputs[1];
  const int64_t vocabulary = table->dims[0], dim = table->dims[1], tokens = ids->count;
  if (tokens * dim == 0) return BPT_OK;
  embedding_backward_kernel<<<bpt_cuda_blocks(state, dim), BPT_CUDA_THREADS, 0, state->stream>>>(
      tokens, vocabulary, dim, (const int32_t *)ids->value, node->output.grad, table->grad);
  return bpt_cuda_check_launch(backend, "embedding_backward");
}

static bool embedding_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  if (node->inputs[1].beta != 1.0f) {
    *reason = "its backward only accumulates into the table's gradient (beta = 1)";
    return false;
  }
  return true;
}

BPT_REGISTER_KERNELS(cuda, EMBEDDING, embedding_forward, embedding_backward, embedding_supports);
