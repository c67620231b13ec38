/* Optimiser update kernels on the CPU: one fused pass over the flat parameter block per step. */
#include <float.h>
#include <math.h>

#include "backends/cpu/cpu.h"

/* Inside the update loops: a value is finite when |w| <= FLT_MAX (false for NaN); an OR reduction that the
 * compiler vectorises alongside the update, so the check reads nothing twice. */
#define NOT_FINITE(x) (!(fabsf(x) <= FLT_MAX))

static bpt_status report(const bpt_update_args *args, int bad) {
  if (bad && args->found_nonfinite) *args->found_nonfinite = 1;
  return BPT_OK;
}

bpt_status bpt_cpu_sgd_update(bpt_backend *backend, const bpt_update_args *args) {
  (void)backend;
  float *w = args->parameters, *velocity = args->state0;
  const float *g = args->gradients;
  const float lr = args->learning_rate, decay = args->weight_decay, mu = args->momentum;
  const int64_t count = args->count;
  int bad = 0;
  if (!velocity || mu == 0.0f) {
#pragma omp parallel for reduction(| : bad) if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++) {
      w[i] -= lr * (g[i] + decay * w[i]);
      bad |= NOT_FINITE(w[i]);
    }
    return report(args, bad);
  }
  /* PyTorch's convention: v = mu v + g; Nesterov steps along g + mu v. */
  if (args->nesterov) {
#pragma omp parallel for reduction(| : bad) if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++) {
      float gradient = g[i] + decay * w[i];
      velocity[i] = mu * velocity[i] + gradient;
      w[i] -= lr * (gradient + mu * velocity[i]);
      bad |= NOT_FINITE(w[i]);
    }
  } else {
#pragma omp parallel for reduction(| : bad) if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++) {
      velocity[i] = mu * velocity[i] + g[i] + decay * w[i];
      w[i] -= lr * velocity[i];
      bad |= NOT_FINITE(w[i]);
    }
  }
  return report(args, bad);
}

bpt_status bpt_cpu_adam_update(bpt_backend *backend, const bpt_update_args *args) {
  (void)backend;
  float *w = args->parameters, *m = args->state0, *v = args->state1;
  const float *g = args->gradients;
  const float b1 = args->beta1, b2 = args->beta2, eps = args->epsilon, decay = args->weight_decay;
  /* Bias corrections folded into the step size and the denominator (Kingma & Ba, Algorithm 1 notes). */
  const float correction1 = 1.0f - powf(b1, (float)args->step);
  const float correction2_root = sqrtf(1.0f - powf(b2, (float)args->step));
  const float step_size = args->learning_rate / correction1;
  const float lr_decay = args->decoupled_weight_decay ? args->learning_rate * decay : 0.0f;
  const float l2_decay = args->decoupled_weight_decay ? 0.0f : decay;
  const int64_t count = args->count;
  int bad = 0;
#pragma omp parallel for reduction(| : bad) if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float gradient = g[i] + l2_decay * w[i];
    w[i] -= lr_decay * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gradient;
    v[i] = b2 * v[i] + (1.0f - b2) * gradient * gradient;
    w[i] -= step_size * m[i] / (sqrtf(v[i]) / correction2_root + eps);
    bad |= NOT_FINITE(w[i]);
  }
  return report(args, bad);
}
