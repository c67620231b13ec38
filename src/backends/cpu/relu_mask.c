/* ReLU with a 1-bit mask on the CPU: the forward records y > 0 as one bit per element, so backward needs
 * neither x nor y (32x less memory held between the passes). Bit j of mask byte b belongs to element
 * 8b + j. The same forward serves add_relu (y = max(a + b, 0)), the join of a residual block.
 *
 * The work is cut into pieces of whole mask bytes, so no two threads ever write the same byte. On CPUs with
 * AVX-512 a piece goes 16 values at a time: one compare yields two mask bytes, and backward loads dy through
 * them. Elsewhere on x86-64, SSE2 compares pack 8 bits at a time (movemask), which the compiler cannot find
 * by itself; a plain loop covers the rest. NaN counts as not positive on every path. */
#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm_bf16.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RELU_AVX512 1
#include "backends/cpu/avx512_target.h"
#define RELU_AVX512_TARGET BPT_AVX512_TARGET
#else
#define RELU_AVX512 0
#endif

/* Values per piece of work: a multiple of 16, so that pieces own whole mask bytes. */
enum { PIECE = 8192 };

/* ---- plain and SSE2 loops: values [first, end), first a multiple of 8 ---- */

static void forward_plain(const float *a, const float *b, float *y, uint8_t *mask, int64_t first, int64_t end) {
  for (int64_t byte_start = first; byte_start < end; byte_start += 8) {
    unsigned bits = 0;
    for (int64_t i = byte_start; i < byte_start + 8 && i < end; i++) {
      const float value = b ? a[i] + b[i] : a[i];
      const bool positive = value > 0.0f;
      y[i] = positive ? value : 0.0f;
      bits |= (unsigned)positive << (i - byte_start);
    }
    mask[byte_start / 8] = (uint8_t)bits;
  }
}

static void backward_plain(const uint8_t *mask, const float *dy, float *dx, bool assign, int64_t first, int64_t end) {
  for (int64_t i = first; i < end; i++) {
    const float gradient = (mask[i / 8] >> (i % 8) & 1) ? dy[i] : 0.0f;
    dx[i] = assign ? gradient : dx[i] + gradient;
  }
}

static void forward_sse2(const float *a, const float *b, float *y, uint8_t *mask, int64_t first, int64_t end) {
  int64_t i = first;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps();
  for (; i + 8 <= end; i += 8) {
    __m128 low = _mm_loadu_ps(a + i), high = _mm_loadu_ps(a + i + 4);
    if (b) {
      low = _mm_add_ps(low, _mm_loadu_ps(b + i));
      high = _mm_add_ps(high, _mm_loadu_ps(b + i + 4));
    }
    const __m128 low_positive = _mm_cmpgt_ps(low, zero), high_positive = _mm_cmpgt_ps(high, zero);
    /* and with the compare mask rather than max: NaN becomes 0 exactly as in the plain loop. */
    _mm_storeu_ps(y + i, _mm_and_ps(low, low_positive));
    _mm_storeu_ps(y + i + 4, _mm_and_ps(high, high_positive));
    mask[i / 8] = (uint8_t)(_mm_movemask_ps(low_positive) | _mm_movemask_ps(high_positive) << 4);
  }
#endif
  forward_plain(a, b, y, mask, i, end);
}

static void backward_sse2(const uint8_t *mask, const float *dy, float *dx, bool assign, int64_t first, int64_t end) {
  int64_t i = first;
#if defined(__SSE2__)
  /* Spread a byte over lanes: lane j keeps bit j (low half) or bit j + 4 (high half). */
  const __m128i lane_bits = _mm_set_epi32(8, 4, 2, 1);
  for (; i + 8 <= end; i += 8) {
    const __m128i low_bits = _mm_and_si128(_mm_set1_epi32(mask[i / 8] & 15), lane_bits);
    const __m128i high_bits = _mm_and_si128(_mm_set1_epi32(mask[i / 8] >> 4), lane_bits);
    const __m128 low_keep = _mm_castsi128_ps(_mm_cmpeq_epi32(low_bits, lane_bits));
    const __m128 high_keep = _mm_castsi128_ps(_mm_cmpeq_epi32(high_bits, lane_bits));
    const __m128 low = _mm_and_ps(_mm_loadu_ps(dy + i), low_keep);
    const __m128 high = _mm_and_ps(_mm_loadu_ps(dy + i + 4), high_keep);
    _mm_storeu_ps(dx + i, assign ? low : _mm_add_ps(_mm_loadu_ps(dx + i), low));
    _mm_storeu_ps(dx + i + 4, assign ? high : _mm_add_ps(_mm_loadu_ps(dx + i + 4), high));
  }
#endif
  backward_plain(mask, dy, dx, assign, i, end);
}

/* ---- AVX-512 loops: values [first, end), first a multiple of 16 ---- */

#if RELU_AVX512
static inline __mmask16 lanes_before(int64_t i, int64_t end) {
  return end - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (end - i)) - 1u);
}

RELU_AVX512_TARGET static void forward_avx512(const float *a, const float *b, float *y, uint8_t *mask, int64_t first,
                                              int64_t end) {
  for (int64_t i = first; i < end; i += 16) {
    const __mmask16 lanes = lanes_before(i, end);
    __m512 value = _mm512_maskz_loadu_ps(lanes, a + i);
    if (b) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(lanes, b + i));
    const __mmask16 positive = _mm512_mask_cmp_ps_mask(lanes, value, _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_mask_storeu_ps(y + i, lanes, _mm512_maskz_mov_ps(positive, value));
    mask[i / 8] = (uint8_t)positive;
    if (end - i > 8) mask[i / 8 + 1] = (uint8_t)(positive >> 8);
  }
}

RELU_AVX512_TARGET static void backward_avx512(const uint8_t *mask, const float *dy, float *dx, bool assign,
                                               int64_t first, int64_t end) {
  for (int64_t i = first; i < end; i += 16) {
    const __mmask16 lanes = lanes_before(i, end);
    unsigned bits = mask[i / 8];
    if (end - i > 8) bits |= (unsigned)mask[i / 8 + 1] << 8;
    __m512 gradient = _mm512_maskz_loadu_ps(lanes & (__mmask16)bits, dy + i);
    if (!assign) gradient = _mm512_add_ps(gradient, _mm512_maskz_loadu_ps(lanes, dx + i));
    _mm512_mask_storeu_ps(dx + i, lanes, gradient);
  }
}
#else
/* Never chosen (bpt_cpu_vector_loops is portable off x86-64): the names only keep the drivers plain. */
static void forward_avx512(const float *a, const float *b, float *y, uint8_t *mask, int64_t first, int64_t end) {
  forward_sse2(a, b, y, mask, first, end);
}
static void backward_avx512(const uint8_t *mask, const float *dy, float *dx, bool assign, int64_t first, int64_t end) {
  backward_sse2(mask, dy, dx, assign, first, end);
}
#endif

/* y = max(a (+ b), 0) and its bits; b may be NULL. */
static void forward(bpt_backend *backend, int64_t count, const float *a, const float *b, float *y, uint8_t *mask) {
  const bool avx512 = bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512;
  const int64_t pieces = (count + PIECE - 1) / PIECE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t piece = 0; piece < pieces; piece++) {
    const int64_t first = piece * PIECE, end = first + PIECE < count ? first + PIECE : count;
    if (avx512)
      forward_avx512(a, b, y, mask, first, end);
    else
      forward_sse2(a, b, y, mask, first, end);
  }
}

/* dx (+)= dy where the mask bit is set (assign: dx = 0 elsewhere). */
static void backward(bpt_backend *backend, int64_t count, const uint8_t *mask, const float *dy, float *dx,
                     bool assign) {
  const bool avx512 = bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512;
  const int64_t pieces = (count + PIECE - 1) / PIECE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t piece = 0; piece < pieces; piece++) {
    const int64_t first = piece * PIECE, end = first + PIECE < count ? first + PIECE : count;
    if (avx512)
      backward_avx512(mask, dy, dx, assign, first, end);
    else
      backward_sse2(mask, dy, dx, assign, first, end);
  }
}

/* ---- bf16 storage (bf16_storage.h): any of x, y, dy, dx stored as bf16; values [first, end) ---- */

static void forward_storage(const bpt_kernel_tensor *x, const bpt_kernel_tensor *y, uint8_t *mask, int64_t first,
                            int64_t end) {
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(y);
  for (int64_t byte_start = first; byte_start < end; byte_start += 8) {
    unsigned bits = 0;
    for (int64_t i = byte_start; i < byte_start + 8 && i < end; i++) {
      const float value = bpt_storage_load(x->value, x16, i);
      const bool positive = value > 0.0f;
      bpt_storage_store(y->value, y16, i, positive ? value : 0.0f);
      bits |= (unsigned)positive << (i - byte_start);
    }
    if (mask) mask[byte_start / 8] = (uint8_t)bits;
  }
}

/* dx (+)= dy where x was positive: from the mask's bits, or (mask NULL) from x itself. */
static void backward_storage(const uint8_t *mask, const bpt_kernel_tensor *x, const bpt_kernel_tensor *y,
                             int64_t first, int64_t end) {
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(y), assign = x->beta == 0.0f;
  for (int64_t i = first; i < end; i++) {
    const bool positive = mask ? (mask[i / 8] >> (i % 8) & 1) : bpt_storage_load(x->value, x16, i) > 0.0f;
    const float gradient = positive ? bpt_storage_load(y->grad, y16, i) : 0.0f;
    bpt_storage_store(x->grad, x16, i, assign ? gradient : bpt_storage_load(x->grad, x16, i) + gradient);
  }
}

static bool relu_storage_bf16(const bpt_kernel_node *node) {
  return bpt_tensor_is_bf16(&node->inputs[0]) || bpt_tensor_is_bf16(&node->output);
}

/* ---- bf16 in and out, AVX-512 BW: 32 values at a time on the bit patterns; values [first, end), first a
 * multiple of 32; the scalar loops above finish the tail ---- */
#if RELU_AVX512 && !defined(BPT_AVX512_EMULATION)
#define RELU_BF16_VECTOR 1
#define RELU_BF16_TARGET __attribute__((target("avx512f,avx512bw")))

/* A bf16 value is positive exactly when its bits, as int16, lie in (0, 0x7f80]: negatives and -0 have the
 * sign bit, NaNs lie above +inf. So ReLU needs no widening, and y is x's bits or 0, as the scalar loop stores. */
RELU_BF16_TARGET static int64_t forward_bf16_vector(const uint16_t *x, uint16_t *y, uint8_t *mask, int64_t first,
                                                    int64_t end) {
  const __m512i zero = _mm512_setzero_si512(), infinity = _mm512_set1_epi16(0x7f80);
  int64_t i = first;
  for (; i + 32 <= end; i += 32) {
    const __m512i v = _mm512_loadu_si512((const void *)(x + i));
    const __mmask32 positive = _mm512_cmpgt_epi16_mask(v, zero) & _mm512_cmple_epi16_mask(v, infinity);
    _mm512_storeu_si512((void *)(y + i), _mm512_maskz_mov_epi16(positive, v));
    if (mask) { /* bit j of the compare is element i + j: four mask bytes, lowest first */
      const uint32_t bits = (uint32_t)positive;
      for (int b = 0; b < 4; b++) mask[i / 8 + b] = (uint8_t)(bits >> (8 * b));
    }
  }
  return i;
}

/* 16 bf16 values widened to f32 (exact). */
RELU_BF16_TARGET static inline __m512 widen16(const uint16_t *values) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)values)), 16));
}

/* 16 f32 to bf16 as bpt_bf16_narrow rounds: to nearest even, NaN kept and made quiet. */
RELU_BF16_TARGET static inline __m256i narrow16(__m512 values) {
  const __m512i bits = _mm512_castps_si512(values);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

/* dx (+)= dy where the mask is set, all bf16. Assigning copies dy's bits (NaNs made quiet, as narrowing their
 * widened value would); accumulating adds in f32 and rounds once, as the scalar loop does. */
RELU_BF16_TARGET static int64_t backward_bf16_vector(const uint8_t *mask, const uint16_t *dy, uint16_t *dx,
                                                     bool assign, int64_t first, int64_t end) {
  int64_t i = first;
  if (assign) {
    const __m512i magnitude = _mm512_set1_epi16(0x7fff), infinity = _mm512_set1_epi16(0x7f80);
    const __m512i quiet = _mm512_set1_epi16(0x0040);
    for (; i + 32 <= end; i += 32) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; b++) bits |= (uint32_t)mask[i / 8 + b] << (8 * b);
      const __m512i v = _mm512_loadu_si512((const void *)(dy + i));
      const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, magnitude), infinity);
      const __m512i kept = _mm512_mask_mov_epi16(v, nan, _mm512_or_si512(v, quiet));
      _mm512_storeu_si512((void *)(dx + i), _mm512_maskz_mov_epi16((__mmask32)bits, kept));
    }
    return i;
  }
  for (; i + 16 <= end; i += 16) {
    const __mmask16 bits = (__mmask16)(mask[i / 8] | (unsigned)mask[i / 8 + 1] << 8);
    const __m512 sum = _mm512_add_ps(widen16(dx + i), _mm512_maskz_mov_ps(bits, widen16(dy + i)));
    _mm256_storeu_si256((void *)(dx + i), narrow16(sum));
  }
  return i;
}
#else
#define RELU_BF16_VECTOR 0
#endif

/* Whether the 16-bit vector loops may run: bf16 x and y (value and gradient), AVX-512 BW on this CPU (every
 * AVX512_BF16 CPU has it) and the backend's loops not limited below AVX-512. */
static bool bf16_vector(bpt_backend *backend, const bpt_kernel_node *node) {
  return RELU_BF16_VECTOR && bpt_tensor_is_bf16(&node->inputs[0]) && bpt_tensor_is_bf16(&node->output) &&
         bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512 && bpt_cpu_has_avx512_bf16();
}

static void relu_forward_bf16(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->output.count, pieces = (count + PIECE - 1) / PIECE;
  const bool vector = bf16_vector(backend, node);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t piece = 0; piece < pieces; piece++) {
    int64_t first = piece * PIECE;
    const int64_t end = first + PIECE < count ? first + PIECE : count;
#if RELU_BF16_VECTOR
    if (vector)
      first = forward_bf16_vector((const uint16_t *)node->inputs[0].value, (uint16_t *)node->output.value, node->saved,
                                  first, end);
#else
    (void)vector;
#endif
    forward_storage(&node->inputs[0], &node->output, node->saved, first, end);
  }
}

static void relu_backward_bf16(bpt_backend *backend, const bpt_kernel_node *node) {
  const int64_t count = node->output.count, pieces = (count + PIECE - 1) / PIECE;
  const uint8_t *mask = node->int_attributes[BPT_RELU_USES_MASK] ? node->saved : NULL;
  const bool vector = mask && bf16_vector(backend, node);
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t piece = 0; piece < pieces; piece++) {
    int64_t first = piece * PIECE;
    const int64_t end = first + PIECE < count ? first + PIECE : count;
#if RELU_BF16_VECTOR
    if (vector)
      first = backward_bf16_vector(mask, (const uint16_t *)node->output.grad, (uint16_t *)node->inputs[0].grad,
                                   node->inputs[0].beta == 0.0f, first, end);
#else
    (void)vector;
#endif
    backward_storage(mask, &node->inputs[0], &node->output, first, end);
  }
}

/* relu: with a mask (BPT_RELU_USES_MASK and a saved buffer) backward reads only the bits; without, x. The
 * maskless loops are branch-free: a data-dependent branch per element mispredicts half the time on ReLU inputs. */
static bpt_status relu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  if (relu_storage_bf16(node)) {
    relu_forward_bf16(backend, node);
    return BPT_OK;
  }
  const int64_t count = node->output.count;
  const float *x = node->inputs[0].value;
  float *y = node->output.value;
  if (node->saved) {
    forward(backend, count, x, NULL, y, node->saved);
    return BPT_OK;
  }
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float value = x[i];
    y[i] = value > 0.0f ? value : 0.0f;
  }
  return BPT_OK;
}

static bpt_status relu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0], *y = &node->output;
  if (relu_storage_bf16(node)) {
    relu_backward_bf16(backend, node);
    return BPT_OK;
  }
  if (node->int_attributes[BPT_RELU_USES_MASK]) {
    backward(backend, y->count, node->saved, y->grad, x->grad, x->beta == 0.0f);
    return BPT_OK;
  }
  const int64_t count = y->count;
  const float *input = x->value, *dy = y->grad;
  float *dx = x->grad;
  /* The select loads dy unconditionally so it vectorises (a branch compiled to a scalar one that mispredicts on
   * every other value). */
#pragma omp parallel for simd if (parallel: count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t i = 0; i < count; i++) {
    float gradient = dy[i];
    dx[i] += input[i] > 0.0f ? gradient : 0.0f;
  }
  return BPT_OK;
}

static bool relu_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  return node->int_attributes[BPT_RELU_USES_MASK] || bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS_16BIT(cpu, RELU, relu_forward, relu_backward, relu_supports);

/* add_relu under 16-bit storage: a, b, y, dy and the input gradients each f32 or bf16, staged through f32 chunks
 * of BPT_STORAGE_STAGE values (a multiple of 16, so each chunk owns whole mask bytes) for the f32 loops; the
 * sum is rounded once, after the ReLU, as the rounding path rounds y. */
static bool add_relu_storage_bf16(const bpt_kernel_node *node) {
  return bpt_tensor_is_bf16(&node->inputs[0]) || bpt_tensor_is_bf16(&node->inputs[1]) ||
         bpt_tensor_is_bf16(&node->output);
}

static void add_relu_forward_bf16(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *a = &node->inputs[0], *b = &node->inputs[1], *y = &node->output;
  const bool a16 = bpt_tensor_is_bf16(a), b16 = bpt_tensor_is_bf16(b), y16 = bpt_tensor_is_bf16(y);
  const bool avx512 = bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512;
  uint8_t *mask = node->saved;
  const int64_t count = y->count, chunks = (count + BPT_STORAGE_STAGE - 1) / BPT_STORAGE_STAGE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    const int64_t at = chunk * BPT_STORAGE_STAGE, m = count - at < BPT_STORAGE_STAGE ? count - at : BPT_STORAGE_STAGE;
    float a_stage[BPT_STORAGE_STAGE], b_stage[BPT_STORAGE_STAGE], y_stage[BPT_STORAGE_STAGE];
    const float *as = bpt_storage_read_row(a->value, a16, at, m, a_stage);
    const float *bs = bpt_storage_read_row(b->value, b16, at, m, b_stage);
    float *ys = bpt_storage_write_row(y->value, y16, at, m, false, y_stage);
    if (avx512)
      forward_avx512(as, bs, ys, mask + at / 8, 0, m);
    else
      forward_sse2(as, bs, ys, mask + at / 8, 0, m);
    bpt_storage_commit_row(y->value, y16, at, m, ys);
  }
}

static void add_relu_backward_bf16(bpt_backend *backend, const bpt_kernel_node *node, const bpt_kernel_tensor *x) {
  const bpt_kernel_tensor *y = &node->output;
  const bool x16 = bpt_tensor_is_bf16(x), y16 = bpt_tensor_is_bf16(y), assign = x->beta == 0.0f;
  const bool avx512 = bpt_cpu_vector_loops(backend) == BPT_CPU_LOOPS_AVX512;
  const uint8_t *mask = node->saved;
  const int64_t count = y->count, chunks = (count + BPT_STORAGE_STAGE - 1) / BPT_STORAGE_STAGE;
#pragma omp parallel for if (count > BPT_CPU_PARALLEL_THRESHOLD)
  for (int64_t chunk = 0; chunk < chunks; chunk++) {
    const int64_t at = chunk * BPT_STORAGE_STAGE, m = count - at < BPT_STORAGE_STAGE ? count - at : BPT_STORAGE_STAGE;
    float dy_stage[BPT_STORAGE_STAGE], dx_stage[BPT_STORAGE_STAGE];
    const float *dys = bpt_storage_read_row(y->grad, y16, at, m, dy_stage);
    float *dxs = bpt_storage_write_row(x->grad, x16, at, m, !assign, dx_stage);
    if (avx512)
      backward_avx512(mask + at / 8, dys, dxs, assign, 0, m);
    else
      backward_sse2(mask + at / 8, dys, dxs, assign, 0, m);
    bpt_storage_commit_row(x->grad, x16, at, m, dxs);
  }
}

/* add_relu, the join of a residual block and its ReLU in one pass: y = max(a + b, 0) keeping the mask in saved;
 * backward passes dy through it to both inputs. */
static bpt_status add_relu_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *y = &node->output;
  if (add_relu_storage_bf16(node))
    add_relu_forward_bf16(backend, node);
  else
    forward(backend, y->count, node->inputs[0].value, node->inputs[1].value, y->value, node->saved);
  return BPT_OK;
}

static bpt_status add_relu_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *y = &node->output;
  const bool staged = add_relu_storage_bf16(node);
  for (int i = 0; i < 2; i++) {
    const bpt_kernel_tensor *input = &node->inputs[i];
    if (!input->grad) continue;
    if (staged)
      add_relu_backward_bf16(backend, node, input);
    else
      backward(backend, y->count, node->saved, y->grad, input->grad, input->beta == 0.0f);
  }
  return BPT_OK;
}

BPT_REGISTER_KERNELS_16BIT(cpu, ADD_RELU, add_relu_forward, add_relu_backward, NULL);
