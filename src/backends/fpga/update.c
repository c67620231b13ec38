/* fpga-sim optimiser updates: one pipelined pass over the flat parameter block per step, the same float
 * expressions as the CPU backend (so f32 results match it), parameters and state quantised in fixed point. */
#include <math.h>

#include "backends/fpga/fpga.h"

static void charge_update(bpt_fpga_model *model, bpt_fpga_kernel kernel, const bpt_update_args *args) {
  uint64_t count = (uint64_t)args->count;
  uint64_t bytes = 2 * bpt_fpga_offchip_bytes(model, args->parameters, args->count) +
                   bpt_fpga_offchip_bytes(model, args->gradients, args->count) +
                   (args->state0 ? 2 * bpt_fpga_offchip_bytes(model, args->state0, args->count) : 0) +
                   (args->state1 ? 2 * bpt_fpga_offchip_bytes(model, args->state1, args->count) : 0);
  bpt_fpga_charge(model, kernel, bpt_fpga_loop_cycles(model, count), bytes, count);
}

static void sgd_kernel(const bpt_fpga_format *format, int64_t count, float *w, const float *g, float *velocity,
                       float lr, float decay, float mu, bool nesterov) {
  for (int64_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
#pragma HLS LOOP_TRIPCOUNT min=1 max=1048576
    float weight = bpt_fpga_q(format, w[i]), gradient = bpt_fpga_q(format, g[i]);
    if (!velocity || mu == 0.0f) {
      w[i] = bpt_fpga_q(format, weight - lr * (gradient + decay * weight));
    } else if (nesterov) {
      float decayed = gradient + decay * weight;
      float v = bpt_fpga_q(format, mu * bpt_fpga_q(format, velocity[i]) + decayed);
      velocity[i] = v;
      w[i] = bpt_fpga_q(format, weight - lr * (decayed + mu * v));
    } else {
      float v = bpt_fpga_q(format, mu * bpt_fpga_q(format, velocity[i]) + gradient + decay * weight);
      velocity[i] = v;
      w[i] = bpt_fpga_q(format, weight - lr * v);
    }
  }
}

/* The parameter check's flag (bpt_update_args.found_nonfinite): in hardware a comparator on the write port. */
static void mark_nonfinite(const bpt_update_args *args) {
  if (!args->found_nonfinite) return;
  for (int64_t i = 0; i < args->count; i++)
    if (!isfinite(args->parameters[i])) {
      *args->found_nonfinite = 1;
      return;
    }
}

bpt_status bpt_fpga_sgd_update(bpt_backend *backend, const bpt_update_args *args) {
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  charge_update(&state->model, BPT_FPGA_KERNEL_SGD_UPDATE, args);
  sgd_kernel(&state->format, args->count, args->parameters, args->gradients, args->state0, args->learning_rate,
             args->weight_decay, args->momentum, args->nesterov);
  mark_nonfinite(args);
  return BPT_OK;
}

static void adam_kernel(const bpt_fpga_format *format, const bpt_update_args *args) {
  const float b1 = args->beta1, b2 = args->beta2, eps = args->epsilon, decay = args->weight_decay;
  const float correction1 = 1.0f - powf(b1, (float)args->step);
  const float correction2_root = sqrtf(1.0f - powf(b2, (float)args->step));
  const float step_size = args->learning_rate / correction1;
  const float lr_decay = args->decoupled_weight_decay ? args->learning_rate * decay : 0.0f;
  const float l2_decay = args->decoupled_weight_decay ? 0.0f : decay;
  float *w = args->parameters, *m = args->state0, *v = args->state1;
  for (int64_t i = 0; i < args->count; i++) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=1048576
    float weight = bpt_fpga_q(format, w[i]);
    float gradient = bpt_fpga_q(format, args->gradients[i]) + l2_decay * weight;
    weight -= lr_decay * weight;
    float first = bpt_fpga_q(format, b1 * bpt_fpga_q(format, m[i]) + (1.0f - b1) * gradient);
    float second = bpt_fpga_q(format, b2 * bpt_fpga_q(format, v[i]) + (1.0f - b2) * gradient * gradient);
    m[i] = first;
    v[i] = second;
    w[i] = bpt_fpga_q(format, weight - step_size * first / (sqrtf(second) / correction2_root + eps));
  }
}

bpt_status bpt_fpga_adam_update(bpt_backend *backend, const bpt_update_args *args) {
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  if (!args->state0 || !args->state1)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "adam update needs both moment buffers");
  charge_update(&state->model, BPT_FPGA_KERNEL_ADAM_UPDATE, args);
  adam_kernel(&state->format, args);
  mark_nonfinite(args);
  return BPT_OK;
}
