/* The CPU's gated activations, y = x sigmoid(z(x)) (see src/core/ops/silu.c and gelu_tanh.c): SiLU with z = x,
 * and the tanh GELU, since 0.5 x (1 + tanh(u)) = x sigmoid(2u) with u = sqrt(2 / pi) (x + 0.044715 x^3). The
 * derivative is s + x s (1 - s) z'(x). libm's expf is a call per element that no loop vectorises without
 * -ffast-math, so exp here is Cephes' expf (Moshier) inlined into the loops, which are compiled three times
 * (baseline, AVX2, AVX-512F) and chosen by the CPU's loop level. All three compute the same expressions
 * without FMA contraction (ISO C mode), so they agree bit for bit. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/strided_rows.h"
#include "backends/cpu/unary_rows.h"

/* omp simd is a request, not a requirement: instrumented (sanitizer) builds may decline it, and clang
 * would turn that note into an error under -Werror. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GATED_WIDE 1
#include "backends/cpu/avx512_target.h"
#define GATED_AVX2_TARGET __attribute__((target("avx2")))
#else
#define GATED_WIDE 0
#endif

#define GATED_INLINE static inline __attribute__((always_inline))

GATED_INLINE float as_float(int32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}
GATED_INLINE int32_t as_bits(float value) {
  int32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}
/* where ? a : b on bit patterns, where is all ones or zero: a float comparison or a select between two float
 * results would be control flow to GCC under -ftrapping-math (its default), and the loop would not vectorise. */
GATED_INLINE float blend(int32_t where, float a, float b) {
  return as_float((as_bits(a) & where) | (as_bits(b) & ~where));
}

/* s = sigmoid(z) and 1 - s, each without cancellation: with e = exp(-|z|) in (0, 1], they are 1 / (1 + e) and
 * e / (1 + e), in one order or the other by the sign of z. exp is Cephes' expf (Moshier): Cody-Waite reduction
 * by ln 2 (in two parts, so r is exact), a degree-5 minimax polynomial for e^r, 2^n built in the exponent bits;
 * within 2 ulp of expf. Its argument -|z| is clamped at -87.3, where 2^n is still a normal float, by an integer
 * minimum on the bit patterns (more negative floats have larger patterns); a NaN's pattern is larger still, so
 * NaN becomes -87.3 and the integer conversion below is always defined, and y, which multiplies by x, stays
 * NaN. Below the clamp s is e^-87.3 = 1.2e-38 instead of smaller. */
GATED_INLINE void sigmoid_pair(float z, float *s, float *one_minus_s) {
  const int32_t z_bits = as_bits(z), floor_bits = as_bits(-87.3f);
  int32_t t_bits = z_bits | INT32_MIN; /* -|z| */
  t_bits = t_bits < floor_bits ? t_bits : floor_bits;
  const float t = as_float(t_bits);
  const float shifter = 12582912.0f; /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
  const float n = (t * 1.44269504088896341f + shifter) - shifter;
  const float r = (t - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float e = p * as_float(((int32_t)n + 127) << 23);
  const float large = 1.0f / (1.0f + e), small = e * large;
  const int32_t negative = -(int32_t)((uint32_t)z_bits >> 31); /* all ones where z < 0 */
  *s = blend(negative, small, large);
  *one_minus_s = blend(negative, large, small);
}

/* z = a x + b x^3, written x (a + b x^2), and z' = a + 3 b x^2; SiLU (cubic false) has z = x, z' = 1 (its b x^2
 * could overflow to inf, and 0 inf is NaN). */
typedef struct gate {
  float a, b;
  bool cubic;
} gate;

GATED_INLINE float gated_value(float v, float z) {
  float s, one_minus_s;
  sigmoid_pair(z, &s, &one_minus_s);
  return v * s;
}

GATED_INLINE float gated_gradient(float v, float z, float slope, float dy) {
  float s, one_minus_s;
  sigmoid_pair(z, &s, &one_minus_s);
  return dy * (s + v * s * one_minus_s * slope);
}

GATED_INLINE void forward_block(gate g, int64_t n, const float *x, float *y) {
  if (g.cubic) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      y[i] = gated_value(x[i], x[i] * (g.a + g.b * x[i] * x[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      y[i] = gated_value(x[i], x[i]);
  }
}

/* Four loops, so that neither the gate nor assign is a branch inside one. */
GATED_INLINE void backward_block(gate g, int64_t n, const float *x, const float *dy, bool assign, float *dx) {
  if (g.cubic && assign) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      dx[i] = gated_gradient(x[i], x[i] * (g.a + g.b * x[i] * x[i]), g.a + 3.0f * g.b * x[i] * x[i], dy[i]);
  } else if (g.cubic) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      dx[i] += gated_gradient(x[i], x[i] * (g.a + g.b * x[i] * x[i]), g.a + 3.0f * g.b * x[i] * x[i], dy[i]);
  } else if (assign) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      dx[i] = gated_gradient(x[i], x[i], 1.0f, dy[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
      dx[i] += gated_gradient(x[i], x[i], 1.0f, dy[i]);
  }
}

static void forward_portable(gate g, int64_t n, const float *x, float *y) { forward_block(g, n, x, y); }
static void backward_portable(gate g, int64_t n, const float *x, const float *dy, bool assign, float *dx) {
  backward_block(g, n, x, dy, assign, dx);
}
#if GATED_WIDE
GATED_AVX2_TARGET static void forward_avx2(gate g, int64_t n, const float *x, float *y) { forward_block(g, n, x, y); }
GATED_AVX2_TARGET static void backward_avx2(gate g, int64_t n, const float *x, const float *dy, bool assign,
                                            float *dx) {
  backward_block(g, n, x, dy, assign, dx);
}
BPT_AVX512_TARGET static void forward_avx512(gate g, int64_t n, const float *x, float *y) { forward_block(g, n, x, y); }
BPT_AVX512_TARGET static void backward_avx512(gate g, int64_t n, const float *x, const float *dy, bool assign,
                                              float *dx) {
  backward_block(g, n, x, dy, assign, dx);
}
#endif

static gate gate_of(const bpt_kernel_node *node) {
  /* sqrt(2 / pi) and 0.044715, doubled: sigmoid(2u). */
  if (node->op == BPT_OP_GELU_TANH) return (gate){1.5957691216057308f, 1.5957691216057308f * 0.044715f, true};
  return (gate){1.0f, 0.0f, false};
}

/* The gate and the loops of this CPU's level, for the chunk loops. */
typedef struct gated {
  gate g;
  void (*forward)(gate, int64_t, const float *, float *);
  void (*backward)(gate, int64_t, const float *, const float *, bool, float *);
} gated;

static gated gated_of(bpt_backend *backend, const bpt_kernel_node *node) {
  gated c = {gate_of(node), forward_portable, backward_portable};
#if GATED_WIDE
  const bpt_cpu_loops loops = bpt_cpu_vector_loops(backend);
  if (loops >= BPT_CPU_LOOPS_AVX512)
    c.forward = forward_avx512, c.backward = backward_avx512;
  else if (loops >= BPT_CPU_LOOPS_AVX2)
    c.forward = forward_avx2, c.backward = backward_avx2;
#else
  (void)backend;
#endif
  return c;
}

static void gated_chunk(const void *context, int64_t n, const float *x, float *y) {
  const gated *c = context;
  c->forward(c->g, n, x, y);
}

static void gated_gradient_chunk(const void *context, int64_t n, const float *x, const float *y, const float *dy,
                                 float beta, float *dx) {
  const gated *c = context;
  (void)y;
  c->backward(c->g, n, x, dy, beta == 0.0f, dx);
}

static bpt_status gated_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const gated c = gated_of(backend, node);
  bpt_cpu_unary_rows_forward(node, gated_chunk, &c);
  return BPT_OK;
}

static bpt_status gated_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const gated c = gated_of(backend, node);
  bpt_cpu_unary_rows_backward(node, true, false, gated_gradient_chunk, &c);
  return BPT_OK;
}

/* A strided x (a slice of a fused projection, as in SwiGLU) is read row by row in place; bf16-stored values
 * and gradients are staged through f32 chunks (bf16_storage.h). */
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, GELU_TANH, gated_forward, gated_backward, bpt_cpu_supports_rows_of_x);
BPT_REGISTER_KERNELS_STRIDED_16BIT(cpu, SILU, gated_forward, gated_backward, bpt_cpu_supports_rows_of_x);
