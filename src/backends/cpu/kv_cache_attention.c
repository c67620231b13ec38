/* kv_cache_attention on the CPU (src/core/ops/kv_cache_attention.c): append the new keys and values to the node's
 * cache, then per (sample, head, query) one pass of scores over the cached rows with an online softmax
 * (running maximum and sum, rescaled as it goes), so the work is O(position x D) and no score row is stored. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu.h"

static bpt_status check_positions(bpt_backend *backend, const int32_t *positions, int64_t batch, int64_t tokens,
                                  int64_t capacity) {
  for (int64_t n = 0; n < batch; n++)
    for (int64_t i = 0; i < tokens; i++) {
      const int64_t p = positions[n * tokens + i];
      if (p < 0 || p >= capacity || p != positions[n * tokens] + i)
        return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                         "sample %lld, token %lld has position %lld; positions must be "
                         "consecutive within a pass and in [0, %lld), the cache's capacity",
                         (long long)n, (long long)i, (long long)p, (long long)capacity);
    }
  return BPT_OK;
}

static bpt_status kv_cache_attention_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *q = &node->inputs[0], *y = &node->output;
  const int64_t batch = q->dims[0], tokens = q->dims[1], width = q->dims[2];
  const int64_t heads = node->int_attributes[0], capacity = node->int_attributes[1], depth = width / heads;
  const int32_t *positions = node->inputs[3].value;
  const bpt_status checked = check_positions(backend, positions, batch, tokens, capacity);
  if (checked != BPT_OK) return checked;
  /* Sample n's cache: its keys (capacity x C), then its values; a batch below the compiled one uses the first. */
  const size_t cache_stride = 2 * (size_t)capacity * (size_t)width;
  float *key_cache = node->saved, *value_cache = key_cache + (size_t)capacity * (size_t)width;
  for (int64_t n = 0; n < batch; n++)
    for (int64_t i = 0; i < tokens; i++) {
      const size_t row = (size_t)n * cache_stride + (size_t)(positions[n * tokens + i]) * (size_t)width;
      const size_t source = (size_t)(n * tokens + i) * (size_t)width;
      memcpy(key_cache + row, (const float *)node->inputs[1].value + source, (size_t)width * sizeof(float));
      memcpy(value_cache + row, (const float *)node->inputs[2].value + source, (size_t)width * sizeof(float));
    }
  const float scale = 1.0f / sqrtf((float)depth);
  const float *query = q->value;
  float *out = y->value;
#pragma omp parallel for collapse(2) if (batch * heads * tokens * (positions[0] + 1) * depth > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t n = 0; n < batch; n++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < tokens; i++) {
        const float *qi = query + (size_t)(n * tokens + i) * (size_t)width + (size_t)(h * depth);
        float *oi = out + (size_t)(n * tokens + i) * (size_t)width + (size_t)(h * depth);
        const int64_t last = positions[n * tokens + i];
        float maximum = -INFINITY, sum = 0.0f;
        for (int64_t d = 0; d < depth; d++)
          oi[d] = 0.0f;
        for (int64_t j = 0; j <= last; j++) {
          const float *kj = key_cache + (size_t)n * cache_stride + (size_t)j * (size_t)width + (size_t)(h * depth);
          const float *vj = value_cache + (size_t)n * cache_stride + (size_t)j * (size_t)width + (size_t)(h * depth);
          float score = 0.0f;
          for (int64_t d = 0; d < depth; d++)
            score += qi[d] * kj[d];
          score *= scale;
          if (score > maximum) { /* rescale what is summed so far to the new maximum */
            const float factor = expf(maximum - score);
            sum *= factor;
            for (int64_t d = 0; d < depth; d++)
              oi[d] *= factor;
            maximum = score;
          }
          const float weight = expf(score - maximum);
          sum += weight;
          for (int64_t d = 0; d < depth; d++)
            oi[d] += weight * vj[d];
        }
        for (int64_t d = 0; d < depth; d++)
          oi[d] /= sum;
      }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, KV_CACHE_ATTENTION, kv_cache_attention_forward, NULL, NULL);
