/* Kernels over flat buffers for residual additions and the training toolkit: y += alpha x, statistics
 * (sum, sum of squares, zeros) for gradient norms and activation monitoring, and scale-and-clamp for
 * gradient clipping. */
#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

bpt_status bpt_cpu_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y) {
  (void)backend;
  if (alpha == 1.0f) {
#pragma omp parallel for simd if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++)
      y[i] += x[i];
  } else {
#pragma omp parallel for simd if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++)
      y[i] += alpha * x[i];
  }
  return BPT_OK;
}

bpt_status bpt_cpu_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                     double *sum_of_squares, int64_t *zeros) {
  (void)backend;
  double total = 0.0, squares = 0.0;
  int64_t zero_count = 0;
  /* Blocks of 1024 sum in float (vectorised), blocks are combined in double. */
#pragma omp parallel for reduction(+ : total, squares, zero_count) if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t block = 0; block < count; block += 1024) {
    const int64_t end = block + 1024 < count ? block + 1024 : count;
    float block_sum = 0.0f, block_squares = 0.0f;
    int64_t block_zeros = 0;
    for (int64_t i = block; i < end; i++) {
      block_sum += x[i];
      block_squares += x[i] * x[i];
      block_zeros += x[i] == 0.0f;
    }
    total += block_sum;
    squares += block_squares;
    zero_count += block_zeros;
  }
  if (sum) *sum = total;
  if (sum_of_squares) *sum_of_squares = squares;
  if (zeros) *zeros = zero_count;
  return BPT_OK;
}

bpt_status bpt_cpu_scale_clamp(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x) {
  (void)backend;
#pragma omp parallel for simd if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    const float value = x[i] * scale;
    x[i] = value < low ? low : (value > high ? high : value);
  }
  return BPT_OK;
}
