/* The CPU's layer-norm kernels (see src/core/ops/layer_norm.c): rows of C values, one pass per row in each
 * direction. Forward: mean, then the biased variance about it (two passes over a row in cache: stable where
 * E[x^2] - mean^2 would cancel), saving (mean, rstd) per row. Backward: dx row by row, and the dgamma, dbeta
 * sums accumulated per fixed chunk of rows in the same pass, then added in chunk order, so results do not
 * depend on the thread count. Loops are written for the compiler to vectorise (omp simd). x may be a strided
 * view whose rows are contiguous (a permute or slice): its rows, and its gradient's, are found through its
 * strides. bf16-stored x, y and their gradients are staged a row at a time through f32 scratch
 * (bf16_storage.h). */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

static void normalise_row(const float *x, int64_t C, const float *gamma, const float *beta, float epsilon, float *y,
                          float *statistics) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; c++)
    sum += x[c];
  const float mean = sum / (float)C;
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < C; c++)
    squares += (x[c] - mean) * (x[c] - mean);
  const float rstd = 1.0f / sqrtf(squares / (float)C + epsilon);
  if (beta) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      y[c] = (x[c] - mean) * rstd * gamma[c];
  }
  statistics[0] = mean;
  statistics[1] = rstd;
}

static bpt_status layer_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const void *x = node->inputs[0].value; /* (rows, C) */
  const float *gamma = node->inputs[1].value, *beta = node->input_count > 2 ? node->inputs[2].value : NULL;
  const float epsilon = node->float_attributes[0];
  void *y = out->value;
  float *statistics = node->saved; /* (rows, C), (rows, 2) */
  const bool contiguous = bpt_cpu_contiguous(&node->inputs[0]);
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(out);
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, 0, 2 * (size_t)C); /* x's row, y's */
  if (status != BPT_OK) return status;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (out->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, 0);
    float *yr = bpt_storage_write_row(y, y16, r * C, C, false, stage ? stage + C : NULL);
    normalise_row(bpt_storage_read_row(x, x16, bpt_cpu_tensor_row(&node->inputs[0], contiguous, r), C, stage), C,
                  gamma, beta, epsilon, yr, statistics + 2 * r);
    bpt_storage_commit_row(y, y16, r * C, C, yr);
  }
  return BPT_OK;
}

/* dx for one row (assigned or added), and dy xhat, dy added into the chunk's partial sums (NULL: not wanted). */
static void backward_row(const float *x, const float *dy, int64_t C, const float *gamma, float mean, float rstd,
                         bool assign, float *dx, float *gamma_partial, float *beta_partial) {
  if (gamma_partial) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gamma_partial[c] += dy[c] * ((x[c] - mean) * rstd);
  }
  if (beta_partial) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      beta_partial[c] += dy[c];
  }
  if (!dx) return;
  float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < C; c++) {
    const float g = dy[c] * gamma[c];
    sum_g += g;
    sum_gx += g * ((x[c] - mean) * rstd);
  }
  const float mean_g = sum_g / (float)C, mean_gx = sum_gx / (float)C;
  if (assign) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      dx[c] = rstd * (dy[c] * gamma[c] - mean_g - (x[c] - mean) * rstd * mean_gx);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      dx[c] += rstd * (dy[c] * gamma[c] - mean_g - (x[c] - mean) * rstd * mean_gx);
  }
}

/* gradient = beta * gradient + the chunks' sum, chunk by chunk in order (into the first chunk's row). */
static void add_partials(float *partials, int64_t chunks, int64_t C, float beta, float *gradient) {
  for (int64_t k = 1; k < chunks; k++) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      partials[c] += partials[k * C + c];
  }
  if (beta == 0.0f) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gradient[c] = partials[c];
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gradient[c] += partials[c];
  }
}

static bpt_status layer_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const void *x = node->inputs[0].value, *dy = out->grad;
  const float *gamma = node->inputs[1].value, *statistics = node->saved;
  void *dx = node->inputs[0].grad;
  float *dgamma = node->inputs[1].grad, *dbeta = node->input_count > 2 ? node->inputs[2].grad : NULL;
  const bool assign = node->inputs[0].beta == 0.0f, contiguous = bpt_cpu_contiguous(&node->inputs[0]);
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(out);
  /* A fixed number of row chunks (not one per thread), each with its own partial sums of dgamma and dbeta. */
  const int64_t chunks = rows < 1 ? 1 : rows < BPT_CPU_REDUCTION_CHUNKS ? rows : BPT_CPU_REDUCTION_CHUNKS;
  /* Slot 0 holds the partial sums; every slot then stages bf16-stored rows of x, dy and dx. */
  const size_t partial_floats = dgamma || dbeta ? 2 * (size_t)chunks * (size_t)C : 0;
  float *gamma_partials = NULL, *beta_partials = NULL;
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, partial_floats, 3 * (size_t)C);
  if (status != BPT_OK) return status;
  if (partial_floats) {
    gamma_partials = bpt_cpu_scratch(backend, 0);
    beta_partials = gamma_partials + chunks * C;
    for (size_t i = 0; i < partial_floats; i++)
      gamma_partials[i] = 0.0f;
  }
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (out->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t k = 0; k < chunks; k++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, partial_floats);
    for (int64_t r = rows * k / chunks; r < rows * (k + 1) / chunks; r++) {
      const int64_t at = bpt_cpu_tensor_row(&node->inputs[0], contiguous, r);
      float *dxr = dx ? bpt_storage_write_row(dx, x16, at, C, !assign, stage ? stage + 2 * C : NULL) : NULL;
      backward_row(bpt_storage_read_row(x, x16, at, C, stage),
                   bpt_storage_read_row(dy, y16, r * C, C, stage ? stage + C : NULL), C,
                   gamma, statistics[2 * r], statistics[2 * r + 1], assign, dxr, dgamma ? gamma_partials + k * C : NULL,
                   dbeta ? beta_partials + k * C : NULL);
      if (dx) bpt_storage_commit_row(dx, x16, at, C, dxr);
    }
  }
  if (dgamma) add_partials(gamma_partials, chunks, C, node->inputs[1].beta, dgamma);
  if (dbeta) add_partials(beta_partials, chunks, C, node->inputs[2].beta, dbeta);
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, LAYER_NORM, layer_norm_forward, layer_norm_backward,
                                   bpt_cpu_supports_rows_of_x);
