/* How the CPU convolution (conv2d.c) is cut up: the plan (lowering, chunks of samples, threads), GEMMs in
 * blocks OpenBLAS multiplies without packing, and each thread's scratch. Private to the CPU backend. */
#ifndef BPT_CPU_CONV2D_PLAN_H
#define BPT_CPU_CONV2D_PLAN_H

#include "backends/cpu/cpu.h"
#include "backends/kernel_args.h"

/* Columns per GEMM we aim for: below this OpenBLAS spends its time in packing, not multiplying. */
#define CONV_MIN_COLUMNS 512
/* Strides above this use the bounds-checked im2col (phase usage is kept in bit masks). */
#define CONV_MAX_PHASE_STRIDE 8
/* OpenBLAS's small-matrix limits and the narrowest blocks worth cutting for them (see bpt_cpu_conv_gemm). */
#define CONV_SMALL_GEMM_VOLUME 1000000
#define CONV_SMALL_GEMM_OUTPUTS 1200
#define CONV_SMALL_GEMM_MIN_COLUMNS 64
/* Where one GEMM per kernel tap beats building the column matrix: at least this many input channels per
 * group, and at most this many (O/g) (C/g) weights per tap (see bpt_cpu_conv_plan). */
#define CONV_TAP_MIN_CHANNELS 16
#define CONV_TAP_MAX_WEIGHTS 512
/* Convolutions with fewer than CONV_TAP_MIN_CHANNELS input channels per group, at most this many output
 * channels per group and input values per output (C/g kh kw) run conv2d_small.c's loops (see bpt_cpu_conv_plan). */
#define CONV_SMALL_MAX_OUTPUTS 16
#define CONV_SMALL_MAX_ROWS 160

typedef struct conv_plan {
  int64_t group_in, group_out, kernel_area, column_rows; /* C/g, O/g, kh * kw, C/g * kh * kw */
  int64_t in_plane, out_plane;                           /* H * W, OH * OW */
  int64_t sample_columns;                                /* one sample's columns: OH * OW, or OH * Wp if padded */
  int64_t phase_width, phase_plane, padded_plane;        /* padded lowering: Wq, floats per phase, per channel */
  unsigned phase_rows_used, phase_columns_used;          /* bit r: some tap reads phase row (column) r */
  int64_t chunk, chunks;                                 /* samples per chunk, number of chunks */
  int threads;                                           /* threads running chunks (1: BLAS threads instead) */
  bool pointwise, padded, by_tap;                        /* by_tap: padded, one GEMM per tap, no columns */
  bool small;                                            /* padded, conv2d_small.c's loops, no columns */
  bool small_blocks;                                     /* cut GEMMs for OpenBLAS's small-matrix path */
  bool bf16_products; /* bf16 policy where vdpbf16ps pays (bf16_unit.h): the GEMMs run gemm_bf16.c's kernel */
} conv_plan;

/* Plans a pass of the convolution a describes; strided_phases: whether strided convolutions may use the
 * padded lowering. Fails with BPT_ERR_SHAPE when the groups do not divide the channels. */
bpt_status bpt_cpu_conv_plan(bpt_backend *backend, const bpt_conv2d_args *a, bool strided_phases, conv_plan *p);

/* The phase plane and offset where tap (i, j)'s run of columns starts, within one channel's phases. */
int64_t bpt_cpu_conv_tap_offset(const bpt_conv2d_args *a, const conv_plan *p, int64_t i, int64_t j);

/* C (m, n) = op(A) (m, k) . op(B) (k, n) + beta C, row-major, in blocks when plan->small_blocks; whole, in bf16,
 * when plan->bf16_products. */
void bpt_cpu_conv_gemm(const conv_plan *plan, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* Samples in chunk chunk_index (the last chunk may be short). */
int64_t bpt_cpu_conv_chunk_samples(const bpt_conv2d_args *a, const conv_plan *p, int64_t chunk_index);

typedef struct conv_scratch {
  size_t partial, columns, stacked, padded, total;
} conv_scratch;

/* Lays out each thread's scratch, in floats, for a pass whose first block (partial weight gradient or weights
 * by tap) holds partial floats, and reserves it for the plan's threads. */
bpt_status bpt_cpu_conv_reserve_scratch(bpt_backend *backend, const conv_plan *p, size_t partial, conv_scratch *layout);

/* One thread's pointers into its scratch, NULL where the layout has no such block. */
typedef struct conv_buffers {
  float *partial, *columns, *stacked, *padded;
} conv_buffers;

/* The calling OpenMP thread's pointers into its scratch, reserved beforehand for layout. */
conv_buffers bpt_cpu_conv_thread_buffers(bpt_backend *backend, const conv_scratch *layout);

/* conv2d_small.c, for plans with small set, on one group of a chunk's samples: their padded planes one after
 * another (C/g padded_plane floats each), their columns side by side as in the padded lowering (L =
 * sample_columns, leading dimension ld = samples L). product (O/g, samples L) = W_g (O/g, C/g kh kw) . the
 * tap-shifted planes, and dW_g (O/g, C/g kh kw) += dy (O/g, samples L) . the tap-shifted planes^T. */
void bpt_cpu_conv_small_forward(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                int64_t samples, const float *padded, float *product, int64_t ld);
/* planes (laid out as padded above) += W_g^T (C/g kh kw, O/g) . dy (O/g, samples L) added at each tap's offset
 * (unit strides: col2im_padded without the column matrix). */
void bpt_cpu_conv_small_data_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p, const float *w,
                                      int64_t samples, const float *dy, int64_t ld, float *planes);
void bpt_cpu_conv_small_weight_gradient(bpt_cpu_loops loops, const bpt_conv2d_args *a, const conv_plan *p,
                                        const float *dy, int64_t ld, int64_t samples, const float *padded, float *dw);

#endif
