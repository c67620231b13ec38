/* concat on the CPU (src/core/ops/concat.c): around the joined axis every value is (outer, extent_i, inner) and
 * y is (outer, sum extent_i, inner), so input i fills one contiguous block of each outer row of y. Inputs are
 * taken in order, so an input given twice gets its second part added after the first was written. */
#include <string.h>

#include "backends/cpu/cpu.h"

static void around(const bpt_kernel_node *node, int64_t *outer, int64_t *inner) {
  const bpt_kernel_tensor *y = &node->output;
  const int axis = (int)node->int_attributes[0];
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++)
    *outer *= y->dims[d];
  for (int d = axis + 1; d < y->rank; d++)
    *inner *= y->dims[d];
}

static bpt_status concat_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  int64_t outer, inner, offset = 0;
  around(node, &outer, &inner);
  const int axis = (int)node->int_attributes[0];
  const int64_t row = node->output.dims[axis] * inner; /* one outer row of y */
  float *y = node->output.value;
  for (int i = 0; i < node->input_count; i++) {
    const float *x = node->inputs[i].value; /* (outer, extent_i, inner) */
    const int64_t block = node->inputs[i].dims[axis] * inner;
#pragma omp parallel for if (outer * block > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t o = 0; o < outer; o++)
      memcpy(y + o * row + offset, x + o * block, (size_t)block * sizeof(float));
    offset += block;
  }
  return BPT_OK;
}

static bpt_status concat_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  int64_t outer, inner, offset = 0;
  around(node, &outer, &inner);
  const int axis = (int)node->int_attributes[0];
  const int64_t row = node->output.dims[axis] * inner;
  const float *dy = node->output.grad;
  for (int i = 0; i < node->input_count; i++) {
    const bpt_kernel_tensor *x = &node->inputs[i];
    const int64_t block = x->dims[axis] * inner;
    float *dx = x->grad; /* (outer, extent_i, inner) */
    if (dx) {
      const bool assign = x->beta == 0.0f;
#pragma omp parallel for if (outer * block > BPT_CPU_PARALLEL_THRESHOLD)
      for (int64_t o = 0; o < outer; o++) {
        const float *source = dy + o * row + offset;
        float *target = dx + o * block;
        if (assign)
          memcpy(target, source, (size_t)block * sizeof(float));
        else
          for (int64_t k = 0; k < block; k++)
            target[k] += source[k];
      }
    }
    offset += block;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, CONCAT, concat_forward, concat_backward, NULL);
