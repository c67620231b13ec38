/* Max and average pooling on the CPU over NCHW, one (sample, channel) plane per loop iteration.
 * Max pooling records, per output value, the index of the winning input inside its H x W plane (int32 is
 * enough for any plane, unlike an index into the whole tensor); ties go to the first value in row-major
 * window order, as in PyTorch, so exactly one input receives each gradient. Average pooling divides by the
 * full window, padding included. */
#include <float.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* The work estimate is a double: it is only compared with a threshold, and a window may be far larger than
 * the plane it covers (padding), so the product of six extents can exceed int64 (found by fuzz_shape). */
static bool parallel(const bpt_pool2d_args *a) {
  const double work = (double)a->batch * (double)a->channels * (double)a->out_height * (double)a->out_width *
                      (double)a->kernel_height * (double)a->kernel_width;
  return a->batch * a->channels > 1 && work > BPT_CPU_PARALLEL_THRESHOLD;
}

/* Average pooling with one window over the whole plane (global average pooling): a plane is one contiguous
 * run, summed by vector lanes instead of one chain of dependent adds through the window loops. */
static bool whole_plane_average(const bpt_pool2d_args *a) {
  return a->kind == BPT_POOL_AVERAGE && a->out_height == 1 && a->out_width == 1 && a->padding_height == 0 &&
         a->padding_width == 0 && a->kernel_height == a->in_height && a->kernel_width == a->in_width;
}

/* 2x2 windows at stride 2 without padding (LeNet's pooling), whose windows all lie inside the plane. */
static bool pairs_max(const bpt_pool2d_args *a) {
  return a->kind == BPT_POOL_MAX && a->kernel_height == 2 && a->kernel_width == 2 && a->stride_height == 2 &&
         a->stride_width == 2 && a->padding_height == 0 && a->padding_width == 0;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define POOL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define POOL_VECTOR_CLONES
#endif

/* One plane of pairs_max pooling without the general loop's bounds and branches: the four candidates are
 * compared in row-major window order with selects, against -FLT_MAX first, so ties and NaNs pick what the
 * general loop picks (7% of a LeNet training step went to that loop, perf, 1 thread). */
POOL_VECTOR_CLONES static void max_pool_pairs_plane(const bpt_pool2d_args *a, const float *in, float *out,
                                                    int32_t *winner) {
  const int64_t W = a->in_width, OW = a->out_width;
  for (int64_t oh = 0; oh < a->out_height; oh++) {
    const float *top = in + 2 * oh * W, *bottom = top + W;
    const int32_t first = (int32_t)(2 * oh * W);
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ow++) {
      const float candidates[4] = {top[2 * ow], top[2 * ow + 1], bottom[2 * ow], bottom[2 * ow + 1]};
      const int32_t offsets[4] = {0, 1, (int32_t)W, (int32_t)W + 1};
      float best = -FLT_MAX, value = candidates[0];
      int32_t index = first + 2 * (int32_t)ow;
      for (int k = 0; k < 4; k++) {
        const bool wins = candidates[k] > best;
        best = wins ? candidates[k] : best;
        value = wins ? candidates[k] : value;
        index = wins ? first + 2 * (int32_t)ow + offsets[k] : index;
      }
      out[oh * OW + ow] = value;
      winner[oh * OW + ow] = index;
    }
  }
}

/* One (sample, channel) plane: in (H, W) -> out (OH, OW), winner the max's indices inside the plane. */
static void pool_plane(const bpt_pool2d_args *a, const float *in, float *out, int32_t *winner) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const float inverse_area = 1.0f / ((float)a->kernel_height * (float)a->kernel_width);
  if (whole_plane_average(a)) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < H * W; i++)
      sum += in[i];
    out[0] = sum * inverse_area;
    return;
  }
  if (pairs_max(a)) {
    max_pool_pairs_plane(a, in, out, winner);
    return;
  }
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) {
      const int64_t h0 = oh * a->stride_height - a->padding_height, w0 = ow * a->stride_width - a->padding_width;
      const int64_t h_begin = h0 < 0 ? 0 : h0, w_begin = w0 < 0 ? 0 : w0;
      const int64_t h_end = h0 + a->kernel_height < H ? h0 + a->kernel_height : H;
      const int64_t w_end = w0 + a->kernel_width < W ? w0 + a->kernel_width : W;
      if (a->kind == BPT_POOL_MAX) {
        float best = -FLT_MAX;
        int64_t best_index = h_begin * W + w_begin;
        for (int64_t h = h_begin; h < h_end; h++)
          for (int64_t w = w_begin; w < w_end; w++)
            if (in[h * W + w] > best) {
              best = in[h * W + w];
              best_index = h * W + w;
            }
        out[oh * OW + ow] = in[best_index];
        winner[oh * OW + ow] = (int32_t)best_index;
      } else {
        float sum = 0.0f;
        for (int64_t h = h_begin; h < h_end; h++)
          for (int64_t w = w_begin; w < w_end; w++)
            sum += in[h * W + w];
        out[oh * OW + ow] = sum * inverse_area;
      }
    }
}

/* One plane's dx (H, W) += dy (OH, OW) routed to each window's winner (max) or spread over its full area
 * (average). */
static void pool_plane_backward(const bpt_pool2d_args *a, const float *d, float *out, const int32_t *winner) {
  const int64_t H = a->in_height, W = a->in_width, OH = a->out_height, OW = a->out_width;
  const float inverse_area = 1.0f / ((float)a->kernel_height * (float)a->kernel_width);
  if (whole_plane_average(a)) {
    const float share = d[0] * inverse_area;
#pragma omp simd
    for (int64_t i = 0; i < H * W; i++)
      out[i] += share;
    return;
  }
  if (a->kind == BPT_POOL_MAX) {
    for (int64_t i = 0; i < OH * OW; i++)
      out[winner[i]] += d[i];
    return;
  }
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) {
      const int64_t h0 = oh * a->stride_height - a->padding_height, w0 = ow * a->stride_width - a->padding_width;
      const int64_t h_begin = h0 < 0 ? 0 : h0, w_begin = w0 < 0 ? 0 : w0;
      const int64_t h_end = h0 + a->kernel_height < H ? h0 + a->kernel_height : H;
      const int64_t w_end = w0 + a->kernel_width < W ? w0 + a->kernel_width : W;
      const float share = d[oh * OW + ow] * inverse_area;
      for (int64_t h = h_begin; h < h_end; h++)
        for (int64_t w = w_begin; w < w_end; w++)
          out[h * W + w] += share;
    }
}

/* What both directions need: the planes' sizes, x's and y's storage, and the argmax buffer max pooling keeps;
 * the per-thread staging (an input plane, then an output plane) reserved where either is bf16. */
typedef struct pool_planes {
  bpt_pool2d_args args;
  int64_t in, out, count;
  bool x16, y16, staged;
} pool_planes;

static bpt_status planes_of(bpt_backend *backend, const bpt_kernel_node *node, pool_planes *p) {
  p->args = bpt_pool2d_args_of(node);
  if (p->args.kind == BPT_POOL_MAX && !node->saved)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "pool2d: max pooling needs an argmax buffer");
  p->in = p->args.in_height * p->args.in_width, p->out = p->args.out_height * p->args.out_width;
  p->count = p->args.batch * p->args.channels;
  p->x16 = bpt_tensor_is_bf16(&node->inputs[0]), p->y16 = bpt_tensor_is_bf16(&node->output);
  p->staged = p->x16 || p->y16;
  return bpt_cpu_row_staging_reserve(backend, p->staged, 0, (size_t)(p->in + p->out));
}

/* max_pool2d (winning indices in saved), avg_pool2d and global_avg_pool, one kernel pair for all three:
 * x (N, C, H, W) -> y (N, C, OH, OW). bf16-stored planes are staged through f32 in the thread's scratch
 * (bf16_storage.h): x's plane and y's, or dx's and dy's, so the same loops run on either storage. */
static bpt_status pool2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  pool_planes p;
  const bpt_status status = planes_of(backend, node, &p);
  if (status != BPT_OK) return status;
  const void *x = node->inputs[0].value;
  void *y = node->output.value;
  int32_t *argmax = node->saved;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (parallel(&p.args))
  for (int64_t plane = 0; plane < p.count; plane++) {
    float *stage = bpt_cpu_row_staging(backend, p.staged, 0);
    float *out = bpt_storage_write_row(y, p.y16, plane * p.out, p.out, false, stage ? stage + p.in : NULL);
    pool_plane(&p.args, bpt_storage_read_row(x, p.x16, plane * p.in, p.in, stage), out,
               argmax ? argmax + plane * p.out : NULL);
    bpt_storage_commit_row(y, p.y16, plane * p.out, p.out, out);
  }
  return BPT_OK;
}

static bpt_status pool2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  pool_planes p;
  const bpt_status status = planes_of(backend, node, &p);
  if (status != BPT_OK) return status;
  const void *dy = node->output.grad;
  const int32_t *argmax = node->saved;
  void *dx = node->inputs[0].grad;
#pragma omp parallel for num_threads(bpt_cpu_threads(backend)) if (parallel(&p.args))
  for (int64_t plane = 0; plane < p.count; plane++) {
    float *stage = bpt_cpu_row_staging(backend, p.staged, 0);
    /* dx is added into (beta 1: its first writer clears it), so a bf16 plane is widened first. */
    float *out = bpt_storage_write_row(dx, p.x16, plane * p.in, p.in, true, stage);
    pool_plane_backward(&p.args, bpt_storage_read_row(dy, p.y16, plane * p.out, p.out, stage ? stage + p.in : NULL),
                        out, argmax ? argmax + plane * p.out : NULL);
    bpt_storage_commit_row(dx, p.x16, plane * p.in, p.in, out);
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, MAX_POOL2D, pool2d_forward, pool2d_backward, NULL);
BPT_REGISTER_KERNELS_16BIT(cpu, AVG_POOL2D, pool2d_forward, pool2d_backward, NULL);
BPT_REGISTER_KERNELS_16BIT(cpu, GLOBAL_AVG_POOL, pool2d_forward, pool2d_backward, NULL);
