/* Walking a strided view of a contiguous output row by row: the element offset, in an operand read with
 * per-axis strides, of output row `row` (an index over every output axis but the last). Shared by the
 * broadcasting kernels (strides 0 along repeated axes), permute (strides in the permuted order) and the row-wise
 * kernels that read a strided view's rows in place. */
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

/* Whether t's strides are the row-major ones its dims give (what a kernel is handed unless a strided view feeds
 * it); axes of extent 1 may have any stride. */
static inline bool bpt_cpu_contiguous(const bpt_kernel_tensor *t) {
  int64_t step = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    if (t->dims[i] != 1 && t->strides[i] != step) return false;
    step *= t->dims[i];
  }
  return true;
}

/* Whether t can be read (and its gradient written) row by row in place: its last axis steps by one, or it is
 * a scalar (contiguous, one value). What the row-wise kernels registered strided (softmax, the norms, silu,
 * both gelus, add and mul) take. */
static inline bool bpt_cpu_rows_in_place(const bpt_kernel_tensor *t) {
  return t->rank == 0 || t->strides[t->rank - 1] == 1 || t->dims[t->rank - 1] == 1;
}

/* The supports of those kernels: x (input 0) can be read row by row in place. */
static inline bool bpt_cpu_supports_rows_of_x(const bpt_backend *backend, const bpt_kernel_node *node,
                                              const char **reason) {
  (void)backend;
  if (bpt_cpu_rows_in_place(&node->inputs[0])) return true;
  if (reason) *reason = "x needs contiguous rows (its last axis one step apart)";
  return false;
}

/* The element offset of row `row` of t (an index over every axis but the last): row times the row length when
 * t is contiguous (the caller asks bpt_cpu_contiguous once), else through its strides. */
static inline int64_t bpt_cpu_tensor_row(const bpt_kernel_tensor *t, bool contiguous, int64_t row) {
  return contiguous ? row * t->dims[t->rank - 1] : bpt_cpu_row_offset(t, t->strides, row);
}

#endif
