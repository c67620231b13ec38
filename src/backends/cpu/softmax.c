/* The CPU's softmax kernels (src/core/ops/softmax.c): rows of the last axis, OpenMP over rows above the usual
 * threshold, exp through exp_rows.c so each row's loop vectorises. Causal rows stop at their last visible
 * column and write zeros after it; a row with nothing visible (or only -inf) is zeros. x may be a strided view
 * whose rows are contiguous (a permute or slice of the scores): its rows, and its gradient's, are found through
 * its strides. bf16-stored values and gradients are staged a row at a time through f32 scratch
 * (bf16_storage.h). */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/exp_rows.h"
#include "backends/cpu/strided_rows.h"

/* The row's visible columns: all of them, or with the causal mask j <= i + (Tk - Tq) for row i of Tq. */
static int64_t visible_columns(const bpt_kernel_tensor *x, bool causal, int64_t row) {
  const int64_t columns = x->dims[x->rank - 1];
  if (!causal) return columns;
  const int64_t rows = x->dims[x->rank - 2];
  const int64_t last = row % rows + (columns - rows); /* the last visible column, may be < 0 */
  return last < 0 ? 0 : last + 1 < columns ? last + 1 : columns;
}

/* y (columns) = softmax of x over its first `visible` columns, zeros after them. */
static void softmax_row(bpt_cpu_loops loops, const float *x, float *y, int64_t visible, int64_t columns) {
  float top = -HUGE_VALF;
  for (int64_t j = 0; j < visible; j++)
    top = x[j] > top ? x[j] : top;
  if (top == -HUGE_VALF) visible = 0; /* nothing visible, or every value -inf: zeros, not 0 / 0 */
  for (int64_t j = 0; j < visible; j++)
    y[j] = x[j];
  const float sum = bpt_cpu_exp_row(loops, y, visible, top);
  const float inverse = visible ? 1.0f / sum : 0.0f;
  for (int64_t j = 0; j < visible; j++)
    y[j] *= inverse;
  for (int64_t j = visible; j < columns; j++)
    y[j] = 0.0f;
}

static bpt_status softmax_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  const bpt_kernel_tensor *x = &node->inputs[0];
  const bool causal = node->int_attributes[0] != 0;
  const int64_t columns = x->dims[x->rank - 1], rows = columns ? x->count / columns : 0;
  const bool contiguous = bpt_cpu_contiguous(x);
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(&node->output);
  const void *in = x->value; /* rows of columns, through x's strides */
  void *out = node->output.value;
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, 0, 2 * (size_t)columns); /* x, y */
  if (status != BPT_OK) return status;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (x->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, 0);
    float *yr = bpt_storage_write_row(out, y16, r * columns, columns, false, stage ? stage + columns : NULL);
    softmax_row(loops, bpt_storage_read_row(in, x16, bpt_cpu_tensor_row(x, contiguous, r), columns, stage), yr,
                visible_columns(x, causal, r), columns);
    bpt_storage_commit_row(out, y16, r * columns, columns, yr);
  }
  return BPT_OK;
}

/* dx = beta dx + y (dy - sum_j dy_j y_j); masked elements have y = 0, so their gradient is 0 too. */
static bpt_status softmax_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int64_t columns = x->dims[x->rank - 1], rows = columns ? x->count / columns : 0;
  const void *y = node->output.value, *dy = node->output.grad; /* (rows, columns) */
  void *dx = x->grad;
  const bool assign = x->beta == 0.0f, contiguous = bpt_cpu_contiguous(x);
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(&node->output);
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, 0, 3 * (size_t)columns); /* y, dy, dx */
  if (status != BPT_OK) return status;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (x->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, 0);
    const int64_t at = bpt_cpu_tensor_row(x, contiguous, r);
    const float *yr = bpt_storage_read_row(y, y16, r * columns, columns, stage);
    const float *dyr = bpt_storage_read_row(dy, y16, r * columns, columns, stage ? stage + columns : NULL);
    float *dxr = bpt_storage_write_row(dx, x16, at, columns, !assign, stage ? stage + 2 * columns : NULL);
    float dot = 0.0f;
    for (int64_t j = 0; j < columns; j++)
      dot += yr[j] * dyr[j];
    if (assign)
      for (int64_t j = 0; j < columns; j++)
        dxr[j] = yr[j] * (dyr[j] - dot);
    else
      for (int64_t j = 0; j < columns; j++)
        dxr[j] += yr[j] * (dyr[j] - dot);
    bpt_storage_commit_row(dx, x16, at, columns, dxr);
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, SOFTMAX, softmax_forward, softmax_backward,
                                   bpt_cpu_supports_rows_of_x);
