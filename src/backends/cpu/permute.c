/* permute on the CPU where it copies (it is a view where its readers take strides): a strided copy. The output
 * is walked as rows of its last axis; each row reads x with the stride of the axis that became the last, so a
 * permutation that keeps the last axis copies rows whole. Values are f32 or bf16 (16-bit storage: copied as
 * stored, widened or rounded where x and y are stored differently). */
#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

/* x's element strides read in the output's axis order. */
typedef struct permuted {
  int64_t strides[BPT_MAX_RANK];
} permuted;

static permuted permuted_strides(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  int64_t contiguous[BPT_MAX_RANK], stride = 1;
  for (int i = x->rank - 1; i >= 0; i--) {
    contiguous[i] = stride;
    stride *= x->dims[i];
  }
  permuted p;
  for (int i = 0; i < x->rank; i++)
    p.strides[i] = contiguous[node->int_attributes[1 + i]];
  return p;
}

static bpt_status permute_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *x = &node->inputs[0], *y = &node->output;
  const permuted p = permuted_strides(node);
  const int64_t length = y->dims[y->rank - 1], rows = y->count / length, step = p.strides[y->rank - 1];
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(y);
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t source = bpt_cpu_row_offset(y, p.strides, r);
    if (step == 1) {
      bpt_cpu_storage_copy(y->value, y16, r * length, x->value, x16, source, length);
    } else if (!x16 && !y16) {
      const float *in = (const float *)x->value + source;
      float *row = (float *)y->value + r * length;
      for (int64_t j = 0; j < length; j++)
        row[j] = in[j * step];
    } else {
      for (int64_t j = 0; j < length; j++)
        bpt_storage_store(y->value, y16, r * length + j, bpt_storage_load(x->value, x16, source + j * step));
    }
  }
  return BPT_OK;
}

/* dx at each source position = (beta dx +) dy: one source per element, so rows run in parallel. */
static bpt_status permute_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_kernel_tensor *x = &node->inputs[0], *y = &node->output;
  const permuted p = permuted_strides(node);
  const int64_t length = y->dims[y->rank - 1], rows = y->count / length, step = p.strides[y->rank - 1];
  const bool assign = x->beta == 0.0f;
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(y);
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t target = bpt_cpu_row_offset(y, p.strides, r);
    if (!x16 && !y16) {
      float *dx = (float *)x->grad + target;
      const float *row = (const float *)y->grad + r * length;
      for (int64_t j = 0; j < length; j++)
        dx[j * step] = assign ? row[j] : dx[j * step] + row[j];
      continue;
    }
    /* A bf16 gradient: each sum rounded once, as the rounding path's f32 sum is. */
    for (int64_t j = 0; j < length; j++) {
      const int64_t at = target + j * step;
      const float gradient = bpt_storage_load(y->grad, y16, r * length + j);
      bpt_storage_store(x->grad, x16, at, assign ? gradient : bpt_storage_load(x->grad, x16, at) + gradient);
    }
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, PERMUTE, permute_forward, permute_backward, NULL);
