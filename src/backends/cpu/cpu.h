/* The CPU backend's kernels, shared between its files; only backend.c exports anything (the table). */
#ifndef BPT_CPU_H
#define BPT_CPU_H

#include "backends/backend.h"

/* Loops shorter than this run on one thread: waking the OpenMP team costs more than it saves. */
#define BPT_CPU_PARALLEL_THRESHOLD 32768

bpt_status bpt_cpu_gemm(bpt_backend *backend, const bpt_gemm_args *args);
bpt_status bpt_cpu_bias_add(bpt_backend *backend, int64_t rows, int64_t cols, const float *bias, float *y);
bpt_status bpt_cpu_bias_backward(bpt_backend *backend, int64_t rows, int64_t cols, const float *dy,
                                 float *bias_gradient);
bpt_status bpt_cpu_activation_forward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                      const float *x, float *y);
bpt_status bpt_cpu_activation_backward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                       const float *x, const float *y, const float *dy, float *dx);
bpt_status bpt_cpu_softmax_cross_entropy_forward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                 const float *logits, const int32_t *labels, float *probabilities,
                                                 float *loss);
bpt_status bpt_cpu_softmax_cross_entropy_backward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                  const float *probabilities, const int32_t *labels,
                                                  const float *loss_gradient, float *dlogits);
bpt_status bpt_cpu_mse_forward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                               float *loss);
bpt_status bpt_cpu_mse_backward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                                const float *loss_gradient, float *dprediction, float *dtarget);
bpt_status bpt_cpu_sgd_update(bpt_backend *backend, const bpt_update_args *args);
bpt_status bpt_cpu_adam_update(bpt_backend *backend, const bpt_update_args *args);

#endif
