/* Fused attention on the CPU (src/core/ops/scaled_dot_product_attention.c has the method). Blocks of
 * ATTENTION_QUERIES queries by ATTENTION_KEYS keys: the block products (Q K^T, P V and backward's four) go to
 * the library's SGEMM straight from the tokens' rows (leading dimension C, or a strided view's row step: q, k
 * and v may be slices of one fused projection, read in place; no gather), the row work (online
 * softmax, P = exp(S - L), dS = P (dP - D)) runs in vectorisable loops on the thread's scratch block. Forward
 * runs tasks of (n, h, query block); backward runs one task per (n, h), which alone writes that head's columns
 * of dq, dk and dv, so nothing needs atomics and the sums' order does not depend on the thread count.
 * bf16-stored q, k, v and output (and their gradients) are widened a head's rows at a time into the task's f32
 * scratch, and the rows it writes rounded back (bf16_storage.h). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/blas_library.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/exp_rows.h"
#include "backends/cpu/fast_exp.h"
#include "backends/cpu/attention_bf16.h"
#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/gemm_bf16.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* 64 x 64 blocks: S is 16 KiB and the products' operands stay in L2, and causal rows skip key blocks at that
 * grain. bench/attention.c (causal, 2048 tokens, C 128 in 4 heads, one thread, CPU ms at T 128 / 512): 64 x 64
 * 6.96 / 17.98, 64 x 128 7.78 / 18.55, 128 x 128 7.53 / 18.26, 32 x 64 7.01 / 19.07. */
enum { ATTENTION_QUERIES = 64, ATTENTION_KEYS = 64 };

typedef struct attention_shape {
  int64_t batch, queries, keys, channels, heads, width; /* N, Tq, Tk, C, H, D = C / H */
  int64_t offset;                                       /* Tk - Tq: query i sees keys j <= i + offset */
  /* Elements between samples and between tokens of q, k and v (and their gradients); the output's are Tq C, C. */
  int64_t q_sample, q_row, k_sample, k_row, v_sample, v_row;
  bool causal;
  float scale;               /* 1 / sqrt(D) */
  float dropout, keep_scale; /* p and 1 / (1 - p) */
  uint32_t threshold;        /* an element is dropped when its 24-bit draw is below this */
  uint64_t seed;
  bpt_cpu_loops loops; /* which exp loop runs (exp_rows.c) */
  /* The bf16 policy where vdpbf16ps pays (bf16_unit.h): the block products take bf16 operands
   * (attention_bf16.h), as PyTorch's bf16 flash attention rounds its q, k, v, probability and dS tiles;
   * accumulation stays f32. */
  bool bf16;
  int64_t pairs_d, keys_ld, width_ld; /* bf16: pairs of D, keys and D rounded up to whole vectors */
  int64_t head_words;                 /* bf16: one head's packed K^T and V (forward) */
  /* Which of q, k, v and the output (each with its gradient) are stored as bf16: a task widens its head's rows
   * of them into f32 scratch, D apart, and rounds what it writes back (bf16_storage.h). */
  bool q16, k16, v16, o16, staged;
} attention_shape;

static attention_shape shape_of(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *q = &node->inputs[0], *k = &node->inputs[1];
  attention_shape s = {.batch = q->dims[0], .queries = q->dims[1], .keys = k->dims[1], .channels = q->dims[2]};
  s.heads = node->int_attributes[0];
  s.width = s.channels / s.heads;
  s.q_sample = q->strides[0], s.q_row = q->strides[1];
  s.k_sample = k->strides[0], s.k_row = k->strides[1];
  s.v_sample = node->inputs[2].strides[0], s.v_row = node->inputs[2].strides[1];
  s.causal = node->int_attributes[1] != 0;
  s.offset = s.keys - s.queries;
  s.scale = (float)(1.0 / sqrt((double)s.width));
  s.dropout = node->float_attributes[0];
  s.keep_scale = 1.0f / (1.0f - s.dropout);
  s.threshold = (uint32_t)((double)s.dropout * 16777216.0);
  s.seed = node->seed;
  s.loops = bpt_cpu_vector_loops(backend);
  s.bf16 = node->bf16_products && bpt_cpu_bf16_dot_pays();
  s.pairs_d = (s.width + 1) / 2;
  /* One vector more than the keys need: rows of K^T a multiple of 4 KiB apart (1024 keys) would all fall into
   * the same L1 sets as a block's products walk down the pairs. */
  s.keys_ld = bpt_attention_vectors(s.keys) + 16;
  s.width_ld = bpt_attention_vectors(s.width);
  s.head_words = s.pairs_d * s.keys_ld + (s.keys + 1) / 2 * s.width_ld;
  s.q16 = bpt_tensor_is_bf16(q), s.k16 = bpt_tensor_is_bf16(k), s.v16 = bpt_tensor_is_bf16(&node->inputs[2]);
  s.o16 = bpt_tensor_is_bf16(&node->output);
  s.staged = s.q16 || s.k16 || s.v16 || s.o16;
  return s;
}

/* rows x D values of a head at element `at` of values (rows `step` apart) as f32 rows: in place (*ld = step),
 * or widened into stage (*ld = D). */
static const float *head_rows(const void *values, bool bf16, int64_t at, int64_t step, int64_t rows, int64_t D,
                              float *stage, int64_t *ld) {
  *ld = bf16 ? D : step;
  if (!bf16) return (const float *)values + at;
  for (int64_t r = 0; r < rows; r++)
    bpt_storage_read_row(values, true, at + r * step, D, stage + r * D);
  return stage;
}

/* The gradient a head task accumulates into (rows x D at element `at`, rows `step` apart): in place, or f32
 * stage (ld D) holding the stored values, or zeros where the task overwrites (zero); head_gradient_commit
 * rounds it back. */
static float *head_gradient(void *gradient, bool bf16, int64_t at, int64_t step, int64_t rows, int64_t D, bool zero,
                            float *stage) {
  if (!bf16) return (float *)gradient + at;
  if (zero)
    memset(stage, 0, (size_t)(rows * D) * sizeof *stage);
  else
    head_rows(gradient, true, at, step, rows, D, stage, &(int64_t){0});
  return stage;
}

static void head_gradient_commit(void *gradient, bool bf16, int64_t at, int64_t step, int64_t rows, int64_t D,
                                 const float *stage) {
  for (int64_t r = 0; bf16 && r < rows; r++)
    bpt_storage_commit_row(gradient, true, at + r * step, D, stage + r * D);
}

/* The keys query i sees: [0, visible). */
static inline int64_t visible_keys(const attention_shape *s, int64_t i) {
  if (!s->causal) return s->keys;
  const int64_t end = i + s->offset + 1;
  return end < 0 ? 0 : end < s->keys ? end : s->keys;
}

/* Visible keys of query i within the block of cols keys from j0: [0, result). */
static inline int64_t visible_in_block(const attention_shape *s, int64_t i, int64_t j0, int64_t cols) {
  const int64_t end = visible_keys(s, i) - j0;
  return end < 0 ? 0 : end < cols ? end : cols;
}

/* splitmix64's finaliser, as dropout.c: element (n, h, i, j)'s draw needs no other element's. */
static inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Multiplies row[0, cols) of query i by its dropout mask (0 or 1 / (1 - p)) over keys j0.. of head task. */
static void apply_dropout(const attention_shape *s, int64_t task, int64_t i, int64_t j0, int64_t cols, float *row) {
  const uint64_t first = ((uint64_t)task * (uint64_t)s->queries + (uint64_t)i) * (uint64_t)s->keys + (uint64_t)j0;
  for (int64_t c = 0; c < cols; c++) {
    const uint32_t draw = (uint32_t)(mix(s->seed + (first + (uint64_t)c) * 0x9e3779b97f4a7c15ULL) >> 40);
    row[c] *= draw < s->threshold ? 0.0f : s->keep_scale;
  }
}

/* C (m, n) = alpha op(A) op(B) + beta C, row-major. */
static void product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  bpt_cpu_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- forward ---- */

/* The head whose bf16 K and V rows a thread's stage holds, and how many of them: consecutive query blocks of one
 * head reuse them instead of widening them again (the thread's own, reset at each call: values change between
 * calls). */
typedef struct staged_keys {
  int64_t task, rows;
} staged_keys;

/* One block of queries [i0, i0 + rows) of head task = n H + h: online softmax over key blocks (Milakov and
 * Gimelshein 2018), O = acc / l and L = m + log l. Scratch: S (rows x ATTENTION_KEYS), acc (rows x D), m, l. */
static void forward_block(const attention_shape *s, int64_t task, int64_t i0, const void *q, const void *k,
                          const void *v, void *out, float *lse, const uint32_t *packed, float *scratch,
                          float *stage, staged_keys *staged) {
  const int64_t n = task / s->heads, h = task % s->heads, C = s->channels, D = s->width;
  const int64_t rows = s->queries - i0 < ATTENTION_QUERIES ? s->queries - i0 : ATTENTION_QUERIES;
  float *scores = scratch, *acc = scores + ATTENTION_QUERIES * ATTENTION_KEYS, *top = acc + ATTENTION_QUERIES * D,
        *sum = top + ATTENTION_QUERIES;
  /* bf16: the head's K^T and V packed by attention_forward; this block's Q and P packed here. */
  const uint32_t *kt = packed ? packed + task * s->head_words : NULL;
  const uint32_t *vp = kt ? kt + s->pairs_d * s->keys_ld : NULL;
  uint32_t *q_words = (uint32_t *)(sum + ATTENTION_QUERIES), *p_words = q_words + ATTENTION_QUERIES * s->pairs_d;
  const int64_t key_end = visible_keys(s, i0 + rows - 1); /* the block's last query sees the most */
  int64_t qr, kr = 0, vr = 0;
  /* (rows, D) and (key_end, D), rows qr, kr and vr apart; K and V are packed instead where kt is. */
  const float *Q = head_rows(q, s->q16, n * s->q_sample + i0 * s->q_row + h * D, s->q_row, rows, D, stage, &qr);
  /* bf16 K and V rows already in the stage for this head (an earlier block of it on this thread) are kept. */
  const bool kept = stage && staged->task == task && staged->rows >= key_end;
  float *stage_k = stage ? stage + ATTENTION_QUERIES * D : NULL, *stage_v = stage ? stage_k + s->keys * D : NULL;
  const float *K = kt                   ? NULL
                   : kept && s->k16 ? (kr = D, stage_k)
                                    : head_rows(k, s->k16, n * s->k_sample + h * D, s->k_row, key_end, D, stage_k, &kr);
  const float *V = kt                   ? NULL
                   : kept && s->v16 ? (vr = D, stage_v)
                                    : head_rows(v, s->v16, n * s->v_sample + h * D, s->v_row, key_end, D, stage_v, &vr);
  if (stage && !kt && !kept) *staged = (staged_keys){task, key_end};
  for (int64_t r = 0; r < rows; r++)
    top[r] = -HUGE_VALF, sum[r] = 0.0f;
  memset(acc, 0, (size_t)(rows * D) * sizeof *acc);
  if (kt) bpt_attention_pack_rows(Q, qr, rows, D, q_words, s->pairs_d);
  for (int64_t j0 = 0; j0 < key_end; j0 += ATTENTION_KEYS) {
    const int64_t cols = key_end - j0 < ATTENTION_KEYS ? key_end - j0 : ATTENTION_KEYS;
    if (kt)
      bpt_attention_bf16_product(rows, cols, s->pairs_d, s->scale, q_words, s->pairs_d, 1, kt + j0, s->keys_ld, 0.0f,
                                 scores, ATTENTION_KEYS);
    else
      product(false, true, rows, cols, D, s->scale, Q, qr, K + j0 * kr, kr, 0.0f, scores, ATTENTION_KEYS);
    for (int64_t r = 0; r < rows; r++) {
      float *row = scores + r * ATTENTION_KEYS;
      const int64_t visible = visible_in_block(s, i0 + r, j0, cols);
      float block_top = -HUGE_VALF;
#pragma omp simd reduction(max : block_top)
      for (int64_t c = 0; c < visible; c++)
        block_top = row[c] > block_top ? row[c] : block_top;
      const float new_top = block_top > top[r] ? block_top : top[r];
      if (new_top == -HUGE_VALF) { /* nothing visible yet (or only -inf): the row adds nothing */
        memset(row, 0, (size_t)cols * sizeof *row);
        continue;
      }
      const float block_sum = bpt_cpu_exp_row(s->loops, row, visible, new_top);
      for (int64_t c = visible; c < cols; c++)
        row[c] = 0.0f;
      const float correction = bpt_cpu_exp(top[r] - new_top); /* 0 on the first visible block */
      sum[r] = sum[r] * correction + block_sum;
      top[r] = new_top;
      if (correction != 1.0f)
        for (int64_t d = 0; d < D; d++)
          acc[r * D + d] *= correction;
      if (s->dropout > 0.0f) apply_dropout(s, task, i0 + r, j0, cols, row);
    }
    if (kt) {
      bpt_attention_pack_rows(scores, ATTENTION_KEYS, rows, cols, p_words, ATTENTION_KEYS / 2);
      bpt_attention_bf16_product(rows, D, (cols + 1) / 2, 1.0f, p_words, ATTENTION_KEYS / 2, 1,
                                 vp + j0 / 2 * s->width_ld, s->width_ld, 1.0f, acc, D);
    } else {
      product(false, false, rows, D, cols, 1.0f, scores, ATTENTION_KEYS, V + j0 * vr, vr, 1.0f, acc, D);
    }
  }
  const int64_t o_at = (n * s->queries + i0) * C + h * D;
  for (int64_t r = 0; r < rows; r++) {
    const float inverse = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
    float *O = bpt_storage_write_row(out, s->o16, o_at + r * C, D, false, acc + r * D);
    for (int64_t d = 0; d < D; d++)
      O[d] = acc[r * D + d] * inverse;
    bpt_storage_commit_row(out, s->o16, o_at + r * C, D, O);
    /* +inf for a query that sees nothing: backward's exp(S - L) is then 0, not NaN. */
    lse[task * s->queries + i0 + r] = sum[r] > 0.0f ? top[r] + logf(sum[r]) : HUGE_VALF;
  }
}

/* Threads for count tasks: one runs them outside any parallel construct (OpenBLAS then threads its products
 * itself, and under libomp a region nested in even an inactive one would leave it a single thread that waits
 * for its other workers forever; see conv2d.c). */
static int task_threads(bpt_backend *backend, int64_t tasks) {
  const int threads = backend->num_threads > 0 ? backend->num_threads : 1;
  return tasks >= 2 && threads > 1 ? threads : 1;
}

/* bf16: head task's K^T (pairs of D by keys) and V (pairs of keys by D), packed once for all its query blocks. */
static void pack_head(const attention_shape *s, int64_t task, const void *k, const void *v, uint32_t *words,
                      float *stage) {
  const int64_t n = task / s->heads, h = task % s->heads, D = s->width;
  uint32_t *kt = words + task * s->head_words;
  int64_t kr, vr;
  const float *K = head_rows(k, s->k16, n * s->k_sample + h * D, s->k_row, s->keys, D, stage, &kr);
  const float *V =
      head_rows(v, s->v16, n * s->v_sample + h * D, s->v_row, s->keys, D, stage ? stage + s->keys * D : NULL, &vr);
  bpt_attention_pack_column_pairs(K, kr, s->keys, D, kt, s->keys_ld);
  bpt_attention_pack_row_pairs(V, vr, s->keys, D, kt + s->pairs_d * s->keys_ld, s->width_ld);
}

static bpt_status attention_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const attention_shape s = shape_of(backend, node);
  const void *q = node->inputs[0].value, *k = node->inputs[1].value, *v = node->inputs[2].value;
  void *out = node->output.value;
  float *lse = node->saved;
  const int64_t blocks = (s.queries + ATTENTION_QUERIES - 1) / ATTENTION_QUERIES, heads = s.batch * s.heads,
                tasks = heads * blocks;
  const int threads = task_threads(backend, tasks);
  const size_t words = s.bf16 ? (size_t)(ATTENTION_QUERIES * (s.pairs_d + ATTENTION_KEYS / 2)) : 0;
  const size_t blocks_floats = (size_t)ATTENTION_QUERIES * (size_t)(ATTENTION_KEYS + s.width + 2) + words;
  /* Staging after the blocks: a block's Q rows and its head's K and V rows (or, packing, K and V). */
  const size_t stage_floats = s.staged ? (size_t)((ATTENTION_QUERIES + 2 * s.keys) * s.width) : 0;
  const size_t per_thread = blocks_floats + stage_floats;
  bpt_status reserved = bpt_cpu_scratch_reserve(backend, threads, per_thread);
  if (reserved != BPT_OK) return reserved;
  uint32_t *packed = NULL;
  if (s.bf16) {
    /* Every head's K^T and V after slot 0's own block, so that, like the blocks, they are allocated once and
     * reused by every later step; all threads read them, none writes them while the blocks run. */
    reserved = bpt_cpu_scratch_reserve(backend, 1, per_thread + (size_t)(heads * s.head_words));
    if (reserved != BPT_OK) return reserved;
    packed = (uint32_t *)(bpt_cpu_scratch(backend, 0) + per_thread);
#pragma omp parallel for num_threads(task_threads(backend, heads)) schedule(static) if (threads > 1)
    for (int64_t t = 0; t < heads; t++)
      pack_head(&s, t, k, v, packed, s.staged ? bpt_cpu_scratch(backend, omp_get_thread_num()) + blocks_floats : NULL);
  }
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      staged_keys staged = {-1, 0}; /* this thread's */
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < tasks; t++) {
        float *scratch = bpt_cpu_scratch(backend, omp_get_thread_num());
        forward_block(&s, t / blocks, t % blocks * ATTENTION_QUERIES, q, k, v, out, lse, packed, scratch,
                      s.staged ? scratch + blocks_floats : NULL, &staged);
      }
    }
  } else {
    float *scratch = bpt_cpu_scratch(backend, 0);
    staged_keys staged = {-1, 0};
    for (int64_t t = 0; t < tasks; t++)
      forward_block(&s, t / blocks, t % blocks * ATTENTION_QUERIES, q, k, v, out, lse, packed, scratch,
                    s.staged ? scratch + blocks_floats : NULL, &staged);
  }
  return BPT_OK;
}

/* ---- backward ---- */

typedef struct attention_tensors {
  const void *q, *k, *v, *out, *dout; /* f32, or bf16 where the shape says so */
  const float *lse;
  void *dq, *dk, *dv;             /* NULL: not wanted */
  bool zero_dq, zero_dk, zero_dv; /* beta 0: the task clears its head's columns first */
} attention_tensors;

/* rows x D block at row stride ld set to 0. */
static void clear_columns(float *x, int64_t rows, int64_t D, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    memset(x + r * ld, 0, (size_t)D * sizeof *x);
}

/* Head task = n H + h over all its queries and keys. Scratch: P, dP and P~ blocks, then D_i for every query. */
static void backward_head(const attention_shape *s, const attention_tensors *t, int64_t task, float *scratch,
                          float *stage) {
  const int64_t n = task / s->heads, h = task % s->heads, C = s->channels, D = s->width;
  const int64_t block = ATTENTION_QUERIES * ATTENTION_KEYS;
  float *probabilities = scratch, *dp = scratch + block, *dropped = scratch + 2 * block, *delta = scratch + 3 * block;
  const int64_t Tq = s->queries, Tk = s->keys;
  const int64_t q_offset = n * s->q_sample + h * D, k_offset = n * s->k_sample + h * D,
                v_offset = n * s->v_sample + h * D, out_offset = n * Tq * C + h * D;
  /* Rows qr, kr, vr and orow apart: the tensors' own steps, or D in the f32 stage of bf16-stored ones (the
   * stage: Q, dQ, O, dO by queries, then K, dK, V, dV by keys). */
  int64_t qr, kr, vr, orow;
  float *stage_q = stage, *stage_k = stage ? stage + 4 * Tq * D : NULL;
  const float *Q = head_rows(t->q, s->q16, q_offset, s->q_row, Tq, D, stage_q, &qr);
  const float *O = head_rows(t->out, s->o16, out_offset, C, Tq, D, stage_q ? stage_q + 2 * Tq * D : NULL, &orow);
  const float *dO = head_rows(t->dout, s->o16, out_offset, C, Tq, D, stage_q ? stage_q + 3 * Tq * D : NULL, &orow);
  const float *K = head_rows(t->k, s->k16, k_offset, s->k_row, Tk, D, stage_k, &kr);
  const float *V = head_rows(t->v, s->v16, v_offset, s->v_row, Tk, D, stage_k ? stage_k + 2 * Tk * D : NULL, &vr);
  const float *L = t->lse + task * Tq;
  /* One node given as two inputs (self-attention on q = k = v) has one gradient: staged once, shared. */
  const bool k_is_q = t->dk && t->dk == t->dq && k_offset == q_offset && s->k_row == s->q_row;
  const bool v_is_q = t->dv && t->dv == t->dq && v_offset == q_offset && s->v_row == s->q_row;
  const bool v_is_k = t->dv && t->dv == t->dk && v_offset == k_offset && s->v_row == s->k_row;
  float *dQ = t->dq ? head_gradient(t->dq, s->q16, q_offset, s->q_row, Tq, D, t->zero_dq,
                                    stage_q ? stage_q + Tq * D : NULL)
                    : NULL;
  float *dK = k_is_q ? dQ
              : t->dk ? head_gradient(t->dk, s->k16, k_offset, s->k_row, Tk, D, t->zero_dk,
                                      stage_k ? stage_k + Tk * D : NULL)
                      : NULL;
  float *dV = v_is_q ? dQ
              : v_is_k ? dK
              : t->dv  ? head_gradient(t->dv, s->v16, v_offset, s->v_row, Tk, D, t->zero_dv,
                                       stage_k ? stage_k + 3 * Tk * D : NULL)
                       : NULL;
  if (t->zero_dq && !s->q16) clear_columns(dQ, Tq, D, qr);
  if (t->zero_dk && !s->k16) clear_columns(dK, Tk, D, kr);
  if (t->zero_dv && !s->v16) clear_columns(dV, Tk, D, vr);
  /* bf16: the head's Q and dO (pairs of D per query, and pairs of queries by D), K^T and V^T (pairs of D by
   * keys) and K (pairs of keys by D) packed once; per block P^T, dS and dS^T. */
  const int64_t Dw = s->pairs_d, KW = ATTENTION_KEYS / 2, QW = ATTENTION_QUERIES / 2;
  const int64_t query_pairs_words = (s->queries + 1) / 2 * s->width_ld;
  uint32_t *q_rows = (uint32_t *)(delta + s->queries), *do_rows = q_rows + s->queries * Dw;
  uint32_t *kt = do_rows + s->queries * Dw, *vt = kt + Dw * s->keys_ld, *kb = vt + Dw * s->keys_ld;
  uint32_t *qb = kb + (s->keys + 1) / 2 * s->width_ld, *dob = qb + query_pairs_words;
  uint32_t *pb = dob + query_pairs_words, *dsr = pb + QW * ATTENTION_KEYS, *dsb = dsr + ATTENTION_QUERIES * KW;
  if (s->bf16) {
    bpt_attention_pack_rows(Q, qr, s->queries, D, q_rows, Dw);
    bpt_attention_pack_rows(dO, orow, s->queries, D, do_rows, Dw);
    bpt_attention_pack_column_pairs(K, kr, s->keys, D, kt, s->keys_ld);
    bpt_attention_pack_column_pairs(V, vr, s->keys, D, vt, s->keys_ld);
    bpt_attention_pack_row_pairs(K, kr, s->keys, D, kb, s->width_ld);
    bpt_attention_pack_row_pairs(Q, qr, s->queries, D, qb, s->width_ld);
    bpt_attention_pack_row_pairs(dO, orow, s->queries, D, dob, s->width_ld);
  }
  for (int64_t i = 0; i < s->queries; i++) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < D; d++)
      dot += dO[i * orow + d] * O[i * orow + d];
    delta[i] = dot;
  }
  for (int64_t j0 = 0; j0 < s->keys; j0 += ATTENTION_KEYS) {
    const int64_t cols = s->keys - j0 < ATTENTION_KEYS ? s->keys - j0 : ATTENTION_KEYS;
    /* The first query that sees key j0: i + offset >= j0. */
    int64_t first = s->causal && j0 - s->offset > 0 ? j0 - s->offset : 0;
    /* bf16: blocks start at an even query, so that they start a pair of the head's packed Q and dO; the query
     * before the first that sees key j0 sees none of this block, so its P and dS rows are 0. */
    if (s->bf16) first -= first % 2;
    for (int64_t i0 = first; i0 < s->queries; i0 += ATTENTION_QUERIES) {
      const int64_t rows = s->queries - i0 < ATTENTION_QUERIES ? s->queries - i0 : ATTENTION_QUERIES;
      if (s->bf16) {
        bpt_attention_bf16_product(rows, cols, Dw, s->scale, q_rows + i0 * Dw, Dw, 1, kt + j0, s->keys_ld, 0.0f,
                                   probabilities, ATTENTION_KEYS);
        bpt_attention_bf16_product(rows, cols, Dw, 1.0f, do_rows + i0 * Dw, Dw, 1, vt + j0, s->keys_ld, 0.0f, dp,
                                   ATTENTION_KEYS);
      } else {
        product(false, true, rows, cols, D, s->scale, Q + i0 * qr, qr, K + j0 * kr, kr, 0.0f, probabilities,
                ATTENTION_KEYS);
        product(false, true, rows, cols, D, 1.0f, dO + i0 * orow, orow, V + j0 * vr, vr, 0.0f, dp, ATTENTION_KEYS);
      }
      for (int64_t r = 0; r < rows; r++) {
        const int64_t i = i0 + r, visible = visible_in_block(s, i, j0, cols);
        float *p = probabilities + r * ATTENTION_KEYS, *g = dp + r * ATTENTION_KEYS;
        const float lse = L[i], di = delta[i];
        bpt_cpu_exp_row(s->loops, p, visible, lse);
        for (int64_t c = visible; c < cols; c++)
          p[c] = 0.0f;
        if (s->dropout > 0.0f) {
          /* The forward's mask M redrawn, then dP = (dO V^T) M and P~ = P M in place of it. */
          float *pd = dropped + r * ATTENTION_KEYS;
          for (int64_t c = 0; c < cols; c++)
            pd[c] = 1.0f;
          apply_dropout(s, task, i, j0, cols, pd);
          for (int64_t c = 0; c < cols; c++) {
            g[c] *= pd[c];
            pd[c] *= p[c];
          }
        }
#pragma omp simd
        for (int64_t c = 0; c < cols; c++)
          g[c] = p[c] * (g[c] - di); /* dS */
      }
      const float *pv = s->dropout > 0.0f ? dropped : probabilities;
      if (s->bf16) {
        /* dV += P~^T dO, dQ += dS K / sqrt(D), dK += dS^T Q / sqrt(D), reductions in pairs of queries or keys. */
        const int64_t query_pairs = (rows + 1) / 2, key_pairs = (cols + 1) / 2;
        if (dV) {
          bpt_attention_pack_row_pairs(pv, ATTENTION_KEYS, rows, cols, pb, ATTENTION_KEYS);
          bpt_attention_bf16_product(cols, D, query_pairs, 1.0f, pb, 1, ATTENTION_KEYS, dob + i0 / 2 * s->width_ld,
                                     s->width_ld, 1.0f, dV + j0 * vr, vr);
        }
        if (dQ) {
          bpt_attention_pack_rows(dp, ATTENTION_KEYS, rows, cols, dsr, KW);
          bpt_attention_bf16_product(rows, D, key_pairs, s->scale, dsr, KW, 1, kb + j0 / 2 * s->width_ld,
                                     s->width_ld, 1.0f, dQ + i0 * qr, qr);
        }
        if (dK) {
          bpt_attention_pack_row_pairs(dp, ATTENTION_KEYS, rows, cols, dsb, ATTENTION_KEYS);
          bpt_attention_bf16_product(cols, D, query_pairs, s->scale, dsb, 1, ATTENTION_KEYS,
                                     qb + i0 / 2 * s->width_ld, s->width_ld, 1.0f, dK + j0 * kr, kr);
        }
        continue;
      }
      if (dV)
        product(true, false, cols, D, rows, 1.0f, pv, ATTENTION_KEYS, dO + i0 * orow, orow, 1.0f, dV + j0 * vr, vr);
      if (dQ)
        product(false, false, rows, D, cols, s->scale, dp, ATTENTION_KEYS, K + j0 * kr, kr, 1.0f, dQ + i0 * qr, qr);
      if (dK)
        product(true, false, cols, D, rows, s->scale, dp, ATTENTION_KEYS, Q + i0 * qr, qr, 1.0f, dK + j0 * kr, kr);
    }
  }
  if (dQ) head_gradient_commit(t->dq, s->q16, q_offset, s->q_row, Tq, D, dQ);
  if (dK && !k_is_q) head_gradient_commit(t->dk, s->k16, k_offset, s->k_row, Tk, D, dK);
  if (dV && !v_is_q && !v_is_k) head_gradient_commit(t->dv, s->v16, v_offset, s->v_row, Tk, D, dV);
}

static bpt_status attention_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const attention_shape s = shape_of(backend, node);
  const bpt_kernel_tensor *in = node->inputs;
  const attention_tensors t = {.q = in[0].value,
                               .k = in[1].value,
                               .v = in[2].value,
                               .out = node->output.value,
                               .dout = node->output.grad,
                               .lse = node->saved,
                               .dq = in[0].grad,
                               .dk = in[1].grad,
                               .dv = in[2].grad,
                               .zero_dq = in[0].grad && in[0].beta == 0.0f,
                               .zero_dk = in[1].grad && in[1].beta == 0.0f,
                               .zero_dv = in[2].grad && in[2].beta == 0.0f};
  const int64_t tasks = s.batch * s.heads;
  const int threads = task_threads(backend, tasks);
  /* bf16: the packed words backward_head lays out after its f32 blocks. */
  const int64_t query_words = 2 * s.queries * s.pairs_d, key_words = 2 * s.pairs_d * s.keys_ld + (s.keys + 1) / 2 * s.width_ld;
  const int64_t block_words = 2 * (ATTENTION_QUERIES / 2) * ATTENTION_KEYS + ATTENTION_QUERIES * (ATTENTION_KEYS / 2) +
                              2 * (s.queries + 1) / 2 * s.width_ld;
  const size_t words = s.bf16 ? (size_t)(query_words + key_words + block_words) : 0;
  const size_t blocks_floats = (size_t)(3 * ATTENTION_QUERIES * ATTENTION_KEYS) + (size_t)s.queries + words;
  const size_t stage_floats = s.staged ? (size_t)(4 * (s.queries + s.keys) * s.width) : 0;
  const bpt_status reserved = bpt_cpu_scratch_reserve(backend, threads, blocks_floats + stage_floats);
  if (reserved != BPT_OK) return reserved;
  if (threads > 1) {
#pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (int64_t task = 0; task < tasks; task++) {
      float *scratch = bpt_cpu_scratch(backend, omp_get_thread_num());
      backward_head(&s, &t, task, scratch, s.staged ? scratch + blocks_floats : NULL);
    }
  } else {
    float *scratch = bpt_cpu_scratch(backend, 0);
    for (int64_t task = 0; task < tasks; task++)
      backward_head(&s, &t, task, scratch, s.staged ? scratch + blocks_floats : NULL);
  }
  return BPT_OK;
}

/* Strided q, k and v (views of a fused projection): any steps between samples and tokens, the channels
 * contiguous, as the block products read whole rows of D channels. */
static bool attention_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  for (int i = 0; i < 3; i++)
    if (node->inputs[i].strides[2] != 1 || node->inputs[i].strides[1] < node->inputs[i].dims[2]) {
      if (reason) *reason = "q, k and v need contiguous channels and rows at least C apart";
      return false;
    }
  return true;
}

BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, SCALED_DOT_PRODUCT_ATTENTION, attention_forward, attention_backward,
                                   attention_supports);
