/* The fpga-sim matrix product. The kernel walks C one row tile at a time in i-k-j order: each step of the
 * pipelined loop multiplies one element of A with a run of B's row and accumulates into a partitioned row of
 * C, so the MACs of one cycle run in parallel lanes whatever the shapes (a per-sample forward is m = 1, a
 * weight gradient k = 1). The launcher charges the cycle model and then calls the kernel. */
#include "backends/fpga/fpga.h"

static inline float element(const float *matrix, int64_t ld, bool transpose, int64_t row, int64_t col) {
  return transpose ? matrix[col * ld + row] : matrix[row * ld + col];
}

/* C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C. Accumulates in f32 (f32 format) or exactly in double,
 * the stand-in for a wide ap_fixed accumulator (fixed format); operands and results are quantised. The first
 * step of a row starts the accumulator and the last writes C back, inside the one pipelined loop, so loading
 * and storing the row cost no loop of their own (the usual fused HLS accumulator pattern). */
static void gemm_kernel(const bpt_fpga_format *format, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                        int64_t k, float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc) {
  float row_f32[BPT_FPGA_TILE];
  double row_wide[BPT_FPGA_TILE];
#pragma HLS ARRAY_PARTITION variable=row_f32 cyclic factor=8
#pragma HLS ARRAY_PARTITION variable=row_wide cyclic factor=8
rows:
  for (int64_t i = 0; i < m; i++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
  tiles:
    for (int64_t j0 = 0; j0 < n; j0 += BPT_FPGA_TILE) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=4
      const int64_t width = n - j0 < BPT_FPGA_TILE ? n - j0 : BPT_FPGA_TILE;
    accumulate:
      for (int64_t p = 0; p < k; p++) {
#pragma HLS LOOP_TRIPCOUNT min=1 max=1024
        const double a_value = bpt_fpga_q(format, element(a, lda, transpose_a, i, p));
      lanes:
        for (int64_t j = 0; j < width; j++) {
#pragma HLS LOOP_FLATTEN
#pragma HLS PIPELINE II=1
#pragma HLS UNROLL factor=8
          const float b_value = bpt_fpga_q(format, element(b, ldb, transpose_b, p, j0 + j));
          if (format->fixed)
            row_wide[j] = (p == 0 ? 0.0 : row_wide[j]) + a_value * (double)b_value;
          else
            row_f32[j] = (p == 0 ? 0.0f : row_f32[j]) + (float)a_value * b_value;
          if (p == k - 1) {
            float *out = &c[i * ldc + j0 + j];
            if (format->fixed) {
              double previous = beta == 0.0f ? 0.0 : (double)beta * bpt_fpga_q(format, *out);
              *out = bpt_fpga_q(format, (double)alpha * row_wide[j] + previous);
            } else {
              *out = alpha * row_f32[j] + (beta == 0.0f ? 0.0f : beta * *out);
            }
          }
        }
      }
    }
  }
}

/* Cycles the controller spends entering each (row, tile) loop before its first trip (width, steps and the
 * lane mask): measured on the RTL (rtl/gemm_engine.v, docs/fpga.md "C/RTL co-simulation"), where leaving it
 * out put the model 6.25% under the RTL on a 10 x 64 x 1 weight gradient. */
#define BPT_FPGA_GEMM_LOOP_ENTRY_CYCLES 1

/* Cycles: per row and column tile, one loop entry plus one flattened pipelined loop of
 * k * ceil(width / lanes) steps. A product with k = 0 only scales C: one pass of ceil(width / lanes) steps. */
static uint64_t gemm_cycles(const bpt_fpga_model *model, int64_t m, int64_t n, int64_t k) {
  const uint64_t lanes = bpt_fpga_lanes(model), ii = (uint64_t)model->options.initiation_interval,
                 depth = (uint64_t)model->options.pipeline_depth;
  uint64_t cycles = 0;
  for (int64_t j0 = 0; j0 < n; j0 += BPT_FPGA_TILE) {
    uint64_t width = (uint64_t)(n - j0 < BPT_FPGA_TILE ? n - j0 : BPT_FPGA_TILE);
    uint64_t steps = (width + lanes - 1) / lanes;
    cycles += BPT_FPGA_GEMM_LOOP_ENTRY_CYCLES + bpt_fpga_pipelined_cycles((uint64_t)(k > 0 ? k : 1) * steps, ii, depth);
  }
  return cycles * (uint64_t)m;
}

/* k = 0: C = beta C (alpha times an empty sum), the same rule as BLAS. */
static void scale_kernel(const bpt_fpga_format *format, int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
#pragma HLS PIPELINE II=1
      float *out = &c[i * ldc + j];
      *out = beta == 0.0f ? 0.0f : bpt_fpga_q(format, (double)beta * bpt_fpga_q(format, *out));
    }
}

static bpt_status gemm_one(bpt_backend *backend, const bpt_gemm_args *args) {
  if (args->m < 0 || args->n < 0 || args->k < 0)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "gemm dimensions %lld x %lld x %lld are negative",
                            (long long)args->m, (long long)args->n, (long long)args->k);
  if (args->a_dtype != BPT_DTYPE_F32 || args->b_dtype != BPT_DTYPE_F32 || args->c_dtype != BPT_DTYPE_F32)
    return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED, "gemm on fpga-sim takes f32 containers only (got %s, %s, %s)",
                            bpt_dtype_name(args->a_dtype), bpt_dtype_name(args->b_dtype),
                            bpt_dtype_name(args->c_dtype));
  if (args->m == 0 || args->n == 0) return BPT_OK;
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  bpt_fpga_model *model = &state->model;
  uint64_t bytes = bpt_fpga_offchip_bytes(model, args->a, args->m * args->k) +
                   bpt_fpga_offchip_bytes(model, args->b, args->k * args->n) +
                   bpt_fpga_offchip_bytes(model, args->c, args->m * args->n) * (args->beta != 0.0f ? 2 : 1);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_GEMM, gemm_cycles(model, args->m, args->n, args->k), bytes,
                  (uint64_t)(args->m * args->n * args->k));
  if (args->k == 0) {
    scale_kernel(&state->format, args->m, args->n, args->beta, args->c, args->ldc);
    return BPT_OK;
  }
  gemm_kernel(&state->format, args->transpose_a, args->transpose_b, args->m, args->n, args->k, args->alpha, args->a,
              args->lda, args->b, args->ldb, args->beta, args->c, args->ldc);
  return BPT_OK;
}

/* A strided-batched call runs its products one after another on the engine, each charged as its own. */
bpt_status bpt_fpga_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  const int64_t count = bpt_gemm_batch_count(args);
  if (count == 1) return gemm_one(backend, args);
  if (!bpt_gemm_batch_valid(args))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "gemm batch of %lld: C products would overlap",
                            (long long)args->batch_count);
  for (int64_t i = 0; i < count; i++) {
    bpt_gemm_args one = bpt_gemm_batch_item(args, i, sizeof(float), sizeof(float), sizeof(float));
    bpt_status status = gemm_one(backend, &one);
    if (status != BPT_OK) return status;
  }
  return BPT_OK;
}
