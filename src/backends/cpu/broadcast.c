/* add and mul with NumPy broadcasting on the CPU. Each operand is right-aligned with the output and given
 * element strides along the output's axes, 0 where it is repeated; the output is walked as rows of its last
 * axis, with the inner loop specialised on whether each operand steps or repeats along it, so the common
 * cases (same shape, a bias row, a per-row scalar) vectorise. A repeated operand's gradient is the sum of
 * dy over the repeats: those rows are summed serially, in row order, so results do not depend on threads.
 * Operands are read through their strides, so a strided view of the output's shape is read in place. */
#include <string.h>

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

static bpt_status broadcast_forward(const bpt_kernel_node *node, bool multiply) {
  const bpt_kernel_tensor *y = &node->output;
  int64_t sa[BPT_MAX_RANK], sb[BPT_MAX_RANK];
  align(y, &node->inputs[0], sa);
  align(y, &node->inputs[1], sb);
  const int last = y->rank - 1;
  const int64_t length = y->dims[last], rows = y->count / length;
  const float *a = node->inputs[0].value, *b = node->inputs[1].value;
  float *out = y->value;
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++)
    combine_row(multiply, length, a + bpt_cpu_row_offset(y, sa, r), sa[last], b + bpt_cpu_row_offset(y, sb, r),
                sb[last], out + r * length);
  return BPT_OK;
}

/* The gradient of operand `which`: g = beta g + sum over repeats of dy (times the other operand for mul). */
static void broadcast_gradient(const bpt_kernel_node *node, int which, bool multiply) {
  const bpt_kernel_tensor *y = &node->output, *input = &node->inputs[which], *other = &node->inputs[1 - which];
  int64_t s_in[BPT_MAX_RANK], s_other[BPT_MAX_RANK];
  align(y, input, s_in);
  align(y, other, s_other);
  const int last = y->rank - 1;
  const int64_t length = y->dims[last], rows = y->count / length;
  const float *dy = y->grad, *o = other->value;
  float *g = input->grad;
  if (input->count == y->count) {
    /* Not repeated: one term per element, rows in parallel (a strided view's rows through its strides). */
    const float beta = input->beta;
    const bool contiguous = bpt_cpu_contiguous(input);
#pragma omp parallel for if (y->count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t r = 0; r < rows; r++) {
      const float *dy_row = dy + r * length, *o_row = o + bpt_cpu_row_offset(y, s_other, r);
      float *g_row = g + (contiguous ? r * length : bpt_cpu_row_offset(y, s_in, r));
      const int64_t so = s_other[last];
      for (int64_t j = 0; j < length; j++) {
        const float term = multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
        g_row[j] = beta == 0.0f ? term : g_row[j] + term;
      }
    }
    return;
  }
  if (input->beta == 0.0f) memset(g, 0, (size_t)input->count * sizeof(float));
  const int64_t si = s_in[last], so = s_other[last];
  for (int64_t r = 0; r < rows; r++) {
    const float *dy_row = dy + r * length, *o_row = o + bpt_cpu_row_offset(y, s_other, r);
    float *g_row = g + bpt_cpu_row_offset(y, s_in, r);
    if (si)
      for (int64_t j = 0; j < length; j++)
        g_row[j] += multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
    else {
      float sum = 0.0f;
      for (int64_t j = 0; j < length; j++)
        sum += multiply ? dy_row[j] * o_row[j * so] : dy_row[j];
      g_row[0] += sum;
    }
  }
}

static bpt_status broadcast_backward(const bpt_kernel_node *node, bool multiply) {
  for (int i = 0; i < 2; i++)
    if (node->inputs[i].grad) broadcast_gradient(node, i, multiply);
  return BPT_OK;
}

static bpt_status add_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_forward(node, false);
}
static bpt_status add_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_backward(node, false);
}
static bpt_status mul_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_forward(node, true);
}
static bpt_status mul_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  return broadcast_backward(node, true);
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

BPT_REGISTER_KERNELS_STRIDED(cpu, ADD, add_forward, add_backward, broadcast_supports);
BPT_REGISTER_KERNELS_STRIDED(cpu, MUL, mul_forward, mul_backward, broadcast_supports);
