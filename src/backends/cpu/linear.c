/* linear's CPU kernels: the bias broadcast and reduction around the shared gemm's products (the activations
 * are in activation.c). Loops are flat and OpenMP-parallel above a size threshold so small layers stay
 * single-threaded. */
#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

/* linear's kernels are its bias terms (its products run through the shared gemm): y (rows, out) += bias (out),
 * rows the samples or a sequence's tokens. x, y and dy may be stored as bf16 (bf16_storage.h); the backward
 * products' gemm reads and writes that storage too (gemm_bf16.c, gemm_mixed.c). */
/* A bf16-stored y: this kernel runs the whole forward (linear.c leaves it the product too), the product into
 * f32 scratch and the bias added there, so y is rounded once, as the rounding path rounds x W^T + b. W may come
 * as the bf16 policy's bf16 copy of the weights (precision.c), which the gemm reads directly. */
static bpt_status linear_forward_bf16(bpt_backend *backend, const bpt_kernel_node *node, int64_t rows, int64_t cols) {
  const bpt_kernel_tensor *x = &node->inputs[0], *weight = &node->inputs[1];
  const int64_t in = weight->dims[1];
  bpt_status status = bpt_cpu_scratch_reserve(backend, 1, (size_t)(rows * cols));
  if (status != BPT_OK) return status;
  float *product = bpt_cpu_scratch(backend, 0);
  /* (rows, out) = x (rows, in) . W^T (in, out) */
  const bpt_gemm_args args = {.transpose_a = false, .transpose_b = true, .m = rows, .n = cols, .k = in, .alpha = 1.0f,
                              .a = x->value, .lda = in, .a_dtype = x->dtype, .b = weight->value,
                              .b_dtype = weight->dtype, .ldb = in, .beta = 0.0f, .c = product, .ldc = cols,
                              .bf16_products = node->bf16_products};
  status = backend->vtable->gemm(backend, &args); /* through the table, as the op file would call it */
  if (status != BPT_OK) return status;
  const float *bias = node->inputs[2].value;
  uint16_t *y = node->output.value;
#pragma omp parallel for if (rows * cols > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) y[r * cols + c] = bpt_bf16_narrow(product[r * cols + c] + bias[c]);
  return BPT_OK;
}

static bpt_status linear_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  if (bpt_tensor_is_bf16(&node->output)) return linear_forward_bf16(backend, node, rows, cols);
  const float *bias = node->inputs[2].value;
  float *y = node->output.value;
#pragma omp parallel for if (rows * cols > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *row = y + r * cols;
    for (int64_t c = 0; c < cols; c++) row[c] += bias[c];
  }
  return BPT_OK;
}

/* bias_gradient (out) += the column sums of dy (rows, out). */
static bpt_status linear_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  const bool bf16 = bpt_tensor_is_bf16(&node->output);
  const void *dy = node->output.grad;
  float *bias_gradient = node->inputs[2].grad;
  /* Columns are independent, so split them across threads; each thread walks rows in order. */
#pragma omp parallel for if (rows * cols > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    int64_t c1 = c0 + 64 < cols ? c0 + 64 : cols;
    if (bf16)
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = c0; c < c1; c++) bias_gradient[c] += bpt_bf16_widen(((const uint16_t *)dy)[r * cols + c]);
    else
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = c0; c < c1; c++) bias_gradient[c] += ((const float *)dy)[r * cols + c];
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, LINEAR, linear_forward, linear_backward, NULL);
