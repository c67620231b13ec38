/* fpga-sim element-wise kernels: bias broadcast and reduction, activations, y += alpha x.
 * Each is one pipelined loop of ceil(count / lanes) steps in the cycle model; the kernels read and write
 * every value through the number format. */
#include <math.h>

#include "backends/fpga/fpga.h"

static void bias_add_kernel(const bpt_fpga_format *format, int64_t rows, int64_t cols, const float *bias, float *y) {
  for (int64_t r = 0; r < rows; r++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
    for (int64_t c = 0; c < cols; c++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
      y[r * cols + c] = bpt_fpga_q(format, (double)bpt_fpga_q(format, y[r * cols + c]) + bpt_fpga_q(format, bias[c]));
    }
  }
}

/* linear's kernels are its bias terms (its products run through the shared gemm): y (rows, out) += bias (out),
 * rows the samples or a sequence's tokens. */
static bpt_status linear_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  const float *bias = node->inputs[2].value;
  float *y = node->output.value;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t cycles = (uint64_t)rows * bpt_fpga_loop_cycles(model, (uint64_t)cols);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_BIAS_ADD, cycles,
                  bpt_fpga_offchip_bytes(model, bias, cols) + 2 * bpt_fpga_offchip_bytes(model, y, rows * cols),
                  (uint64_t)(rows * cols));
  bias_add_kernel(&state->format, rows, cols, bias, y);
  return BPT_OK;
}

/* Columns in the inner, pipelined loop so each lane owns one column's running sum (no loop-carried add). */
static void bias_backward_kernel(const bpt_fpga_format *format, int64_t rows, int64_t cols, const float *dy,
                                 float *bias_gradient) {
  for (int64_t c0 = 0; c0 < cols; c0 += BPT_FPGA_TILE) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=4
    const int64_t width = cols - c0 < BPT_FPGA_TILE ? cols - c0 : BPT_FPGA_TILE;
    double sums[BPT_FPGA_TILE];
#pragma HLS ARRAY_PARTITION variable=sums cyclic factor=8
    for (int64_t c = 0; c < width; c++)
      sums[c] = bpt_fpga_q(format, bias_gradient[c0 + c]);
    for (int64_t r = 0; r < rows; r++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
      for (int64_t c = 0; c < width; c++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
        double value = bpt_fpga_q(format, dy[r * cols + c0 + c]);
        sums[c] = format->fixed ? sums[c] + value : (double)((float)sums[c] + (float)value);
      }
    }
    for (int64_t c = 0; c < width; c++)
      bias_gradient[c0 + c] = bpt_fpga_q(format, sums[c]);
  }
}

/* bias_gradient (out) += the column sums of dy (rows, out). */
static bpt_status linear_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t cols = node->output.dims[node->output.rank - 1], rows = node->output.count / cols;
  const float *dy = node->output.grad;
  float *bias_gradient = node->inputs[2].grad;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t cycles = (uint64_t)rows * bpt_fpga_loop_cycles(model, (uint64_t)cols);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_BIAS_BACKWARD, cycles,
                  bpt_fpga_offchip_bytes(model, dy, rows * cols) +
                      2 * bpt_fpga_offchip_bytes(model, bias_gradient, cols),
                  (uint64_t)(rows * cols));
  bias_backward_kernel(&state->format, rows, cols, dy, bias_gradient);
  return BPT_OK;
}

static double activate(bpt_activation kind, float parameter, double x) {
  switch (kind) {
  case BPT_ACTIVATION_RELU: return x > 0.0 ? x : 0.0;
  case BPT_ACTIVATION_LEAKY_RELU: return x > 0.0 ? x : (double)((float)parameter * (float)x);
  case BPT_ACTIVATION_SIGMOID: return 1.0f / (1.0f + expf(-(float)x));
  case BPT_ACTIVATION_TANH: return tanhf((float)x);
  }
  return 0.0;
}

static void activation_forward_kernel(const bpt_fpga_format *format, bpt_activation kind, float parameter,
                                      int64_t count, const float *x, float *y) {
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
#pragma HLS LOOP_TRIPCOUNT min=1 max=65536
    y[i] = bpt_fpga_q(format, activate(kind, parameter, bpt_fpga_q(format, x[i])));
  }
}

/* dx += f'(x) dy, with the same float expressions as the CPU reference so f32 results match exactly. */
static double derivative_times(bpt_activation kind, float parameter, float x, float y, float dy) {
  switch (kind) {
  case BPT_ACTIVATION_RELU: return x > 0.0f ? dy : 0.0f;
  case BPT_ACTIVATION_LEAKY_RELU: return x > 0.0f ? dy : parameter * dy;
  case BPT_ACTIVATION_SIGMOID: return dy * y * (1.0f - y);
  case BPT_ACTIVATION_TANH: return dy * (1.0f - y * y);
  }
  return 0.0;
}

static void activation_backward_kernel(const bpt_fpga_format *format, bpt_activation kind, float parameter,
                                       int64_t count, const float *x, const float *y, const float *dy, float *dx) {
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
#pragma HLS LOOP_TRIPCOUNT min=1 max=65536
    double term = derivative_times(kind, parameter, bpt_fpga_q(format, x[i]), bpt_fpga_q(format, y[i]),
                                   bpt_fpga_q(format, dy[i]));
    dx[i] = format->fixed ? bpt_fpga_q(format, (double)bpt_fpga_q(format, dx[i]) + bpt_fpga_q(format, term))
                          : dx[i] + (float)term;
  }
}

/* The activations (relu, leaky_relu with its slope in float attribute 0, sigmoid, tanh); ReLU reads x in
 * backward (this backend keeps no 1-bit masks). */
static bpt_status activation_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_activation_args a = bpt_activation_args_of(node);
  float *y = node->output.value;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_ACTIVATION_FORWARD, bpt_fpga_loop_cycles(model, (uint64_t)a.count),
                  bpt_fpga_offchip_bytes(model, a.x, a.count) + bpt_fpga_offchip_bytes(model, y, a.count),
                  (uint64_t)a.count);
  activation_forward_kernel(&state->format, a.kind, a.parameter, a.count, a.x, y);
  return BPT_OK;
}

static bpt_status activation_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_activation_args a = bpt_activation_args_of(node);
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_ACTIVATION_BACKWARD, bpt_fpga_loop_cycles(model, (uint64_t)a.count),
                  bpt_fpga_offchip_bytes(model, a.x, a.count) + bpt_fpga_offchip_bytes(model, a.y, a.count) +
                      bpt_fpga_offchip_bytes(model, a.dy, a.count) + 2 * bpt_fpga_offchip_bytes(model, a.dx, a.count),
                  (uint64_t)a.count);
  activation_backward_kernel(&state->format, a.kind, a.parameter, a.count, a.x, a.y, a.dy, a.dx);
  return BPT_OK;
}

static void add_scaled_kernel(const bpt_fpga_format *format, int64_t count, float alpha, const float *x, float *y) {
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
#pragma HLS LOOP_TRIPCOUNT min=1 max=1048576
    y[i] = format->fixed
               ? bpt_fpga_q(format, (double)bpt_fpga_q(format, y[i]) + (double)alpha * bpt_fpga_q(format, x[i]))
               : y[i] + alpha * x[i];
  }
}

bpt_status bpt_fpga_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y) {
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_ADD_SCALED, bpt_fpga_loop_cycles(model, (uint64_t)count),
                  bpt_fpga_offchip_bytes(model, x, count) + 2 * bpt_fpga_offchip_bytes(model, y, count),
                  (uint64_t)count);
  add_scaled_kernel(&state->format, count, alpha, x, y);
  return BPT_OK;
}

BPT_REGISTER_KERNELS(fpga, LINEAR, linear_forward, linear_backward, NULL);

static bool activation_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  if (node->op == BPT_OP_RELU && node->int_attributes[BPT_RELU_USES_MASK]) {
    *reason = "no 1-bit ReLU masks";
    return false;
  }
  return bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS(fpga, RELU, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(fpga, LEAKY_RELU, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(fpga, SIGMOID, activation_forward, activation_backward, activation_supports);
BPT_REGISTER_KERNELS(fpga, TANH, activation_forward, activation_backward, activation_supports);
