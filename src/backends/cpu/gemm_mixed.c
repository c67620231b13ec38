/* Matrix products with f16, bf16 or FP8 operands on the CPU: emulation. Operands are widened to f32 scratch
 * (exact), multiplied by bpt_cpu_sgemm with f32 accumulation, and a narrow C is rounded back to nearest even,
 * which is what a tensor-core GEMM with f32 accumulation produces up to summation order. */
#include <stdlib.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

/* Rows of bf16 (16-bit storage's activations and the weights' bf16 copies, the common case) widened or rounded
 * by the vector row loops (bf16_rows.c), rows spread over the threads, as bpt_cpu_cast does it (a signalling
 * NaN made quiet, as the reference decodes it). */
static void cast_bf16_rows(int64_t rows, int64_t cols, bool widen, const void *source, int64_t source_ld,
                           void *destination, int64_t destination_ld) {
#pragma omp parallel for if (rows * cols > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t r = 0; r < rows; r++) {
    if (widen)
      bpt_cpu_bf16_widen_row((const uint16_t *)source + r * source_ld, cols, (float *)destination + r * destination_ld);
    else
      bpt_cpu_bf16_narrow_row((const float *)source + r * source_ld, cols,
                              (uint16_t *)destination + r * destination_ld);
  }
}

/* rows x cols values from source (leading dimension source_ld, in from's dtype) to destination (destination_ld,
 * in to's): one cast where both are contiguous, else one per row. */
static bpt_status cast_block(bpt_backend *backend, int64_t rows, int64_t cols, bpt_dtype from, const void *source,
                             int64_t source_ld, bpt_dtype to, void *destination, int64_t destination_ld) {
  const bool contiguous = rows == 1 || (source_ld == cols && destination_ld == cols);
  if (!contiguous && ((from == BPT_DTYPE_BF16 && to == BPT_DTYPE_F32) || (from == BPT_DTYPE_F32 && to == BPT_DTYPE_BF16))) {
    cast_bf16_rows(rows, cols, from == BPT_DTYPE_BF16, source, source_ld, destination, destination_ld);
    return BPT_OK;
  }
  if (contiguous) /* one cast, its blocks spread over the threads */
    return bpt_cpu_cast(backend, rows * cols, from, source, to, destination, 1.0f);
  const size_t from_size = bpt_dtype_size(from), to_size = bpt_dtype_size(to);
  bpt_status status = BPT_OK;
  for (int64_t r = 0; status == BPT_OK && r < rows; r++)
    status = bpt_cpu_cast(backend, cols, from, (const char *)source + (size_t)(r * source_ld) * from_size, to,
                          (char *)destination + (size_t)(r * destination_ld) * to_size, 1.0f);
  return status;
}

/* A rows x cols block with leading dimension ld as f32: f32 blocks are used where they lie (*scratch stays
 * NULL); narrow ones are widened into packed scratch (leading dimension cols). skip_values: scratch only,
 * nothing read (a C that beta 0 overwrites). */
static bpt_status as_f32(bpt_backend *backend, bpt_dtype dtype, const void *source, int64_t rows, int64_t cols,
                         int64_t ld, bool skip_values, const float **values, int64_t *values_ld, float **scratch) {
  *scratch = NULL;
  if (dtype == BPT_DTYPE_F32) {
    *values = source;
    *values_ld = ld;
    return BPT_OK;
  }
  *scratch = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof(float));
  if (!*scratch) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "gemm: no memory for %lld x %lld scratch",
                                         (long long)rows, (long long)cols);
  *values = *scratch;
  *values_ld = cols;
  return skip_values ? BPT_OK : cast_block(backend, rows, cols, dtype, source, ld, BPT_DTYPE_F32, *scratch, cols);
}

bpt_status bpt_cpu_gemm_mixed(bpt_backend *backend, const bpt_gemm_args *args) {
  /* Stored shapes: A is (m, k) or, transposed, (k, m); B is (k, n) or (n, k); C is (m, n). */
  int64_t a_rows = args->transpose_a ? args->k : args->m, a_cols = args->transpose_a ? args->m : args->k;
  int64_t b_rows = args->transpose_b ? args->n : args->k, b_cols = args->transpose_b ? args->k : args->n;
  const float *a = NULL, *b = NULL, *c = NULL;
  float *a_scratch = NULL, *b_scratch = NULL, *c_scratch = NULL;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bpt_status status = as_f32(backend, args->a_dtype, args->a, a_rows, a_cols, args->lda, false, &a, &lda, &a_scratch);
  if (status == BPT_OK)
    status = as_f32(backend, args->b_dtype, args->b, b_rows, b_cols, args->ldb, false, &b, &ldb, &b_scratch);
  if (status == BPT_OK)
    status = as_f32(backend, args->c_dtype, args->c, args->m, args->n, args->ldc, args->beta == 0.0f, &c, &ldc,
                    &c_scratch);
  if (status == BPT_OK) {
    bpt_gemm_args wide = *args;
    wide.a_dtype = wide.b_dtype = wide.c_dtype = BPT_DTYPE_F32;
    wide.a = a;
    wide.lda = lda;
    wide.b = b;
    wide.ldb = ldb;
    wide.c = (float *)c; /* args->c itself, or scratch */
    wide.ldc = ldc;
    status = bpt_cpu_gemm(backend, &wide);
  }
  if (c_scratch && status == BPT_OK) /* a narrow C: rounded back */
    status = cast_block(backend, args->m, args->n, BPT_DTYPE_F32, c_scratch, args->n, args->c_dtype, args->c,
                        args->ldc);
  free(a_scratch);
  free(b_scratch);
  free(c_scratch);
  return status;
}
