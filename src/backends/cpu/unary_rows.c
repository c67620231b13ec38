/* The shared chunk loops of unary_rows.h. */
#include "backends/cpu/unary_rows.h"

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

void bpt_cpu_unary_rows_forward(const bpt_kernel_node *node, bpt_cpu_unary_forward run, const void *context) {
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? BPT_CPU_UNARY_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length; /* f32: each block in one call */
  const void *x = in->value;    /* (count), or a strided view's rows */
  void *y = node->output.value; /* (count) */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t begin = r * length, n = count - begin < length ? count - begin : length;
    const int64_t at = contiguous ? begin : bpt_cpu_tensor_row(in, false, r);
    float x_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      float *ys = bpt_storage_write_row(y, y16, begin + o, m, false, y_stage);
      run(context, m, bpt_storage_read_row(x, x16, at + o, m, x_stage), ys);
      bpt_storage_commit_row(y, y16, begin + o, m, ys);
    }
  }
}

void bpt_cpu_unary_rows_backward(const bpt_kernel_node *node, bool reads_x, bool reads_y, bpt_cpu_unary_backward run,
                                 const void *context) {
  const bpt_kernel_tensor *in = &node->inputs[0];
  const bool contiguous = bpt_cpu_contiguous(in);
  const int64_t count = node->output.count, length = contiguous ? BPT_CPU_UNARY_BLOCK : in->dims[in->rank - 1];
  const int64_t rows = length ? (count + length - 1) / length : 0;
  const bool x16 = bpt_tensor_is_bf16(in), y16 = bpt_tensor_is_bf16(&node->output);
  const int64_t step = x16 || y16 ? BPT_STORAGE_STAGE : length;
  const void *x = in->value, *y = node->output.value, *dy = node->output.grad;
  void *dx = in->grad; /* x's layout and storage */
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t begin = r * length, n = count - begin < length ? count - begin : length;
    const int64_t at = contiguous ? begin : bpt_cpu_tensor_row(in, false, r);
    float x_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE], dy_stage[BPT_STORAGE_STAGE],
        dx_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < n; o += step) {
      const int64_t m = n - o < step ? n - o : step;
      const float *xs = reads_x ? bpt_storage_read_row(x, x16, at + o, m, x_stage) : NULL;
      const float *ys = reads_y ? bpt_storage_read_row(y, y16, begin + o, m, y_stage) : NULL;
      float *dxs = bpt_storage_write_row(dx, x16, at + o, m, in->beta != 0.0f, dx_stage);
      run(context, m, xs, ys, bpt_storage_read_row(dy, y16, begin + o, m, dy_stage), in->beta, dxs);
      bpt_storage_commit_row(dx, x16, at + o, m, dxs);
    }
  }
}
