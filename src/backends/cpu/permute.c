/* permute on the CPU: a strided copy. The output is walked as rows of its last axis; each row reads x with the
 * stride of the axis that became the last, so a permutation that keeps the last axis copies rows whole. */
#include <string.h>

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
  const float *in = x->value;
  float *out = y->value;
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const float *source = in + bpt_cpu_row_offset(y, p.strides, r);
    float *row = out + r * length;
    if (step == 1)
      memcpy(row, source, (size_t)length * sizeof(float));
    else
      for (int64_t j = 0; j < length; j++)
        row[j] = source[j * step];
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
  const float *dy = y->grad;
  float *dx = x->grad;
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *target = dx + bpt_cpu_row_offset(y, p.strides, r);
    const float *row = dy + r * length;
    for (int64_t j = 0; j < length; j++)
      target[j * step] = assign ? row[j] : target[j * step] + row[j];
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, PERMUTE, permute_forward, permute_backward, NULL);
