/* fpga-sim max and average pooling over (N, C, H, W) windows: one pipelined pass over the outputs, each step
 * reading its window (kernel_height x kernel_width values). Max pooling keeps the winning input index of every
 * output in the node's saved buffer (int32, within the sample's plane), which backward routes dy through.
 * Values are compared and averaged in the number format; in f32 the results are the CPU kernels'. */
#include <float.h>

#include "backends/fpga/fpga.h"

static uint64_t window_cycles(const bpt_fpga_model *model, const bpt_pool2d_args *a) {
  const uint64_t lanes = bpt_fpga_lanes(model);
  const uint64_t outputs = (uint64_t)(a->batch * a->channels * a->out_height * a->out_width);
  const uint64_t steps = (outputs + lanes - 1) / lanes * (uint64_t)(a->kernel_height * a->kernel_width);
  return bpt_fpga_pipelined_cycles(steps, (uint64_t)model->options.initiation_interval,
                                   (uint64_t)model->options.pipeline_depth);
}

static void charge(bpt_fpga_model *model, const bpt_pool2d_args *a, const void *input, const void *output,
                   int input_passes, int output_passes) {
  const int64_t in_count = a->batch * a->channels * a->in_height * a->in_width;
  const int64_t out_count = a->batch * a->channels * a->out_height * a->out_width;
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_POOL, window_cycles(model, a),
                  (uint64_t)input_passes * bpt_fpga_offchip_bytes(model, input, in_count) +
                      (uint64_t)output_passes * bpt_fpga_offchip_bytes(model, output, out_count),
                  (uint64_t)(out_count * a->kernel_height * a->kernel_width));
}

/* The window of output (oh, ow) clipped to the plane: [h_begin, h_end) x [w_begin, w_end). */
static void window(const bpt_pool2d_args *a, int64_t oh, int64_t ow, int64_t bounds[4]) {
  const int64_t h0 = oh * a->stride_height - a->padding_height, w0 = ow * a->stride_width - a->padding_width;
  bounds[0] = h0 < 0 ? 0 : h0;
  bounds[1] = h0 + a->kernel_height < a->in_height ? h0 + a->kernel_height : a->in_height;
  bounds[2] = w0 < 0 ? 0 : w0;
  bounds[3] = w0 + a->kernel_width < a->in_width ? w0 + a->kernel_width : a->in_width;
}

static void pool_forward_kernel(const bpt_fpga_format *format, const bpt_pool2d_args *a, const float *x, float *y,
                                int32_t *winners) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const double inverse_area = 1.0 / (double)(a->kernel_height * a->kernel_width);
planes:
  for (int64_t plane = 0; plane < a->batch * a->channels; plane++)
  outputs:
    for (int64_t o = 0; o < OH * OW; o++) {
#pragma HLS PIPELINE II=1
      int64_t b[4];
      window(a, o / OW, o % OW, b);
      const float *in = x + plane * H * W;
      if (a->kind == BPT_POOL_MAX) {
        float best = -FLT_MAX;
        int64_t best_index = b[0] * W + b[2];
        for (int64_t h = b[0]; h < b[1]; h++)
          for (int64_t w = b[2]; w < b[3]; w++)
            if (bpt_fpga_q(format, in[h * W + w]) > best) {
              best = bpt_fpga_q(format, in[h * W + w]);
              best_index = h * W + w;
            }
        y[plane * OH * OW + o] = bpt_fpga_q(format, in[best_index]);
        winners[plane * OH * OW + o] = (int32_t)best_index;
      } else {
        double sum = 0.0;
        for (int64_t h = b[0]; h < b[1]; h++)
          for (int64_t w = b[2]; w < b[3]; w++)
            sum = format->fixed ? sum + bpt_fpga_q(format, in[h * W + w]) : (double)((float)sum + in[h * W + w]);
        y[plane * OH * OW + o] =
            format->fixed ? bpt_fpga_q(format, sum * inverse_area) : (float)sum * (float)inverse_area;
      }
    }
}

/* dx += dy at each window's winner (max) or spread over the window's full area (average). */
static void pool_backward_kernel(const bpt_fpga_format *format, const bpt_pool2d_args *a, const float *dy,
                                 const int32_t *winners, float *dx) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const double inverse_area = 1.0 / (double)(a->kernel_height * a->kernel_width);
  for (int64_t plane = 0; plane < a->batch * a->channels; plane++)
    for (int64_t o = 0; o < OH * OW; o++) {
#pragma HLS PIPELINE II=1
      float *out = dx + plane * H * W;
      const double d = bpt_fpga_q(format, dy[plane * OH * OW + o]);
      if (a->kind == BPT_POOL_MAX) {
        float *target = &out[winners[plane * OH * OW + o]];
        *target = format->fixed ? bpt_fpga_q(format, (double)bpt_fpga_q(format, *target) + d) : *target + (float)d;
        continue;
      }
      int64_t b[4];
      window(a, o / OW, o % OW, b);
      const float share = format->fixed ? bpt_fpga_q(format, d * inverse_area) : (float)d * (float)inverse_area;
      for (int64_t h = b[0]; h < b[1]; h++)
        for (int64_t w = b[2]; w < b[3]; w++) {
          float *target = &out[h * W + w];
          *target = format->fixed ? bpt_fpga_q(format, (double)bpt_fpga_q(format, *target) + share) : *target + share;
        }
    }
}

static bpt_status pool2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_pool2d_args args = bpt_pool2d_args_of(node);
  if (args.kind == BPT_POOL_MAX && !node->saved)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: max pooling needs a buffer for its winners");
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  charge(&state->model, &args, node->inputs[0].value, node->output.value, 1, 1);
  pool_forward_kernel(&state->format, &args, node->inputs[0].value, node->output.value, node->saved);
  return BPT_OK;
}

static bpt_status pool2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_pool2d_args args = bpt_pool2d_args_of(node);
  if (args.kind == BPT_POOL_MAX && !node->saved)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: max pooling needs a buffer for its winners");
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  charge(&state->model, &args, node->inputs[0].grad, node->output.grad, 2, 1);
  pool_backward_kernel(&state->format, &args, node->output.grad, node->saved, node->inputs[0].grad);
  return BPT_OK;
}

/* Backward adds into dx: it needs the gradient cleared first (beta 1). */
static bool pool2d_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  return bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS(fpga, MAX_POOL2D, pool2d_forward, pool2d_backward, pool2d_supports);
BPT_REGISTER_KERNELS(fpga, AVG_POOL2D, pool2d_forward, pool2d_backward, pool2d_supports);
