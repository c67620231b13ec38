/* 2-D convolution on the CPU, lowered to SGEMM. im2col gathers each receptive field into a column, so the
 * forward pass, the input gradient and the weight gradient are each one GEMM per group and chunk of samples.
 *
 * Samples are processed in chunks of S consecutive images whose columns sit side by side, (C/g * kh * kw,
 * S * OH * OW), so late layers with small planes (7x7) still give the GEMM a wide matrix. Chunks run in
 * parallel with one single-threaded GEMM each (OpenBLAS's OpenMP build does not nest), which also
 * parallelises im2col and col2im. Pointwise convolutions (1x1, stride 1, no padding) skip im2col.
 *
 * Most convolutions use a padded-width lowering instead. Each input plane is first copied once into a
 * zero-padded plane (Hp x Wp, Wp = W + 2 pad_w, plus (kw - 1) dil_w zeros of slack at the end; with unit
 * column stride consecutive rows share one border, Wp = W + pad_w, see conv2d_plan.c), and a
 * sample's columns keep the padded row width: column t = oh * Wp + ow for t in [0, OH * Wp). Row
 * (c, i, j) of the column matrix is then one contiguous run of the padded plane starting at
 * i dil_h Wp + j dil_w: a straight memcpy with no bounds logic, where the plain im2col pays bounds checks
 * on every short (OW-long) row. The price is Wp - OW garbage columns per output row (ow >= OW, reading
 * the next row's pixels), which the GEMM computes and the forward pass drops when it copies the product
 * into y. The gradients keep them harmless by gathering dy into the same layout with zeros there: the
 * weight gradient's products with garbage columns vanish, and the data gradient's column matrix is exactly
 * zero there, so col2im becomes contiguous adds into a padded plane whose interior is added into dx.
 *
 * Strides s > 1 split the padded plane into s_h * s_w phase planes (every s-th row and column from each
 * offset), in which a tap's receptive fields are again one contiguous run, of phase rows Wq = ceil(Wp / s_w)
 * wide. The forward pass and the weight gradient use them; the data gradient of a strided convolution
 * keeps the bounds-checked col2im, which measured faster. Planes so narrow that the garbage columns would
 * exceed a quarter of the columns keep the bounds-checked im2col. Convolutions with few channels (LeNet's,
 * one-channel stems) run conv2d_small.c's loops on the padded planes instead of the GEMMs (the data
 * gradient only for unit strides), and take the padded layout with up to half as many garbage columns as
 * outputs. */
#include <omp.h>
#include <string.h>

#include "backends/cpu/conv2d_direct.h"
#include "backends/cpu/conv2d_plan.h"
#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

#define CONV_CHECK(expression)                                                                                         \
  do {                                                                                                                 \
    bpt_status conv_status_ = (expression);                                                                            \
    if (conv_status_ != BPT_OK) return conv_status_;                                                                   \
  } while (0)

/* Wider vectors for the gathers: the library is built for baseline x86-64, so without clones these loops
 * would use 4-wide SSE on machines with AVX-512. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONV_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CONV_VECTOR_CLONES
#endif

/* out[0, n) = in[0, n) for the short rows of the gathers (OW values, often under 16): vectors of 8 with the
 * last one overlapping its predecessor, so a row of 10 is two vector copies instead of one and a scalar
 * tail with its loop control (LeNet's conv2, 14x14 -> 10x10: im2col was 16% of a training step). */
static inline void copy_run(float *out, const float *in, int64_t n) {
  if (n >= 8) {
    for (int64_t k = 0; k + 8 < n; k += 8)
      memcpy(out + k, in + k, 8 * sizeof *out);
    memcpy(out + n - 8, in + n - 8, 8 * sizeof *out);
  } else if (n >= 4) {
    memcpy(out, in, 4 * sizeof *out);
    memcpy(out + n - 4, in + n - 4, 4 * sizeof *out);
  } else {
    for (int64_t k = 0; k < n; k++)
      out[k] = in[k];
  }
}

/* out[0, n) += in[0, n): col2im's rows, in fixed-width pieces (8, then 4, then single values) that compile
 * to whole vectors; sums cannot overlap the way copy_run's copies do. */
static inline void add_run(float *out, const float *in, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int64_t l = 0; l < 8; l++)
      out[k + l] += in[k + l];
  if (n - k >= 4) {
    for (int64_t l = 0; l < 4; l++)
      out[k + l] += in[k + l];
    k += 4;
  }
  for (; k < n; k++)
    out[k] += in[k];
}

/* The output positions [low, high) along one axis whose input position o s + offset lies inside [0, size),
 * for output positions [0, count). */
static void inside_range(int64_t size, int64_t count, int64_t s, int64_t offset, int64_t *low, int64_t *high) {
  *low = offset >= 0 ? 0 : (-offset + s - 1) / s;
  *high = size - 1 - offset >= 0 ? (size - 1 - offset) / s + 1 : 0;
  if (*high > count) *high = count;
  if (*low > *high) *low = *high;
}

/* col (C/g * kh * kw rows, leading dimension ld) = receptive fields of the channels of one sample's group.
 * Each row of col is the tap's (OH, OW) window of the plane: rows of outputs above and below the image are
 * zeroed in one block, the rest copied row by row with zeros where the window overhangs the sides. */
CONV_VECTOR_CLONES static void im2col(const bpt_conv2d_args *a, const conv_plan *p, const float *x, float *col,
                                      int64_t ld) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const int64_t sh = a->stride_height, sw = a->stride_width;
  for (int64_t c = 0; c < p->group_in; c++) {
    const float *plane = x + c * p->in_plane;
    for (int64_t i = 0; i < a->kernel_height; i++)
      for (int64_t j = 0; j < a->kernel_width; j++) {
        float *row = col + ((c * a->kernel_height + i) * a->kernel_width + j) * ld;
        const int64_t row_offset = i * a->dilation_height - a->padding_height;
        const int64_t column_offset = j * a->dilation_width - a->padding_width;
        int64_t top, bottom, low, high;
        inside_range(H, OH, sh, row_offset, &top, &bottom);
        inside_range(W, OW, sw, column_offset, &low, &high);
        memset(row, 0, (size_t)(top * OW) * sizeof *row);
        memset(row + bottom * OW, 0, (size_t)((OH - bottom) * OW) * sizeof *row);
        if (low == high) {
          memset(row + top * OW, 0, (size_t)((bottom - top) * OW) * sizeof *row);
          continue;
        }
        for (int64_t oh = top; oh < bottom; oh++) {
          float *out = row + oh * OW;
          const float *source = plane + (oh * sh + row_offset) * W + low * sw + column_offset;
          for (int64_t ow = 0; ow < low; ow++)
            out[ow] = 0.0f;
          if (sw == 1) {
            copy_run(out + low, source, high - low);
          } else {
            for (int64_t ow = low; ow < high; ow++)
              out[ow] = source[(ow - low) * sw];
          }
          for (int64_t ow = high; ow < OW; ow++)
            out[ow] = 0.0f;
        }
      }
  }
}

/* dx (channels of one sample's group) += the columns scattered back to their pixels (im2col's adjoint). */
CONV_VECTOR_CLONES static void col2im(const bpt_conv2d_args *a, const conv_plan *p, const float *col, int64_t ld,
                                      float *dx) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const int64_t sh = a->stride_height, sw = a->stride_width;
  for (int64_t c = 0; c < p->group_in; c++) {
    float *plane = dx + c * p->in_plane;
    for (int64_t i = 0; i < a->kernel_height; i++)
      for (int64_t j = 0; j < a->kernel_width; j++) {
        const float *row = col + ((c * a->kernel_height + i) * a->kernel_width + j) * ld;
        const int64_t row_offset = i * a->dilation_height - a->padding_height;
        const int64_t column_offset = j * a->dilation_width - a->padding_width;
        int64_t top, bottom, low, high;
        inside_range(H, OH, sh, row_offset, &top, &bottom);
        inside_range(W, OW, sw, column_offset, &low, &high);
        if (low == high) continue;
        for (int64_t oh = top; oh < bottom; oh++) {
          const float *in = row + oh * OW + low;
          float *target = plane + (oh * sh + row_offset) * W + low * sw + column_offset;
          if (sw == 1) {
            add_run(target, in, high - low);
          } else {
            for (int64_t ow = 0; ow < high - low; ow++)
              target[ow * sw] += in[ow];
          }
        }
      }
  }
}

/* padded (C/g groups of sh * sw phase planes) = one sample's group channels inside a zero border, split
 * into stride phases: phase (r, q) row a, column b holds padded pixel (a sh + r, b sw + q). Phases no tap
 * reads are left unwritten. */
CONV_VECTOR_CLONES static void pad_planes(const bpt_conv2d_args *a, const conv_plan *p, const float *x, float *padded) {
  const int64_t H = a->in_height, W = a->in_width, sh = a->stride_height, sw = a->stride_width;
  const int64_t ph = a->padding_height, pw = a->padding_width, Wq = p->phase_width;
  const int64_t phase_height = (H + 2 * ph + sh - 1) / sh;
  if (sh == 1 && sw == 1) {
    /* One plane per channel: zero it whole, then copy the image rows in; with rows this short (W values)
     * that beats writing each row's borders separately. */
    for (int64_t c = 0; c < p->group_in; c++) {
      float *plane = padded + c * p->padded_plane;
      memset(plane, 0, (size_t)p->padded_plane * sizeof *plane);
      for (int64_t h = 0; h < H; h++)
        memcpy(plane + (h + ph) * Wq + pw, x + c * p->in_plane + h * W, (size_t)W * sizeof *plane);
    }
    return;
  }
  for (int64_t c = 0; c < p->group_in; c++)
    for (int64_t r = 0; r < sh; r++)
      for (int64_t q = 0; q < sw; q++) {
        if (!(p->phase_rows_used >> r & 1) || !(p->phase_columns_used >> q & 1)) continue;
        float *plane = padded + c * p->padded_plane + (r * sw + q) * p->phase_plane;
        /* Phase columns b whose source column b sw + q - pw lies inside the image: [low, high). */
        int64_t low = q >= pw ? 0 : (pw - q + sw - 1) / sw;
        int64_t high = W - 1 + pw - q >= 0 ? (W - 1 + pw - q) / sw + 1 : 0;
        if (high > Wq) high = Wq;
        if (low > high) low = high;
        for (int64_t row = 0; row < phase_height; row++) {
          float *out = plane + row * Wq;
          const int64_t source_row = row * sh + r - ph;
          if (source_row < 0 || source_row >= H) {
            memset(out, 0, (size_t)Wq * sizeof *out);
            continue;
          }
          const float *source = x + c * p->in_plane + source_row * W + q - pw;
          for (int64_t b = 0; b < low; b++)
            out[b] = 0.0f;
          if (sw == 1) {
#pragma omp simd
            for (int64_t b = low; b < high; b++)
              out[b] = source[b];
          } else {
#pragma omp simd
            for (int64_t b = low; b < high; b++)
              out[b] = source[b * sw];
          }
          for (int64_t b = high; b < Wq; b++)
            out[b] = 0.0f;
        }
        memset(plane + phase_height * Wq, 0, (size_t)(p->phase_plane - phase_height * Wq) * sizeof *plane);
      }
}

/* col (C/g * kh * kw rows, leading dimension ld; OH * Wq columns) from phase planes: one copy per row. */
static void im2col_padded(const bpt_conv2d_args *a, const conv_plan *p, const float *padded, float *col, int64_t ld) {
  const size_t bytes = (size_t)p->sample_columns * sizeof *col;
  for (int64_t c = 0; c < p->group_in; c++)
    for (int64_t i = 0; i < a->kernel_height; i++)
      for (int64_t j = 0; j < a->kernel_width; j++)
        memcpy(col + ((c * a->kernel_height + i) * a->kernel_width + j) * ld,
               padded + c * p->padded_plane + bpt_cpu_conv_tap_offset(a, p, i, j), bytes);
}

/* planes (one sample's group channels, padded) = col2im of padded-width columns, for unit strides only (see
 * input_gradient): each row is added, contiguously, at its tap's offset. */
CONV_VECTOR_CLONES static void col2im_padded(const bpt_conv2d_args *a, const conv_plan *p, const float *col, int64_t ld,
                                             float *planes) {
  const int64_t L = p->sample_columns;
  for (int64_t c = 0; c < p->group_in; c++) {
    float *plane = planes + c * p->padded_plane;
    /* The first tap starts at offset 0 and covers [0, L): it is copied and the rest zeroed. */
    memset(plane + L, 0, (size_t)(p->padded_plane - L) * sizeof *plane);
    for (int64_t i = 0; i < a->kernel_height; i++)
      for (int64_t j = 0; j < a->kernel_width; j++) {
        const float *row = col + ((c * a->kernel_height + i) * a->kernel_width + j) * ld;
        if (i == 0 && j == 0) {
          memcpy(plane, row, (size_t)L * sizeof *plane);
          continue;
        }
        float *target = plane + bpt_cpu_conv_tap_offset(a, p, i, j);
#pragma omp simd
        for (int64_t t = 0; t < L; t++)
          target[t] += row[t];
      }
  }
}

/* taps (kh * kw, O/g, C/g) = w_g (O/g, C/g, kh * kw): one (O/g, C/g) matrix per kernel tap. */
static void weights_by_tap(const conv_plan *p, const float *w, float *taps) {
  for (int64_t o = 0; o < p->group_out; o++)
    for (int64_t c = 0; c < p->group_in; c++)
      for (int64_t t = 0; t < p->kernel_area; t++)
        taps[(t * p->group_out + o) * p->group_in + c] = w[(o * p->group_in + c) * p->kernel_area + t];
}

/* dx (one sample's group channels) += the interiors of its padded planes (unit strides). */
CONV_VECTOR_CLONES static void add_interiors(const bpt_conv2d_args *a, const conv_plan *p, const float *planes,
                                             float *dx) {
  const int64_t W = a->in_width;
  for (int64_t c = 0; c < p->group_in; c++)
    for (int64_t h = 0; h < a->in_height; h++) {
      const float *source = planes + c * p->padded_plane + (a->padding_height + h) * p->phase_width + a->padding_width;
      float *target = dx + c * p->in_plane + h * W;
#pragma omp simd
      for (int64_t w = 0; w < W; w++)
        target[w] += source[w];
    }
}

/* Gathers dy of one group for the chunk's samples into (O/g, S * sample_columns); in the padded layout the
 * garbage columns (ow >= OW) are zero, so they add nothing to either gradient. */
CONV_VECTOR_CLONES static void gather_output(const bpt_conv2d_args *a, const conv_plan *p, const float *dy,
                                             int64_t first, int64_t samples, int64_t group, float *out) {
  const int64_t ld = samples * p->sample_columns, OW = a->out_width, Wq = p->phase_width;
  for (int64_t s = 0; s < samples; s++)
    for (int64_t o = 0; o < p->group_out; o++) {
      const float *source = dy + ((first + s) * a->out_channels + group * p->group_out + o) * p->out_plane;
      float *target = out + o * ld + s * p->sample_columns;
      if (!p->padded) {
        memcpy(target, source, (size_t)p->out_plane * sizeof *out);
        continue;
      }
      for (int64_t oh = 0; oh < a->out_height; oh++) {
        float *row = target + oh * Wq;
        copy_run(row, source + oh * OW, OW);
        for (int64_t ow = OW; ow < Wq; ow++)
          row[ow] = 0.0f;
      }
    }
}

/* y (the chunk's samples, one group's channels) = product (O/g, S * sample_columns) + bias, dropping the
 * padded layout's garbage columns. */
CONV_VECTOR_CLONES static void scatter_product(const bpt_conv2d_args *a, const conv_plan *p, const float *product,
                                               int64_t first, int64_t samples, int64_t group, const float *bias,
                                               float *y) {
  const int64_t ld = samples * p->sample_columns, OW = a->out_width;
  const int64_t row_stride = p->padded ? p->phase_width : OW;
  for (int64_t s = 0; s < samples; s++)
    for (int64_t o = 0; o < p->group_out; o++) {
      const float *source = product + o * ld + s * p->sample_columns;
      float *target = y + ((first + s) * a->out_channels + group * p->group_out + o) * p->out_plane;
      const float value = bias ? bias[group * p->group_out + o] : 0.0f;
      for (int64_t oh = 0; oh < a->out_height; oh++)
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ow++)
          target[oh * OW + ow] = source[oh * row_stride + ow] + value;
    }
}

/* The column matrix of group g for the chunk's samples, side by side (forward and weight gradient). */
static void lower_chunk(const bpt_conv2d_args *a, const conv_plan *p, const float *x, int64_t first, int64_t samples,
                        int64_t g, float *padded, float *col, int64_t ld) {
  for (int64_t s = 0; s < samples; s++) {
    const float *sample = x + ((first + s) * a->in_channels + g * p->group_in) * p->in_plane;
    if (p->padded) {
      pad_planes(a, p, sample, padded);
      im2col_padded(a, p, padded, col + s * p->sample_columns, ld);
    } else {
      im2col(a, p, sample, col + s * p->sample_columns, ld);
    }
  }
}

/* The padded planes of group g of the chunk's samples, one sample's after another (conv2d_small.c's input). */
static void pad_samples(const bpt_conv2d_args *a, const conv_plan *p, const float *x, int64_t first, int64_t samples,
                        int64_t g, float *padded) {
  for (int64_t s = 0; s < samples; s++)
    pad_planes(a, p, x + ((first + s) * a->in_channels + g * p->group_in) * p->in_plane,
               padded + s * p->group_in * p->padded_plane);
}

/* One chunk of samples of the forward pass, on the calling thread's scratch. */
static void forward_chunk(bpt_backend *backend, const bpt_conv2d_args *a, const conv_plan *p,
                          const conv_scratch *layout, const float *x, const float *weight, const float *bias, float *y,
                          int64_t chunk) {
  const conv_buffers buffers = bpt_cpu_conv_thread_buffers(backend, layout);
  float *taps = buffers.partial, *col = buffers.columns, *product = buffers.stacked, *padded = buffers.padded;
  const int64_t first = chunk * p->chunk, samples = bpt_cpu_conv_chunk_samples(a, p, chunk),
                ld = samples * p->sample_columns;
  for (int64_t g = 0; g < a->groups; g++) {
    const float *w = weight + g * p->group_out * p->column_rows;
    if (p->by_tap) {
      /* y (O/g, OH * Wq) = sum over taps of W_tap (O/g, C/g) . padded planes shifted to the tap (C/g, OH * Wq) */
      weights_by_tap(p, w, taps);
      for (int64_t s = 0; s < samples; s++) {
        pad_planes(a, p, x + ((first + s) * a->in_channels + g * p->group_in) * p->in_plane, padded);
        for (int64_t i = 0; i < a->kernel_height; i++)
          for (int64_t j = 0; j < a->kernel_width; j++) {
            const int64_t t = i * a->kernel_width + j;
            bpt_cpu_conv_gemm(p, false, false, p->group_out, p->sample_columns, p->group_in,
                              taps + t * p->group_out * p->group_in, p->group_in,
                              padded + bpt_cpu_conv_tap_offset(a, p, i, j), p->padded_plane, t ? 1.0f : 0.0f,
                              product + s * p->sample_columns, ld);
          }
      }
      scatter_product(a, p, product, first, samples, g, bias, y);
      continue;
    }
    if (p->small) {
      pad_samples(a, p, x, first, samples, g, padded);
      bpt_cpu_conv_small_forward(bpt_cpu_vector_loops(backend), a, p, w, samples, padded, product, ld);
      scatter_product(a, p, product, first, samples, g, bias, y);
      continue;
    }
    const float *b = NULL;
    if (p->pointwise) {
      b = x + (first * a->in_channels + g * p->group_in) * p->in_plane;
    } else {
      lower_chunk(a, p, x, first, samples, g, padded, col, ld);
      b = col;
    }
    /* y (O/g, S * OH * OW) = W_g (O/g, C/g * kh * kw) . col (C/g * kh * kw, S * OH * OW) */
    if (!product) {
      float *y_group = y + (first * a->out_channels + g * p->group_out) * p->out_plane;
      bpt_cpu_conv_gemm(p, false, false, p->group_out, ld, p->column_rows, w, p->column_rows, b, ld, 0.0f, y_group,
                        p->out_plane);
      if (bias)
        for (int64_t o = 0; o < p->group_out; o++) {
          const float value = bias[g * p->group_out + o];
          float *plane = y_group + o * p->out_plane;
#pragma omp simd
          for (int64_t i = 0; i < p->out_plane; i++)
            plane[i] += value;
        }
      continue;
    }
    bpt_cpu_conv_gemm(p, false, false, p->group_out, ld, p->column_rows, w, p->column_rows, b, ld, 0.0f, product, ld);
    scatter_product(a, p, product, first, samples, g, bias, y);
  }
}

/* conv2d: inputs x (N, C, H, W), weight (O, C / groups, kh, kw) and an optional bias (O); y (N, O, H_out, W_out). */
static bpt_status conv2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node), *a = &args;
  const float *x = node->inputs[0].value, *weight = node->inputs[1].value;
  const float *bias = node->input_count > 2 ? node->inputs[2].value : NULL;
  float *y = node->output.value;
  if (bpt_cpu_conv_direct_applies(backend, a, false))
    return bpt_cpu_conv_direct_forward(backend, a, x, weight, bias, y);
  conv_plan p;
  CONV_CHECK(bpt_cpu_conv_plan(backend, a, true, &p));
  conv_scratch layout;
  CONV_CHECK(bpt_cpu_conv_reserve_scratch(backend, &p, p.by_tap ? (size_t)(p.group_out * p.column_rows) : 0, &layout));
  /* One thread runs the chunks outside any parallel construct rather than in an if (0) one: OpenBLAS threads
   * its GEMMs itself then, and under clang's OpenMP runtime (libomp) a region nested in even an inactive one
   * gets a single thread, on which OpenBLAS's GEMM waits for its other workers forever. */
  if (p.threads > 1) {
#pragma omp parallel for num_threads(p.threads) schedule(static)
    for (int64_t chunk = 0; chunk < p.chunks; chunk++)
      forward_chunk(backend, a, &p, &layout, x, weight, bias, y, chunk);
  } else {
    for (int64_t chunk = 0; chunk < p.chunks; chunk++)
      forward_chunk(backend, a, &p, &layout, x, weight, bias, y, chunk);
  }
  return BPT_OK;
}

/* One chunk of samples of the data gradient, on the calling thread's scratch. */
static void data_gradient_chunk(bpt_backend *backend, const bpt_conv2d_args *a, const conv_plan *p,
                                const conv_scratch *layout, const float *dy, const float *weight, float *dx,
                                int64_t chunk) {
  const conv_buffers buffers = bpt_cpu_conv_thread_buffers(backend, layout);
  float *taps = buffers.partial, *dcol = buffers.columns, *gathered = buffers.stacked, *planes = buffers.padded;
  const int64_t first = chunk * p->chunk, samples = bpt_cpu_conv_chunk_samples(a, p, chunk),
                ld = samples * p->sample_columns;
  for (int64_t g = 0; g < a->groups; g++) {
    const float *w = weight + g * p->group_out * p->column_rows;
    const float *d = dy + (first * a->out_channels + g * p->group_out) * p->out_plane;
    if (gathered) {
      gather_output(a, p, dy, first, samples, g, gathered);
      d = gathered;
    }
    float *dx_group = dx + (first * a->in_channels + g * p->group_in) * p->in_plane;
    if (p->by_tap) {
      /* padded planes (C/g, ...) at each tap's offset += W_tap^T (C/g, O/g) . dy (O/g, OH * Wq): the garbage
       * columns of dy are zero, so they add nothing; the planes' interiors are then added into dx. */
      weights_by_tap(p, w, taps);
      for (int64_t s = 0; s < samples; s++) {
        /* The first tap writes [0, OH * Wq) of every plane; the rest of each plane starts at zero. */
        for (int64_t c = 0; c < p->group_in; c++)
          memset(planes + c * p->padded_plane + p->sample_columns, 0,
                 (size_t)(p->padded_plane - p->sample_columns) * sizeof *planes);
        for (int64_t i = 0; i < a->kernel_height; i++)
          for (int64_t j = 0; j < a->kernel_width; j++) {
            const int64_t t = i * a->kernel_width + j;
            bpt_cpu_conv_gemm(p, true, false, p->group_in, p->sample_columns, p->group_out,
                              taps + t * p->group_out * p->group_in, p->group_in, d + s * p->sample_columns, ld,
                              t ? 1.0f : 0.0f, planes + bpt_cpu_conv_tap_offset(a, p, i, j), p->padded_plane);
          }
        add_interiors(a, p, planes, dx_group + s * a->in_channels * p->in_plane);
      }
      continue;
    }
    if (p->small) {
      /* padded planes = W_g^T (C/g kh kw, O/g) . dy (O/g, OH * Wq) added at each tap's offset, whose interiors
       * are then added into dx, as col2im_padded does but without the column matrix. */
      const int64_t sample_planes = p->group_in * p->padded_plane;
      memset(planes, 0, (size_t)(samples * sample_planes) * sizeof *planes);
      bpt_cpu_conv_small_data_gradient(bpt_cpu_vector_loops(backend), a, p, w, samples, d, ld, planes);
      for (int64_t s = 0; s < samples; s++)
        add_interiors(a, p, planes + s * sample_planes, dx_group + s * a->in_channels * p->in_plane);
      continue;
    }
    if (p->pointwise) {
      /* dx (C/g, H * W) += W_g^T (C/g, O/g) . dy (O/g, H * W) */
      bpt_cpu_conv_gemm(p, true, false, p->group_in, p->in_plane, p->group_out, w, p->column_rows, d, p->out_plane,
                        1.0f, dx_group, p->in_plane);
      continue;
    }
    /* dcol (C/g * kh * kw, S * OH * OW) = W_g^T . dy, then scattered back with col2im */
    bpt_cpu_conv_gemm(p, true, false, p->column_rows, ld, p->group_out, w, p->column_rows, d, ld, 0.0f, dcol, ld);
    for (int64_t s = 0; s < samples; s++) {
      float *dx_sample = dx_group + s * a->in_channels * p->in_plane;
      if (p->padded) {
        col2im_padded(a, p, dcol + s * p->sample_columns, ld, planes);
        add_interiors(a, p, planes, dx_sample);
      } else {
        col2im(a, p, dcol + s * p->sample_columns, ld, dx_sample);
      }
    }
  }
}

/* dx (+)= the transposed convolution of dy with the weight (assigned when a->assign_input_gradient). */
static bpt_status input_gradient(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy, const float *weight,
                                 float *dx) {
  if (bpt_cpu_conv_direct_applies(backend, a, true))
    return bpt_cpu_conv_direct_backward_data(backend, a, dy, weight, dx);
  /* The lowerings below add into dx. */
  if (a->assign_input_gradient)
    memset(dx, 0, (size_t)(a->batch * a->in_channels * a->in_height * a->in_width) * sizeof *dx);
  conv_plan p;
  /* Strided data gradients keep col2im: phase planes to zero and read back are stride_h * stride_w times
   * the output being scattered, which measured slower (32 channels 14x14 -> 64 at 7x7: 4.7 against 3.9 ms). */
  CONV_CHECK(bpt_cpu_conv_plan(backend, a, false, &p));
  conv_scratch layout;
  CONV_CHECK(bpt_cpu_conv_reserve_scratch(backend, &p, p.by_tap ? (size_t)(p.group_out * p.column_rows) : 0, &layout));
  /* Outside any parallel construct on one thread, as in conv2d_forward. */
  if (p.threads > 1) {
#pragma omp parallel for num_threads(p.threads) schedule(static)
    for (int64_t chunk = 0; chunk < p.chunks; chunk++)
      data_gradient_chunk(backend, a, &p, &layout, dy, weight, dx, chunk);
  } else {
    for (int64_t chunk = 0; chunk < p.chunks; chunk++)
      data_gradient_chunk(backend, a, &p, &layout, dy, weight, dx, chunk);
  }
  return BPT_OK;
}

/* The sum of one output plane, in vector lanes: a chain of dependent scalar adds made the bias gradient 4% of
 * a LeNet training step (perf, 1 thread). */
CONV_VECTOR_CLONES static float plane_sum(const float *plane, int64_t count) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < count; i++)
    sum += plane[i];
  return sum;
}

/* dbias (O) += dy summed over samples and pixels. */
static void bias_gradient(const bpt_conv2d_args *a, const float *dy, float *dbias) {
  const int64_t out_plane = a->out_height * a->out_width;
#pragma omp parallel for if (a->batch * a->out_channels * out_plane > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t o = 0; o < a->out_channels; o++) {
    double sum = 0.0;
    for (int64_t n = 0; n < a->batch; n++)
      sum += plane_sum(dy + (n * a->out_channels + o) * out_plane, out_plane);
    dbias[o] += (float)sum;
  }
}

/* One thread's share of the weight gradient: its chunks into its own partial (or straight into dweight), then,
 * after a barrier, one slice of dweight summed over every thread's partial. Called by each thread of a team, or
 * alone outside any parallel region, where the worksharing loop and the barrier involve only the caller. */
static void weight_gradient_share(bpt_backend *backend, const bpt_conv2d_args *a, const conv_plan *p,
                                  const conv_scratch *layout, const float *x, const float *dy, float *dweight) {
  const conv_buffers buffers = bpt_cpu_conv_thread_buffers(backend, layout);
  float *accumulator = buffers.partial ? buffers.partial : dweight;
  float *col = buffers.columns, *gathered = buffers.stacked, *padded = buffers.padded;
  if (layout->partial) memset(accumulator, 0, layout->partial * sizeof *accumulator);
#pragma omp for schedule(static)
  for (int64_t chunk = 0; chunk < p->chunks; chunk++) {
    const int64_t first = chunk * p->chunk, samples = bpt_cpu_conv_chunk_samples(a, p, chunk),
                  ld = samples * p->sample_columns;
    for (int64_t g = 0; g < a->groups; g++) {
      const float *d = dy + (first * a->out_channels + g * p->group_out) * p->out_plane;
      if (gathered) {
        gather_output(a, p, dy, first, samples, g, gathered);
        d = gathered;
      }
      float *dw_group = accumulator + g * p->group_out * p->column_rows;
      if (p->by_tap) {
        /* dW_tap (O/g, C/g) += dy (O/g, OH * Wq) . (padded planes shifted to the tap)^T; zeros in dy's
         * garbage columns cancel the pixels those columns read. */
        for (int64_t s = 0; s < samples; s++) {
          pad_planes(a, p, x + ((first + s) * a->in_channels + g * p->group_in) * p->in_plane, padded);
          for (int64_t i = 0; i < a->kernel_height; i++)
            for (int64_t j = 0; j < a->kernel_width; j++) {
              const int64_t t = i * a->kernel_width + j;
              bpt_cpu_conv_gemm(p, false, true, p->group_out, p->group_in, p->sample_columns, d + s * p->sample_columns,
                                ld, padded + bpt_cpu_conv_tap_offset(a, p, i, j), p->padded_plane, 1.0f,
                                dw_group + t * p->group_out * p->group_in, p->group_in);
            }
        }
        continue;
      }
      if (p->small) {
        pad_samples(a, p, x, first, samples, g, padded);
        bpt_cpu_conv_small_weight_gradient(bpt_cpu_vector_loops(backend), a, p, d, ld, samples, padded, dw_group);
        continue;
      }
      const float *b = x + (first * a->in_channels + g * p->group_in) * p->in_plane;
      if (!p->pointwise) {
        lower_chunk(a, p, x, first, samples, g, padded, col, ld);
        b = col;
      }
      /* dW_g (O/g, C/g * kh * kw) += dy (O/g, S * OH * OW) . col^T (S * OH * OW, C/g * kh * kw) */
      bpt_cpu_conv_gemm(p, false, true, p->group_out, p->column_rows, ld, d, ld, b, ld, 1.0f, dw_group, p->column_rows);
    }
  }
  if (layout->partial) {
    /* Each thread sums one slice of the weight gradient over every thread's partial. */
#pragma omp barrier
    const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t weight_count = a->out_channels * p->column_rows, slice = (weight_count + threads - 1) / threads;
    const int64_t begin = thread * slice, end = begin + slice < weight_count ? begin + slice : weight_count;
    for (int64_t i = begin; i < end; i++) {
      int64_t source_index = i;
      if (p->by_tap) {
        /* i = ((g O/g + o) C/g + c) kh kw + t; partials hold ((g kh kw + t) O/g + o) C/g + c. */
        const int64_t t = i % p->kernel_area, c = i / p->kernel_area % p->group_in;
        const int64_t o = i / p->column_rows % p->group_out, g = i / (p->group_out * p->column_rows);
        source_index = g * p->group_out * p->column_rows + (t * p->group_out + o) * p->group_in + c;
      }
      float sum = 0.0f;
      for (int t = 0; t < threads; t++)
        sum += bpt_cpu_scratch(backend, t)[source_index];
      dweight[i] += sum;
    }
  }
}

/* dweight += the correlation of x with dy, and dbias (when not NULL) += dy summed per output channel. */
static bpt_status weight_gradient(bpt_backend *backend, const bpt_conv2d_args *a, const float *x, const float *dy,
                                  float *dweight, float *dbias) {
  if (bpt_cpu_conv_direct_applies(backend, a, false)) {
    CONV_CHECK(bpt_cpu_conv_direct_backward_filter(backend, a, x, dy, dweight));
    if (dbias) bias_gradient(a, dy, dbias);
    return BPT_OK;
  }
  conv_plan p;
  CONV_CHECK(bpt_cpu_conv_plan(backend, a, true, &p));
  const int64_t weight_count = a->out_channels * p.column_rows;
  /* Threads accumulate their own weight gradients, summed into dweight at the end; so does the padded path,
   * whose gradient is laid out by tap (groups of (kh * kw, O/g, C/g)). */
  const bool partials = p.threads > 1 || p.by_tap;
  conv_scratch layout;
  CONV_CHECK(bpt_cpu_conv_reserve_scratch(backend, &p, partials ? (size_t)weight_count : 0, &layout));
  /* Outside any parallel construct on one thread, as in conv2d_forward. */
  if (p.threads > 1) {
#pragma omp parallel num_threads(p.threads)
    weight_gradient_share(backend, a, &p, &layout, x, dy, dweight);
  } else {
    weight_gradient_share(backend, a, &p, &layout, x, dy, dweight);
  }
  if (dbias) bias_gradient(a, dy, dbias);
  return BPT_OK;
}

/* The weight (and bias) gradient first, then the input gradient, which beta 0 lets overwrite. */
static bpt_status conv2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node);
  const bpt_kernel_tensor *x = &node->inputs[0], *weight = &node->inputs[1];
  const float *dy = node->output.grad;
  if (weight->grad)
    CONV_CHECK(weight_gradient(backend, &args, x->value, dy, weight->grad,
                               node->input_count > 2 ? node->inputs[2].grad : NULL));
  return x->grad ? input_gradient(backend, &args, dy, weight->value, x->grad) : BPT_OK;
}

BPT_REGISTER_KERNELS(cpu, CONV2D, conv2d_forward, conv2d_backward, NULL);
