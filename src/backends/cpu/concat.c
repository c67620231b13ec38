/* concat on the CPU (src/core/ops/concat.c): around the joined axis every value is (outer, extent_i, inner) and
 * y is (outer, sum extent_i, inner), so input i fills one contiguous block of each outer row of y. Inputs are
 * taken in order, so an input given twice gets its second part added after the first was written. Values are
 * f32 or bf16 (16-bit storage: copied as stored, widened or rounded where an input and y are stored
 * differently). */
#include "backends/cpu/bf16_storage.h"
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
  void *y = node->output.value;
  const bool y16 = bpt_tensor_is_bf16(&node->output);
  for (int i = 0; i < node->input_count; i++) {
    const void *x = node->inputs[i].value; /* (outer, extent_i, inner) */
    const bool x16 = bpt_tensor_is_bf16(&node->inputs[i]);
    const int64_t block = node->inputs[i].dims[axis] * inner;
#pragma omp parallel for if (outer * block > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t o = 0; o < outer; o++)
      bpt_cpu_storage_copy(y, y16, o * row + offset, x, x16, o * block, block);
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
  const void *dy = node->output.grad;
  const bool y16 = bpt_tensor_is_bf16(&node->output);
  for (int i = 0; i < node->input_count; i++) {
    const bpt_kernel_tensor *x = &node->inputs[i];
    const bool x16 = bpt_tensor_is_bf16(x);
    const int64_t block = x->dims[axis] * inner;
    void *dx = x->grad; /* (outer, extent_i, inner) */
    if (dx) {
      const bool assign = x->beta == 0.0f;
#pragma omp parallel for if (outer * block > BPT_CPU_PARALLEL_THRESHOLD)
      for (int64_t o = 0; o < outer; o++) {
        /* An input given twice into a bf16 gradient is rounded after each part, as the parts of any bf16
         * gradient with several writers are (docs/precision.md); under the policy an f32 dy holds bf16 values
         * already. */
        if (assign)
          bpt_cpu_storage_copy(dx, x16, o * block, dy, y16, o * row + offset, block);
        else
          bpt_cpu_storage_add(dx, x16, o * block, dy, y16, o * row + offset, block);
      }
    }
    offset += block;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, CONCAT, concat_forward, concat_backward, NULL);
