/* Planning the CPU convolution (see conv2d_plan.h): which lowering a convolution gets, how samples are
 * chunked and threaded, GEMMs cut for OpenBLAS's small-matrix kernels, and the scratch each thread needs.
 * The data movement and the three passes are in conv2d.c. */
#include <omp.h>

#include "backends/cpu/blas_library.h"

#include "backends/cpu/conv2d_plan.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/gemm_bf16.h"

/* The data gradient passes strided_phases = false: see input_gradient in conv2d.c. */
bpt_status bpt_cpu_conv_plan(bpt_backend *backend, const bpt_conv2d_args *a, bool strided_phases, conv_plan *p) {
  if (a->groups < 1 || a->in_channels % a->groups || a->out_channels % a->groups)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE,
                            "conv2d: %lld groups do not divide %lld input and %lld output "
                            "channels",
                            (long long)a->groups, (long long)a->in_channels, (long long)a->out_channels);
  p->bf16_products = a->bf16_products && bpt_cpu_bf16_dot_pays();
  p->group_in = a->in_channels / a->groups;
  p->group_out = a->out_channels / a->groups;
  p->kernel_area = a->kernel_height * a->kernel_width;
  p->column_rows = p->group_in * p->kernel_area;
  p->in_plane = a->in_height * a->in_width;
  p->out_plane = a->out_height * a->out_width;
  const int64_t sh = a->stride_height, sw = a->stride_width;
  p->pointwise = a->kernel_height == 1 && a->kernel_width == 1 && sh == 1 && sw == 1 && a->padding_height == 0 &&
                 a->padding_width == 0;
  /* Padded lowering: phase planes of the zero-padded input (Hp x Wp), phase (r, q) holding pixels
   * (a sh + r, b sw + q) as a Hq x Wq plane, Hq = ceil(Hp / sh), Wq = ceil(Wp / sw), plus slack for the
   * last row's garbage columns; planes rounded to 16 floats stay 64-byte aligned. */
  const int64_t pw = a->padding_width;
  /* Unit column stride: consecutive rows share their border, row h's right padding being row h + 1's left
   * padding (Wp = W + pad_w), which halves the garbage columns (one per row for a 3x3 "same" convolution).
   * A window overhanging a row's right end reads the next row's leading zeros, so this needs the overhang,
   * (kw - 1) dil_w - pad_w, to be at most pad_w; for larger padding each row keeps both borders. */
  const bool shared_border = sw == 1 && pw <= (a->kernel_width - 1) * a->dilation_width;
  const int64_t padded_height = a->in_height + 2 * a->padding_height;
  const int64_t padded_width = a->in_width + (shared_border ? pw : 2 * pw);
  const int64_t phase_height = (padded_height + sh - 1) / sh;
  p->phase_width = (padded_width + sw - 1) / sw;
  p->phase_plane = (phase_height * p->phase_width + (a->kernel_width - 1) * a->dilation_width / sw + 15) / 16 * 16;
  /* Only strides the padded lowering takes get its layout: sh sw phase planes of a stride far beyond the input
   * (one output pixel, allowed) would overflow, and that lowering is not used for them anyway. */
  p->padded_plane = sh <= CONV_MAX_PHASE_STRIDE && sw <= CONV_MAX_PHASE_STRIDE ? sh * sw * p->phase_plane : 0;
  p->phase_rows_used = p->phase_columns_used = 0;
  for (int64_t i = 0; i < a->kernel_height && sh <= CONV_MAX_PHASE_STRIDE; i++)
    p->phase_rows_used |= 1u << (i * a->dilation_height % sh);
  for (int64_t j = 0; j < a->kernel_width && sw <= CONV_MAX_PHASE_STRIDE; j++)
    p->phase_columns_used |= 1u << (j * a->dilation_width % sw);
  /* The garbage columns (Wq - OW per output row) cost GEMM work: measured on ResNet-8, 1 or 2 extra per 7,
   * 14 or 28 columns (4-14%) win, 2 per 7 (29%, before rows shared their border) lost slightly to the
   * bounds-checked gather. A 1x1 convolution without padding would copy each pixel twice for nothing. */
  const bool strided = sh > 1 || sw > 1;
  /* Few channels on both sides: the forward pass and the weight gradient run conv2d_small.c's direct loops on
   * the padded planes, not a GEMM (which the shapes leave packing-bound and on edge tiles). Measured at batch
   * 128 on one thread (AMD EPYC Zen 2, AVX2), forward and weight gradient: LeNet's conv1 (1 -> 6, 5x5, 25
   * values per output) 1.48 -> 0.59 and 2.73 -> 1.42 ms; ResNet's stem (1 -> 16, 3x3) 1.45 -> 0.89 ms forward;
   * LeNet's conv2 (6 -> 16 on 14x14 -> 10x10, 150 values per output, 4 garbage columns per 10) 2.06 -> 1.46 and
   * 2.25 -> 2.0 ms, data gradient (unit strides only; strided ones, strided_phases false, keep col2im)
   * 2.41 -> 1.66 ms. For these the garbage columns may reach half the output width. */
  const bool small = (strided_phases || !strided) && !p->bf16_products && p->group_in < CONV_TAP_MIN_CHANNELS &&
                     p->group_out <= CONV_SMALL_MAX_OUTPUTS && p->column_rows <= CONV_SMALL_MAX_ROWS;
  const int64_t garbage = p->phase_width - a->out_width;
  p->padded = !p->pointwise && (!strided || strided_phases) && sh <= CONV_MAX_PHASE_STRIDE &&
              sw <= CONV_MAX_PHASE_STRIDE && (p->kernel_area > 1 || a->padding_height > 0 || a->padding_width > 0) &&
              (4 * garbage <= a->out_width || (small && 2 * garbage <= a->out_width));
  p->small = p->padded && small;
  p->sample_columns = p->padded ? a->out_height * p->phase_width : p->out_plane;
  int threads = backend->num_threads > 0 ? backend->num_threads : 1;
  int64_t chunk = (CONV_MIN_COLUMNS + p->sample_columns - 1) / p->sample_columns;
  int64_t per_thread = (a->batch + threads - 1) / threads;
  if (chunk > per_thread) chunk = per_thread;
  if (chunk < 1) chunk = 1;
  if (p->pointwise) chunk = 1;
  p->chunk = chunk;
  p->chunks = (a->batch + chunk - 1) / chunk;
  /* Too few chunks to share, or too little work: run chunks in order and let OpenBLAS use the threads. */
  double work = (double)a->batch * (double)p->out_plane * (double)p->column_rows * (double)a->out_channels;
  p->threads = p->chunks >= threads && work > 2e6 ? threads : 1;
  /* OpenBLAS runs small-matrix products on one thread, so they are only worth it where each thread has its
   * own chunks (or there is one thread): a batch-1 pass on two threads keeps whole, threaded GEMMs. */
  p->small_blocks = p->threads > 1 || threads == 1;
  /* In the padded layout each tap's receptive fields are a matrix already (rows: channel planes, stride
   * padded_plane), so the GEMMs can read them in place, one per tap with C/g as the inner dimension, and
   * skip the column matrix. That needs OpenBLAS's unpacked small-matrix path, whose weight-gradient
   * kernel requires (O/g) (C/g) <= 1200, and enough channels to keep the kernel busy: measured per pass
   * on ResNet-8 (batch 128), 16 -> 16 channels 6.7-7.8 -> 6.0-6.8 ms and 16 -> 32 (stride 2) 4.6-4.9 ->
   * 4.6-4.9 ms, but 32 -> 32 6.3-6.9 -> 6.5-7.1 ms, 1 -> 16 (the stem) 0.7 -> 1.4 ms, and 64 -> 64
   * (4096 weights per tap, past the small kernel) 6.3 -> 10.4 ms for the weight gradient. */
  p->by_tap = p->padded && p->small_blocks && p->group_in >= CONV_TAP_MIN_CHANNELS &&
              p->group_in * p->group_out <= CONV_TAP_MAX_WEIGHTS;
  return BPT_OK;
}

/* The phase plane and offset where tap (i, j)'s run of columns starts, within one channel's phases. */
int64_t bpt_cpu_conv_tap_offset(const bpt_conv2d_args *a, const conv_plan *p, int64_t i, int64_t j) {
  const int64_t row = i * a->dilation_height, column = j * a->dilation_width;
  const int64_t sh = a->stride_height, sw = a->stride_width;
  return (row % sh * sw + column % sw) * p->phase_plane + row / sh * p->phase_width + column / sw;
}

static void blas_gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  bpt_cpu_sgemm(transpose_a, transpose_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* C (m, n) = op(A) (m, k) . op(B) (k, n) + beta C, row-major, cut into blocks OpenBLAS multiplies without
 * packing. OpenBLAS 0.3.21's x86-64 SkylakeX/Cooper Lake kernels (also chosen on Zen 4) take a "small
 * matrix" path when M N K <= 10^6 in its column-major terms, and for op(A) = A^T, op(B) = B there (our
 * weight gradient, B^T) only when also M N <= 1200 and K >= 32. Convolution GEMMs have few rows (16-64
 * channels) and thousands of columns, so the whole product never qualifies; blocks that do measured, for
 * 16 and 32 channels, 1.4-1.6x faster forward and data-gradient GEMMs and 2.2x faster weight gradients
 * (46-65 -> 90-103, 35 -> 76-81 GFLOP/s). Blocks narrower than CONV_SMALL_GEMM_MIN_COLUMNS gained nothing
 * (64 channels), so such products stay whole; with other BLAS builds the blocks cost only extra calls. */
/* The size of equal blocks, at most limit each, that cover count. */
static int64_t even_block(int64_t count, int64_t limit) {
  const int64_t blocks = (count + limit - 1) / limit;
  return (count + blocks - 1) / blocks;
}

void bpt_cpu_conv_gemm(const conv_plan *plan, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (plan->bf16_products) {
    /* The packed kernel needs no cutting. Should its panels find no memory, the f32 product below is the
     * emulation of the same bf16 operands: a slower, not a different, result. */
    const bpt_gemm_args args = {.transpose_a = transpose_a, .transpose_b = transpose_b, .m = m, .n = n, .k = k,
                                .alpha = 1.0f, .a = a, .lda = lda, .b = b, .ldb = ldb, .beta = beta, .c = c,
                                .ldc = ldc, .bf16_products = true};
    if (bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_avx512) == BPT_OK) return;
  }
  if (!plan->small_blocks) {
    blas_gemm(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (!transpose_b) {
    /* Blocks of op(A)'s rows and B's columns with rows columns k <= volume; rows are halved while the
     * columns would fall below CONV_SMALL_GEMM_MIN_COLUMNS (64 channels by 576: 16 rows of 108 columns,
     * 98-108 GFLOP/s against 70-89 whole or in 27-column blocks). */
    int64_t rows = m;
    while (rows > 8 && CONV_SMALL_GEMM_VOLUME / (rows * k) < CONV_SMALL_GEMM_MIN_COLUMNS)
      rows = (rows + 1) / 2;
    int64_t columns = CONV_SMALL_GEMM_VOLUME / (rows * k);
    if (columns < CONV_SMALL_GEMM_MIN_COLUMNS || (rows >= m && columns >= n)) {
      blas_gemm(transpose_a, false, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    rows = even_block(m, rows);
    columns = even_block(n, columns < n ? columns : n);
    for (int64_t i = 0; i < m; i += rows)
      for (int64_t j = 0; j < n; j += columns)
        blas_gemm(transpose_a, false, m - i < rows ? m - i : rows, n - j < columns ? n - j : columns, k,
                  a + (transpose_a ? i : i * lda), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
    return;
  }
  /* C (m, n) += A (m, k) . B^T: blocks of C's columns with n_block m <= outputs, and of the reduction
   * with n_block m k_block <= volume (k_block >= 32). */
  int64_t columns = CONV_SMALL_GEMM_OUTPUTS / m;
  int64_t reduction = columns > 0 ? CONV_SMALL_GEMM_VOLUME / (columns * m) : 0;
  if (transpose_a || beta != 1.0f || columns < 1 || reduction < 32 || (columns >= n && reduction >= k)) {
    blas_gemm(transpose_a, true, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  columns = even_block(n, columns);
  reduction = even_block(k, reduction);
  for (int64_t j = 0; j < n; j += columns)
    for (int64_t l = 0; l < k; l += reduction)
      blas_gemm(false, true, m, n - j < columns ? n - j : columns, k - l < reduction ? k - l : reduction, a + l, lda,
                b + j * ldb + l, ldb, 1.0f, c + j, ldc);
}

int64_t bpt_cpu_conv_chunk_samples(const bpt_conv2d_args *a, const conv_plan *p, int64_t chunk_index) {
  int64_t first = chunk_index * p->chunk;
  return first + p->chunk <= a->batch ? p->chunk : a->batch - first;
}

/* Each thread's scratch, in floats: [partial weight gradient or weights by tap][columns][product or gathered
 * dy][padded planes]. Columns exist unless the GEMMs go by tap or the convolution is pointwise; the
 * product/gathered block when chunks hold several samples or use the padded layout; padded planes hold one
 * sample's group channels, or every sample's of a chunk for conv2d_small.c's loops. */
bpt_status bpt_cpu_conv_reserve_scratch(bpt_backend *backend, const conv_plan *p, size_t partial,
                                        conv_scratch *layout) {
  const int64_t columns = p->chunk * p->sample_columns;
  layout->partial = partial;
  layout->columns = p->pointwise || p->by_tap || p->small ? 0 : (size_t)(p->column_rows * columns);
  layout->stacked = p->chunk > 1 || p->padded ? (size_t)(p->group_out * columns) : 0;
  layout->padded = p->padded ? (size_t)((p->small ? p->chunk : 1) * p->group_in * p->padded_plane) : 0;
  layout->total = layout->partial + layout->columns + layout->stacked + layout->padded;
  return layout->total ? bpt_cpu_scratch_reserve(backend, p->threads, layout->total) : BPT_OK;
}

conv_buffers bpt_cpu_conv_thread_buffers(bpt_backend *backend, const conv_scratch *layout) {
  conv_buffers buffers = {0};
  if (!layout->total) return buffers;
  float *base = bpt_cpu_scratch(backend, omp_get_thread_num());
  if (layout->partial) buffers.partial = base;
  if (layout->columns) buffers.columns = base + layout->partial;
  if (layout->stacked) buffers.stacked = base + layout->partial + layout->columns;
  if (layout->padded) buffers.padded = base + layout->partial + layout->columns + layout->stacked;
  return buffers;
}
