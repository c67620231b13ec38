/* fpga-sim conv2d (groups 1): lowered to the GEMM engine one sample at a time, as an accelerator without a
 * convolution datapath of its own would run it. A line-buffer kernel streams the sample's receptive fields
 * into a column matrix (im2col: rows C kh kw, columns OH OW) and the engine multiplies it with the weights;
 * backward runs the two gradient products on the engine and scatters the column gradient back (col2im).
 * The products are charged as GEMM calls, the streaming loops as im2col, the bias terms as bias add and
 * reduction: one pipelined loop of ceil(count / lanes) steps each. */
#include <stdlib.h>
#include <string.h>

#include "backends/fpga/fpga.h"

/* Input position of column (oh, ow) for kernel tap (kh, kw), or -1 in the zero padding. */
static int64_t source_index(const bpt_conv2d_args *a, int64_t kh, int64_t kw, int64_t oh, int64_t ow) {
  const int64_t h = oh * a->stride_height - a->padding_height + kh * a->dilation_height;
  const int64_t w = ow * a->stride_width - a->padding_width + kw * a->dilation_width;
  return h < 0 || h >= a->in_height || w < 0 || w >= a->in_width ? -1 : h * a->in_width + w;
}

/* columns (C kh kw, OH OW) = the receptive fields of one sample x (C, H, W). */
static void im2col_kernel(const bpt_conv2d_args *a, const float *x, float *columns) {
  const int64_t outputs = a->out_height * a->out_width;
rows:
  for (int64_t c = 0; c < a->in_channels; c++)
    for (int64_t kh = 0; kh < a->kernel_height; kh++)
      for (int64_t kw = 0; kw < a->kernel_width; kw++) {
        float *row = columns + ((c * a->kernel_height + kh) * a->kernel_width + kw) * outputs;
      stream:
        for (int64_t o = 0; o < outputs; o++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
          const int64_t at = source_index(a, kh, kw, o / a->out_width, o % a->out_width);
          row[o] = at < 0 ? 0.0f : x[c * a->in_height * a->in_width + at];
        }
      }
}

/* dx (C, H, W) of one sample += the column gradient scattered back to the positions it was read from. */
static void col2im_kernel(const bpt_fpga_format *format, const bpt_conv2d_args *a, const float *columns, float *dx) {
  const int64_t outputs = a->out_height * a->out_width;
  for (int64_t c = 0; c < a->in_channels; c++)
    for (int64_t kh = 0; kh < a->kernel_height; kh++)
      for (int64_t kw = 0; kw < a->kernel_width; kw++) {
        const float *row = columns + ((c * a->kernel_height + kh) * a->kernel_width + kw) * outputs;
        for (int64_t o = 0; o < outputs; o++) {
#pragma HLS PIPELINE II=1
          const int64_t at = source_index(a, kh, kw, o / a->out_width, o % a->out_width);
          if (at < 0) continue;
          float *out = &dx[c * a->in_height * a->in_width + at];
          *out = format->fixed ? bpt_fpga_q(format, (double)bpt_fpga_q(format, *out) + bpt_fpga_q(format, row[o]))
                               : *out + row[o];
        }
      }
}

/* The column matrix of one sample on the host side of the engine (the line buffer's contents). */
static float *columns_for(bpt_backend *backend, const bpt_conv2d_args *a) {
  const size_t count = (size_t)(a->in_channels * a->kernel_height * a->kernel_width * a->out_height * a->out_width);
  float *columns = malloc((count ? count : 1) * sizeof *columns);
  if (!columns) bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "conv2d: cannot allocate %zu column values", count);
  return columns;
}

static void charge_streaming(bpt_fpga_model *model, const bpt_conv2d_args *a, uint64_t offchip_bytes) {
  const uint64_t count =
      (uint64_t)(a->in_channels * a->kernel_height * a->kernel_width * a->out_height * a->out_width);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_IM2COL, bpt_fpga_loop_cycles(model, count), offchip_bytes, count);
}

/* y (N, O, OH, OW) = W (O, C kh kw) . columns, plus the bias per output channel. */
static bpt_status conv2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node), *a = &args;
  const float *x = node->inputs[0].value, *weight = node->inputs[1].value;
  const float *bias = node->input_count > 2 ? node->inputs[2].value : NULL;
  float *y = node->output.value;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  const int64_t rows = a->in_channels * a->kernel_height * a->kernel_width, outputs = a->out_height * a->out_width;
  const int64_t in_count = a->in_channels * a->in_height * a->in_width, out_count = a->out_channels * outputs;
  float *columns = columns_for(backend, a);
  if (!columns) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = BPT_OK;
  for (int64_t n = 0; n < a->batch && status == BPT_OK; n++) {
    charge_streaming(model, a, bpt_fpga_offchip_bytes(model, x + n * in_count, in_count));
    im2col_kernel(a, x + n * in_count, columns);
    const bpt_gemm_args product = {.m = a->out_channels, .n = outputs, .k = rows, .alpha = 1.0f, .a = weight,
                                   .lda = rows, .b = columns, .ldb = outputs, .beta = 0.0f, .c = y + n * out_count,
                                   .ldc = outputs};
    status = bpt_fpga_gemm(backend, &product);
    if (status != BPT_OK || !bias) continue;
    bpt_fpga_charge(model, BPT_FPGA_KERNEL_BIAS_ADD, bpt_fpga_loop_cycles(model, (uint64_t)out_count),
                    bpt_fpga_offchip_bytes(model, bias, a->out_channels) +
                        2 * bpt_fpga_offchip_bytes(model, y + n * out_count, out_count),
                    (uint64_t)out_count);
    const bpt_fpga_format *format = &state->format;
    for (int64_t o = 0; o < a->out_channels; o++)
      for (int64_t i = 0; i < outputs; i++) {
#pragma HLS PIPELINE II=1
        float *out = &y[n * out_count + o * outputs + i];
        *out = bpt_fpga_q(format, (double)bpt_fpga_q(format, *out) + bpt_fpga_q(format, bias[o]));
      }
  }
  free(columns);
  return status;
}

/* Sums of dy per output channel into dbias, in the bias reduction's order (samples, then positions). */
static void bias_gradient(bpt_fpga_model *model, const bpt_fpga_format *format, const bpt_conv2d_args *a,
                          const float *dy, float beta, float *dbias) {
  const int64_t outputs = a->out_height * a->out_width, count = a->batch * a->out_channels * outputs;
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_BIAS_BACKWARD, bpt_fpga_loop_cycles(model, (uint64_t)count),
                  bpt_fpga_offchip_bytes(model, dy, count) + 2 * bpt_fpga_offchip_bytes(model, dbias, a->out_channels),
                  (uint64_t)count);
  for (int64_t o = 0; o < a->out_channels; o++) {
    double sum = beta == 0.0f ? 0.0 : bpt_fpga_q(format, dbias[o]);
    for (int64_t n = 0; n < a->batch; n++)
      for (int64_t i = 0; i < outputs; i++) {
#pragma HLS PIPELINE II=1
        const double value = bpt_fpga_q(format, dy[(n * a->out_channels + o) * outputs + i]);
        sum = format->fixed ? sum + value : (double)((float)sum + (float)value);
      }
    dbias[o] = bpt_fpga_q(format, sum);
  }
}

/* dW += dy_n (O, OH OW) . columns_n^T, db += dy summed per channel, dx (=, or += with beta 1) col2im(W^T dy_n). */
static bpt_status conv2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node), *a = &args;
  const bpt_kernel_tensor *x = &node->inputs[0], *weight = &node->inputs[1];
  const bpt_kernel_tensor *bias = node->input_count > 2 ? &node->inputs[2] : NULL;
  const float *dy = node->output.grad;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  const int64_t rows = a->in_channels * a->kernel_height * a->kernel_width, outputs = a->out_height * a->out_width;
  const int64_t in_count = a->in_channels * a->in_height * a->in_width, out_count = a->out_channels * outputs;
  if (bias && bias->grad) bias_gradient(model, &state->format, a, dy, bias->beta, bias->grad);
  if (!weight->grad && !x->grad) return BPT_OK;
  float *columns = columns_for(backend, a);
  if (!columns) return BPT_ERR_OUT_OF_MEMORY;
  if (weight->grad && weight->beta == 0.0f) memset(weight->grad, 0, (size_t)weight->count * sizeof(float));
  if (x->grad && x->beta == 0.0f) memset(x->grad, 0, (size_t)x->count * sizeof(float));
  bpt_status status = BPT_OK;
  for (int64_t n = 0; n < a->batch && status == BPT_OK; n++) {
    if (weight->grad) {
      charge_streaming(model, a, bpt_fpga_offchip_bytes(model, x->value, in_count));
      im2col_kernel(a, (const float *)x->value + n * in_count, columns);
      const bpt_gemm_args product = {.transpose_b = true, .m = a->out_channels, .n = rows, .k = outputs,
                                     .alpha = 1.0f, .a = dy + n * out_count, .lda = outputs, .b = columns,
                                     .ldb = outputs, .beta = 1.0f, .c = weight->grad, .ldc = rows};
      status = bpt_fpga_gemm(backend, &product);
    }
    if (status != BPT_OK || !x->grad) continue;
    const bpt_gemm_args product = {.transpose_a = true, .m = rows, .n = outputs, .k = a->out_channels,
                                   .alpha = 1.0f, .a = weight->value, .lda = rows, .b = dy + n * out_count,
                                   .ldb = outputs, .beta = 0.0f, .c = columns, .ldc = outputs};
    status = bpt_fpga_gemm(backend, &product);
    if (status != BPT_OK) continue;
    charge_streaming(model, a, 2 * bpt_fpga_offchip_bytes(model, x->grad, in_count));
    col2im_kernel(&state->format, a, columns, x->grad + n * in_count);
  }
  free(columns);
  return status;
}

static bool conv2d_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  if (node->int_attributes[BPT_CONV2D_GROUPS] != 1) {
    *reason = "grouped convolutions are not lowered";
    return false;
  }
  return true;
}

BPT_REGISTER_KERNELS(fpga, CONV2D, conv2d_forward, conv2d_backward, conv2d_supports);
