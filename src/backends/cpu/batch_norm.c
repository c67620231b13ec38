/* Batch normalisation on the CPU over (batch, channels, spatial) tensors, one channel per loop iteration.
 * Statistics take one pass over the data: sums of (x - shift) and (x - shift)^2, with shift the channel's
 * first value, so that var = E[(x-k)^2] - E[x-k]^2 does not cancel catastrophically when |mean| >> std
 * (Chan, Golub and LeVeque's shifted-data algorithm). Rows of `spatial` values sum in float (short and
 * already centred), rows are combined in double. With args->relu_mask the normalising and gradient loops are
 * batch_norm_relu.c's, which apply ReLU on the way. */
#include <math.h>

#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* Wider vectors for the per-channel loops: the library is built for baseline x86-64, where these loops
 * would use 4-wide SSE, and their sums are bound by the add latency of one vector accumulator, so 16-wide
 * AVX-512 runs them several times faster. The loops live in helpers outside the OpenMP regions because
 * the clones apply to a function, not to the region GCC outlines from it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BATCH_NORM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BATCH_NORM_VECTOR_CLONES
#endif

/* Sums of (x - shift) and (x - shift)^2 over one channel: (N rows of S values, row stride C * S). */
BATCH_NORM_VECTOR_CLONES static void shifted_sums(const float *x, int64_t N, int64_t row_stride, int64_t S, float shift,
                                                  double *sum, double *sum_of_squares) {
  double total = 0.0, squares = 0.0;
  int64_t n = 0;
  /* Four rows at a time, each with its own accumulators: one row's sum is a chain of dependent adds, so
   * interleaving rows keeps the adder busy. Each row still sums alone, so the result does not change. */
  for (; n + 4 <= N; n += 4) {
    const float *r0 = x + n * row_stride, *r1 = r0 + row_stride, *r2 = r1 + row_stride, *r3 = r2 + row_stride;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, q0 = 0.0f, q1 = 0.0f, q2 = 0.0f, q3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3, q0, q1, q2, q3)
    for (int64_t i = 0; i < S; i++) {
      const float c0 = r0[i] - shift, c1 = r1[i] - shift, c2 = r2[i] - shift, c3 = r3[i] - shift;
      s0 += c0;
      s1 += c1;
      s2 += c2;
      s3 += c3;
      q0 += c0 * c0;
      q1 += c1 * c1;
      q2 += c2 * c2;
      q3 += c3 * c3;
    }
    total += s0;
    total += s1;
    total += s2;
    total += s3;
    squares += q0;
    squares += q1;
    squares += q2;
    squares += q3;
  }
  for (; n < N; n++) {
    const float *row = x + n * row_stride;
    float row_sum = 0.0f, row_squares = 0.0f;
#pragma omp simd reduction(+ : row_sum, row_squares)
    for (int64_t i = 0; i < S; i++) {
      const float centred = row[i] - shift;
      row_sum += centred;
      row_squares += centred * centred;
    }
    total += row_sum;
    squares += row_squares;
  }
  *sum = total;
  *sum_of_squares = squares;
}

/* y = (x - mean) scale + shift over one channel. Subtracting first (rather than x scale + (shift - mean
 * scale)) keeps a channel with |mean| >> std from losing its digits to the large offset. */
BATCH_NORM_VECTOR_CLONES static void normalise(const float *x, int64_t N, int64_t row_stride, int64_t S, float mean,
                                               float scale, float shift, float *y) {
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride;
    float *out = y + n * row_stride;
#pragma omp simd
    for (int64_t i = 0; i < S; i++)
      out[i] = (in[i] - mean) * scale + shift;
  }
}

/* Sums of dy and dy (x - mean) over one channel. */
BATCH_NORM_VECTOR_CLONES static void gradient_sums(const float *x, const float *dy, int64_t N, int64_t row_stride,
                                                   int64_t S, float mean, double *sum_dy, double *sum_dy_centred) {
  double total = 0.0, centred_total = 0.0;
  int64_t n = 0;
  /* Four rows at a time, as in shifted_sums. */
  for (; n + 4 <= N; n += 4) {
    const float *x0 = x + n * row_stride, *x1 = x0 + row_stride, *x2 = x1 + row_stride, *x3 = x2 + row_stride;
    const float *d0 = dy + n * row_stride, *d1 = d0 + row_stride, *d2 = d1 + row_stride, *d3 = d2 + row_stride;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3, p0, p1, p2, p3)
    for (int64_t i = 0; i < S; i++) {
      s0 += d0[i];
      s1 += d1[i];
      s2 += d2[i];
      s3 += d3[i];
      p0 += d0[i] * (x0[i] - mean);
      p1 += d1[i] * (x1[i] - mean);
      p2 += d2[i] * (x2[i] - mean);
      p3 += d3[i] * (x3[i] - mean);
    }
    total += s0;
    total += s1;
    total += s2;
    total += s3;
    centred_total += p0;
    centred_total += p1;
    centred_total += p2;
    centred_total += p3;
  }
  for (; n < N; n++) {
    const float *in = x + n * row_stride, *d = dy + n * row_stride;
    float row_dy = 0.0f, row_dy_centred = 0.0f;
#pragma omp simd reduction(+ : row_dy, row_dy_centred)
    for (int64_t i = 0; i < S; i++) {
      row_dy += d[i];
      row_dy_centred += d[i] * (in[i] - mean);
    }
    total += row_dy;
    centred_total += row_dy_centred;
  }
  *sum_dy = total;
  *sum_dy_centred = centred_total;
}

/* dx (+)= scale (dy - mean_dy - (x - mean) xhat_coefficient) over one channel. */
BATCH_NORM_VECTOR_CLONES static void input_gradient(const float *x, const float *dy, int64_t N, int64_t row_stride,
                                                    int64_t S, float mean, float scale, float mean_dy,
                                                    float xhat_coefficient, bool assign, float *dx) {
  for (int64_t n = 0; n < N; n++) {
    const float *in = x + n * row_stride, *d = dy + n * row_stride;
    float *out = dx + n * row_stride;
    if (assign) {
#pragma omp simd
      for (int64_t i = 0; i < S; i++)
        out[i] = scale * (d[i] - mean_dy - (in[i] - mean) * xhat_coefficient);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < S; i++)
        out[i] += scale * (d[i] - mean_dy - (in[i] - mean) * xhat_coefficient);
    }
  }
}

static bool parallel(const bpt_batch_norm_args *a) {
  return a->channels > 1 && a->batch * a->channels * a->spatial > BPT_CPU_PARALLEL_THRESHOLD;
}

bpt_status bpt_cpu_batch_norm_forward(bpt_backend *backend, const bpt_batch_norm_args *a, const float *x,
                                      const float *gamma, const float *beta, float *running_mean,
                                      float *running_variance, float *y, float *saved_mean, float *saved_inverse_std) {
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S;
  if (a->training && count < 2)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE,
                            "batch_norm: training needs at least 2 values per channel, got batch %lld x spatial %lld",
                            (long long)N, (long long)S);
  const bool avx512 = bpt_cpu_relu_loops_avx512(backend);
#pragma omp parallel for if (parallel(a))
  for (int64_t c = 0; c < C; c++) {
    float mean, inverse_std;
    if (a->training) {
      const float shift = x[c * S];
      double sum, sum_of_squares;
      shifted_sums(x + c * S, N, C * S, S, shift, &sum, &sum_of_squares);
      const double shifted_mean = sum / (double)count;
      double variance = sum_of_squares / (double)count - shifted_mean * shifted_mean;
      if (variance < 0.0) variance = 0.0;
      mean = (float)(shifted_mean + shift);
      inverse_std = (float)(1.0 / sqrt(variance + (double)a->epsilon));
      saved_mean[c] = mean;
      saved_inverse_std[c] = inverse_std;
      const double unbiased = variance * (double)count / (double)(count - 1);
      running_mean[c] = (1.0f - a->momentum) * running_mean[c] + a->momentum * mean;
      running_variance[c] = (float)((1.0 - a->momentum) * running_variance[c] + a->momentum * unbiased);
    } else {
      mean = running_mean[c];
      inverse_std = (float)(1.0 / sqrt((double)running_variance[c] + (double)a->epsilon));
    }
    /* y = gamma (x - mean) / std + beta */
    if (a->relu_mask) {
      const int64_t row_bytes = (S + 7) / 8;
      bpt_cpu_normalise_relu(avx512, x + c * S, N, C * S, S, mean, gamma[c] * inverse_std, beta[c], y + c * S,
                             a->relu_mask + c * row_bytes, C * row_bytes);
    } else {
      normalise(x + c * S, N, C * S, S, mean, gamma[c] * inverse_std, beta[c], y + c * S);
    }
  }
  return BPT_OK;
}

bpt_status bpt_cpu_batch_norm_backward(bpt_backend *backend, const bpt_batch_norm_args *a, const float *x,
                                       const float *dy, const float *gamma, const float *saved_mean,
                                       const float *saved_inverse_std, float *dx, float *dgamma, float *dbeta) {
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S;
  if (!a->training)
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED,
                            "batch_norm: backward needs the batch statistics of a training-mode forward pass");
  const bool avx512 = bpt_cpu_relu_loops_avx512(backend);
#pragma omp parallel for if (parallel(a))
  for (int64_t c = 0; c < C; c++) {
    const float mean = saved_mean[c], inverse_std = saved_inverse_std[c];
    const int64_t row_bytes = (S + 7) / 8;
    const uint8_t *bits = a->relu_mask ? a->relu_mask + c * row_bytes : NULL;
    double sum_dy, sum_dy_centred;
    if (bits)
      bpt_cpu_gradient_sums_relu(avx512, x + c * S, dy + c * S, N, C * S, S, mean, bits, C * row_bytes, &sum_dy,
                                 &sum_dy_centred);
    else
      gradient_sums(x + c * S, dy + c * S, N, C * S, S, mean, &sum_dy, &sum_dy_centred);
    /* dgamma = sum dy * xhat; dbeta = sum dy;
     * dx = gamma / std * (dy - mean(dy) - xhat * mean(dy * xhat)) (Ioffe and Szegedy, section 3) */
    const float gradient_gamma = (float)(sum_dy_centred * inverse_std);
    if (dgamma) dgamma[c] += gradient_gamma;
    if (dbeta) dbeta[c] += (float)sum_dy;
    if (!dx) continue;
    const float scale = gamma[c] * inverse_std;
    const float mean_dy = (float)(sum_dy / (double)count);
    const float xhat_coefficient = (float)(sum_dy_centred / (double)count) * inverse_std * inverse_std;
    if (bits)
      bpt_cpu_input_gradient_relu(avx512, x + c * S, dy + c * S, N, C * S, S, mean, scale, mean_dy, xhat_coefficient,
                                  bits, C * row_bytes, a->assign_input_gradient, dx + c * S);
    else
      input_gradient(x + c * S, dy + c * S, N, C * S, S, mean, scale, mean_dy, xhat_coefficient,
                     a->assign_input_gradient, dx + c * S);
  }
  return BPT_OK;
}
