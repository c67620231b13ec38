/* Loss kernels on the CPU: fused softmax + cross-entropy and mean squared error.
 * Sums are accumulated in double over a fixed number of chunks, then added in chunk order: OpenMP's own
 * reduction clause combines in thread arrival order, which would make two runs differ in the last bit. */
#include <math.h>
#include <stdbool.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

#define LOSS_CHUNKS BPT_CPU_REDUCTION_CHUNKS

static double sum_in_order(const double *partial) {
  double total = 0.0;
  for (int c = 0; c < LOSS_CHUNKS; c++)
    total += partial[c];
  return total;
}

typedef bpt_cross_entropy_options cross_entropy_options;

static bool ignored(const cross_entropy_options *o, int32_t label) { return bpt_cross_entropy_ignored(o, label); }

/* p = softmax(row); returns log sum exp(row). Subtracting the row maximum keeps exp() finite; the log-sum-exp
 * gives the loss without log(0). */
static double softmax_row(const float *row, int64_t classes, float *p) {
  float maximum = row[0];
  for (int64_t c = 1; c < classes; c++)
    maximum = row[c] > maximum ? row[c] : maximum;
  double sum = 0.0;
  for (int64_t c = 0; c < classes; c++) {
    p[c] = expf(row[c] - maximum);
    sum += p[c];
  }
  float inverse = (float)(1.0 / sum);
  for (int64_t c = 0; c < classes; c++)
    p[c] *= inverse;
  return log(sum) + (double)maximum;
}

/* The positions that count: every one whose label is not the ignore index. */
static int64_t counted_rows(int64_t batch, const int32_t *labels, const cross_entropy_options *o) {
  int64_t counted = 0;
  for (int64_t n = 0; n < batch; n++)
    counted += !ignored(o, labels[n]);
  return counted;
}

static bpt_status cross_entropy_forward(bpt_backend *backend, const bpt_softmax_cross_entropy_args *a, float *loss) {
  const bpt_status checked = bpt_softmax_cross_entropy_check_labels(backend, a);
  if (checked != BPT_OK) return checked;
  const int64_t batch = a->rows, classes = a->classes;
  const float *logits = a->logits;
  const int32_t *labels = a->labels;
  const cross_entropy_options *o = &a->options;
  float *probabilities = a->probabilities;
  const double eps = (double)o->smoothing;
  double partial[LOSS_CHUNKS] = {0};
#pragma omp parallel for if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < LOSS_CHUNKS; chunk++)
    for (int64_t n = batch * chunk / LOSS_CHUNKS; n < batch * (chunk + 1) / LOSS_CHUNKS; n++) {
      const float *row = logits + n * classes;
      const double log_sum_exp = softmax_row(row, classes, probabilities + n * classes);
      if (ignored(o, labels[n])) continue;
      if (eps == 0.0) {
        partial[chunk] += log_sum_exp - (double)row[labels[n]];
        continue;
      }
      /* mean_c -log p[c] = log_sum_exp - mean_c row[c]. */
      double mean = 0.0;
      for (int64_t c = 0; c < classes; c++)
        mean += (double)row[c];
      mean /= (double)classes;
      partial[chunk] += log_sum_exp - (1.0 - eps) * (double)row[labels[n]] - eps * mean;
    }
  const int64_t counted = o->has_ignore ? counted_rows(batch, labels, o) : batch;
  *loss = counted ? (float)(sum_in_order(partial) / (double)counted) : 0.0f;
  return BPT_OK;
}

static bpt_status cross_entropy_backward(int64_t batch, int64_t classes, const float *probabilities,
                                         const int32_t *labels, const cross_entropy_options *o,
                                         const float *loss_gradient, float *dlogits) {
  const int64_t counted = o->has_ignore ? counted_rows(batch, labels, o) : batch;
  if (counted == 0) return BPT_OK; /* every position ignored: no gradient at all, rather than 0/0 */
  const float scale = *loss_gradient / (float)counted, eps = o->smoothing, uniform = eps / (float)classes;
#pragma omp parallel for if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t n = 0; n < batch; n++) {
    if (ignored(o, labels[n])) continue;
    const float *p = probabilities + n * classes;
    float *d = dlogits + n * classes;
    if (eps == 0.0f)
      for (int64_t c = 0; c < classes; c++)
        d[c] += scale * (p[c] - (c == labels[n] ? 1.0f : 0.0f));
    else
      for (int64_t c = 0; c < classes; c++)
        d[c] += scale * (p[c] - (uniform + (c == labels[n] ? 1.0f - eps : 0.0f)));
  }
  return BPT_OK;
}

/* Logits stored as bf16 (bf16_storage.h) are widened into an f32 copy for the f32 loops above: the loss reads
 * them once and the classes are few next to the products that made them. The copy lives in the backend's
 * scratch (slot 0, which these kernels use for nothing else), so a step allocates nothing once it has grown. */
static float *widened(bpt_backend *backend, const void *values, int64_t count) {
  if (bpt_cpu_scratch_reserve(backend, 1, (size_t)(count > 0 ? count : 1)) != BPT_OK) return NULL;
  float *wide = bpt_cpu_scratch(backend, 0);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) wide[i] = bpt_bf16_widen(((const uint16_t *)values)[i]);
  return wide;
}

/* softmax_cross_entropy (kernel_args.h gives the layout and the options). */
static bpt_status softmax_cross_entropy_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_softmax_cross_entropy_args a = bpt_softmax_cross_entropy_args_of(node);
  if (!bpt_tensor_is_bf16(&node->inputs[0])) return cross_entropy_forward(backend, &a, node->output.value);
  float *logits = widened(backend, node->inputs[0].value, node->inputs[0].count);
  if (!logits) return BPT_ERR_OUT_OF_MEMORY;
  a.logits = logits;
  return cross_entropy_forward(backend, &a, node->output.value);
}

static bpt_status softmax_cross_entropy_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args a = bpt_softmax_cross_entropy_args_of(node);
  const bpt_kernel_tensor *x = &node->inputs[0];
  if (!bpt_tensor_is_bf16(x))
    return cross_entropy_backward(a.rows, a.classes, a.probabilities, a.labels, &a.options, node->output.grad, x->grad);
  /* A bf16 gradient: accumulated in f32 and rounded once, as the f32 path's gradient is rounded before use. */
  float *gradient = widened(backend, x->grad, x->count);
  if (!gradient) return BPT_ERR_OUT_OF_MEMORY;
  const bpt_status status =
      cross_entropy_backward(a.rows, a.classes, a.probabilities, a.labels, &a.options, node->output.grad, gradient);
#pragma omp parallel for if (x->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < x->count; i++) ((uint16_t *)x->grad)[i] = bpt_bf16_narrow(gradient[i]);
  return status;
}

BPT_REGISTER_KERNELS_16BIT(cpu, SOFTMAX_CROSS_ENTROPY, softmax_cross_entropy_forward, softmax_cross_entropy_backward, NULL);

/* mse: prediction and target of one shape (count values); the output is mean((prediction - target)^2). */
static bpt_status mse_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->inputs[0].count;
  const float *prediction = node->inputs[0].value, *target = node->inputs[1].value;
  double partial[LOSS_CHUNKS] = {0};
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < LOSS_CHUNKS; chunk++)
    for (int64_t i = count * chunk / LOSS_CHUNKS; i < count * (chunk + 1) / LOSS_CHUNKS; i++) {
      double difference = (double)prediction[i] - (double)target[i];
      partial[chunk] += difference * difference;
    }
  *(float *)node->output.value = (float)(sum_in_order(partial) / (double)count);
  return BPT_OK;
}

/* dprediction += g and dtarget -= g, g = 2 dloss / count (prediction - target); either gradient may be absent. */
static bpt_status mse_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const int64_t count = node->inputs[0].count;
  const float *prediction = node->inputs[0].value, *target = node->inputs[1].value;
  float *dprediction = node->inputs[0].grad, *dtarget = node->inputs[1].grad;
  const float scale = 2.0f * *node->output.grad / (float)count;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float g = scale * (prediction[i] - target[i]);
    if (dprediction) dprediction[i] += g;
    if (dtarget) dtarget[i] -= g;
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, MSE, mse_forward, mse_backward, NULL);
