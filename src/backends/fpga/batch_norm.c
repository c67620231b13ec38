/* fpga-sim batch normalisation and batch_norm_relu over (N, C, spatial): per channel, a statistics pass (sums
 * of x - shift and its square, shift the channel's first value, as the CPU sums them so that the variance does
 * not cancel) and a normalising pass; backward, a pass for the two gradient sums and one for dx. Each pass is
 * one pipelined loop over the values, lanes at a time. Sums are kept in double (an accumulator wider than the
 * format, as an HLS design would size it), results are rounded to the number format; in f32 they are the CPU
 * kernels' to round-off. A norm folded into its convolution has nothing to do, or its ReLU in place. */
#include <math.h>

#include "backends/fpga/fpga.h"

/* passes over count values; reads and writes: what crosses the off-chip interface, in values. */
static void charge(bpt_fpga_model *model, int64_t count, int passes, const void *read, int reads, const void *written) {
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_NORM, (uint64_t)passes * bpt_fpga_loop_cycles(model, (uint64_t)count),
                  (uint64_t)reads * bpt_fpga_offchip_bytes(model, read, count) +
                      bpt_fpga_offchip_bytes(model, written, count),
                  (uint64_t)(4 * count));
}

static bool bit_set(const uint8_t *bits, int64_t i) { return bits[i / 8] >> (i % 8) & 1; }

static bpt_status forward(bpt_backend *backend, const bpt_kernel_node *node, const bpt_batch_norm_args *a) {
  const bpt_fpga_format *format = &bpt_fpga_state_of(backend)->format;
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S, row_bytes = (S + 7) / 8;
  const float *x = node->inputs[0].value, *gamma = node->inputs[1].value, *beta = node->inputs[2].value;
  float *running_mean = node->inputs[3].value, *running_variance = node->inputs[4].value, *y = node->output.value;
  float *saved_mean = bpt_batch_norm_saved_mean(node), *saved_inverse_std = bpt_batch_norm_saved_inverse_std(node);
  if (a->training && count < 2)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE,
                            "batch_norm: training needs at least 2 values per channel, got batch %lld x spatial %lld",
                            (long long)N, (long long)S);
  for (int64_t c = 0; c < C; c++) {
    double mean, inverse_std;
    if (a->training) {
      const double shift = x[c * S];
      double sum = 0.0, sum_of_squares = 0.0;
      for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < S; i++) {
#pragma HLS PIPELINE II=1
          const double centred = (double)x[(n * C + c) * S + i] - shift;
          sum += centred;
          sum_of_squares += centred * centred;
        }
      const double shifted_mean = sum / (double)count;
      double variance = sum_of_squares / (double)count - shifted_mean * shifted_mean;
      if (variance < 0.0) variance = 0.0;
      mean = shifted_mean + shift;
      inverse_std = 1.0 / sqrt(variance + (double)a->epsilon);
      saved_mean[c] = (float)mean;
      saved_inverse_std[c] = (float)inverse_std;
      const double unbiased = variance * (double)count / (double)(count - 1);
      running_mean[c] = (float)((1.0 - a->momentum) * running_mean[c] + a->momentum * mean);
      running_variance[c] = (float)((1.0 - a->momentum) * running_variance[c] + a->momentum * unbiased);
    } else {
      mean = running_mean[c];
      inverse_std = 1.0 / sqrt((double)running_variance[c] + (double)a->epsilon);
    }
    const double scale = gamma[c] * inverse_std;
    for (int64_t n = 0; n < N; n++) {
      uint8_t *bits = a->relu_mask ? a->relu_mask + (n * C + c) * row_bytes : NULL;
      for (int64_t i = 0; i < S; i++) {
#pragma HLS PIPELINE II=1
        const float value = bpt_fpga_q(format, ((double)x[(n * C + c) * S + i] - mean) * scale + beta[c]);
        const bool positive = value > 0.0f;
        y[(n * C + c) * S + i] = bits && !positive ? 0.0f : value;
        if (bits) {
          if (i % 8 == 0) bits[i / 8] = 0;
          bits[i / 8] |= (uint8_t)(positive << (i % 8));
        }
      }
    }
  }
  return BPT_OK;
}

/* dgamma += sum dy xhat, dbeta += sum dy, dx (+)= gamma / std (dy - mean(dy) - xhat mean(dy xhat)), dy masked by
 * the ReLU's bits (Ioffe and Szegedy, section 3). */
static bpt_status backward(bpt_backend *backend, const bpt_kernel_node *node, const bpt_batch_norm_args *a) {
  const bpt_fpga_format *format = &bpt_fpga_state_of(backend)->format;
  if (!a->training)
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED,
                            "batch_norm: backward needs the batch statistics of a training-mode forward pass");
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S, row_bytes = (S + 7) / 8;
  const float *x = node->inputs[0].value, *gamma = node->inputs[1].value, *dy = node->output.grad;
  float *dx = node->inputs[0].grad, *dgamma = node->inputs[1].grad, *dbeta = node->inputs[2].grad;
  const float *saved_mean = bpt_batch_norm_saved_mean(node), *saved_inverse_std = bpt_batch_norm_saved_inverse_std(node);
  for (int64_t c = 0; c < C; c++) {
    const double mean = saved_mean[c], inverse_std = saved_inverse_std[c];
    double sum_dy = 0.0, sum_dy_centred = 0.0;
    for (int64_t n = 0; n < N; n++) {
      const uint8_t *bits = a->relu_mask ? a->relu_mask + (n * C + c) * row_bytes : NULL;
      for (int64_t i = 0; i < S; i++) {
#pragma HLS PIPELINE II=1
        const double gradient = bits && !bit_set(bits, i) ? 0.0 : dy[(n * C + c) * S + i];
        sum_dy += gradient;
        sum_dy_centred += gradient * ((double)x[(n * C + c) * S + i] - mean);
      }
    }
    if (dgamma) dgamma[c] = bpt_fpga_q(format, (double)dgamma[c] + sum_dy_centred * inverse_std);
    if (dbeta) dbeta[c] = bpt_fpga_q(format, (double)dbeta[c] + sum_dy);
    if (!dx) continue;
    const double scale = gamma[c] * inverse_std, mean_dy = sum_dy / (double)count,
                 coefficient = sum_dy_centred / (double)count * inverse_std * inverse_std;
    for (int64_t n = 0; n < N; n++) {
      const uint8_t *bits = a->relu_mask ? a->relu_mask + (n * C + c) * row_bytes : NULL;
      for (int64_t i = 0; i < S; i++) {
#pragma HLS PIPELINE II=1
        const int64_t at = (n * C + c) * S + i;
        const double gradient = bits && !bit_set(bits, i) ? 0.0 : dy[at];
        const double value = scale * (gradient - mean_dy - ((double)x[at] - mean) * coefficient);
        dx[at] = bpt_fpga_q(format, a->assign_input_gradient ? value : (double)dx[at] + value);
      }
    }
  }
  return BPT_OK;
}

static bpt_status batch_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bool relu = node->op == BPT_OP_BATCH_NORM_RELU;
  if (node->int_attributes[BPT_BATCH_NORM_FOLDED])
    return relu ? bpt_kernel_relu_in_place(backend, node, &node->output, NULL, false) : BPT_OK;
  bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  if (relu) args.relu_mask = bpt_batch_norm_relu_mask(node);
  const int64_t count = node->inputs[0].count;
  charge(&bpt_fpga_state_of(backend)->model, count, args.training ? 2 : 1, node->inputs[0].value,
         args.training ? 2 : 1, node->output.value);
  return forward(backend, node, &args);
}

static bpt_status batch_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  if (node->op == BPT_OP_BATCH_NORM_RELU) args.relu_mask = bpt_batch_norm_relu_mask(node);
  /* Two passes, each reading x and dy (the second also dx where it accumulates); dx written once. */
  const int64_t count = node->inputs[0].count;
  charge(&bpt_fpga_state_of(backend)->model, count, 2, node->inputs[0].value,
         4 + (args.assign_input_gradient ? 0 : 1), node->inputs[0].grad);
  return backward(backend, node, &args);
}

BPT_REGISTER_KERNELS(fpga, BATCH_NORM, batch_norm_forward, batch_norm_backward, NULL);
BPT_REGISTER_KERNELS(fpga, BATCH_NORM_RELU, batch_norm_forward, batch_norm_backward, NULL);
