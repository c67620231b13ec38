/* Walking a strided view of a contiguous output row by row: the element offset, in an operand read with
 * per-axis strides, of output row `row` (an index over every output axis but the last). Shared by the
 * broadcasting kernels (strides 0 along repeated axes) and permute (strides in the permuted order). */
#ifndef BPT_BACKENDS_CPU_STRIDED_ROWS_H
#define BPT_BACKENDS_CPU_STRIDED_ROWS_H

#include "backends/backend.h"

static inline int64_t bpt_cpu_row_offset(const bpt_kernel_tensor *output, const int64_t *strides, int64_t row) {
  int64_t offset = 0;
  for (int i = output->rank - 2; i >= 0; i--) {
    offset += row % output->dims[i] * strides[i];
    row /= output->dims[i];
  }
  return offset;
}

#endif
