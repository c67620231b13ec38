/* embedding on the CPU (src/core/ops/embedding.c): forward copies one table row per token after checking every
 * id; backward adds dy into the rows of dtable in token order. It is parallel over blocks of columns, never over
 * tokens, so two tokens with one id never race and each element's sum has a fixed order on any thread count.
 * The output (and so dy) may be stored as bf16: rows are rounded on the way out and dy widened on the way in. */
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

#define EMBEDDING_COLUMN_BLOCK 16

/* The first id outside [0, vocabulary) in row-major order, named by sample (and token for (N, T) ids). */
static bpt_status check_ids(bpt_backend *backend, const bpt_kernel_tensor *ids, int64_t vocabulary) {
  const int32_t *values = ids->value;
  const int64_t length = ids->rank == 2 ? ids->dims[1] : 1;
  for (int64_t i = 0; i < ids->count; i++) {
    if (values[i] >= 0 && values[i] < vocabulary) continue;
    if (ids->rank == 2)
      return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                              "id %d at sample %lld, token %lld is outside the table's [0, %lld)", values[i],
                              (long long)(i / length), (long long)(i % length), (long long)vocabulary);
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "id %d at sample %lld is outside the table's [0, %lld)",
                            values[i], (long long)i, (long long)vocabulary);
  }
  return BPT_OK;
}

static bpt_status embedding_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *ids = &node->inputs[0], *table = &node->inputs[1];
  const int64_t vocabulary = table->dims[0], dim = table->dims[1], tokens = ids->count;
  const bpt_status status = check_ids(backend, ids, vocabulary);
  if (status != BPT_OK) return status;
  const int32_t *id = ids->value;   /* (tokens) */
  const float *rows = table->value; /* (V, C) */
  void *out = node->output.value;   /* (tokens, C) */
  const bool out16 = bpt_tensor_is_bf16(&node->output);
#pragma omp parallel for if (node->output.count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t t = 0; t < tokens; t++) {
    if (out16)
      bpt_cpu_bf16_narrow_row(rows + (int64_t)id[t] * dim, dim, (uint16_t *)out + t * dim);
    else
      memcpy((float *)out + t * dim, rows + (int64_t)id[t] * dim, (size_t)dim * sizeof(float));
  }
  return BPT_OK;
}

/* dtable[ids[t], c] += dy[t, c] for t in order, each block of columns on one thread. */
static bpt_status embedding_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *ids = &node->inputs[0], *table = &node->inputs[1];
  const int64_t vocabulary = table->dims[0], dim = table->dims[1], tokens = ids->count;
  const int64_t blocks = (dim + EMBEDDING_COLUMN_BLOCK - 1) / EMBEDDING_COLUMN_BLOCK;
  const int32_t *id = ids->value;      /* (tokens) */
  const void *dy = node->output.grad; /* (tokens, C), f32 or bf16 */
  const bool dy16 = bpt_tensor_is_bf16(&node->output);
  float *dtable = table->grad; /* (V, C) */
#pragma omp parallel for if (node->output.count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t block = 0; block < blocks; block++) {
    const int64_t first = block * EMBEDDING_COLUMN_BLOCK,
                  last = first + EMBEDDING_COLUMN_BLOCK < dim ? first + EMBEDDING_COLUMN_BLOCK : dim;
    for (int64_t t = 0; t < tokens; t++) {
      if (id[t] < 0 || id[t] >= vocabulary) continue; /* forward refused it; ids fed since must not write astray */
      float *row = dtable + (int64_t)id[t] * dim;
      if (dy16) {
        const uint16_t *gradient = (const uint16_t *)dy + t * dim;
        for (int64_t c = first; c < last; c++)
          row[c] += bpt_bf16_widen(gradient[c]);
      } else {
        const float *gradient = (const float *)dy + t * dim;
        for (int64_t c = first; c < last; c++)
          row[c] += gradient[c];
      }
    }
  }
  return BPT_OK;
}

/* The table's gradient is a parameter's, added into (beta 1); no other gradient is written. */
static bool embedding_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  if (node->inputs[1].beta != 1.0f) {
    *reason = "its backward only accumulates into the table's gradient (beta = 1)";
    return false;
  }
  return true;
}

BPT_REGISTER_KERNELS_16BIT(cpu, EMBEDDING, embedding_forward, embedding_backward, embedding_supports);
