/* Direct and Winograd kernels for 3x3 convolutions; conv2d.c hands them the convolutions they take.
 *
 * - conv2d_direct_layout.c: the zero-bordered (and, for stride 2, phase-split) input planes they all read;
 * - conv2d_direct_transpose.c: the pixel-major copies of planes (conv2d_transpose.h's kernels);
 * - conv2d_direct.c: forward and data-gradient passes, a register tile of outputs per reduction
 *   (conv2d_direct_tiles.h's kernels);
 * - conv2d_direct_filter.c: the weight gradient, an outer product per output pixel (conv2d_direct_filter.h's);
 * - conv2d_winograd.c: Winograd F(2x2, 3x3) for the stride-1 forward and data-gradient passes
 *   (conv2d_winograd_tiles.h's kernels);
 * - conv2d_winograd_channels.c: the same with channels in lanes, for the weight gradient and small planes
 *   (conv2d_winograd_channels.h's kernels).
 *
 * Which CPUs run what: the kernel bodies (*.h) are written once on conv2d_vec.h and compiled for AVX-512F
 * (bpt_cpu_vector_loops() == BPT_CPU_LOOPS_AVX512, 16-lane zmm tiles) and for AVX2 + FMA (BPT_CPU_LOOPS_AVX2,
 * 8-lane ymm tiles re-sized for 16 registers). With AVX2 the stride-1 convolutions must also be Winograd's
 * (planes of 6 or more, both sides 14 or more or both under 14, channels in 16s) and the weight gradient of
 * 16 input channels takes the generic tiles (filter_tile_16 is AVX-512 only); the rest stay on conv2d.c's
 * GEMM lowerings. The portable level takes none of them.
 *
 * Private to the CPU backend. */
#ifndef BPT_CPU_CONV2D_DIRECT_H
#define BPT_CPU_CONV2D_DIRECT_H

#include <stdbool.h>

#include "backends/cpu/cpu.h"
#include "backends/kernel_args.h"

/* Whether the direct kernels run a pass of a (the data gradient when data_gradient): 3x3, stride 1 or 2,
 * padding 1, no dilation, one group, input channels a multiple of 8, output channels of 16, AVX-512 loops, and the
 * backend's gemm_convolutions_only unset; stride-2 data gradients only on inputs over 14x14. With AVX2 loops
 * the same, stride 1 only where Winograd applies (see above). */
bool bpt_cpu_conv_direct_applies(bpt_backend *backend, const bpt_conv2d_args *a, bool data_gradient);

/* y = conv(x, weight) + bias (bias may be NULL). */
bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y);

/* dx += the input gradient for dy (dx = with a->assign_input_gradient). */
bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx);

/* dweight += the weight gradient for x and dy (the bias gradient is conv2d.c's). */
bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight);

/* ---- shared by the kernel files ---- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DIRECT_KERNELS 1
#include "backends/cpu/avx512_target.h"
#else
#define DIRECT_KERNELS 0
#endif

#if DIRECT_KERNELS

/* Output channels per register tile (broadcast weights); the vectors of positions per tile are
 * conv2d_vec.h's VEC_DIRECT_VECTORS. */
#define DIRECT_BLOCK 4
/* Zeros after the last padded plane: the last vector of positions reads up to 15 floats past it. */
#define DIRECT_SLACK 16
#define DIRECT_TAPS 9

/* The library is built for baseline x86-64: the kernels carry their own target attribute and run only where
 * the CPU reports AVX-512F (valgrind, for one, does not). */
#define DIRECT_TARGET BPT_AVX512_TARGET
#define DIRECT_INLINE static inline __attribute__((always_inline)) DIRECT_TARGET

typedef struct direct_geometry {
  int64_t in_height, in_width, out_height, out_width, stride;
  int64_t row;                  /* R: output positions per row, the last one garbage */
  int64_t plane;                /* floats per padded plane (per phase plane when strided) */
  int64_t channel_floats;       /* floats per input channel: stride^2 planes */
  int64_t positions;            /* OH R */
  int64_t taps;                 /* 9, or fewer for one phase of a strided data gradient */
  int64_t offsets[DIRECT_TAPS]; /* where each tap reads for position 0, within a channel's planes */
} direct_geometry;

/* The planes' layout for a convolution (conv2d_direct_layout.c).
 * Stride 1: one padded plane per channel, rows sharing a border column, R = W + 1, tap (i, j) at i R + j.
 * Stride 2: the padded plane split into 4 phase planes, phase (r, q) row a column b holding padded pixel
 * (2 a + r, 2 b + q), OH + 1 rows of R = OW + 1; tap (i, j) reads phase (i % 2, j % 2) at
 * (i / 2) R + j / 2. Either way a tap's inputs for consecutive positions are consecutive floats. */
direct_geometry bpt_cpu_direct_geometry(const bpt_conv2d_args *a);

/* planes (channels of channel_floats, then DIRECT_SLACK zeros) = x's channel planes inside a zero border, in
 * g's layout; loops: BPT_CPU_LOOPS_AVX512 or BPT_CPU_LOOPS_AVX2, the instructions it uses. */
void bpt_cpu_direct_pad_planes(bpt_cpu_loops loops, const direct_geometry *g, int64_t channels, const float *x,
                               float *planes);

/* Threads for units independent pieces of work: the backend's, or fewer. */
int bpt_cpu_direct_threads(bpt_backend *backend, int64_t units);

/* The next sample's input and output (either may be NULL), brought into L2 while this one is convolved. */
typedef struct direct_prefetch {
  const float *input, *output;
  int64_t input_floats, output_floats;
} direct_prefetch;

/* Asks for part `part` of `parts` equal parts of next: between pieces of work. Asking for a whole sample at
 * once measured no faster than not asking (the requests queue behind each other), parts ~5% faster. */
void bpt_cpu_direct_prefetch(const direct_prefetch *next, int64_t part, int64_t parts);

/* Whether a stride-1 pass goes through Winograd, and the pass itself (conv2d_winograd.c): out (+)= x convolved
 * with w (O, C, 3, 3), or with transposed the adjoint (w (in_channels as O, out_channels as C) flipped). */
bool bpt_cpu_winograd_applies(const bpt_conv2d_args *a);
bpt_status bpt_cpu_winograd_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                     int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                     const float *bias, bool accumulate, float *out);

/* U[xi] (O / block blocks of (C, block)) = G w G^T per (o, c), for w (out, in, 3, 3) (O = out, C = in) or,
 * transposed, w'(c, o) flipped (O = in, C = out). */
void bpt_cpu_winograd_weights(const float *w, int64_t out, int64_t in, bool transposed, int64_t block, float *packed);

/* Winograd with channels in lanes (conv2d_winograd_channels.c): the weight gradient (stride 1, planes of 6 or
 * more, channels in 16s), and the forward or data-gradient pass on planes under 14 (input channels in 16s,
 * output channels in 64s, or 16s with AVX2 loops), as bpt_cpu_winograd_convolve. */
bool bpt_cpu_winograd_filter_applies(const bpt_conv2d_args *a);
bpt_status bpt_cpu_winograd_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                            const float *dy, float *dweight);
bool bpt_cpu_winograd_small_applies(bpt_cpu_loops loops, const bpt_conv2d_args *a, int64_t in_channels,
                                    int64_t out_channels);
bpt_status bpt_cpu_winograd_small_convolve(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                           int64_t in_channels, const float *w, int64_t out_channels, bool transposed,
                                           const float *bias, bool accumulate, float *out);

/* transposed (pixels, channels) = (channels, pixels): one sample's dy, or its padded input planes
 * (conv2d_direct_transpose.c); loops: BPT_CPU_LOOPS_AVX512 or BPT_CPU_LOOPS_AVX2, the registers it uses. */
void bpt_cpu_direct_transpose_planes(bpt_cpu_loops loops, int64_t channels, int64_t pixels, const float *planes,
                                     float *transposed);

/* The same for x's channel planes (channels in 16s, or 8s with AVX2) straight into the pixel-major stride-1
 * padded layout of g: only the image's positions are written, so the border stays as the caller zeroed it. */
void bpt_cpu_direct_pad_transposed(bpt_cpu_loops loops, const direct_geometry *g, int64_t channels, const float *x,
                                   float *transposed);

/* The first count (at most 16) lanes. */
static inline __mmask16 direct_lanes(int64_t count) { return (__mmask16)((1u << count) - 1u); }

/* Vectors in tile `tile` of `tiles` when `remaining` vectors are left: tiles as even as they can be, since a
 * short last tile holds fewer accumulators than the FMA latency needs. */
static inline int64_t direct_tile_vectors(int64_t remaining, int64_t tile, int64_t tiles) {
  return (remaining + tiles - tile - 1) / (tiles - tile);
}

#endif
#endif
