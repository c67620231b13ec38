/* Direct kernels (AVX-512 or AVX2, conv2d_direct_tiles.h) for ResNet's workhorse convolution: 3x3, stride 1 or
 * 2, padding 1, no dilation, one group, input channels a multiple of 8 and output channels of 16. The GEMM lowerings of conv2d.c spend about a third
 * of such a layer's time around OpenBLAS: each tap's GEMM re-reads and re-writes the whole output, and the
 * products are padded and copied out. Here a tile of outputs stays in registers for its whole reduction and
 * is written once, straight into the NCHW tensor.
 *
 * Layout: each input plane is copied into a zero-bordered plane whose rows share one border column (row width
 * R = W + 1), so output position t = oh R + ow reads tap (i, j) at t + i R + j, one contiguous run per tap
 * (as in conv2d.c's padded lowering). The last position of each row (ow = W) is garbage and never stored.
 *
 * - Forward: 4 output channels by up to VEC_DIRECT_VECTORS vectors of consecutive positions per tile,
 *   broadcasting each weight against the shifted input vectors (AVX-512 4 x 6 vectors: 24 accumulators, 6
 *   loads and 4 broadcasts per 24 FMAs; AVX2 4 x 3).
 * - Data gradient: the same kernel on zero-bordered dy with the weights transposed and the taps flipped
 *   (the adjoint of a "same" 3x3 convolution is one), adding into dx.
 * - Stride 2: the forward pass reads the input's phase planes; the data gradient is four stride-1
 *   convolutions of dy, one per phase of dx (1, 2 or 4 taps each), interleaved into dx.
 *
 * The weight gradient is in conv2d_direct_filter.c, Winograd's passes in conv2d_winograd*.c. */
#include <string.h>

#include <omp.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/cpu.h"

bool bpt_cpu_conv_direct_applies(bpt_backend *backend, const bpt_conv2d_args *a, bool data_gradient) {
#if DIRECT_KERNELS
  const int64_t stride = a->stride_height;
  /* A stride-2 data gradient whose dx phases hold 64 pixels or fewer (14x14 input) measured faster as SGEMM +
   * col2im (3.66 against 3.90 ms for ResNet-8's 32 -> 64 layer, bench/conv_kernels.c). */
  if (data_gradient && stride == 2 && (a->in_height + 1) / 2 * ((a->in_width + 1) / 2) <= 64) return false;
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  if (loops == BPT_CPU_LOOPS_PORTABLE || ((bpt_cpu_state *)backend->state)->gemm_convolutions_only) return false;
  /* With AVX2: at stride 1 the Winograd kernels only, tiles in lanes on planes of 14 or more, channels in lanes
   * below, the weight gradient channels in lanes on both (input and output channels in 16s); at stride 2 the
   * direct kernels as with AVX-512. */
  if (loops == BPT_CPU_LOOPS_AVX2 && stride == 1 &&
      !(a->in_channels % 16 == 0 && a->out_channels % 16 == 0 &&
        (bpt_cpu_winograd_applies(a) || bpt_cpu_winograd_small_applies(loops, a, a->in_channels, a->out_channels))))
    return false;
  return a->kernel_height == 3 && a->kernel_width == 3 && a->stride_width == stride && (stride == 1 || stride == 2) &&
         a->padding_height == 1 && a->padding_width == 1 && a->dilation_height == 1 && a->dilation_width == 1 &&
         a->groups == 1 && a->in_channels % 8 == 0 && a->out_channels % 16 == 0 &&
         a->out_height == (a->in_height - 1) / stride + 1 && a->out_width == (a->in_width - 1) / stride + 1;
#else
  (void)backend, (void)a, (void)data_gradient;
  return false;
#endif
}

#if DIRECT_KERNELS

/* packed (out / DIRECT_BLOCK blocks of (in, tap, DIRECT_BLOCK)) from w (out, in, 3, 3); transposed: the data gradient's
 * weights, w'(c, o, tap) = w(o, c, 8 - tap), with c as the output channel. */
static void pack_weights(const float *w, int64_t out, int64_t in, bool transposed, float *packed) {
  const int64_t blocks = (transposed ? in : out) / DIRECT_BLOCK, inner = transposed ? out : in;
  for (int64_t b = 0; b < blocks; b++)
    for (int64_t k = 0; k < inner; k++)
      for (int64_t tap = 0; tap < DIRECT_TAPS; tap++)
        for (int64_t m = 0; m < DIRECT_BLOCK; m++) {
          const int64_t channel = b * DIRECT_BLOCK + m;
          const float value = transposed ? w[(k * in + channel) * DIRECT_TAPS + DIRECT_TAPS - 1 - tap]
                                         : w[(channel * in + k) * DIRECT_TAPS + tap];
          packed[((b * inner + k) * DIRECT_TAPS + tap) * DIRECT_BLOCK + m] = value;
        }
}

/* packed (in, tap, out) from w (out, in, 3, 3), or transposed as in pack_weights. */
static void pack_pixel_weights(const float *w, int64_t out, int64_t in, bool transposed, float *packed) {
  const int64_t outputs = transposed ? in : out, inputs = transposed ? out : in;
  for (int64_t o = 0; o < outputs; o++)
    for (int64_t c = 0; c < inputs; c++)
      for (int64_t tap = 0; tap < DIRECT_TAPS; tap++)
        packed[(c * DIRECT_TAPS + tap) * outputs + o] =
            transposed ? w[(c * in + o) * DIRECT_TAPS + DIRECT_TAPS - 1 - tap] : w[(o * in + c) * DIRECT_TAPS + tap];
}

typedef void (*forward_tile_function)(const direct_geometry *, const float *, int64_t, const float *, const float *,
                                      bool, int64_t, float *);
typedef void (*pixel_tile_function)(const direct_geometry *, const float *, int64_t, const float *, int64_t,
                                    const int64_t *, float *);

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_direct_tiles.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_direct_tiles.h"

/* out (+)= the convolution of every sample of x (in_channels planes) with packed weights: the forward pass,
 * or with transposed weights and accumulate the data gradient. */
static bpt_status convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x, int64_t in_channels,
                           const float *w, int64_t out_channels, bool transposed, const float *bias, bool accumulate,
                           float *out) {
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  if (a->stride_height == 1 && bpt_cpu_winograd_applies(a))
    return bpt_cpu_winograd_convolve(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
  if (bpt_cpu_winograd_small_applies(loops, a, in_channels, out_channels))
    return bpt_cpu_winograd_small_convolve(backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate,
                                           out);
  return (loops == BPT_CPU_LOOPS_AVX512 ? convolve_direct_avx512 : convolve_direct_avx2)(
      backend, a, x, in_channels, w, out_channels, transposed, bias, accumulate, out);
}

bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y) {
  return convolve(backend, a, x, a->in_channels, weight, a->out_channels, false, bias, false, y);
}

/* The data gradient of a stride-2 convolution, one phase (ph, pw) of dx at a time. Pixel (2 a + ph, 2 b + pw)
 * of dx receives tap (i, j) only where i = ph + 1 and j = pw + 1 (mod 2), from dy (a + dr, b + dc) with
 * dr = (ph + 1 - i) / 2, dc = (pw + 1 - j) / 2: a stride-1 convolution of zero-bordered dy with 1, 2 or 4
 * taps, whose outputs are then interleaved into dx. */
static direct_geometry strided_phase(const direct_geometry *dy_planes, int64_t ph, int64_t pw, int64_t in_height,
                                     int64_t in_width, int64_t taps[4][2]) {
  direct_geometry g = *dy_planes;
  g.out_height = (in_height - ph + 1) / 2;
  g.out_width = (in_width - pw + 1) / 2;
  g.positions = g.out_height * g.row;
  g.taps = 0;
  for (int64_t i = ph == 0 ? 1 : 0; i < 3; i += 2)
    for (int64_t j = pw == 0 ? 1 : 0; j < 3; j += 2) {
      taps[g.taps][0] = i;
      taps[g.taps][1] = j;
      g.offsets[g.taps++] = ((ph + 1 - i) / 2 + 1) * g.row + 1 + (pw + 1 - j) / 2;
    }
  return g;
}

static bpt_status strided_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy, const float *w,
                                        float *dx) {
  const int64_t C = a->in_channels, O = a->out_channels, H = a->in_height, W = a->in_width;
  bpt_conv2d_args dy_shape = *a;
  dy_shape.in_height = a->out_height;
  dy_shape.in_width = a->out_width;
  dy_shape.stride_height = dy_shape.stride_width = 1;
  const direct_geometry dy_planes = bpt_cpu_direct_geometry(&dy_shape);
  const size_t packed_floats = (size_t)(C * O * DIRECT_TAPS), planes_floats = (size_t)(O * dy_planes.plane);
  const int64_t phase_floats = ((H + 1) / 2) * ((W + 1) / 2), dy_floats = a->out_height * a->out_width;
  const int threads = bpt_cpu_direct_threads(backend, a->batch);
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  const bool avx512 = loops == BPT_CPU_LOOPS_AVX512;
  bpt_status status = bpt_cpu_scratch_reserve(
      backend, threads, packed_floats + planes_floats + DIRECT_SLACK + (size_t)(4 * C * phase_floats));
  if (status != BPT_OK) return status;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *packed = bpt_cpu_scratch(backend, omp_get_thread_num()), *planes = packed + packed_floats;
    float *phase_out = planes + planes_floats + DIRECT_SLACK; /* 4 phases of (C, Ha, Wa), C phase_floats apart */
    /* Each phase's weights, (C / DIRECT_BLOCK blocks of (O, taps, DIRECT_BLOCK)), one after the other. */
    direct_geometry phases[4];
    float *phase_weights[4];
    float *next = packed;
    for (int64_t phase = 0; phase < 4; phase++) {
      int64_t taps[4][2];
      phases[phase] = strided_phase(&dy_planes, phase / 2, phase % 2, H, W, taps);
      phase_weights[phase] = next;
      for (int64_t b = 0; b < C / DIRECT_BLOCK; b++)
        for (int64_t o = 0; o < O; o++)
          for (int64_t k = 0; k < phases[phase].taps; k++)
            for (int64_t m = 0; m < DIRECT_BLOCK; m++)
              *next++ = w[((o * C + b * DIRECT_BLOCK + m) * 3 + taps[k][0]) * 3 + taps[k][1]];
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < a->batch; n++) {
      bpt_cpu_direct_pad_planes(loops, &dy_planes, O, dy + n * O * dy_floats, planes);
      const bool last = n + 1 == a->batch;
      const direct_prefetch next = {last ? NULL : dy + (n + 1) * O * dy_floats, last ? NULL : dx + (n + 1) * C * H * W,
                                    O * dy_floats, C * H * W};
      const int64_t blocks = C / DIRECT_BLOCK;
      for (int64_t phase = 0; phase < 4; phase++)
        (avx512 ? convolve_sample_avx512 : convolve_sample_avx2)(&phases[phase], planes, O, phase_weights[phase], C,
                                                                 NULL, false, &next, phase * blocks, 4 * blocks,
                                                                 phase_out + phase * C * phase_floats);
      (avx512 ? interleave_phases_avx512 : interleave_phases_avx2)(C, H, W, phase_out, C * phase_floats,
                                                                   a->assign_input_gradient, dx + n * C * H * W);
    }
  }
  return BPT_OK;
}

bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx) {
  if (a->stride_height == 2) return strided_backward_data(backend, a, dy, weight, dx);
  return convolve(backend, a, dy, a->out_channels, weight, a->in_channels, true, NULL, !a->assign_input_gradient, dx);
}

#else

bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y) {
  (void)a, (void)x, (void)weight, (void)bias, (void)y;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx) {
  (void)a, (void)dy, (void)weight, (void)dx;
  return bpt_backend_fail(backend, BPT_ERR_INTERNAL, "conv2d: direct kernels are not built for this CPU");
}

#endif
