/* fpga-sim loss kernels: fused softmax + cross-entropy and mean squared error. Per row, softmax is three
 * pipelined loops over the classes (maximum, exponentials and their sum, normalisation); exp is one lane
 * (an HLS exp core per engine). Probabilities are quantised to the number format. */
#include <math.h>

#include "backends/fpga/fpga.h"

static uint64_t loop(const bpt_fpga_model *model, uint64_t trips) {
  return bpt_fpga_pipelined_cycles(trips, (uint64_t)model->options.initiation_interval,
                                   (uint64_t)model->options.pipeline_depth);
}

/* Same arithmetic as the CPU reference (f32 exponentials, double sum) so f32 results agree to rounding. */
static double softmax_cross_entropy_kernel(const bpt_fpga_format *format, int64_t batch, int64_t classes,
                                           const float *logits, const int32_t *labels, float *probabilities) {
  double total = 0.0;
  for (int64_t n = 0; n < batch; n++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
    const float *row = logits + n * classes;
    float *p = probabilities + n * classes;
    float maximum = bpt_fpga_q(format, row[0]);
  find_maximum:
    for (int64_t c = 1; c < classes; c++) {
#pragma HLS PIPELINE II=1
      float value = bpt_fpga_q(format, row[c]);
      maximum = value > maximum ? value : maximum;
    }
    double sum = 0.0;
  exponentials:
    for (int64_t c = 0; c < classes; c++) {
#pragma HLS PIPELINE II=1
      p[c] = expf(bpt_fpga_q(format, row[c]) - maximum);
      sum += p[c];
    }
    float inverse = (float)(1.0 / sum);
  normalise:
    for (int64_t c = 0; c < classes; c++) {
#pragma HLS PIPELINE II=1
      p[c] = bpt_fpga_q(format, p[c] * inverse);
    }
    total += log(sum) + (double)maximum - (double)bpt_fpga_q(format, row[labels[n]]);
  }
  return total / (double)batch;
}

/* softmax_cross_entropy (kernel_args.h gives the layout); labels are checked on the host, as the CPU does. */
static bpt_status softmax_cross_entropy_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args args = bpt_softmax_cross_entropy_args_of(node);
  bpt_status status = bpt_softmax_cross_entropy_check_labels(backend, &args);
  if (status != BPT_OK) return status;
  const int64_t batch = args.rows, classes = args.classes;
  float *loss = node->output.value;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t cycles = (uint64_t)batch * (2 * loop(model, (uint64_t)classes) + loop(model, (uint64_t)classes - 1));
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_SOFTMAX_CE_FORWARD, cycles,
                  bpt_fpga_offchip_bytes(model, args.logits, batch * classes) +
                      bpt_fpga_offchip_bytes(model, args.probabilities, batch * classes),
                  (uint64_t)(batch * classes));
  *loss = bpt_fpga_q(&state->format, softmax_cross_entropy_kernel(&state->format, batch, classes, args.logits,
                                                                  args.labels, args.probabilities));
  return BPT_OK;
}

static void softmax_cross_entropy_backward_kernel(const bpt_fpga_format *format, int64_t batch, int64_t classes,
                                                  const float *probabilities, const int32_t *labels, float scale,
                                                  float *dlogits) {
  for (int64_t n = 0; n < batch; n++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
    for (int64_t c = 0; c < classes; c++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
      float target = c == labels[n] ? 1.0f : 0.0f;
      float *d = &dlogits[n * classes + c];
      float p = bpt_fpga_q(format, probabilities[n * classes + c]);
      *d = format->fixed ? bpt_fpga_q(format, (double)bpt_fpga_q(format, *d) + bpt_fpga_q(format, scale * (p - target)))
                         : *d + scale * (p - target);
    }
  }
}

static bpt_status softmax_cross_entropy_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args a = bpt_softmax_cross_entropy_args_of(node);
  float *dlogits = node->inputs[0].grad;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t lanes = bpt_fpga_lanes(model);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_SOFTMAX_CE_BACKWARD,
                  (uint64_t)a.rows * loop(model, ((uint64_t)a.classes + lanes - 1) / lanes),
                  bpt_fpga_offchip_bytes(model, a.probabilities, a.rows * a.classes) +
                      2 * bpt_fpga_offchip_bytes(model, dlogits, a.rows * a.classes),
                  (uint64_t)(a.rows * a.classes));
  softmax_cross_entropy_backward_kernel(&state->format, a.rows, a.classes, a.probabilities, a.labels,
                                        *node->output.grad / (float)a.rows, dlogits);
  return BPT_OK;
}

/* The engine's loss unit has no ignore index or label smoothing (the op's int attribute 0 and float attribute 0):
 * such nodes are refused here, so compile says so or, with cpu_fallback, runs them on the CPU. */
static bool softmax_cross_entropy_supports(const bpt_backend *backend, const bpt_kernel_node *node,
                                           const char **reason) {
  (void)backend;
  if (node->int_attributes[0] != 0 || node->float_attributes[0] != 0.0f) {
    *reason = "its loss unit has no ignore index or label smoothing";
    return false;
  }
  return true;
}

BPT_REGISTER_KERNELS(fpga, SOFTMAX_CROSS_ENTROPY, softmax_cross_entropy_forward, softmax_cross_entropy_backward,
                     softmax_cross_entropy_supports);

/* mse: prediction and target of one shape; the output is the mean squared difference. */
static bpt_status mse_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->inputs[0].count;
  const float *prediction = node->inputs[0].value, *target = node->inputs[1].value;
  float *loss = node->output.value;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t lanes = bpt_fpga_lanes(model);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_MSE_FORWARD, loop(model, ((uint64_t)count + lanes - 1) / lanes),
                  bpt_fpga_offchip_bytes(model, prediction, count) + bpt_fpga_offchip_bytes(model, target, count),
                  (uint64_t)count);
  double total = 0.0;
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
    double difference = (double)bpt_fpga_q(&state->format, prediction[i]) - bpt_fpga_q(&state->format, target[i]);
    total += difference * difference;
  }
  *loss = bpt_fpga_q(&state->format, total / (double)count);
  return BPT_OK;
}

static bpt_status mse_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->inputs[0].count;
  const float *prediction = node->inputs[0].value, *target = node->inputs[1].value, *loss_gradient = node->output.grad;
  float *dprediction = node->inputs[0].grad, *dtarget = node->inputs[1].grad;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  const bpt_fpga_format *format = &state->format;
  bpt_fpga_model *model = &state->model;
  uint64_t lanes = bpt_fpga_lanes(model);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_MSE_BACKWARD, loop(model, ((uint64_t)count + lanes - 1) / lanes),
                  bpt_fpga_offchip_bytes(model, prediction, count) + bpt_fpga_offchip_bytes(model, target, count) +
                      (dprediction ? 2 * bpt_fpga_offchip_bytes(model, dprediction, count) : 0) +
                      (dtarget ? 2 * bpt_fpga_offchip_bytes(model, dtarget, count) : 0),
                  (uint64_t)count);
  const float scale = 2.0f * *loss_gradient / (float)count;
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
    float g = scale * (bpt_fpga_q(format, prediction[i]) - bpt_fpga_q(format, target[i]));
    if (dprediction)
      dprediction[i] = format->fixed ? bpt_fpga_q(format, (double)dprediction[i] + g) : dprediction[i] + g;
    if (dtarget) dtarget[i] = format->fixed ? bpt_fpga_q(format, (double)dtarget[i] - g) : dtarget[i] - g;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(fpga, MSE, mse_forward, mse_backward, NULL);
