/* Optimiser update kernels on the CPU: one fused pass over the flat parameter block per step, which also
 * raises the parameter check's flag (bpt_update_args.found_nonfinite) when it writes an inf or NaN. */
#include <float.h>
#include <math.h>
#include <omp.h>

#include "backends/cpu/cpu.h"

/* A value is finite when |w| <= FLT_MAX (false for NaN): an OR the compiler vectorises alongside the update,
 * so the check reads nothing twice. */
#define NOT_FINITE(x) (!(fabsf(x) <= FLT_MAX))

/* One update rule over elements [begin, end); returns whether it wrote a non-finite value. */
typedef int (*update_range)(const bpt_update_args *args, int64_t begin, int64_t end);

/* Splits the block over the threads by hand rather than with a reduction clause: clang's OpenMP reductions
 * define a global lock variable that the shared library would export. */
static bpt_status run_update(const bpt_update_args *args, update_range body) {
  const int64_t count = args->count;
  int bad = 0;
  if (count <= BPT_CPU_PARALLEL_THRESHOLD) {
    bad = body(args, 0, count);
  } else {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
      if (body(args, count * thread / threads, count * (thread + 1) / threads)) {
#pragma omp atomic write
        bad = 1;
      }
    }
  }
  if (bad && args->found_nonfinite) *args->found_nonfinite = 1;
  return BPT_OK;
}

static int sgd_range(const bpt_update_args *args, int64_t begin, int64_t end) {
  float *w = args->parameters;
  const float *g = args->gradients;
  const float lr = args->learning_rate, decay = args->weight_decay;
  int bad = 0;
  for (int64_t i = begin; i < end; i++) {
    w[i] -= lr * (g[i] + decay * w[i]);
    bad |= NOT_FINITE(w[i]);
  }
  return bad;
}

/* PyTorch's convention: v = mu v + g; Nesterov steps along g + mu v. */
static int sgd_momentum_range(const bpt_update_args *args, int64_t begin, int64_t end) {
  float *w = args->parameters, *velocity = args->state0;
  const float *g = args->gradients;
  const float lr = args->learning_rate, decay = args->weight_decay, mu = args->momentum;
  int bad = 0;
  if (args->nesterov) {
    for (int64_t i = begin; i < end; i++) {
      float gradient = g[i] + decay * w[i];
      velocity[i] = mu * velocity[i] + gradient;
      w[i] -= lr * (gradient + mu * velocity[i]);
      bad |= NOT_FINITE(w[i]);
    }
  } else {
    for (int64_t i = begin; i < end; i++) {
      velocity[i] = mu * velocity[i] + g[i] + decay * w[i];
      w[i] -= lr * velocity[i];
      bad |= NOT_FINITE(w[i]);
    }
  }
  return bad;
}

bpt_status bpt_cpu_sgd_update(bpt_backend *backend, const bpt_update_args *args) {
  (void)backend;
  return run_update(args, !args->state0 || args->momentum == 0.0f ? sgd_range : sgd_momentum_range);
}

static int adam_range(const bpt_update_args *args, int64_t begin, int64_t end) {
  float *w = args->parameters, *m = args->state0, *v = args->state1;
  const float *g = args->gradients;
  const float b1 = args->beta1, b2 = args->beta2, eps = args->epsilon, decay = args->weight_decay;
  /* Bias corrections folded into the step size and the denominator (Kingma & Ba, Algorithm 1 notes). */
  const float correction1 = 1.0f - powf(b1, (float)args->step);
  const float correction2_root = sqrtf(1.0f - powf(b2, (float)args->step));
  const float step_size = args->learning_rate / correction1;
  const float lr_decay = args->decoupled_weight_decay ? args->learning_rate * decay : 0.0f;
  const float l2_decay = args->decoupled_weight_decay ? 0.0f : decay;
  int bad = 0;
  for (int64_t i = begin; i < end; i++) {
    float gradient = g[i] + l2_decay * w[i];
    w[i] -= lr_decay * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gradient;
    v[i] = b2 * v[i] + (1.0f - b2) * gradient * gradient;
    w[i] -= step_size * m[i] / (sqrtf(v[i]) / correction2_root + eps);
    bad |= NOT_FINITE(w[i]);
  }
  return bad;
}

bpt_status bpt_cpu_adam_update(bpt_backend *backend, const bpt_update_args *args) {
  (void)backend;
  return run_update(args, adam_range);
}
