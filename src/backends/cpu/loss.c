/* Loss kernels on the CPU: fused softmax + cross-entropy and mean squared error.
 * Sums are accumulated in double so the mean does not depend on the batch size's rounding. */
#include <math.h>

#include "backends/cpu/cpu.h"

bpt_status bpt_cpu_softmax_cross_entropy_forward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                 const float *logits, const int32_t *labels, float *probabilities,
                                                 float *loss) {
  for (int64_t n = 0; n < batch; n++)
    if (labels[n] < 0 || labels[n] >= classes)
      return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "label %d of sample %lld is outside [0, %lld)",
                              labels[n], (long long)n, (long long)classes);
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t n = 0; n < batch; n++) {
    const float *row = logits + n * classes;
    float *p = probabilities + n * classes;
    /* Subtracting the row maximum keeps exp() finite; log-sum-exp gives the loss without log(0). */
    float maximum = row[0];
    for (int64_t c = 1; c < classes; c++) maximum = row[c] > maximum ? row[c] : maximum;
    double sum = 0.0;
    for (int64_t c = 0; c < classes; c++) {
      p[c] = expf(row[c] - maximum);
      sum += p[c];
    }
    float inverse = (float)(1.0 / sum);
    for (int64_t c = 0; c < classes; c++) p[c] *= inverse;
    total += log(sum) + (double)maximum - (double)row[labels[n]];
  }
  *loss = (float)(total / (double)batch);
  return BPT_OK;
}

bpt_status bpt_cpu_softmax_cross_entropy_backward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                  const float *probabilities, const int32_t *labels,
                                                  const float *loss_gradient, float *dlogits) {
  (void)backend;
  const float scale = *loss_gradient / (float)batch;
#pragma omp parallel for if (batch * classes > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t n = 0; n < batch; n++) {
    const float *p = probabilities + n * classes;
    float *d = dlogits + n * classes;
    for (int64_t c = 0; c < classes; c++) d[c] += scale * (p[c] - (c == labels[n] ? 1.0f : 0.0f));
  }
  return BPT_OK;
}

bpt_status bpt_cpu_mse_forward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                               float *loss) {
  (void)backend;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    double difference = (double)prediction[i] - (double)target[i];
    total += difference * difference;
  }
  *loss = (float)(total / (double)count);
  return BPT_OK;
}

bpt_status bpt_cpu_mse_backward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                                const float *loss_gradient, float *dprediction, float *dtarget) {
  (void)backend;
  const float scale = 2.0f * *loss_gradient / (float)count;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float g = scale * (prediction[i] - target[i]);
    if (dprediction) dprediction[i] += g;
    if (dtarget) dtarget[i] -= g;
  }
  return BPT_OK;
}
