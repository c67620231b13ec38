/* The CPU's RMS-norm kernels (see src/core/ops/rms_norm.c): rows of C values. Forward: the mean square of a row,
 * then the scaled row, saving rstd per row. Backward: dx row by row, and dgamma accumulated per fixed chunk of
 * rows in the same pass, then added in chunk order, so results do not depend on the thread count. Loops are
 * written for the compiler to vectorise (omp simd). x may be a strided view whose rows are contiguous (a permute
 * or slice): its rows, and its gradient's, are found through its strides. bf16-stored x, y and their gradients
 * are staged a row at a time through f32 scratch (bf16_storage.h). */
#include <math.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

static bpt_status rms_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const void *x = node->inputs[0].value; /* (rows, C) */
  const float *gamma = node->inputs[1].value, epsilon = node->float_attributes[0];
  void *y = out->value;
  float *rstd = node->saved; /* (rows, C), (rows) */
  const bool contiguous = bpt_cpu_contiguous(&node->inputs[0]);
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(out);
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, 0, 2 * (size_t)C); /* x's row, y's */
  if (status != BPT_OK) return status;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (out->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, 0);
    const float *xr = bpt_storage_read_row(x, x16, bpt_cpu_tensor_row(&node->inputs[0], contiguous, r), C, stage);
    float *yr = bpt_storage_write_row(y, y16, r * C, C, false, stage ? stage + C : NULL);
    float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
    for (int64_t c = 0; c < C; c++)
      squares += xr[c] * xr[c];
    const float scale = 1.0f / sqrtf(squares / (float)C + epsilon);
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      yr[c] = xr[c] * scale * gamma[c];
    bpt_storage_commit_row(y, y16, r * C, C, yr);
    rstd[r] = scale;
  }
  return BPT_OK;
}

/* dx for one row (assigned or added), and dy xhat added into the chunk's partial sums (NULL: not wanted). */
static void backward_row(const float *x, const float *dy, int64_t C, const float *gamma, float rstd, bool assign,
                         float *dx, float *gamma_partial) {
  if (gamma_partial) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      gamma_partial[c] += dy[c] * (x[c] * rstd);
  }
  if (!dx) return;
  float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
  for (int64_t c = 0; c < C; c++)
    sum_gx += dy[c] * gamma[c] * (x[c] * rstd);
  const float mean_gx = sum_gx / (float)C;
  if (assign) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      dx[c] = rstd * (dy[c] * gamma[c] - x[c] * rstd * mean_gx);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      dx[c] += rstd * (dy[c] * gamma[c] - x[c] * rstd * mean_gx);
  }
}

static bpt_status rms_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *out = &node->output;
  const int64_t C = out->dims[out->rank - 1], rows = out->count / C;
  const void *x = node->inputs[0].value, *dy = out->grad;
  const float *gamma = node->inputs[1].value, *rstd = node->saved;
  void *dx = node->inputs[0].grad;
  float *dgamma = node->inputs[1].grad;
  const bool assign = node->inputs[0].beta == 0.0f, contiguous = bpt_cpu_contiguous(&node->inputs[0]);
  const bool x16 = bpt_tensor_is_bf16(&node->inputs[0]), y16 = bpt_tensor_is_bf16(out);
  /* A fixed number of row chunks (not one per thread), each with its own partial sums of dgamma. */
  const int64_t chunks = rows < 1 ? 1 : rows < BPT_CPU_REDUCTION_CHUNKS ? rows : BPT_CPU_REDUCTION_CHUNKS;
  /* Slot 0 holds the partial sums; every slot then stages bf16-stored rows of x, dy and dx. */
  const size_t partial_floats = dgamma ? (size_t)chunks * (size_t)C : 0;
  const bpt_status status = bpt_cpu_row_staging_reserve(backend, x16 || y16, partial_floats, 3 * (size_t)C);
  if (status != BPT_OK) return status;
  float *partials = partial_floats ? bpt_cpu_scratch(backend, 0) : NULL;
  for (size_t i = 0; i < partial_floats; i++)
    partials[i] = 0.0f;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (out->count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t k = 0; k < chunks; k++) {
    float *stage = bpt_cpu_row_staging(backend, x16 || y16, partial_floats);
    for (int64_t r = rows * k / chunks; r < rows * (k + 1) / chunks; r++) {
      const int64_t at = bpt_cpu_tensor_row(&node->inputs[0], contiguous, r);
      float *dxr = dx ? bpt_storage_write_row(dx, x16, at, C, !assign, stage ? stage + 2 * C : NULL) : NULL;
      backward_row(bpt_storage_read_row(x, x16, at, C, stage),
                   bpt_storage_read_row(dy, y16, r * C, C, stage ? stage + C : NULL), C, gamma, rstd[r], assign, dxr,
                   dgamma ? partials + k * C : NULL);
      if (dx) bpt_storage_commit_row(dx, x16, at, C, dxr);
    }
  }
  if (!dgamma) return BPT_OK;
  /* The chunks' sums in chunk order, into the first chunk's row, then into dgamma. */
  for (int64_t k = 1; k < chunks; k++) {
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
      partials[c] += partials[k * C + c];
  }
  const bool assign_gamma = node->inputs[1].beta == 0.0f;
#pragma omp simd
  for (int64_t c = 0; c < C; c++)
    dgamma[c] = assign_gamma ? partials[c] : dgamma[c] + partials[c];
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, RMS_NORM, rms_norm_forward, rms_norm_backward,
                                   bpt_cpu_supports_rows_of_x);
