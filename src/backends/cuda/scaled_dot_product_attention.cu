// Fused attention on CUDA (src/core/ops/scaled_dot_product_attention.c has the method), simple and exact rather
// than fast: one thread block per (n, h, query) row in forward and for dq, one per (n, h, key) for dk and dv, so
// every gradient element has one writer and needs no atomics. A row's scores live in shared memory (Tk floats
// forward and for dq, 2 Tq for dk and dv), which bounds the lengths supports() accepts. The dropout mask is
// dropout.cu's hash of the element's index (n H + h, i, j), so it equals the CPU's. q, k and v (and their
// gradients) may be strided views (slices of a fused qkv projection): any steps between samples and tokens,
// contiguous channels; the output is the node's own, (N, Tq, C).
#include <math.h>

#include "backends/cuda/cuda.h"

enum { ATTENTION_THREADS = 128, ATTENTION_SHARED_LIMIT = 48 * 1024 };

struct attention_shape {
  int64_t batch, queries, keys, channels, heads, width, offset;
  int64_t q_sample, q_row, k_sample, k_row, v_sample, v_row; // elements between samples and between tokens
  int causal;
  float scale, dropout, keep_scale;
  uint32_t threshold;
  uint64_t seed;
};

static attention_shape shape_of(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *q = &node->inputs[0], *k = &node->inputs[1];
  attention_shape s;
  s.batch = q->dims[0];
  s.queries = q->dims[1];
  s.keys = k->dims[1];
  s.channels = q->dims[2];
  s.q_sample = q->strides[0], s.q_row = q->strides[1];
  s.k_sample = k->strides[0], s.k_row = k->strides[1];
  s.v_sample = node->inputs[2].strides[0], s.v_row = node->inputs[2].strides[1];
  s.heads = node->int_attributes[0];
  s.width = s.channels / s.heads;
  s.offset = s.keys - s.queries;
  s.causal = node->int_attributes[1] != 0;
  s.scale = (float)(1.0 / sqrt((double)s.width));
  s.dropout = node->float_attributes[0];
  s.keep_scale = 1.0f / (1.0f - s.dropout);
  s.threshold = (uint32_t)((double)s.dropout * 16777216.0);
  s.seed = node->seed;
  return s;
}

// Where token t of sample n, head h starts in q, k or v.
__device__ static int64_t q_at(const attention_shape &s, int64_t n, int64_t t, int64_t h) {
  return n * s.q_sample + t * s.q_row + h * s.width;
}
__device__ static int64_t k_at(const attention_shape &s, int64_t n, int64_t t, int64_t h) {
  return n * s.k_sample + t * s.k_row + h * s.width;
}
__device__ static int64_t v_at(const attention_shape &s, int64_t n, int64_t t, int64_t h) {
  return n * s.v_sample + t * s.v_row + h * s.width;
}

__device__ static int64_t visible_keys(const attention_shape &s, int64_t i) {
  if (!s.causal) return s.keys;
  const int64_t end = i + s.offset + 1;
  return end < 0 ? 0 : (end < s.keys ? end : s.keys);
}

// splitmix64's finaliser, as dropout.cu and the CPU kernels: 0 or 1 / (1 - p) for element (task, i, j).
__device__ static float keep(const attention_shape &s, int64_t task, int64_t i, int64_t j) {
  if (s.dropout <= 0.0f) return 1.0f;
  uint64_t z = s.seed + (((uint64_t)task * (uint64_t)s.queries + (uint64_t)i) * (uint64_t)s.keys + (uint64_t)j) *
                            0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (uint32_t)(z >> 40) < s.threshold ? 0.0f : s.keep_scale;
}

// The block's max or sum of v, returned to every thread; reduce holds 32 floats. Leaves the block synchronised.
__device__ static float block_reduce(float v, bool maximum, float *reduce) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = maximum ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  if (threadIdx.x % 32 == 0) reduce[warp] = v;
  __syncthreads();
  float total = maximum ? -INFINITY : 0.0f;
  for (int w = 0; w < warps; w++)
    total = maximum ? fmaxf(total, reduce[w]) : total + reduce[w];
  __syncthreads();
  return total;
}

__device__ static float dot(const float *a, const float *b, int64_t n) {
  float sum = 0.0f;
  for (int64_t d = 0; d < n; d++)
    sum += a[d] * b[d];
  return sum;
}

// One (n, h, i) row per block: scores, softmax, O and the log-sum-exp (+inf when no key is visible).
__global__ void attention_forward_kernel(attention_shape s, const float *q, const float *k, const float *v, float *out,
                                         float *lse) {
  extern __shared__ float shared[];
  float *reduce = shared, *p = shared + 32;
  const int64_t C = s.channels, D = s.width, rows = s.batch * s.heads * s.queries;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t task = row / s.queries, i = row % s.queries, n = task / s.heads, h = task % s.heads;
    const int64_t visible = visible_keys(s, i);
    const float *qi = q + q_at(s, n, i, h);
    float top = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
      p[j] = dot(qi, k + k_at(s, n, j, h), D) * s.scale;
      top = fmaxf(top, p[j]);
    }
    top = block_reduce(top, true, reduce);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < visible && top != -INFINITY; j += blockDim.x) {
      const float e = expf(p[j] - top);
      sum += e;
      p[j] = e * keep(s, task, i, j);
    }
    sum = block_reduce(sum, false, reduce);
    const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
    float *oi = out + (n * s.queries + i) * C + h * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < visible && sum > 0.0f; j++)
        acc += p[j] * v[v_at(s, n, j, h) + d];
      oi[d] = acc * inverse;
    }
    if (threadIdx.x == 0) lse[row] = sum > 0.0f ? top + logf(sum) : INFINITY;
    __syncthreads();
  }
}

// dq for one (n, h, i) row per block: dS_j = P_ij ((dO_i . v_j) M_ij - dO_i . O_i), dq_i = beta dq_i + dS K / sqrt(D).
__global__ void attention_dq_kernel(attention_shape s, const float *q, const float *k, const float *v, const float *out,
                                    const float *dout, const float *lse, float beta, float *dq) {
  extern __shared__ float shared[];
  float *reduce = shared, *ds = shared + 32;
  const int64_t C = s.channels, D = s.width, rows = s.batch * s.heads * s.queries;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t task = row / s.queries, i = row % s.queries, n = task / s.heads, h = task % s.heads;
    const int64_t visible = visible_keys(s, i), oi = (n * s.queries + i) * C + h * D, qi = q_at(s, n, i, h);
    float partial = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
      partial += dout[oi + d] * out[oi + d];
    const float delta = block_reduce(partial, false, reduce), L = lse[row];
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
      const float *kj = k + k_at(s, n, j, h), *vj = v + v_at(s, n, j, h);
      const float p = expf(dot(q + qi, kj, D) * s.scale - L);
      ds[j] = p * (dot(dout + oi, vj, D) * keep(s, task, i, j) - delta);
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < visible; j++)
        acc += ds[j] * k[k_at(s, n, j, h) + d];
      acc *= s.scale;
      dq[qi + d] = beta == 0.0f ? acc : dq[qi + d] + acc;
    }
    __syncthreads();
  }
}

// dk and dv for one (n, h, j) key per block, over the queries that see it: dv_j = sum_i P~_ij dO_i,
// dk_j = sum_i dS_ij q_i / sqrt(D). Either may be NULL (not wanted).
__global__ void attention_dkv_kernel(attention_shape s, const float *q, const float *k, const float *v,
                                     const float *out, const float *dout, const float *lse, float beta_k, float *dk,
                                     float beta_v, float *dv) {
  extern __shared__ float shared[];
  float *pd = shared, *ds = shared + s.queries;
  const int64_t C = s.channels, D = s.width, columns = s.batch * s.heads * s.keys;
  for (int64_t column = blockIdx.x; column < columns; column += gridDim.x) {
    const int64_t task = column / s.keys, j = column % s.keys, n = task / s.heads, h = task % s.heads;
    const int64_t kj = k_at(s, n, j, h), vj = v_at(s, n, j, h);
    for (int64_t i = threadIdx.x; i < s.queries; i += blockDim.x) {
      pd[i] = ds[i] = 0.0f;
      if (j >= visible_keys(s, i)) continue;
      const int64_t qi = q_at(s, n, i, h), oi = (n * s.queries + i) * C + h * D;
      const float p = expf(dot(q + qi, k + kj, D) * s.scale - lse[task * s.queries + i]), m = keep(s, task, i, j);
      pd[i] = p * m;
      ds[i] = p * (dot(dout + oi, v + vj, D) * m - dot(dout + oi, out + oi, D));
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float dk_acc = 0.0f, dv_acc = 0.0f;
      for (int64_t i = 0; i < s.queries; i++) {
        dk_acc += ds[i] * q[q_at(s, n, i, h) + d];
        dv_acc += pd[i] * dout[(n * s.queries + i) * C + h * D + d];
      }
      if (dk) dk[kj + d] = beta_k == 0.0f ? dk_acc * s.scale : dk[kj + d] + dk_acc * s.scale;
      if (dv) dv[vj + d] = beta_v == 0.0f ? dv_acc : dv[vj + d] + dv_acc;
    }
    __syncthreads();
  }
}

static unsigned row_blocks(const bpt_cuda_state *state, int64_t rows) {
  const int64_t limit = (int64_t)state->multiprocessors * 32;
  return (unsigned)(rows < limit ? (rows > 0 ? rows : 1) : limit);
}

static bool attention_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  const int64_t queries = node->inputs[0].dims[1], keys = node->inputs[1].dims[1];
  const int64_t longest = keys + 32 > 2 * queries ? keys + 32 : 2 * queries;
  if (longest * (int64_t)sizeof(float) > ATTENTION_SHARED_LIMIT) {
    *reason = "its kernels keep a row of scores in shared memory: at most 12256 keys and 6144 queries";
    return false;
  }
  for (int i = 0; i < 3; i++)
    if (node->inputs[i].strides[2] != 1 || node->inputs[i].strides[1] < node->inputs[i].dims[2]) {
      *reason = "q, k and v need contiguous channels and rows at least C apart";
      return false;
    }
  return true;
}

static bpt_status attention_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const attention_shape s = shape_of(node);
  const int64_t rows = s.batch * s.heads * s.queries;
  if (rows == 0) return BPT_OK;
  attention_forward_kernel<<<row_blocks(state, rows), ATTENTION_THREADS, (size_t)(s.keys + 32) * sizeof(float),
                             state->stream>>>(
      s, (const float *)node->inputs[0].value, (const float *)node->inputs[1].value,
      (const float *)node->inputs[2].value, (float *)node->output.value, (float *)node->saved);
  return bpt_cuda_check_launch(backend, "scaled_dot_product_attention_forward");
}

static bpt_status attention_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const attention_shape s = shape_of(node);
  const bpt_kernel_tensor *in = node->inputs;
  const float *q = (const float *)in[0].value, *k = (const float *)in[1].value, *v = (const float *)in[2].value;
  const float *out = (const float *)node->output.value, *dout = node->output.grad, *lse = (const float *)node->saved;
  if (s.batch * s.heads == 0 || s.queries == 0 || s.keys == 0) return BPT_OK;
  // dq first: when q is also k or v (one node, one gradient), its beta-0 pass must come before the adds.
  if (in[0].grad) {
    const int64_t rows = s.batch * s.heads * s.queries;
    attention_dq_kernel<<<row_blocks(state, rows), ATTENTION_THREADS, (size_t)(s.keys + 32) * sizeof(float),
                          state->stream>>>(s, q, k, v, out, dout, lse, in[0].beta, in[0].grad);
    const bpt_status launched = bpt_cuda_check_launch(backend, "scaled_dot_product_attention_dq");
    if (launched != BPT_OK) return launched;
  }
  if (in[1].grad || in[2].grad) {
    const int64_t columns = s.batch * s.heads * s.keys;
    attention_dkv_kernel<<<row_blocks(state, columns), ATTENTION_THREADS, (size_t)(2 * s.queries) * sizeof(float),
                           state->stream>>>(s, q, k, v, out, dout, lse, in[1].beta, in[1].grad, in[2].beta, in[2].grad);
    return bpt_cuda_check_launch(backend, "scaled_dot_product_attention_dkv");
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_STRIDED(cuda, SCALED_DOT_PRODUCT_ATTENTION, attention_forward, attention_backward,
                             attention_supports);
