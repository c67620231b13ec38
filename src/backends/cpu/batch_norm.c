/* Batch normalisation on the CPU over (batch, channels, spatial) tensors.
 *
 * The passes walk the tensor in memory order, sample by sample, one row (a sample's channel plane) at a time:
 * NCHW puts a channel's rows a whole sample apart, and reading them channel by channel measured about twice
 * as slow as reading the tensor straight through (a stand-alone test of both orders on ResNet-8's 16 x 28 x 28
 * activations: 1.34 against 0.78 ms for the statistics and normalising passes). Each row's sums land in
 * scratch, and each channel then adds its rows up in double in sample order, so the results do not depend on
 * the threads.
 *
 * Statistics take one pass over the data: sums of (x - shift) and (x - shift)^2, with shift the channel's
 * first value, so that var = E[(x-k)^2] - E[x-k]^2 does not cancel catastrophically when |mean| >> std
 * (Chan, Golub and LeVeque's shifted-data algorithm). Rows sum in float (short and already centred).
 * With args->relu_mask the normalising pass applies ReLU and records its bits, and the gradient passes read
 * dy through them. The row loops are in batch_norm_rows.c. Under 16-bit storage x, y and their gradients may be
 * bf16: each row is staged through f32 in the thread's scratch (bf16_storage.h), so the f32 row loops run as
 * they are. */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

static bool parallel(const bpt_batch_norm_args *a) {
  return a->batch > 1 && a->batch * a->channels * a->spatial > BPT_CPU_PARALLEL_THRESHOLD;
}

/* The storage of x and y (each value with its gradient): either bf16 stages the rows through f32 in each thread's
 * scratch (bpt_cpu_row_staging), after the passes' sums at the front of slot 0. */
typedef struct row_staging {
  bool x16, y16;
} row_staging;

/* Row (n, c)'s ReLU bits, or NULL without ReLU. */
static uint8_t *row_bits(const bpt_batch_norm_args *a, int64_t row) {
  return a->relu_mask ? a->relu_mask + row * ((a->spatial + 7) / 8) : NULL;
}

/* y = gamma (x - mean) / sqrt(var + eps) + beta per channel, with the batch's statistics (saved, and folded into
 * the running ones) in training, the running ones in evaluation; gamma and beta may be NULL (1 and 0). */
static bpt_status normalise(bpt_backend *backend, const bpt_batch_norm_args *a, row_staging staging, const void *x,
                            const float *gamma, const float *beta, float *running_mean, float *running_variance,
                            void *y, float *saved_mean, float *saved_inverse_std) {
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S;
  if (a->training && count < 2)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE,
                            "batch_norm: training needs at least 2 values per channel, got batch %lld x spatial %lld",
                            (long long)N, (long long)S);
  /* Scratch: each row's two sums, then each channel's mean and scale. */
  const size_t shared = (size_t)(2 * N * C + 2 * C);
  const bool staged = staging.x16 || staging.y16;
  bpt_status status = bpt_cpu_row_staging_reserve(backend, staged, shared, 2 * (size_t)S); /* x's row, y's */
  if (status != BPT_OK) return status;
  float *row_sums = bpt_cpu_scratch(backend, 0), *means = row_sums + 2 * N * C, *scales = means + C;
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  if (a->training) {
#pragma omp parallel for schedule(static) num_threads(bpt_cpu_threads(backend)) if (parallel(a))
    for (int64_t n = 0; n < N; n++) {
      float *stage = bpt_cpu_row_staging(backend, staged, shared);
      for (int64_t c = 0; c < C; c++)
        bpt_cpu_batch_norm_row_sums(loops, bpt_storage_read_row(x, staging.x16, (n * C + c) * S, S, stage), S,
                                    bpt_storage_load(x, staging.x16, c * S), &row_sums[2 * (n * C + c)],
                                    &row_sums[2 * (n * C + c) + 1]);
    }
  }
  for (int64_t c = 0; c < C; c++) {
    float mean, inverse_std;
    if (a->training) {
      const float shift = bpt_storage_load(x, staging.x16, c * S);
      double sum = 0.0, sum_of_squares = 0.0;
      for (int64_t n = 0; n < N; n++) {
        sum += row_sums[2 * (n * C + c)];
        sum_of_squares += row_sums[2 * (n * C + c) + 1];
      }
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
    means[c] = mean;
    scales[c] = gamma[c] * inverse_std;
  }
  /* y = gamma (x - mean) / std + beta */
#pragma omp parallel for schedule(static) num_threads(bpt_cpu_threads(backend)) if (parallel(a))
  for (int64_t n = 0; n < N; n++) {
    float *stage = bpt_cpu_row_staging(backend, staged, shared);
    for (int64_t c = 0; c < C; c++) {
      const int64_t at = (n * C + c) * S;
      float *yr = bpt_storage_write_row(y, staging.y16, at, S, false, stage ? stage + S : NULL);
      bpt_cpu_batch_norm_normalise_row(loops, bpt_storage_read_row(x, staging.x16, at, S, stage), S, means[c],
                                       scales[c], beta[c], yr, row_bits(a, n * C + c));
      bpt_storage_commit_row(y, staging.y16, at, S, yr);
    }
  }
  return BPT_OK;
}

/* The gradients of normalise in training mode, each accumulated (dx assigned under a->assign_input_gradient);
 * a NULL gradient is not computed. */
static bpt_status normalise_backward(bpt_backend *backend, const bpt_batch_norm_args *a, row_staging staging,
                                     const void *x, const void *dy, const float *gamma, const float *saved_mean,
                                     const float *saved_inverse_std, void *dx, float *dgamma, float *dbeta) {
  const int64_t N = a->batch, C = a->channels, S = a->spatial, count = N * S;
  if (!a->training)
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED,
                            "batch_norm: backward needs the batch statistics of a training-mode forward pass");
  /* Scratch: each row's two sums, then each channel's coefficients of dx. */
  const size_t shared = (size_t)(2 * N * C + 3 * C);
  const bool staged = staging.x16 || staging.y16;
  bpt_status status = bpt_cpu_row_staging_reserve(backend, staged, shared, 3 * (size_t)S); /* x, dy, dx */
  if (status != BPT_OK) return status;
  float *row_sums = bpt_cpu_scratch(backend, 0), *scales = row_sums + 2 * N * C, *mean_dys = scales + C,
        *coefficients = mean_dys + C;
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
#pragma omp parallel for schedule(static) num_threads(bpt_cpu_threads(backend)) if (parallel(a))
  for (int64_t n = 0; n < N; n++) {
    float *stage = bpt_cpu_row_staging(backend, staged, shared);
    for (int64_t c = 0; c < C; c++) {
      const int64_t at = (n * C + c) * S;
      bpt_cpu_batch_norm_gradient_row_sums(loops, bpt_storage_read_row(x, staging.x16, at, S, stage),
                                           bpt_storage_read_row(dy, staging.y16, at, S, stage ? stage + S : NULL), S,
                                           saved_mean[c], row_bits(a, n * C + c), &row_sums[2 * (n * C + c)],
                                           &row_sums[2 * (n * C + c) + 1]);
    }
  }
  for (int64_t c = 0; c < C; c++) {
    const float inverse_std = saved_inverse_std[c];
    double sum_dy = 0.0, sum_dy_centred = 0.0;
    for (int64_t n = 0; n < N; n++) {
      sum_dy += row_sums[2 * (n * C + c)];
      sum_dy_centred += row_sums[2 * (n * C + c) + 1];
    }
    /* dgamma = sum dy * xhat; dbeta = sum dy;
     * dx = gamma / std * (dy - mean(dy) - xhat * mean(dy * xhat)) (Ioffe and Szegedy, section 3) */
    if (dgamma) dgamma[c] += (float)(sum_dy_centred * inverse_std);
    if (dbeta) dbeta[c] += (float)sum_dy;
    scales[c] = gamma[c] * inverse_std;
    mean_dys[c] = (float)(sum_dy / (double)count);
    coefficients[c] = (float)(sum_dy_centred / (double)count) * inverse_std * inverse_std;
  }
  if (!dx) return BPT_OK;
#pragma omp parallel for schedule(static) num_threads(bpt_cpu_threads(backend)) if (parallel(a))
  for (int64_t n = 0; n < N; n++) {
    float *stage = bpt_cpu_row_staging(backend, staged, shared);
    for (int64_t c = 0; c < C; c++) {
      const int64_t at = (n * C + c) * S;
      float *dxr =
          bpt_storage_write_row(dx, staging.x16, at, S, !a->assign_input_gradient, stage ? stage + 2 * S : NULL);
      bpt_cpu_batch_norm_input_gradient_row(loops, bpt_storage_read_row(x, staging.x16, at, S, stage),
                                            bpt_storage_read_row(dy, staging.y16, at, S, stage ? stage + S : NULL), S,
                                            saved_mean[c], scales[c], mean_dys[c], coefficients[c],
                                            row_bits(a, n * C + c), a->assign_input_gradient, dxr);
      bpt_storage_commit_row(dx, staging.x16, at, S, dxr);
    }
  }
  return BPT_OK;
}

/* batch_norm and batch_norm_relu, the latter with the ReLU fused into the normalising and gradient passes
 * (the mask after the statistics in saved, in bpt_batch_norm_args' per-row layout). A folded batch norm has
 * no work of its own; a folded batch_norm_relu applies its ReLU to the convolution's output in place. */
static bpt_status batch_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *in = node->inputs, *y = &node->output;
  const bool relu = node->op == BPT_OP_BATCH_NORM_RELU;
  if (node->int_attributes[BPT_BATCH_NORM_FOLDED])
    return relu ? bpt_kernel_relu_in_place(backend, node, y, NULL, false) : BPT_OK;
  bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  if (relu) args.relu_mask = bpt_batch_norm_relu_mask(node);
  const row_staging staging = {.x16 = bpt_tensor_is_bf16(&in[0]), .y16 = bpt_tensor_is_bf16(y)};
  return normalise(backend, &args, staging, in[0].value, in[1].value, in[2].value, in[3].value, in[4].value,
                   y->value, bpt_batch_norm_saved_mean(node), bpt_batch_norm_saved_inverse_std(node));
}

static bpt_status batch_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *in = node->inputs;
  bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  if (node->op == BPT_OP_BATCH_NORM_RELU) args.relu_mask = bpt_batch_norm_relu_mask(node);
  const row_staging staging = {.x16 = bpt_tensor_is_bf16(&in[0]), .y16 = bpt_tensor_is_bf16(&node->output)};
  return normalise_backward(backend, &args, staging, in[0].value, node->output.grad, in[1].value,
                            bpt_batch_norm_saved_mean(node), bpt_batch_norm_saved_inverse_std(node), in[0].grad,
                            in[1].grad, in[2].grad);
}

BPT_REGISTER_KERNELS_16BIT(cpu, BATCH_NORM, batch_norm_forward, batch_norm_backward, NULL);
BPT_REGISTER_KERNELS_16BIT(cpu, BATCH_NORM_RELU, batch_norm_forward, batch_norm_backward, NULL);
