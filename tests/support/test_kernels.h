/* For tests that check one backend's op kernels directly (against a reference, or fpga-sim against the CPU): a
 * node description built by hand, run through the op's registered kernels the way the core runs them, since
 * kernels have no other entry point. Header-only, so no test's sources change in CMake. */
#ifndef BPT_TEST_KERNELS_H
#define BPT_TEST_KERNELS_H

#include <string.h>

#include "backends/backend.h"

/* A kernel tensor of rank dims (f32 unless dtype says otherwise), count their product; beta 1 (accumulate). */
static inline bpt_kernel_tensor test_kernel_tensor(bpt_dtype dtype, void *value, float *grad, int rank,
                                                   const int64_t *dims) {
  bpt_kernel_tensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.dtype = dtype;
  tensor.rank = rank;
  tensor.count = 1;
  for (int i = 0; i < rank; i++) {
    tensor.dims[i] = dims[i];
    tensor.count *= dims[i];
  }
  tensor.value = value;
  tensor.grad = grad;
  tensor.beta = 1.0f;
  return tensor;
}

/* A zeroed node of op with its name, ready for inputs and attributes. */
static inline bpt_kernel_node test_kernel_node(bpt_op_id op) {
  bpt_kernel_node node;
  memset(&node, 0, sizeof node);
  node.op = op;
  node.name = "test";
  return node;
}

/* The part of a linear node its kernels read: the bias (cols) and its gradient, the output y (rows, cols) and
 * its gradient dy (x and the weight, which only the shared gemm reads, are left empty). */
static inline bpt_kernel_node test_linear_bias_node(int64_t rows, int64_t cols, float *bias, float *bias_gradient,
                                                    float *y, float *dy) {
  bpt_kernel_node node = test_kernel_node(BPT_OP_LINEAR);
  node.input_count = 3;
  node.inputs[2] = test_kernel_tensor(BPT_DTYPE_F32, bias, bias_gradient, 1, (const int64_t[]){cols});
  node.output = test_kernel_tensor(BPT_DTYPE_F32, y, dy, 2, (const int64_t[]){rows, cols});
  return node;
}

/* An element-wise activation node of op (RELU without a mask, LEAKY_RELU with slope, SIGMOID, TANH) over count
 * values: x and y, with gradients dx and dy (NULL before backward). */
static inline bpt_kernel_node test_activation_node(bpt_op_id op, float slope, int64_t count, const float *x, float *y,
                                                   float *dx, float *dy) {
  bpt_kernel_node node = test_kernel_node(op);
  node.input_count = 1;
  node.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, (void *)x, dx, 1, &count);
  node.output = test_kernel_tensor(BPT_DTYPE_F32, y, dy, 1, &count);
  node.float_attributes[0] = slope;
  return node;
}

/* Runs the forward (backward false) or backward kernel the backend registered for node->op; a backend without
 * that kernel fails the call with BPT_ERR_UNSUPPORTED. */
static inline bpt_status test_kernel_run(bpt_backend *backend, const bpt_kernel_node *node, bool backward) {
  const bpt_op_kernels *kernels = backend->vtable->kernels(backend, node->op);
  if (!kernels) return BPT_ERR_UNSUPPORTED;
  bpt_status (*kernel)(bpt_backend *, const bpt_kernel_node *) = backward ? kernels->backward : kernels->forward;
  return kernel ? kernel(backend, node) : BPT_ERR_UNSUPPORTED;
}

#endif
