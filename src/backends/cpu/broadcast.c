/* add and mul with NumPy broadcasting on the CPU. Each operand is right-aligned with the output and given
 * element strides along the output's axes, 0 where it is repeated; the output is walked as rows of its last
 * axis, with the inner loop specialised on whether each operand steps or repeats along it, so the common
 * cases (same shape, a bias row, a per-row scalar) vectorise. A repeated operand's gradient is the sum of
 * dy over the repeats: those rows are summed serially, in row order, so results do not depend on threads.
 * Operands are read through their strides, so a strided view of the output's shape is read in place; bf16-stored
 * operands, outputs and gradients are staged through f32 chunks of a row (bf16_storage.h). */
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

typedef struct aligned_operand {
  const float *values;
  int64_t strides[BPT_MAX_RANK]; /* per output axis, in elements; 0 along repeated axes */
} aligned_operand;

/* The input's own strides (contiguous, or a strided view's) along the output's axes, 0 where it repeats. */
static void align(const bpt_kernel_tensor *output, const bpt_kernel_tensor *input, int64_t *strides) {
  const int offset = output->rank - input->rank;
  for (int i = output->rank - 1; i >= 0; i--) {
    const int j = i - offset;
    strides[i] = j < 0 || (input->dims[j] == 1 && output->dims[i] != 1) ? 0 : input->strides[j];
  }
}

/* y[j] = a[j sa] op b[j sb] for one row, sa and sb each 0 or 1. */
static void combine_row(bool multiply, int64_t length, const float *a, int64_t sa, const float *b, int64_t sb,
                        float *y) {
  if (multiply) {
    if (sa && sb)
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j] * b[j];
    else if (sa)
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j] * b[j * sb];
    else
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j * sa] * b[j * sb];
  } else {
    if (sa && sb)
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j] + b[j];
    else if (sa)
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j] + b[j * sb];
    else
      for (int64_t j = 0; j < length; j++)
        y[j] = a[j * sa] + b[j * sb];
  }
}

/* Values [o, o + m) of an operand row at element `at` that steps by `step` (0 or 1) along it, as f32: a
 * repeated operand is one value. */
static const float *operand_row(const void *values, bool bf16, int64_t at, int64_t step, int64_t o, int64_t m,
                                float *stage) {
  return bpt_storage_read_row(values, bf16, at + o * step, step ? m : 1, stage);
}

static bpt_status broadcast_forward(const bpt_kernel_node *node, bool multiply) {
  const bpt_kernel_tensor *y = &node->output;
  int64_t sa[BPT_MAX_RANK], sb[BPT_MAX_RANK];
  align(y, &node->inputs[0], sa);
  align(y, &node->inputs[1], sb);
  const int last = y->rank - 1;
  const int64_t length = y->dims[last], rows = y->count / length;
  const void *a = node->inputs[0].value, *b = node->inputs[1].value;
  void *out = y->value;
  const bool a16 = bpt_tensor_is_bf16(&node->inputs[0]), b16 = bpt_tensor_is_bf16(&node->inputs[1]),
             y16 = bpt_tensor_is_bf16(y);
  const int64_t step = a16 || b16 || y16 ? BPT_STORAGE_STAGE : length; /* f32: each row in one call */
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t a_at = bpt_cpu_row_offset(y, sa, r), b_at = bpt_cpu_row_offset(y, sb, r);
    float a_stage[BPT_STORAGE_STAGE], b_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE];
    for (int64_t o = 0; o < length; o += step) {
      const int64_t m = length - o < step ? length - o : step;
      float *yr = bpt_storage_write_row(out, y16, r * length + o, m, false, y_stage);
      combine_row(multiply, m, operand_row(a, a16, a_at, sa[last], o, m, a_stage), sa[last],
                  operand_row(b, b16, b_at, sb[last], o, m, b_stage), sb[last], yr);
      bpt_storage_commit_row(out, y16, r * length + o, m, yr);
    }
  }
  return BPT_OK;
}

/* The gradient of operand `which`: g = beta g + sum over repeats of dy (times the other operand for mul). A
 * bf16-stored g that repeats is summed in f32 scratch (slot 0) and rounded once at the end. */
static bpt_status broadcast_gradient(bpt_backend *backend, const bpt_kernel_node *node, int which, bool multiply) {
  const bpt_kernel_tensor *y = &node->output, *input = &node->inputs[which], *other = &node->inputs[1 - which];
  int64_t s_in[BPT_MAX_RANK], s_other[BPT_MAX_RANK];
  align(y, input, s_in);
  align(y, other, s_other);
  const int last = y->rank - 1;
  const int64_t length = y->dims[last], rows = y->count / length;
  const void *dy = y->grad, *o = other->value;
  const bool g16 = bpt_tensor_is_bf16(input), y16 = bpt_tensor_is_bf16(y), o16 = multiply && bpt_tensor_is_bf16(other);
  const int64_t step = g16 || y16 || o16 ? BPT_STORAGE_STAGE : length; /* f32: each row in one call */
  const int64_t so = s_other[last];
  if (input->count == y->count) {
    /* Not repeated: one term per element, rows in parallel (a strided view's rows through its strides). */
    const float beta = input->beta;
    const bool contiguous = bpt_cpu_contiguous(input);
    void *g = input->grad;
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t r = 0; r < rows; r++) {
      const int64_t o_at = bpt_cpu_row_offset(y, s_other, r);
      const int64_t g_at = contiguous ? r * length : bpt_cpu_row_offset(y, s_in, r);
      float dy_stage[BPT_STORAGE_STAGE], o_stage[BPT_STORAGE_STAGE], g_stage[BPT_STORAGE_STAGE];
      for (int64_t c = 0; c < length; c += step) {
        const int64_t m = length - c < step ? length - c : step;
        const float *dy_row = bpt_storage_read_row(dy, y16, r * length + c, m, dy_stage);
        const float *o_row = multiply ? operand_row(o, o16, o_at, so, c, m, o_stage) : NULL;
        float *g_row = bpt_storage_write_row(g, g16, g_at + c, m, beta != 0.0f, g_stage);
        for (int64_t j = 0; j < m; j++) {
          const float term = multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
          g_row[j] = beta == 0.0f ? term : g_row[j] + term;
        }
        bpt_storage_commit_row(g, g16, g_at + c, m, g_row);
      }
    }
    return BPT_OK;
  }
  float *g = input->grad;
  if (g16) {
    const bpt_status status = bpt_cpu_scratch_reserve(backend, 1, (size_t)input->count);
    if (status != BPT_OK) return status;
    g = bpt_cpu_scratch(backend, 0);
    if (input->beta != 0.0f) bpt_storage_read_row(input->grad, true, 0, input->count, g);
  }
  if (input->beta == 0.0f) memset(g, 0, (size_t)input->count * sizeof(float));
  const int64_t si = s_in[last];
  float dy_stage[BPT_STORAGE_STAGE], o_stage[BPT_STORAGE_STAGE];
  for (int64_t r = 0; r < rows; r++) {
    const int64_t o_at = bpt_cpu_row_offset(y, s_other, r);
    float *g_row = g + bpt_cpu_row_offset(y, s_in, r);
    float sum = 0.0f;
    for (int64_t c = 0; c < length; c += step) {
      const int64_t m = length - c < step ? length - c : step;
      const float *dy_row = bpt_storage_read_row(dy, y16, r * length + c, m, dy_stage);
      const float *o_row = multiply ? operand_row(o, o16, o_at, so, c, m, o_stage) : NULL;
      if (si)
        for (int64_t j = 0; j < m; j++)
          g_row[c + j] += multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
      else
        for (int64_t j = 0; j < m; j++)
          sum += multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
    }
    if (!si) g_row[0] += sum;
  }
  bpt_storage_commit_row(input->grad, g16, 0, input->count, g);
  return BPT_OK;
}

static bpt_status broadcast_backward(bpt_backend *backend, const bpt_kernel_node *node, bool multiply) {
  for (int i = 0; i < 2; i++) {
    const bpt_status status = node->inputs[i].grad ? broadcast_gradient(backend, node, i, multiply) : BPT_OK;
    if (status != BPT_OK) return status;
  }
  return BPT_OK;
}

static bpt_status add_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_forward(node, false);
}
static bpt_status add_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  return broadcast_backward(backend, node, false);
}
static bpt_status mul_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_forward(node, true);
}
static bpt_status mul_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  return broadcast_backward(backend, node, true);
}

/* An operand may be a strided view (a slice of a fused projection, as SwiGLU's value half) when it is not
 * broadcast and its rows are contiguous: the rows are read, and its gradient's written, in place. add of one
 * shape runs on these kernels then, not on the shared primitives (core/ops/add.c). */
static bool broadcast_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  const bpt_kernel_tensor *y = &node->output;
  for (int i = 0; i < 2; i++) {
    const bpt_kernel_tensor *input = &node->inputs[i];
    if (bpt_cpu_contiguous(input)) continue;
    bool same_shape = input->rank == y->rank && bpt_cpu_rows_in_place(input);
    for (int d = 0; same_shape && d < y->rank; d++)
      same_shape = input->dims[d] == y->dims[d];
    if (!same_shape) {
      if (reason) *reason = "a strided operand must have the output's shape and contiguous rows";
      return false;
    }
  }
  return true;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, ADD, add_forward, add_backward, broadcast_supports);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, MUL, mul_forward, mul_backward, broadcast_supports);
