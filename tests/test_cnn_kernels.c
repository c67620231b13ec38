/* The CPU's convolution, batch-norm and pooling kernels against plain references: a direct 7-loop
 * convolution (and its two adjoints) in double, two-pass double batch statistics, pooling ties; and the
 * train/eval semantics of batch norm and dropout in a graph. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/context.h"
#include "test_kernels.h"
#include "test_support.h"

/* ---- convolution ---- */

static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* y[n][o][oh][ow] = b[o] + sum over c in o's group, i, j of x[n][c][ih][iw] w[o][c'][i][j] (7 loops). */
static void reference_conv(const bpt_conv2d_args *a, const float *x, const float *w, const float *b, double *y) {
  const int64_t cg = a->in_channels / a->groups, og = a->out_channels / a->groups;
  for (int64_t n = 0; n < a->batch; n++)
    for (int64_t o = 0; o < a->out_channels; o++)
      for (int64_t oh = 0; oh < a->out_height; oh++)
        for (int64_t ow = 0; ow < a->out_width; ow++) {
          double sum = b ? b[o] : 0.0;
          const int64_t g = o / og;
          for (int64_t c = 0; c < cg; c++)
            for (int64_t i = 0; i < a->kernel_height; i++)
              for (int64_t j = 0; j < a->kernel_width; j++) {
                int64_t ih = oh * a->stride_height - a->padding_height + i * a->dilation_height;
                int64_t iw = ow * a->stride_width - a->padding_width + j * a->dilation_width;
                if (ih < 0 || ih >= a->in_height || iw < 0 || iw >= a->in_width) continue;
                sum += (double)x[((n * a->in_channels + g * cg + c) * a->in_height + ih) * a->in_width + iw] *
                       (double)w[((o * cg + c) * a->kernel_height + i) * a->kernel_width + j];
              }
          y[((n * a->out_channels + o) * a->out_height + oh) * a->out_width + ow] = sum;
        }
}

/* The adjoints of the same loop nest: dx += W^T dy and dW += dy x^T. */
static void reference_conv_backward(const bpt_conv2d_args *a, const float *x, const float *w, const float *dy,
                                    double *dx, double *dw, double *db) {
  const int64_t cg = a->in_channels / a->groups, og = a->out_channels / a->groups;
  for (int64_t n = 0; n < a->batch; n++)
    for (int64_t o = 0; o < a->out_channels; o++)
      for (int64_t oh = 0; oh < a->out_height; oh++)
        for (int64_t ow = 0; ow < a->out_width; ow++) {
          const double d = dy[((n * a->out_channels + o) * a->out_height + oh) * a->out_width + ow];
          const int64_t g = o / og;
          db[o] += d;
          for (int64_t c = 0; c < cg; c++)
            for (int64_t i = 0; i < a->kernel_height; i++)
              for (int64_t j = 0; j < a->kernel_width; j++) {
                int64_t ih = oh * a->stride_height - a->padding_height + i * a->dilation_height;
                int64_t iw = ow * a->stride_width - a->padding_width + j * a->dilation_width;
                if (ih < 0 || ih >= a->in_height || iw < 0 || iw >= a->in_width) continue;
                const int64_t xi = ((n * a->in_channels + g * cg + c) * a->in_height + ih) * a->in_width + iw;
                const int64_t wi = ((o * cg + c) * a->kernel_height + i) * a->kernel_width + j;
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
}

static double max_relative_error(const float *actual, const double *expected, int64_t count) {
  double scale = 1e-6, worst = 0.0;
  for (int64_t i = 0; i < count; i++)
    scale = fmax(scale, fabs(expected[i]));
  for (int64_t i = 0; i < count; i++) {
    if (isnan(actual[i])) return INFINITY; /* fmax would skip it */
    worst = fmax(worst, fabs((double)actual[i] - expected[i]) / scale);
  }
  return worst;
}

/* The conv2d node whose bpt_conv2d_args_of is a: x, weight, bias (NULL: none) and y, with gradients dx, dw, db
 * (NULL: not wanted); dx is assigned (beta 0) when a->assign_input_gradient. */
static bpt_kernel_node conv_node(const bpt_conv2d_args *a, float *x, float *w, float *b, float *y, float *dx, float *dw,
                                 float *db, float *dy) {
  bpt_kernel_node node = test_kernel_node(BPT_OP_CONV2D);
  node.input_count = b ? 3 : 2;
  node.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, x, dx, 4,
                                      (const int64_t[]){a->batch, a->in_channels, a->in_height, a->in_width});
  node.inputs[0].beta = a->assign_input_gradient ? 0.0f : 1.0f;
  node.inputs[1] = test_kernel_tensor(
      BPT_DTYPE_F32, w, dw, 4,
      (const int64_t[]){a->out_channels, a->in_channels / a->groups, a->kernel_height, a->kernel_width});
  if (b) node.inputs[2] = test_kernel_tensor(BPT_DTYPE_F32, b, db, 1, (const int64_t[]){a->out_channels});
  node.output = test_kernel_tensor(BPT_DTYPE_F32, y, dy, 4,
                                   (const int64_t[]){a->batch, a->out_channels, a->out_height, a->out_width});
  const int64_t attributes[7] = {a->stride_height,   a->stride_width,   a->padding_height, a->padding_width,
                                 a->dilation_height, a->dilation_width, a->groups};
  memcpy(node.int_attributes, attributes, sizeof attributes);
  node.bf16_products = a->bf16_products;
  return node;
}

static void check_conv(bpt_backend *backend, bpt_conv2d_args a, uint64_t seed) {
  a.out_height = out_size(a.in_height, a.kernel_height, a.stride_height, a.padding_height, a.dilation_height);
  a.out_width = out_size(a.in_width, a.kernel_width, a.stride_width, a.padding_width, a.dilation_width);
  const int64_t x_count = a.batch * a.in_channels * a.in_height * a.in_width;
  const int64_t w_count = a.out_channels * (a.in_channels / a.groups) * a.kernel_height * a.kernel_width;
  const int64_t y_count = a.batch * a.out_channels * a.out_height * a.out_width;
  float *x = malloc((size_t)x_count * sizeof *x), *w = malloc((size_t)w_count * sizeof *w);
  float *b = malloc((size_t)a.out_channels * sizeof *b), *y = malloc((size_t)y_count * sizeof *y);
  float *dy = malloc((size_t)y_count * sizeof *dy), *dx = malloc((size_t)x_count * sizeof *dx);
  float *dw = malloc((size_t)w_count * sizeof *dw), *db = malloc((size_t)a.out_channels * sizeof *db);
  double *ry = calloc((size_t)y_count, sizeof *ry), *rdx = calloc((size_t)x_count, sizeof *rdx);
  double *rdw = calloc((size_t)w_count, sizeof *rdw), *rdb = calloc((size_t)a.out_channels, sizeof *rdb);
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, x, x_count, -1.0f, 1.0f);
  test_random_fill(&random, w, w_count, -1.0f, 1.0f);
  test_random_fill(&random, b, a.out_channels, -1.0f, 1.0f);
  test_random_fill(&random, dy, y_count, -1.0f, 1.0f);
  /* Gradients accumulate: start from non-zero values and add them to the reference. */
  test_random_fill(&random, dx, x_count, -1.0f, 1.0f);
  test_random_fill(&random, dw, w_count, -1.0f, 1.0f);
  test_random_fill(&random, db, a.out_channels, -1.0f, 1.0f);
  for (int64_t i = 0; i < x_count; i++)
    rdx[i] = dx[i];
  for (int64_t i = 0; i < w_count; i++)
    rdw[i] = dw[i];
  for (int64_t i = 0; i < a.out_channels; i++)
    rdb[i] = db[i];

  reference_conv(&a, x, w, b, ry);
  reference_conv_backward(&a, x, w, dy, rdx, rdw, rdb);
  bpt_kernel_node node = conv_node(&a, x, w, b, y, dx, dw, db, dy);
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  assert_int_equal(test_kernel_run(backend, &node, true), BPT_OK);
  print_message(
      "[ conv     ] N%lld C%lld %lldx%lld O%lld k%lldx%lld s%lld p%lld d%lld g%lld: errors %.2g %.2g %.2g %.2g\n",
      (long long)a.batch, (long long)a.in_channels, (long long)a.in_height, (long long)a.in_width,
      (long long)a.out_channels, (long long)a.kernel_height, (long long)a.kernel_width, (long long)a.stride_height,
      (long long)a.padding_height, (long long)a.dilation_height, (long long)a.groups,
      max_relative_error(y, ry, y_count), max_relative_error(dx, rdx, x_count), max_relative_error(dw, rdw, w_count),
      max_relative_error(db, rdb, a.out_channels));
  assert_true(max_relative_error(y, ry, y_count) < 1e-5);
  assert_true(max_relative_error(dx, rdx, x_count) < 1e-5);
  assert_true(max_relative_error(dw, rdw, w_count) < 1e-5);
  assert_true(max_relative_error(db, rdb, a.out_channels) < 1e-5);
  /* Assigning the data gradient (a first writer, see run.c): whatever dx held, here NaN, is replaced. */
  for (int64_t i = 0; i < x_count; i++)
    dx[i] = NAN;
  memset(rdx, 0, (size_t)x_count * sizeof *rdx);
  memset(rdw, 0, (size_t)w_count * sizeof *rdw);
  memset(rdb, 0, (size_t)a.out_channels * sizeof *rdb);
  reference_conv_backward(&a, x, w, dy, rdx, rdw, rdb);
  bpt_conv2d_args assigning = a;
  assigning.assign_input_gradient = true;
  node = conv_node(&assigning, x, w, b, y, dx, NULL, NULL, dy);
  assert_int_equal(test_kernel_run(backend, &node, true), BPT_OK);
  assert_true(max_relative_error(dx, rdx, x_count) < 1e-5);
  free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
  free(ry), free(rdx), free(rdw), free(rdb);
}

static bpt_conv2d_args conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw, int64_t s,
                            int64_t p, int64_t d, int64_t g) {
  return (bpt_conv2d_args){.batch = n,
                           .in_channels = c,
                           .in_height = h,
                           .in_width = w,
                           .out_channels = o,
                           .kernel_height = kh,
                           .kernel_width = kw,
                           .stride_height = s,
                           .stride_width = s,
                           .padding_height = p,
                           .padding_width = p,
                           .dilation_height = d,
                           .dilation_width = d,
                           .groups = g};
}

/* Every case on the given backend; run with two threads (chunks shared between threads, or whole GEMMs
 * that OpenBLAS threads) and with one (every GEMM cut into small-matrix blocks, the tap GEMMs). */
static void check_conv_cases(bpt_backend *backend) {
  check_conv(backend, conv(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1), 1);
  check_conv(backend, conv(3, 4, 9, 9, 6, 3, 3, 2, 1, 1, 2), 2);   /* stride 2, groups */
  check_conv(backend, conv(2, 2, 8, 7, 3, 3, 3, 1, 2, 2, 1), 3);   /* dilation */
  check_conv(backend, conv(1, 5, 6, 6, 7, 1, 1, 1, 0, 1, 1), 4);   /* pointwise, batch 1 */
  check_conv(backend, conv(3, 4, 7, 7, 8, 1, 1, 2, 0, 1, 1), 5);   /* projection shortcut */
  check_conv(backend, conv(2, 1, 28, 28, 6, 5, 5, 1, 2, 1, 1), 6); /* LeNet conv1 */
  /* Big enough to run chunks of several samples on both threads (gathers and partial weight sums). */
  check_conv(backend, conv(12, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1), 7);
  check_conv(backend, conv(13, 8, 7, 7, 16, 3, 3, 1, 1, 1, 2), 8);
  check_conv(backend, conv(9, 32, 8, 8, 32, 1, 1, 1, 0, 1, 1), 9); /* threaded pointwise */
  /* Stride-1 convolutions on planes wide enough for the padded-width lowering: padding 0, 1 and 2, dilation,
   * groups, batch 1, a rectangular kernel with padding only along the width, and threaded chunks. */
  check_conv(backend, conv(2, 3, 9, 17, 5, 3, 3, 1, 2, 2, 1), 10);
  check_conv(backend, conv(2, 3, 9, 20, 4, 3, 3, 1, 0, 2, 1), 11);
  check_conv(backend, conv(3, 4, 10, 16, 6, 3, 3, 1, 1, 1, 2), 12);
  check_conv(backend, conv(1, 2, 6, 12, 3, 3, 3, 1, 1, 1, 1), 13);
  bpt_conv2d_args wide_only = conv(2, 3, 5, 16, 4, 1, 5, 1, 0, 1, 1);
  wide_only.padding_width = 2;
  check_conv(backend, wide_only, 14);
  check_conv(backend, conv(24, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1), 15);
  /* Padding wider than the kernel's overhang: rows keep both borders instead of sharing one. */
  check_conv(backend, conv(2, 3, 6, 12, 4, 1, 1, 1, 1, 1, 1), 23);
  check_conv(backend, conv(2, 2, 6, 16, 3, 3, 3, 1, 3, 1, 1), 24);
  /* Strided convolutions through phase planes: odd sizes, groups, dilation (one phase used), stride 3, a
   * 2x2 stride-2 kernel without padding, LeNet-sized 5x5; and a small one left on the bounds-checked path. */
  check_conv(backend, conv(3, 4, 15, 15, 6, 3, 3, 2, 1, 1, 2), 16);
  check_conv(backend, conv(2, 3, 17, 17, 4, 3, 3, 2, 2, 2, 1), 17);
  check_conv(backend, conv(2, 2, 20, 19, 3, 3, 3, 3, 1, 1, 1), 18);
  check_conv(backend, conv(2, 3, 16, 16, 5, 2, 2, 2, 0, 1, 1), 19);
  check_conv(backend, conv(1, 2, 28, 28, 4, 5, 5, 2, 2, 1, 1), 20);
  check_conv(backend, conv(24, 8, 14, 14, 16, 3, 3, 2, 1, 1, 1), 21);
  check_conv(backend, conv(2, 3, 7, 7, 4, 3, 3, 2, 0, 1, 1), 22);
  /* The bounds-checked im2col and col2im on rows of 8 or more: LeNet's conv2 (14x14 -> 10x10, rows of 10),
   * padding that cuts rows short at both sides (5x5, padding 1, on 11x13), and rows of 23 (two vectors and
   * an overlapping third) from a 7x7 kernel on rows of 29. */
  check_conv(backend, conv(3, 6, 14, 14, 16, 5, 5, 1, 0, 1, 1), 48);
  check_conv(backend, conv(2, 3, 11, 13, 4, 5, 5, 1, 1, 1, 1), 49);
  check_conv(backend, conv(2, 2, 9, 29, 3, 7, 7, 1, 0, 1, 1), 50);
  /* Products big enough to be cut into OpenBLAS's small-matrix blocks: columns of the forward and data
   * GEMMs, and both the columns and the reduction (a 32x33-column sample) of the weight gradient's. */
  check_conv(backend, conv(2, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1), 25);
  check_conv(backend, conv(2, 32, 40, 40, 32, 1, 1, 1, 0, 1, 1), 26);
  check_conv(backend, conv(2, 64, 9, 9, 64, 3, 3, 1, 1, 1, 1), 30); /* rows of W and of W^T cut too */
  /* 16 channels per group: one GEMM per kernel tap, with phases (stride 2), groups, dilation without
   * padding, and threaded chunks (case 7 above). */
  check_conv(backend, conv(3, 16, 15, 15, 8, 3, 3, 2, 1, 1, 1), 27);
  check_conv(backend, conv(4, 32, 10, 16, 32, 3, 3, 1, 1, 1, 2), 28);
  check_conv(backend, conv(2, 16, 8, 20, 4, 3, 3, 1, 0, 2, 1), 29);
  /* The direct kernels' shapes (3x3, padding 1, C a multiple of 8, O of 16; stride 1 or 2): odd and
   * non-square planes, 7x7 planes (one short tile of positions), stride 2 from odd sizes, 16 and 32 output
   * channels per weight-gradient tile, batch 1, and samples that do not fill a thread's last chunk. */
  check_conv(backend, conv(2, 8, 13, 11, 32, 3, 3, 1, 1, 1, 1), 31);
  check_conv(backend, conv(1, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1), 32);
  check_conv(backend, conv(3, 16, 15, 15, 16, 3, 3, 2, 1, 1, 1), 33);
  check_conv(backend, conv(2, 8, 7, 9, 32, 3, 3, 2, 1, 1, 1), 34);
  check_conv(backend, conv(5, 16, 28, 28, 32, 3, 3, 2, 1, 1, 1), 35);
  check_conv(backend, conv(11, 32, 7, 7, 64, 3, 3, 1, 1, 1, 1), 36);
  check_conv(backend, conv(2, 8, 17, 35, 16, 3, 3, 2, 1, 1, 1), 37); /* rows over 32 pixels: the scalar phase split */
  /* Winograd F(2x2, 3x3) (stride 1, planes of 14 or more): odd heights and widths (half tiles at the edges),
   * batch 1, 8 input channels (the data gradient's 8 outputs), and more tiles than one register tile. */
  check_conv(backend, conv(2, 16, 15, 17, 16, 3, 3, 1, 1, 1, 1), 38);
  check_conv(backend, conv(1, 8, 14, 14, 32, 3, 3, 1, 1, 1, 1), 39);
  check_conv(backend, conv(3, 32, 21, 16, 16, 3, 3, 1, 1, 1, 1), 40);
  /* The Winograd weight gradient (stride 1, channels in 16s; odd planes in cases 36, 38, 40 and 41): a last group
   * of fewer than 16 tiles, two vectors of input channels, rows over 32 pixels, two blocks of output channels,
   * batch 1 and a thread with fewer samples. */
  check_conv(backend, conv(1, 32, 14, 34, 16, 3, 3, 1, 1, 1, 1), 44);
  check_conv(backend, conv(3, 16, 18, 14, 32, 3, 3, 1, 1, 1, 1), 45);
  /* Winograd with channels in lanes on planes under 14 (output channels in 64s; cases 36 and 41 too): two blocks
   * of output channels, batch 1, an odd height and a width of 6. */
  check_conv(backend, conv(1, 16, 8, 12, 128, 3, 3, 1, 1, 1, 1), 46);
  check_conv(backend, conv(2, 64, 13, 6, 64, 3, 3, 1, 1, 1, 1), 47);
  /* Output planes of 64 pixels or fewer with 64-channel multiples: pixel-major tiles, forward and data. */
  check_conv(backend, conv(3, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1), 41);
  check_conv(backend, conv(2, 32, 13, 13, 64, 3, 3, 2, 1, 1, 1), 42);
  check_conv(backend, conv(2, 64, 6, 5, 16, 3, 3, 1, 1, 1, 1), 43);
}

/* Runs every case through the direct kernels where they apply (and the CPU has them), then through the
 * GEMM lowerings alone. */
static void check_conv_lowerings(bpt_backend *backend) {
  bpt_cpu_state *state = backend->state;
  check_conv_cases(backend);
  state->gemm_convolutions_only = true;
  check_conv_cases(backend);
  state->gemm_convolutions_only = false;
}

/* Once per level of loops the CPU has: the AVX-512 kernels, the AVX2 ones (the same bodies on 8 lanes; stride 1
 * only through Winograd with channels in 16s: cases 7, 25, 30, 32, 36, 38, 40, 41, 44-47; stride 2: 21, 33-35,
 * 37, 42), and the portable level, which leaves every case to the GEMM lowerings. */
static void conv_matches_direct_loops(void **state) {
  (void)state;
  /* Widest first, so that a slow run (valgrind) reaches the vector kernels early. */
  for (int level = (int)bpt_cpu_loops_supported(); level >= (int)BPT_CPU_LOOPS_PORTABLE; level--) {
    const bpt_cpu_loops loops = (bpt_cpu_loops)level;
    bpt_context *context = test_context(1);
    ((bpt_cpu_state *)context->backend.state)->loop_limit = loops;
    check_conv_lowerings(&context->backend);
    bpt_context_destroy(context);
    bpt_context_options options = bpt_context_options_default();
    options.num_threads = 1;
    assert_int_equal(bpt_context_create(&options, &context), BPT_OK);
    ((bpt_cpu_state *)context->backend.state)->loop_limit = loops;
    check_conv_lowerings(&context->backend);
    bpt_context_destroy(context);
  }
}

/* Convolutions with few channels (C/g < 16, O/g <= 16, C/g kh kw <= 160), which run conv2d_small.c's loops in
 * the forward pass and the weight gradient, at every level of loops the CPU has: LeNet's conv1 and conv2
 * (garbage columns up to half the width), a one-channel 3x3 stem (16 outputs: whole tiles), 27 values per
 * output in two groups, 13 outputs (tiles of 6 and 4 with remainders), stride 2 through phase planes,
 * dilation, rows whose columns end in partial vectors, 125, 135 and exactly 160 values per output, 6
 * channels per group; and, on the other side of the limits, 175 values per output and garbage columns over
 * half the width. On two threads (chunks shared) and one. */
static void small_convolutions_on(bpt_backend *backend, bpt_cpu_loops loops) {
  ((bpt_cpu_state *)backend->state)->loop_limit = loops;
  check_conv(backend, conv(3, 1, 28, 28, 6, 5, 5, 1, 2, 1, 1), 61);
  check_conv(backend, conv(2, 1, 12, 12, 16, 3, 3, 1, 1, 1, 1), 62);
  check_conv(backend, conv(2, 6, 9, 17, 4, 3, 3, 1, 1, 1, 2), 63);
  check_conv(backend, conv(3, 2, 11, 11, 13, 3, 3, 1, 1, 1, 1), 64);
  check_conv(backend, conv(2, 1, 17, 17, 5, 5, 5, 2, 2, 1, 1), 65);
  check_conv(backend, conv(2, 2, 9, 17, 7, 3, 3, 1, 2, 2, 1), 66);
  check_conv(backend, conv(9, 3, 5, 13, 3, 1, 3, 1, 1, 1, 1), 67);
  check_conv(backend, conv(5, 6, 14, 14, 16, 5, 5, 1, 0, 1, 1), 68);
  check_conv(backend, conv(2, 5, 9, 11, 7, 5, 5, 1, 1, 1, 1), 69);
  check_conv(backend, conv(3, 15, 7, 7, 9, 3, 3, 1, 1, 1, 1), 70);
  check_conv(backend, conv(2, 10, 9, 9, 5, 4, 4, 1, 1, 1, 1), 71);
  check_conv(backend, conv(2, 12, 10, 10, 8, 3, 3, 1, 1, 1, 2), 72);
  check_conv(backend, conv(2, 7, 12, 12, 5, 5, 5, 1, 2, 1, 1), 73);
  check_conv(backend, conv(2, 2, 8, 8, 4, 5, 5, 1, 0, 1, 1), 74);
  /* A 3x1 kernel without padding has no garbage columns, so the last partial vector holds real outputs. */
  check_conv(backend, conv(2, 3, 9, 13, 5, 3, 1, 1, 0, 1, 1), 75);
  /* 36 values per output: the weight gradient's tiles of 5 taps leave one. */
  check_conv(backend, conv(2, 4, 9, 9, 3, 3, 3, 1, 1, 1, 1), 76);
  ((bpt_cpu_state *)backend->state)->loop_limit = BPT_CPU_LOOPS_AVX512;
}

static void small_convolutions_match_direct_loops(void **state) {
  (void)state;
  for (int threads = 2; threads >= 1; threads--) {
    bpt_context_options options = bpt_context_options_default();
    options.num_threads = threads;
    bpt_context *context = NULL;
    assert_int_equal(bpt_context_create(&options, &context), BPT_OK);
    for (bpt_cpu_loops loops = BPT_CPU_LOOPS_PORTABLE; loops <= bpt_cpu_loops_supported(); loops++)
      small_convolutions_on(&context->backend, loops);
    bpt_context_destroy(context);
  }
}

/* ---- batch norm ---- */

/* Once per level of row loops the CPU has (AVX-512, AVX2, portable). */
static void batch_norm_statistics_match_two_pass_on(bpt_cpu_loops loops) {
  bpt_context *context = test_context(2);
  bpt_backend *backend = &context->backend;
  ((bpt_cpu_state *)backend->state)->loop_limit = loops;
  enum { N = 7, C = 3, S = 37 };
  /* A large mean over a small spread is where a naive sum of squares cancels catastrophically. */
  static const float means[C] = {1000.0f, -3.0f, 0.0f}, spreads[C] = {0.01f, 2.0f, 1.0f};
  float *x = malloc(N * C * S * sizeof *x), *y = malloc(N * C * S * sizeof *y);
  float gamma[C] = {1.5f, 0.5f, -1.0f}, beta[C] = {0.1f, -0.2f, 0.3f};
  float running_mean[C] = {0.5f, 0.5f, 0.5f}, running_variance[C] = {2.0f, 2.0f, 2.0f};
  float saved[2 * C], *saved_mean = saved, *saved_inverse_std = saved + C; /* the node's saved layout */
  test_random random;
  test_random_seed(&random, 2);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int s = 0; s < S; s++)
        x[(n * C + c) * S + s] = means[c] + spreads[c] * test_random_uniform(&random, -1.0f, 1.0f);
  bpt_kernel_node node = test_kernel_node(BPT_OP_BATCH_NORM);
  node.input_count = 5;
  float *inputs[5] = {x, gamma, beta, running_mean, running_variance};
  node.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, x, NULL, 3, (const int64_t[]){N, C, S});
  for (int i = 1; i < 5; i++)
    node.inputs[i] = test_kernel_tensor(BPT_DTYPE_F32, inputs[i], NULL, 1, (const int64_t[]){C});
  node.output = test_kernel_tensor(BPT_DTYPE_F32, y, NULL, 3, (const int64_t[]){N, C, S});
  node.saved = saved;
  node.float_attributes[0] = 0.1f;  /* momentum */
  node.float_attributes[1] = 1e-5f; /* epsilon */
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  for (int c = 0; c < C; c++) {
    double sum = 0.0, squares = 0.0;
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++)
        sum += x[(n * C + c) * S + s];
    const double mean = sum / (N * S);
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++)
        squares += (x[(n * C + c) * S + s] - mean) * (x[(n * C + c) * S + s] - mean);
    const double variance = squares / (N * S);
    assert_true(fabs(saved_mean[c] - mean) <= 1e-6 * fabs(mean) + 1e-7);
    const double expected_inverse_std = 1.0 / sqrt(variance + 1e-5);
    assert_true(fabs(saved_inverse_std[c] - expected_inverse_std) < 1e-3 * expected_inverse_std);
    assert_true(fabs(running_mean[c] - (0.9 * 0.5 + 0.1 * mean)) < 1e-4 * fmax(1.0, fabs(mean)));
    const double unbiased = squares / (N * S - 1);
    assert_true(fabs(running_variance[c] - (0.9 * 2.0 + 0.1 * unbiased)) < 1e-4 * (0.9 * 2.0 + 0.1 * unbiased));
    for (int n = 0; n < N; n++)
      for (int s = 0; s < S; s++) {
        const int i = (n * C + c) * S + s;
        const double expected = gamma[c] * (x[i] - mean) * expected_inverse_std + beta[c];
        /* The saved mean is a float: its rounding (half an ulp of the mean) is amplified by gamma / std. */
        const double allowed = 1e-4 + 6e-8 * fabs(mean) * fabs(gamma[c]) * expected_inverse_std;
        assert_true(fabs(y[i] - expected) < allowed);
      }
  }
  /* Evaluation mode: normalise with the running statistics and leave them alone. */
  node.evaluation = true;
  const float frozen_mean[C] = {running_mean[0], running_mean[1], running_mean[2]};
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  for (int c = 0; c < C; c++) {
    assert_true(running_mean[c] == frozen_mean[c]);
    const int i = (2 * C + c) * S + 5;
    const double expected = gamma[c] * (x[i] - running_mean[c]) / sqrt(running_variance[c] + 1e-5) + beta[c];
    assert_true(fabs(y[i] - expected) < 1e-3 * fmax(1.0, fabs(expected)));
  }
  free(x);
  free(y);
  bpt_context_destroy(context);
}

static void batch_norm_statistics_match_two_pass(void **state) {
  (void)state;
  for (bpt_cpu_loops loops = BPT_CPU_LOOPS_PORTABLE; loops <= bpt_cpu_loops_supported(); loops++)
    batch_norm_statistics_match_two_pass_on(loops);
}

/* ---- pooling ---- */

/* The max_pool2d or avg_pool2d node whose bpt_pool2d_args_of is a: x and y, saved (the winners, NULL for
 * average pooling), dx and dy. */
static bpt_kernel_node pool_node(const bpt_pool2d_args *a, float *x, float *y, int32_t *saved, float *dx, float *dy) {
  bpt_kernel_node node = test_kernel_node(a->kind == BPT_POOL_MAX ? BPT_OP_MAX_POOL2D : BPT_OP_AVG_POOL2D);
  node.input_count = 1;
  node.inputs[0] =
      test_kernel_tensor(BPT_DTYPE_F32, x, dx, 4, (const int64_t[]){a->batch, a->channels, a->in_height, a->in_width});
  node.output = test_kernel_tensor(BPT_DTYPE_F32, y, dy, 4,
                                   (const int64_t[]){a->batch, a->channels, a->out_height, a->out_width});
  node.saved = saved;
  const int64_t attributes[6] = {a->kernel_height, a->kernel_width,   a->stride_height,
                                 a->stride_width,  a->padding_height, a->padding_width};
  memcpy(node.int_attributes, attributes, sizeof attributes);
  return node;
}

/* Forward, then (dx not NULL) backward, of the pooling a describes. */
static void run_pool(bpt_backend *backend, const bpt_pool2d_args *a, float *x, float *y, int32_t *saved, float *dx,
                     float *dy) {
  bpt_kernel_node node = pool_node(a, x, y, saved, dx, dy);
  assert_int_equal(test_kernel_run(backend, &node, false), BPT_OK);
  if (dx) assert_int_equal(test_kernel_run(backend, &node, true), BPT_OK);
}

static void max_pool_ties_route_to_first(void **state) {
  (void)state;
  bpt_context *context = test_context(3);
  bpt_backend *backend = &context->backend;
  /* One 4x4 plane of equal values, 2x2 windows with stride 2: each window's gradient goes to its top-left. */
  float x[16], y[4], dy[4] = {1.0f, 2.0f, 3.0f, 4.0f}, dx[16] = {0};
  int32_t argmax[4];
  for (int i = 0; i < 16; i++)
    x[i] = 0.5f;
  bpt_pool2d_args args = {.kind = BPT_POOL_MAX,
                          .batch = 1,
                          .channels = 1,
                          .in_height = 4,
                          .in_width = 4,
                          .out_height = 2,
                          .out_width = 2,
                          .kernel_height = 2,
                          .kernel_width = 2,
                          .stride_height = 2,
                          .stride_width = 2};
  run_pool(backend, &args, x, y, argmax, dx, dy);
  const float expected[16] = {1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; i++)
    assert_true(dx[i] == expected[i]);
  for (int i = 0; i < 4; i++)
    assert_true(y[i] == 0.5f);
  /* Overlapping 3x3 windows, stride 1, padding 1 over negative values: padding never wins, and an input
   * that wins several windows collects all their gradients. */
  float plane[9] = {-5, -4, -3, -2, -1, -6, -7, -8, -9}, out[9], d[9], grad[9] = {0};
  int32_t winners[9];
  for (int i = 0; i < 9; i++)
    d[i] = 1.0f;
  bpt_pool2d_args overlapping = {.kind = BPT_POOL_MAX,
                                 .batch = 1,
                                 .channels = 1,
                                 .in_height = 3,
                                 .in_width = 3,
                                 .out_height = 3,
                                 .out_width = 3,
                                 .kernel_height = 3,
                                 .kernel_width = 3,
                                 .stride_height = 1,
                                 .stride_width = 1,
                                 .padding_height = 1,
                                 .padding_width = 1};
  run_pool(backend, &overlapping, plane, out, winners, grad, d);
  const float expected_out[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  for (int i = 0; i < 9; i++)
    assert_true(out[i] == expected_out[i]);
  assert_true(grad[4] == 9.0f);
  /* Average pooling with padding divides by the full window. */
  bpt_pool2d_args average = overlapping;
  average.kind = BPT_POOL_AVERAGE;
  run_pool(backend, &average, plane, out, NULL, NULL, NULL);
  assert_true(fabsf(out[0] - (-5 - 4 - 2 - 1) / 9.0f) < 1e-6f);
  bpt_context_destroy(context);
}

/* 2x2 stride-2 max pooling (its own loop in pool2d.c) against a plain window loop, with ties (values from a
 * set of five), NaN, -inf and -FLT_MAX among them, on odd planes (a last row and column no window covers),
 * LeNet's 28x28 and rows of 33: same outputs (NaN where NaN) and the same winners. */
static void max_pool_pairs_match_window_loop(void **state) {
  (void)state;
  bpt_context *context = test_context(4);
  static const int64_t sizes[3][2] = {{7, 9}, {28, 28}, {5, 33}};
  const float specials[4] = {NAN, -INFINITY, -FLT_MAX, 1.0f};
  test_random random;
  test_random_seed(&random, 4);
  for (int shape = 0; shape < 3; shape++) {
    const int64_t N = 2, C = 3, H = sizes[shape][0], W = sizes[shape][1], OH = H / 2, OW = W / 2;
    float *x = malloc((size_t)(N * C * H * W) * sizeof *x), *y = malloc((size_t)(N * C * OH * OW) * sizeof *y);
    int32_t *argmax = malloc((size_t)(N * C * OH * OW) * sizeof *argmax);
    for (int64_t i = 0; i < N * C * H * W; i++) {
      const float u = test_random_uniform(&random, 0.0f, 1.0f);
      x[i] = u < 0.1f ? specials[(int)(u * 40.0f)] : floorf(test_random_uniform(&random, -2.0f, 3.0f));
    }
    /* A window of NaNs only, one of -inf only, and NaN first before larger values. */
    x[0] = x[1] = x[W] = x[W + 1] = NAN;
    x[2] = x[3] = x[W + 2] = x[W + 3] = -INFINITY;
    x[4] = NAN, x[5] = 2.0f, x[W + 4] = 2.0f, x[W + 5] = -1.0f;
    bpt_pool2d_args args = {.kind = BPT_POOL_MAX,
                            .batch = N,
                            .channels = C,
                            .in_height = H,
                            .in_width = W,
                            .out_height = OH,
                            .out_width = OW,
                            .kernel_height = 2,
                            .kernel_width = 2,
                            .stride_height = 2,
                            .stride_width = 2};
    run_pool(&context->backend, &args, x, y, argmax, NULL, NULL);
    for (int64_t plane = 0; plane < N * C; plane++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          const float *in = x + plane * H * W;
          float best = -FLT_MAX;
          int64_t index = 2 * oh * W + 2 * ow;
          for (int64_t h = 2 * oh; h < 2 * oh + 2; h++)
            for (int64_t w = 2 * ow; w < 2 * ow + 2; w++)
              if (in[h * W + w] > best) best = in[h * W + w], index = h * W + w;
          const int64_t o = plane * OH * OW + oh * OW + ow;
          assert_int_equal(argmax[o], index);
          assert_true(isnan(in[index]) ? isnan(y[o]) : y[o] == in[index]);
        }
    free(x), free(y), free(argmax);
  }
  bpt_context_destroy(context);
}

/* A window over the whole plane (global average pooling) against means in double: 6 planes of 7x7 and of
 * 5x3; backward adds each plane's share to what dx held. */
static void whole_plane_average_matches_mean(void **state) {
  (void)state;
  bpt_context *context = test_context(6);
  bpt_backend *backend = &context->backend;
  test_random random;
  test_random_seed(&random, 6);
  static const int64_t sizes[2][2] = {{7, 7}, {5, 3}};
  for (int k = 0; k < 2; k++) {
    const int64_t H = sizes[k][0], W = sizes[k][1], planes = 6;
    float x[6 * 49], y[6], dy[6], dx[6 * 49];
    test_random_fill(&random, x, planes * H * W, -1.0f, 1.0f);
    test_random_fill(&random, dy, planes, -1.0f, 1.0f);
    for (int64_t i = 0; i < planes * H * W; i++)
      dx[i] = 1.0f;
    bpt_pool2d_args args = {.kind = BPT_POOL_AVERAGE,
                            .batch = 2,
                            .channels = 3,
                            .in_height = H,
                            .in_width = W,
                            .out_height = 1,
                            .out_width = 1,
                            .kernel_height = H,
                            .kernel_width = W,
                            .stride_height = H,
                            .stride_width = W};
    run_pool(backend, &args, x, y, NULL, dx, dy);
    for (int64_t p = 0; p < planes; p++) {
      double sum = 0.0;
      for (int64_t i = 0; i < H * W; i++) {
        sum += x[p * H * W + i];
        assert_true(fabsf(dx[p * H * W + i] - (1.0f + dy[p] / (float)(H * W))) < 1e-6f);
      }
      assert_true(fabs(y[p] - sum / (double)(H * W)) < 1e-6);
    }
  }
  bpt_context_destroy(context);
}

/* ---- train and eval semantics in a graph ---- */

static void train_and_eval_modes(void **state) {
  (void)state;
  bpt_context *context = test_context(4);
  bpt_graph *graph;
  bpt_node *x, *normalised, *dropped, *target, *loss;
  int64_t image[3] = {2, 4, 4}, features = 32;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_layer_batch_norm(graph, "bn", x, &normalised));
  assert_ok(context, bpt_dropout(graph, "drop", normalised, 0.5f, &dropped));
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &features, &target));
  assert_ok(context, bpt_mse_loss(graph, "loss", dropped, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 64));
  assert_int_equal(bpt_graph_is_training(graph), 1);

  int64_t dims[4] = {64, 2, 4, 4}, target_dims[2] = {64, 32};
  bpt_tensor *values, *targets, *bn_out, *drop_out;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, target_dims, &targets));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &bn_out));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, dims, &drop_out));
  test_random random;
  test_random_seed(&random, 4);
  float *v = bpt_tensor_data(values);
  for (int64_t i = 0; i < 64 * 32; i++)
    v[i] = 3.0f + test_random_uniform(&random, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, values));
  assert_ok(context, bpt_graph_set_input(graph, target, targets));

  /* Training: batch statistics give mean 0 per channel; dropout zeroes about half and doubles the rest. */
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, normalised, bn_out));
  assert_ok(context, bpt_graph_read(graph, dropped, drop_out));
  const float *b = bpt_tensor_data(bn_out), *d = bpt_tensor_data(drop_out);
  double channel_sum = 0.0;
  int zeros = 0;
  for (int64_t n = 0; n < 64; n++)
    for (int s = 0; s < 16; s++)
      channel_sum += b[n * 32 + s];
  for (int64_t i = 0; i < 64 * 32; i++) {
    if (d[i] == 0.0f)
      zeros++;
    else
      assert_true(fabsf(d[i] - 2.0f * b[i]) < 1e-5f);
  }
  assert_true(fabs(channel_sum / (64 * 16)) < 1e-4);
  assert_true(zeros > 64 * 32 * 0.4 && zeros < 64 * 32 * 0.6);
  bpt_value_statistics statistics = {.size = sizeof statistics};
  assert_ok(context, bpt_graph_value_statistics(graph, dropped, &statistics));
  assert_true(fabs(statistics.zero_fraction - zeros / (64.0 * 32.0)) < 1e-9);

  /* The running mean moved a tenth of the way to the batch mean (about 3). */
  bpt_node *running_mean;
  assert_ok(context, bpt_graph_find_node(graph, "bn.running_mean", &running_mean));
  assert_int_equal(bpt_node_is_trainable(running_mean), 0);

  /* Evaluation: dropout passes values through; batch norm uses running statistics (mean ~0.3, var ~1). */
  assert_ok(context, bpt_graph_set_training(graph, 0));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, normalised, bn_out));
  assert_ok(context, bpt_graph_read(graph, dropped, drop_out));
  for (int64_t i = 0; i < 64 * 32; i++)
    assert_true(d[i] == b[i]);
  assert_true(fabs(b[0] - (v[0] - 0.1 * 3.0) / sqrt(0.9 + 0.1 * (1.0 / 3.0) + 1e-5)) < 0.05);
  assert_fails(context, BPT_ERR_STATE, "evaluation", bpt_graph_backward(graph));

  /* Back to training: equal masks between optimiser steps, fresh masks after one. */
  assert_ok(context, bpt_graph_set_training(graph, 1));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, dropped, drop_out));
  float first = d[0] + 3 * d[1] + 7 * d[2] + 11 * d[3], second;
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, dropped, drop_out));
  second = d[0] + 3 * d[1] + 7 * d[2] + 11 * d[3];
  assert_true(first == second);

  bpt_tensor_destroy(values);
  bpt_tensor_destroy(targets);
  bpt_tensor_destroy(bn_out);
  bpt_tensor_destroy(drop_out);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* ---- bad input gets a status and a message naming the problem ---- */

static void shape_errors_are_reported(void **state) {
  (void)state;
  bpt_context *context = test_context(5);
  bpt_graph *graph;
  bpt_node *x, *flat, *weight, *y, *gamma, *beta, *mean, *variance;
  int64_t image[3] = {3, 8, 8}, weight_dims[4] = {4, 2, 3, 3}, channels = 5, wrong[2] = {7, 9};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(context, bpt_graph_parameter(graph, "w", 4, weight_dims, BPT_INIT_HE_NORMAL, &weight));
  assert_fails(context, BPT_ERR_SHAPE, "has 3 channels", bpt_conv2d(graph, "conv", x, weight, NULL, NULL, &y));
  bpt_conv2d_options options = bpt_conv2d_options_default();
  options.stride_height = 0;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "stride", bpt_conv2d(graph, "conv", x, weight, NULL, &options, &y));
  assert_fails(context, BPT_ERR_SHAPE, "does not fit", bpt_max_pool2d(graph, "pool", x, 9, 1, 0, &y));
  assert_fails(context, BPT_ERR_SHAPE, "new shape", bpt_reshape(graph, "reshape", x, 2, wrong, &y));
  assert_ok(context, bpt_flatten(graph, "flat", x, &flat));
  assert_fails(context, BPT_ERR_SHAPE, "(N, C, H, W)", bpt_global_avg_pool(graph, "gap", flat, &y));
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "probability", bpt_dropout(graph, "drop", x, 1.0f, &y));
  assert_ok(context, bpt_graph_parameter(graph, "gamma", 1, &channels, BPT_INIT_ONES, &gamma));
  assert_ok(context, bpt_graph_parameter(graph, "beta", 1, &channels, BPT_INIT_ZEROS, &beta));
  assert_ok(context, bpt_graph_nontrainable_parameter(graph, "mean", 1, &channels, BPT_INIT_ZEROS, &mean));
  assert_ok(context, bpt_graph_nontrainable_parameter(graph, "variance", 1, &channels, BPT_INIT_ONES, &variance));
  assert_fails(context, BPT_ERR_SHAPE, "3 values",
               bpt_batch_norm(graph, "bn", x, gamma, beta, mean, variance, 0.1f, 1e-5f, &y));
  assert_fails(context, BPT_ERR_SHAPE, "do not broadcast", bpt_add(graph, "add", x, flat, &y));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(conv_matches_direct_loops),
      cmocka_unit_test(batch_norm_statistics_match_two_pass),
      cmocka_unit_test(small_convolutions_match_direct_loops),
      cmocka_unit_test(max_pool_ties_route_to_first),
      cmocka_unit_test(max_pool_pairs_match_window_loop),
      cmocka_unit_test(whole_plane_average_matches_mean),
      cmocka_unit_test(train_and_eval_modes),
      cmocka_unit_test(shape_errors_are_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
