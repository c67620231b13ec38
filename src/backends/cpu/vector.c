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
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++)
      y[i] += x[i];
  } else {
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t i = 0; i < count; i++)
      y[i] += alpha * x[i];
  }
  return BPT_OK;
}

bpt_status bpt_cpu_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                     double *sum_of_squares, int64_t *zeros) {
  (void)backend;
  /* Blocks of 1024 sum in float (vectorised); block sums are combined in double, in block order, so the
   * result does not depend on the number of threads or their timing. */
  const int64_t blocks = (count + 1023) / 1024;
  double total = 0.0, squares = 0.0;
  int64_t zero_count = 0;
  for (int64_t first_block = 0; first_block < blocks; first_block += BPT_CPU_REDUCTION_CHUNKS * 16) {
    double block_sums[BPT_CPU_REDUCTION_CHUNKS * 16], block_squares[BPT_CPU_REDUCTION_CHUNKS * 16];
    int64_t block_zeros[BPT_CPU_REDUCTION_CHUNKS * 16];
    const int64_t batch = blocks - first_block < BPT_CPU_REDUCTION_CHUNKS * 16 ? blocks - first_block
                                                                             : BPT_CPU_REDUCTION_CHUNKS * 16;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
    for (int64_t b = 0; b < batch; b++) {
      const int64_t begin = (first_block + b) * 1024, end = begin + 1024 < count ? begin + 1024 : count;
      float block_sum = 0.0f, block_square = 0.0f;
      int64_t zeros_here = 0;
      for (int64_t i = begin; i < end; i++) {
        block_sum += x[i];
        block_square += x[i] * x[i];
        zeros_here += x[i] == 0.0f;
      }
      block_sums[b] = block_sum;
      block_squares[b] = block_square;
      block_zeros[b] = zeros_here;
    }
    for (int64_t b = 0; b < batch; b++) {
      total += block_sums[b];
      squares += block_squares[b];
      zero_count += block_zeros[b];
    }
  }
  if (sum) *sum = total;
  if (sum_of_squares) *sum_of_squares = squares;
  if (zeros) *zeros = zero_count;
  return BPT_OK;
}

bpt_status bpt_cpu_scale_clamp(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x) {
  (void)backend;
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    const float value = x[i] * scale;
    x[i] = value < low ? low : (value > high ? high : value);
  }
  return BPT_OK;
}
