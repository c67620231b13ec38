/* Loss kernels on the CPU: fused softmax + cross-entropy and mean squared error.
 * Sums are accumulated in double over a fixed number of chunks, then added in chunk order: OpenMP's own
 * reduction clause combines in thread arrival order, which would make two runs differ in the last bit. */
#include <math.h>

#include "backends/cpu/cpu.h"

#define LOSS_CHUNKS BPT_CPU_REDUCTION_CHUNKS

static double sum_in_order(const double *partial) {
  double total = 0.0;
  for (int c = 0; c < LOSS_CHUNKS; c++)
    total += partial[c];
  return total;
}

/* softmax_cross_entropy (kernel_args.h gives the layout). */
static bpt_status softmax_cross_entropy_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_softmax_cross_entropy_args args = bpt_softmax_cross_entropy_args_of(node);
  const int64_t batch = args.rows, classes = args.classes;
  const float *logits = args.logits;
  const int32_t *labels = args.labels;
  float *probabilities = args.probabilities, *loss = node->output.value;
  bpt_status status = bpt_softmax_cross_entropy_check_labels(backend, &args);
  if (status != BPT_OK) return status;
  double partial[LOSS_CHUNKS] = {0};
#pragma omp parallel for if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int chunk = 0; chunk < LOSS_CHUNKS; chunk++)
    for (int64_t n = batch * chunk / LOSS_CHUNKS; n < batch * (chunk + 1) / LOSS_CHUNKS; n++) {
      const float *row = logits + n * classes;
      float *p = probabilities + n * classes;
      /* Subtracting the row maximum keeps exp() finite; log-sum-exp gives the loss without log(0). */
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
      partial[chunk] += log(sum) + (double)maximum - (double)row[labels[n]];
    }
  *loss = (float)(sum_in_order(partial) / (double)batch);
  return BPT_OK;
}

/* dlogits += dloss / rows (p - onehot(label)). */
static bpt_status softmax_cross_entropy_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  (void)backend;
  const bpt_softmax_cross_entropy_args args = bpt_softmax_cross_entropy_args_of(node);
  const int64_t batch = args.rows, classes = args.classes;
  const float *probabilities = args.probabilities;
  const int32_t *labels = args.labels;
  float *dlogits = node->inputs[0].grad;
  const float scale = *node->output.grad / (float)batch;
#pragma omp parallel for if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t n = 0; n < batch; n++) {
    const float *p = probabilities + n * classes;
    float *d = dlogits + n * classes;
    for (int64_t c = 0; c < classes; c++)
      d[c] += scale * (p[c] - (c == labels[n] ? 1.0f : 0.0f));
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, SOFTMAX_CROSS_ENTROPY, softmax_cross_entropy_forward, softmax_cross_entropy_backward, NULL);

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
