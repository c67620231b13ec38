/* The CUDA backend against the CPU backend (the reference): one table of cases runs every kernel forward
 * and backward on both with the same random inputs and compares with a tolerance that fits the precision.
 * Write-only outputs are poisoned with NaN on the device first, so an element the kernel never wrote fails
 * the comparison. Also: the device loss scaler's skip/back-off, the MLP's first training steps against the
 * CPU trajectory, and the clean BPT_ERR_DEVICE without a device. Without a device (or a CUDA build) the
 * device tests skip and the executable exits 77, which CTest reports as skipped.
 * BPT_TEST_PARITY_BACKEND names another backend to put under test (default "cuda"); "cpu" checks the
 * harness itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/context.h"
#include "test_support.h"

enum { MAX_BUFFERS = 12, MAX_CASES = 64 };

typedef enum role { IN, INOUT, OUT } role;

typedef struct buffer_spec {
  int64_t count;
  bpt_dtype dtype;
  role role;
  float low, high; /* range of the random fill; I32 takes integers in [low, high) */
} buffer_spec;

typedef struct parity_case parity_case;
typedef bpt_status (*parity_run)(bpt_backend *backend, bool cuda, void **buffers, const parity_case *c);

struct parity_case {
  char name[96];
  double tolerance;
  int buffer_count;
  buffer_spec buffers[MAX_BUFFERS];
  parity_run run;
  int64_t i[8];
  float f[4];
  bpt_conv2d_args conv;
  bpt_pool2d_args pool;
  bpt_batch_norm_args norm;
  int64_t inject_inf_at; /* > 0: buffer 0 gets an infinity at this index */
};

#define CALL(backend, member, ...) \
  ((backend)->vtable->member ? (backend)->vtable->member((backend), __VA_ARGS__) : BPT_ERR_UNSUPPORTED)
/* Op kernels are registered per op id now, so this test (to be replaced by test_backend_ops.c) calls each
 * backend's typed kernel functions; the CUDA ones are declared weak so that it links without the CUDA backend. */
bpt_status bpt_cuda_bias_add(bpt_backend *backend, int64_t rows, int64_t cols, const float *bias, float *y);
bpt_status bpt_cuda_bias_backward(bpt_backend *backend, int64_t rows, int64_t cols, const float *dy,
                                  float *bias_gradient);
bpt_status bpt_cuda_activation_forward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                       const float *x, float *y);
bpt_status bpt_cuda_activation_backward(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                        const float *x, const float *y, const float *dy, float *dx);
bpt_status bpt_cuda_softmax_cross_entropy_forward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                  const float *logits, const int32_t *labels, float *probabilities,
                                                  float *loss);
bpt_status bpt_cuda_softmax_cross_entropy_backward(bpt_backend *backend, int64_t batch, int64_t classes,
                                                   const float *probabilities, const int32_t *labels,
                                                   const float *loss_gradient, float *dlogits);
bpt_status bpt_cuda_mse_forward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                                float *loss);
bpt_status bpt_cuda_mse_backward(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                                 const float *loss_gradient, float *dprediction, float *dtarget);
bpt_status bpt_cuda_conv2d_forward(bpt_backend *backend, const bpt_conv2d_args *args, const float *x,
                                   const float *weight, const float *bias, float *y);
bpt_status bpt_cuda_conv2d_backward_data(bpt_backend *backend, const bpt_conv2d_args *args, const float *dy,
                                         const float *weight, float *dx);
bpt_status bpt_cuda_conv2d_backward_filter(bpt_backend *backend, const bpt_conv2d_args *args, const float *x,
                                           const float *dy, float *dweight, float *dbias);
bpt_status bpt_cuda_batch_norm_forward(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x,
                                       const float *gamma, const float *beta, float *running_mean,
                                       float *running_variance, float *y, float *saved_mean, float *saved_inverse_std);
bpt_status bpt_cuda_batch_norm_backward(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x,
                                        const float *dy, const float *gamma, const float *saved_mean,
                                        const float *saved_inverse_std, float *dx, float *dgamma, float *dbeta);
bpt_status bpt_cuda_pool2d_forward(bpt_backend *backend, const bpt_pool2d_args *args, const float *x, float *y,
                                   int32_t *argmax);
bpt_status bpt_cuda_pool2d_backward(bpt_backend *backend, const bpt_pool2d_args *args, const float *dy,
                                    const int32_t *argmax, float *dx);
#pragma weak bpt_cuda_bias_add
#pragma weak bpt_cuda_bias_backward
#pragma weak bpt_cuda_activation_forward
#pragma weak bpt_cuda_activation_backward
#pragma weak bpt_cuda_softmax_cross_entropy_forward
#pragma weak bpt_cuda_softmax_cross_entropy_backward
#pragma weak bpt_cuda_mse_forward
#pragma weak bpt_cuda_mse_backward
#pragma weak bpt_cuda_conv2d_forward
#pragma weak bpt_cuda_conv2d_backward_data
#pragma weak bpt_cuda_conv2d_backward_filter
#pragma weak bpt_cuda_batch_norm_forward
#pragma weak bpt_cuda_batch_norm_backward
#pragma weak bpt_cuda_pool2d_forward
#pragma weak bpt_cuda_pool2d_backward
#define OP_CALL(backend, member, ...)                                                                                  \
  (strcmp((backend)->vtable->name, "cpu") == 0                         ? bpt_cpu_##member((backend), __VA_ARGS__)      \
   : strcmp((backend)->vtable->name, "cuda") == 0 && bpt_cuda_##member ? bpt_cuda_##member((backend), __VA_ARGS__)     \
                                                                       : BPT_ERR_UNSUPPORTED)
#define TRY(expression)                    \
  do {                                     \
    bpt_status try_status_ = (expression); \
    if (try_status_ != BPT_OK) return try_status_; \
  } while (0)

static bool device_missing_reported;
static char device_missing_reason[512];

static const char *backend_under_test(void) {
  const char *name = getenv("BPT_TEST_PARITY_BACKEND");
  return name && name[0] ? name : "cuda";
}

/* A context on the backend under test, or NULL with the reason kept for the skip message. */
static bpt_context *cuda_context(uint64_t seed) {
  if (!bpt_backend_registry_find(backend_under_test())) {
    snprintf(device_missing_reason, sizeof device_missing_reason, "libbptrain was built without %s",
             backend_under_test());
    return NULL;
  }
  bpt_context_options options = bpt_context_options_default();
  options.backend = backend_under_test();
  options.seed = seed;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    snprintf(device_missing_reason, sizeof device_missing_reason, "%s", bpt_context_last_error(NULL));
    return NULL;
  }
  return context;
}

#define CUDA_OR_SKIP(context, seed)                                                        \
  bpt_context *context = cuda_context(seed);                                               \
  if (!context) {                                                                          \
    if (!device_missing_reported) print_message("skipping CUDA tests: %s\n", device_missing_reason); \
    device_missing_reported = true;                                                        \
    skip();                                                                                \
  }

/* ---- host-side number formats for building 16-bit inputs ---- */

static uint16_t bf16_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(bits >> 16);
}

/* IEEE half, round to nearest even (compilers' _Float16 is not available on every target we build on). */
static uint16_t f16_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u; /* 65520 and up round to infinity */
  if (magnitude < 0x38800000u) {                      /* below 2^-14: a subnormal, in units of 2^-24 */
    float scaled;
    memcpy(&scaled, &magnitude, sizeof scaled);
    return sign | (uint16_t)nearbyintf(scaled * 16777216.0f);
  }
  magnitude += 0x0fffu + ((magnitude >> 13) & 1u); /* round the 13 dropped bits to nearest even */
  return sign | (uint16_t)((magnitude - (112u << 23)) >> 13);
}

static size_t dtype_bytes(bpt_dtype dtype) {
  switch (dtype) {
  case BPT_DTYPE_F16:
  case BPT_DTYPE_BF16: return 2;
  case BPT_DTYPE_FP8_E4M3:
  case BPT_DTYPE_FP8_E5M2:
  case BPT_DTYPE_U8: return 1;
  default: return 4;
  }
}

static void fill_host(test_random *random, const buffer_spec *spec, void *host) {
  for (int64_t i = 0; i < spec->count; i++) {
    float value = test_random_uniform(random, spec->low, spec->high);
    if (spec->low == spec->high) value = spec->low;
    switch (spec->dtype) {
    case BPT_DTYPE_I32: ((int32_t *)host)[i] = (int32_t)floorf(value < spec->high ? value : spec->low); break;
    case BPT_DTYPE_BF16: ((uint16_t *)host)[i] = bf16_bits(value); break;
    case BPT_DTYPE_F16: ((uint16_t *)host)[i] = f16_bits(value); break;
    case BPT_DTYPE_FP8_E4M3:
    case BPT_DTYPE_FP8_E5M2:
    case BPT_DTYPE_U8: ((uint8_t *)host)[i] = (uint8_t)(value * 255.0f); break;
    default: ((float *)host)[i] = value; break;
    }
  }
}

/* ---- the runs: each calls the same members on either backend ---- */

static bpt_status run_gemm(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  bpt_gemm_args args = {.transpose_a = c->i[0], .transpose_b = c->i[1], .m = c->i[2], .n = c->i[3], .k = c->i[4],
                        .alpha = c->f[0], .a = p[0], .lda = c->i[5], .b = p[1], .ldb = c->i[6], .beta = c->f[1],
                        .c = p[2], .ldc = c->i[7]};
  bpt_dtype operand = (bpt_dtype)(int)c->f[2];
  bool only_b = c->f[3] != 0.0f; /* an f32 A with a narrow B, as a weight gradient from a compressed input */
  if (!cuda || operand == BPT_DTYPE_F32) return CALL(b, gemm, &args);
  /* Mixed precision: the CPU multiplies the f32 values, the device their narrow roundings. */
  int64_t a_count = c->buffers[0].count, b_count = c->buffers[1].count;
  void *a16 = NULL, *b16 = NULL;
  TRY(b->vtable->alloc(b, (size_t)a_count * 2, &a16));
  TRY(b->vtable->alloc(b, (size_t)b_count * 2, &b16));
  bpt_status status = only_b ? BPT_OK : CALL(b, cast, a_count, BPT_DTYPE_F32, p[0], operand, a16, 1.0f);
  if (status == BPT_OK) status = CALL(b, cast, b_count, BPT_DTYPE_F32, p[1], operand, b16, 1.0f);
  if (!only_b) {
    args.a = a16;
    args.a_dtype = operand;
  }
  args.b = b16;
  args.b_dtype = operand;
  if (status == BPT_OK) status = CALL(b, gemm, &args);
  if (status == BPT_OK && b->vtable->synchronize) status = b->vtable->synchronize(b);
  b->vtable->free(b, a16);
  b->vtable->free(b, b16);
  return status;
}

static bpt_status run_bias(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  TRY(OP_CALL(b, bias_add, c->i[0], c->i[1], p[1], p[0]));
  return OP_CALL(b, bias_backward, c->i[0], c->i[1], p[2], p[3]);
}

static bpt_status run_activation(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  bpt_activation kind = (bpt_activation)c->i[0];
  TRY(OP_CALL(b, activation_forward, kind, c->f[0], c->buffers[0].count, p[0], p[1]));
  return OP_CALL(b, activation_backward, kind, c->f[0], c->buffers[0].count, p[0], p[1], p[2], p[3]);
}

static bpt_status run_add_scaled(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  return CALL(b, add_scaled, c->buffers[0].count, c->f[0], p[0], p[1]);
}

static bpt_status run_softmax_cross_entropy(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  TRY(OP_CALL(b, softmax_cross_entropy_forward, c->i[0], c->i[1], p[0], p[1], p[2], p[3]));
  return OP_CALL(b, softmax_cross_entropy_backward, c->i[0], c->i[1], p[2], p[1], p[4], p[5]);
}

static bpt_status run_mse(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  int64_t count = c->buffers[0].count;
  TRY(OP_CALL(b, mse_forward, count, p[0], p[1], p[2]));
  return OP_CALL(b, mse_backward, count, p[0], p[1], p[3], p[4], p[5]);
}

static bpt_status run_update(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  bpt_update_args args = {.count = c->buffers[0].count, .parameters = p[0], .gradients = p[1], .state0 = p[2],
                          .state1 = p[3], .learning_rate = 0.01f, .weight_decay = c->f[0], .momentum = c->f[1],
                          .nesterov = c->i[1], .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f,
                          .decoupled_weight_decay = c->i[2], .step = 3};
  /* Three steps, so state carried between steps is compared too. */
  for (int step = 1; step <= 3; step++) {
    args.step = step;
    TRY(c->i[0] ? CALL(b, adam_update, &args) : CALL(b, sgd_update, &args));
  }
  return BPT_OK;
}

static bpt_status run_conv2d(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  TRY(OP_CALL(b, conv2d_forward, &c->conv, p[0], p[1], p[2], p[3]));
  TRY(OP_CALL(b, conv2d_backward_data, &c->conv, p[4], p[1], p[5]));
  return OP_CALL(b, conv2d_backward_filter, &c->conv, p[0], p[4], p[6], p[7]);
}

static bpt_status run_batch_norm(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  TRY(OP_CALL(b, batch_norm_forward, &c->norm, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]));
  if (!c->norm.training) return BPT_OK;
  return OP_CALL(b, batch_norm_backward, &c->norm, p[0], p[8], p[1], p[6], p[7], p[9], p[10], p[11]);
}

static bpt_status run_pool2d(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  int32_t *argmax = c->pool.kind == BPT_POOL_MAX ? p[2] : NULL;
  TRY(OP_CALL(b, pool2d_forward, &c->pool, p[0], p[1], argmax));
  return OP_CALL(b, pool2d_backward, &c->pool, p[3], argmax, p[4]);
}

static bpt_status run_cast(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  return CALL(b, cast, c->buffers[0].count, c->buffers[0].dtype, p[0], c->buffers[1].dtype, p[1], c->f[0]);
}

static bpt_status run_unscale(bpt_backend *b, bool cuda, void **p, const parity_case *c) {
  (void)cuda;
  return CALL(b, unscale_check_finite, c->buffers[0].count, p[0], c->f[0], p[1]);
}

/* ---- the table ---- */

static parity_case *add_case(parity_case *cases, int *count, const char *name, parity_run run, double tolerance) {
  assert_true(*count < MAX_CASES);
  parity_case *c = &cases[(*count)++];
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  c->run = run;
  c->tolerance = tolerance;
  return c;
}

static void add_buffer(parity_case *c, int64_t count, bpt_dtype dtype, role role, float low, float high) {
  c->buffers[c->buffer_count++] = (buffer_spec){count, dtype, role, low, high};
}

static int build_cases(parity_case *cases) {
  int n = 0;
  char name[96];
  const int64_t shapes[][3] = {{64, 33, 128}, {128, 784, 10}, {31, 257, 65}};
  const bpt_dtype operands[] = {BPT_DTYPE_F32, BPT_DTYPE_BF16, BPT_DTYPE_F16};
  for (int d = 0; d < 3; d++)
    for (int s = 0; s < 3; s++)
      for (int t = 0; t < 4; t++) {
        int64_t ta = t & 1, tb = t >> 1, m = shapes[s][0], nn = shapes[s][1], k = shapes[s][2];
        snprintf(name, sizeof name, "gemm %s %lldx%lldx%lld ta=%lld tb=%lld", bpt_dtype_name(operands[d]),
                 (long long)m, (long long)nn, (long long)k, (long long)ta, (long long)tb);
        if (d > 0 && t != 0 && s != 1) continue; /* 16-bit: every transpose on one shape, plain on the others */
        parity_case *c = add_case(cases, &n, name, run_gemm, d == 0 ? 1e-5 : 1e-2);
        int64_t lda = (ta ? m : k) + (d ? 0 : 3), ldb = (tb ? k : nn) + (d ? 0 : 2), ldc = nn + 1;
        c->i[0] = ta, c->i[1] = tb, c->i[2] = m, c->i[3] = nn, c->i[4] = k, c->i[5] = lda, c->i[6] = ldb, c->i[7] = ldc;
        c->f[0] = 0.75f, c->f[1] = s % 2 ? 1.0f : 0.0f, c->f[2] = (float)operands[d];
        add_buffer(c, (ta ? k : m) * lda, BPT_DTYPE_F32, IN, -1, 1);
        add_buffer(c, (tb ? nn : k) * ldb, BPT_DTYPE_F32, IN, -1, 1);
        add_buffer(c, m * ldc, BPT_DTYPE_F32, INOUT, -1, 1);
      }
  /* f32 A with a narrow B (cuBLAS takes one operand type, so the backend widens B): FP8 E4M3 keeps 3 mantissa
   * bits, so its products land a few percent from the f32 ones. */
  const struct { bpt_dtype dtype; double tolerance; } mixed[] = {{BPT_DTYPE_BF16, 1e-2}, {BPT_DTYPE_FP8_E4M3, 5e-2}};
  for (int v = 0; v < 2; v++) {
    snprintf(name, sizeof name, "gemm f32 x %s 10x784x128 ta=1 tb=0", bpt_dtype_name(mixed[v].dtype));
    parity_case *c = add_case(cases, &n, name, run_gemm, mixed[v].tolerance);
    c->i[0] = 1, c->i[1] = 0, c->i[2] = 10, c->i[3] = 784, c->i[4] = 128, c->i[5] = 10, c->i[6] = 784, c->i[7] = 784;
    c->f[0] = 1.0f, c->f[1] = 1.0f, c->f[2] = (float)mixed[v].dtype, c->f[3] = 1.0f;
    add_buffer(c, 128 * 10, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, 128 * 784, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, 10 * 784, BPT_DTYPE_F32, INOUT, -1, 1);
  }
  parity_case *c = add_case(cases, &n, "bias add and backward", run_bias, 1e-5);
  c->i[0] = 300, c->i[1] = 70;
  add_buffer(c, 300 * 70, BPT_DTYPE_F32, INOUT, -1, 1);
  add_buffer(c, 70, BPT_DTYPE_F32, IN, -1, 1);
  add_buffer(c, 300 * 70, BPT_DTYPE_F32, IN, -1, 1);
  add_buffer(c, 70, BPT_DTYPE_F32, INOUT, -1, 1);
  const char *activations[] = {"relu", "leaky_relu", "sigmoid", "tanh"};
  for (int kind = 0; kind < 4; kind++) {
    snprintf(name, sizeof name, "activation %s", activations[kind]);
    c = add_case(cases, &n, name, run_activation, 1e-5);
    c->i[0] = kind, c->f[0] = 0.1f;
    for (int b = 0; b < 4; b++) add_buffer(c, 10007, BPT_DTYPE_F32, b == 1 ? OUT : b == 3 ? INOUT : IN, -3, 3);
  }
  c = add_case(cases, &n, "add_scaled", run_add_scaled, 1e-6);
  c->f[0] = -0.5f;
  add_buffer(c, 70001, BPT_DTYPE_F32, IN, -1, 1);
  add_buffer(c, 70001, BPT_DTYPE_F32, INOUT, -1, 1);
  const int64_t softmax_shapes[][2] = {{128, 10}, {33, 1000}};
  for (int s = 0; s < 2; s++) {
    int64_t batch = softmax_shapes[s][0], classes = softmax_shapes[s][1];
    snprintf(name, sizeof name, "softmax_cross_entropy %lldx%lld", (long long)batch, (long long)classes);
    c = add_case(cases, &n, name, run_softmax_cross_entropy, 1e-5);
    c->i[0] = batch, c->i[1] = classes;
    add_buffer(c, batch * classes, BPT_DTYPE_F32, IN, -8, 8);
    add_buffer(c, batch, BPT_DTYPE_I32, IN, 0, (float)classes);
    add_buffer(c, batch * classes, BPT_DTYPE_F32, OUT, 0, 0);
    add_buffer(c, 1, BPT_DTYPE_F32, OUT, 0, 0);
    add_buffer(c, 1, BPT_DTYPE_F32, IN, 0.5f, 2);
    add_buffer(c, batch * classes, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  }
  c = add_case(cases, &n, "mse", run_mse, 1e-5);
  add_buffer(c, 50000, BPT_DTYPE_F32, IN, -2, 2);
  add_buffer(c, 50000, BPT_DTYPE_F32, IN, -2, 2);
  add_buffer(c, 1, BPT_DTYPE_F32, OUT, 0, 0);
  add_buffer(c, 1, BPT_DTYPE_F32, IN, 0.5f, 2);
  add_buffer(c, 50000, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  add_buffer(c, 50000, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  const char *updates[] = {"sgd", "sgd momentum", "sgd nesterov", "adam (L2)", "adamw"};
  for (int u = 0; u < 5; u++) {
    snprintf(name, sizeof name, "update %s", updates[u]);
    c = add_case(cases, &n, name, run_update, 1e-5);
    c->i[0] = u >= 3, c->i[1] = u == 2, c->i[2] = u == 4;
    c->f[0] = 0.01f, c->f[1] = u == 0 ? 0.0f : 0.9f;
    add_buffer(c, 100003, BPT_DTYPE_F32, INOUT, -1, 1);
    add_buffer(c, 100003, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, 100003, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
    add_buffer(c, 100003, BPT_DTYPE_F32, INOUT, 0.001f, 0.1f);
  }
  /* batch, in_c, h, w, out_c, kernel, stride, padding, dilation, groups */
  const int64_t convolutions[][10] = {
      {2, 4, 9, 7, 8, 3, 1, 1, 1, 1}, {3, 3, 16, 16, 16, 3, 2, 1, 1, 1}, {2, 6, 11, 11, 4, 3, 1, 0, 2, 2},
      {4, 16, 8, 8, 32, 1, 1, 0, 1, 1}};
  for (int v = 0; v < 4; v++) {
    const int64_t *q = convolutions[v];
    bpt_conv2d_args a = {.batch = q[0], .in_channels = q[1], .in_height = q[2], .in_width = q[3],
                         .out_channels = q[4], .kernel_height = q[5], .kernel_width = q[5], .stride_height = q[6],
                         .stride_width = q[6], .padding_height = q[7], .padding_width = q[7],
                         .dilation_height = q[8], .dilation_width = q[8], .groups = q[9]};
    a.out_height = (a.in_height + 2 * a.padding_height - a.dilation_height * (a.kernel_height - 1) - 1) / a.stride_height + 1;
    a.out_width = (a.in_width + 2 * a.padding_width - a.dilation_width * (a.kernel_width - 1) - 1) / a.stride_width + 1;
    snprintf(name, sizeof name, "conv2d %lldx%lldx%lldx%lld -> %lld k%lld s%lld p%lld d%lld g%lld", (long long)q[0],
             (long long)q[1], (long long)q[2], (long long)q[3], (long long)q[4], (long long)q[5], (long long)q[6],
             (long long)q[7], (long long)q[8], (long long)q[9]);
    c = add_case(cases, &n, name, run_conv2d, 1e-5);
    c->conv = a;
    int64_t x = a.batch * a.in_channels * a.in_height * a.in_width;
    int64_t w = a.out_channels * (a.in_channels / a.groups) * a.kernel_height * a.kernel_width;
    int64_t y = a.batch * a.out_channels * a.out_height * a.out_width;
    add_buffer(c, x, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, w, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, a.out_channels, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, y, BPT_DTYPE_F32, OUT, 0, 0);
    add_buffer(c, y, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, x, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
    add_buffer(c, w, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
    add_buffer(c, a.out_channels, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  }
  for (int training = 1; training >= 0; training--) {
    c = add_case(cases, &n, training ? "batch_norm training forward and backward" : "batch_norm evaluation",
                 run_batch_norm, 1e-4);
    c->norm = (bpt_batch_norm_args){.batch = 8, .channels = 12, .spatial = 49, .epsilon = 1e-5f, .momentum = 0.1f,
                                    .training = training};
    int64_t count = 8 * 12 * 49;
    add_buffer(c, count, BPT_DTYPE_F32, IN, -2, 3);
    add_buffer(c, 12, BPT_DTYPE_F32, IN, 0.5f, 1.5f);
    add_buffer(c, 12, BPT_DTYPE_F32, IN, -0.5f, 0.5f);
    add_buffer(c, 12, BPT_DTYPE_F32, INOUT, -0.5f, 0.5f);
    add_buffer(c, 12, BPT_DTYPE_F32, INOUT, 0.5f, 2.0f);
    add_buffer(c, count, BPT_DTYPE_F32, OUT, 0, 0);
    add_buffer(c, 12, BPT_DTYPE_F32, training ? OUT : IN, 0, 0);
    add_buffer(c, 12, BPT_DTYPE_F32, training ? OUT : IN, 0, 0);
    add_buffer(c, count, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, count, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
    add_buffer(c, 12, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
    add_buffer(c, 12, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  }
  /* kind, kernel, stride, padding */
  const int64_t pools[][4] = {{BPT_POOL_MAX, 2, 2, 0}, {BPT_POOL_MAX, 3, 1, 1}, {BPT_POOL_AVERAGE, 3, 2, 1},
                              {BPT_POOL_AVERAGE, 2, 2, 0}};
  for (int v = 0; v < 4; v++) {
    bpt_pool2d_args a = {.kind = (bpt_pool_kind)pools[v][0], .batch = 3, .channels = 5, .in_height = 12, .in_width = 9,
                         .kernel_height = pools[v][1], .kernel_width = pools[v][1], .stride_height = pools[v][2],
                         .stride_width = pools[v][2], .padding_height = pools[v][3], .padding_width = pools[v][3]};
    a.out_height = (a.in_height + 2 * a.padding_height - a.kernel_height) / a.stride_height + 1;
    a.out_width = (a.in_width + 2 * a.padding_width - a.kernel_width) / a.stride_width + 1;
    snprintf(name, sizeof name, "pool2d %s k%lld s%lld p%lld", a.kind == BPT_POOL_MAX ? "max" : "average",
             (long long)pools[v][1], (long long)pools[v][2], (long long)pools[v][3]);
    c = add_case(cases, &n, name, run_pool2d, 1e-5);
    c->pool = a;
    int64_t x = 3 * 5 * 12 * 9, y = 3 * 5 * a.out_height * a.out_width;
    add_buffer(c, x, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, y, BPT_DTYPE_F32, OUT, 0, 0);
    add_buffer(c, y, BPT_DTYPE_I32, a.kind == BPT_POOL_MAX ? OUT : IN, 0, 1);
    add_buffer(c, y, BPT_DTYPE_F32, IN, -1, 1);
    add_buffer(c, x, BPT_DTYPE_F32, INOUT, -0.1f, 0.1f);
  }
  /* source, destination, scale, range: FP8 ranges go past the format's maximum to check saturation. */
  const struct { bpt_dtype from, to; float scale, range; } casts[] = {
      {BPT_DTYPE_F32, BPT_DTYPE_BF16, 1.0f, 100.0f},     {BPT_DTYPE_F32, BPT_DTYPE_F16, 4.0f, 100.0f},
      {BPT_DTYPE_F32, BPT_DTYPE_FP8_E4M3, 2.0f, 400.0f}, {BPT_DTYPE_F32, BPT_DTYPE_FP8_E5M2, 8.0f, 10000.0f},
      {BPT_DTYPE_BF16, BPT_DTYPE_F32, 0.5f, 100.0f},     {BPT_DTYPE_F16, BPT_DTYPE_F32, 1.0f, 100.0f}};
  for (size_t v = 0; v < sizeof casts / sizeof casts[0]; v++) {
    snprintf(name, sizeof name, "cast %s -> %s scale %g", bpt_dtype_name(casts[v].from), bpt_dtype_name(casts[v].to),
             (double)casts[v].scale);
    c = add_case(cases, &n, name, run_cast, 0.0);
    c->f[0] = casts[v].scale;
    add_buffer(c, 40009, casts[v].from, IN, -casts[v].range, casts[v].range);
    add_buffer(c, 40009, casts[v].to, OUT, 0, 0);
  }
  for (int inject = 0; inject < 2; inject++) {
    c = add_case(cases, &n, inject ? "unscale_check_finite with an infinity" : "unscale_check_finite, all finite",
                 run_unscale, 1e-6);
    c->f[0] = 1.0f / 1024.0f;
    c->inject_inf_at = inject ? 77777 : 0;
    add_buffer(c, 100003, BPT_DTYPE_F32, INOUT, -1000, 1000);
    add_buffer(c, 1, BPT_DTYPE_I32, INOUT, 0, 0);
  }
  return n;
}

/* ---- the driver ---- */

typedef struct side {
  bpt_backend *backend;
  void *device[MAX_BUFFERS];
  void *result[MAX_BUFFERS];
} side;

/* Runs one case on a backend; returns BPT_ERR_UNSUPPORTED when the backend lacks a member. */
static bpt_status run_side(side *s, bool cuda, const parity_case *c, void *const *host) {
  bpt_backend *b = s->backend;
  for (int i = 0; i < c->buffer_count; i++) {
    size_t bytes = (size_t)c->buffers[i].count * dtype_bytes(c->buffers[i].dtype);
    assert_int_equal(b->vtable->alloc(b, bytes, &s->device[i]), BPT_OK);
    if (c->buffers[i].role == OUT && cuda) {
      void *poison = malloc(bytes);
      memset(poison, 0xff, bytes); /* NaN in every float format, -1 as an index */
      assert_int_equal(b->vtable->upload(b, s->device[i], poison, bytes), BPT_OK);
      free(poison);
    } else {
      assert_int_equal(b->vtable->upload(b, s->device[i], host[i], bytes), BPT_OK);
    }
  }
  bpt_status status = c->run(b, cuda, s->device, c);
  if (status == BPT_OK && b->vtable->synchronize) status = b->vtable->synchronize(b);
  for (int i = 0; i < c->buffer_count; i++) {
    size_t bytes = (size_t)c->buffers[i].count * dtype_bytes(c->buffers[i].dtype);
    s->result[i] = calloc(1, bytes);
    if (status == BPT_OK) assert_int_equal(b->vtable->download(b, s->result[i], s->device[i], bytes), BPT_OK);
    b->vtable->free(b, s->device[i]);
  }
  return status;
}

static void compare(const parity_case *c, int index, const void *expected, const void *actual) {
  const buffer_spec *spec = &c->buffers[index];
  if (spec->dtype == BPT_DTYPE_F32) {
    const float *e = expected, *a = actual;
    /* Non-finite values must match exactly (an unwritten, NaN-poisoned element fails here); the finite
     * ones are compared as a whole with the case's tolerance. */
    float *finite_a = malloc((size_t)spec->count * sizeof(float)), *finite_e = malloc((size_t)spec->count * sizeof(float));
    int64_t finite = 0;
    for (int64_t i = 0; i < spec->count; i++) {
      if (isfinite(a[i]) && isfinite(e[i])) {
        finite_a[finite] = a[i];
        finite_e[finite++] = e[i];
      } else if (!(isnan(a[i]) && isnan(e[i])) && a[i] != e[i]) {
        fail_msg("%s: buffer %d element %lld is %g on cuda, %g on cpu (unwritten?)", c->name, index, (long long)i,
                 (double)a[i], (double)e[i]);
      }
    }
    double error = test_relative_error(finite_a, finite_e, finite);
    free(finite_a);
    free(finite_e);
    if (!(error <= c->tolerance))
      fail_msg("%s: buffer %d relative error %g > %g", c->name, index, error, c->tolerance);
    return;
  }
  /* Integers and narrow formats must match bit for bit (round to nearest even has one answer). */
  size_t width = dtype_bytes(spec->dtype);
  for (int64_t i = 0; i < spec->count; i++)
    if (memcmp((const char *)expected + i * width, (const char *)actual + i * width, width) != 0) {
      uint32_t e = 0, a = 0;
      memcpy(&e, (const char *)expected + i * width, width);
      memcpy(&a, (const char *)actual + i * width, width);
      fail_msg("%s: buffer %d element %lld is 0x%x on cuda, 0x%x on cpu", c->name, index, (long long)i, a, e);
    }
}

static void every_kernel_matches_the_cpu(void **state) {
  (void)state;
  CUDA_OR_SKIP(gpu, 5);
  bpt_context *cpu = test_context(5);
  static parity_case cases[MAX_CASES];
  int count = build_cases(cases), compared = 0, without_reference = 0;
  test_random random;
  test_random_seed(&random, 2026);
  for (int k = 0; k < count; k++) {
    const parity_case *c = &cases[k];
    void *host[MAX_BUFFERS];
    for (int i = 0; i < c->buffer_count; i++) {
      host[i] = malloc((size_t)c->buffers[i].count * dtype_bytes(c->buffers[i].dtype));
      fill_host(&random, &c->buffers[i], host[i]);
    }
    if (c->inject_inf_at > 0) ((float *)host[0])[c->inject_inf_at] = INFINITY;
    side reference = {.backend = &cpu->backend}, device = {.backend = &gpu->backend};
    bpt_status cpu_status = run_side(&reference, false, c, host);
    bpt_status gpu_status = run_side(&device, true, c, host);
    if (gpu_status == BPT_ERR_UNSUPPORTED && strcmp(backend_under_test(), "cpu") == 0) cpu_status = gpu_status;
    else if (gpu_status != BPT_OK)
      fail_msg("%s: cuda returned %s: %s", c->name, bpt_status_string(gpu_status), gpu->backend.error_message);
    if (cpu_status == BPT_ERR_UNSUPPORTED) {
      print_message("%s: no CPU kernel to compare with yet\n", c->name);
      without_reference++;
    } else {
      assert_int_equal(cpu_status, BPT_OK);
      for (int i = 0; i < c->buffer_count; i++)
        if (c->buffers[i].role != IN) compare(c, i, reference.result[i], device.result[i]);
      compared++;
    }
    for (int i = 0; i < c->buffer_count; i++) {
      free(host[i]);
      free(reference.result[i]);
      free(device.result[i]);
    }
  }
  print_message("%d of %d CUDA kernel cases compared with the CPU (%d without a CPU kernel)\n", compared, count,
                without_reference);
  assert_true(compared > 0);
  bpt_context_destroy(cpu);
  bpt_context_destroy(gpu);
}

/* Uploads of every path (direct, overlapped on the copy stream, several staging chunks) come back bit for
 * bit, also when the host buffer is reused at once and uploads queue up behind each other. */
static void memory_round_trips_exactly(void **state) {
  (void)state;
  CUDA_OR_SKIP(gpu, 4);
  bpt_backend *b = &gpu->backend;
  const size_t sizes[] = {4, 4000, 300000, (20u << 20) + 12};
  test_random random;
  test_random_seed(&random, 4);
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    size_t bytes = sizes[s], count = bytes / sizeof(float);
    float *host = malloc(bytes), *first = malloc(bytes), *back = malloc(bytes);
    void *one, *two, *three;
    assert_int_equal(b->vtable->alloc(b, bytes, &one), BPT_OK);
    assert_int_equal(b->vtable->alloc(b, bytes, &two), BPT_OK);
    assert_int_equal(b->vtable->alloc(b, bytes, &three), BPT_OK);
    test_random_fill(&random, host, (int64_t)count, -1, 1);
    memcpy(first, host, bytes);
    assert_int_equal(b->vtable->upload(b, one, host, bytes), BPT_OK);
    test_random_fill(&random, host, (int64_t)count, -1, 1); /* reused at once: the upload must have copied */
    assert_int_equal(b->vtable->upload(b, two, host, bytes), BPT_OK);
    assert_int_equal(b->vtable->copy(b, three, one, bytes), BPT_OK);
    assert_int_equal(b->vtable->download(b, back, three, bytes), BPT_OK);
    assert_memory_equal(back, first, bytes);
    assert_int_equal(b->vtable->download(b, back, two, bytes), BPT_OK);
    assert_memory_equal(back, host, bytes);
    assert_int_equal(b->vtable->memset_zero(b, two, bytes), BPT_OK);
    assert_int_equal(b->vtable->download(b, back, two, bytes), BPT_OK);
    for (size_t i = 0; i < count; i++) assert_true(back[i] == 0.0f);
    b->vtable->free(b, one);
    b->vtable->free(b, two);
    b->vtable->free(b, three);
    free(host);
    free(first);
    free(back);
  }
  bpt_context_destroy(gpu);
}

/* Dynamic loss scaling with the flag kept on the device: an overflowing step is skipped (weights untouched)
 * and the scale halves; a finite step unscales exactly and updates. */
static void loss_scaler_skips_and_backs_off_on_the_device(void **state) {
  (void)state;
  CUDA_OR_SKIP(gpu, 6);
  bpt_backend *b = &gpu->backend;
  enum { COUNT = 4099 };
  float weights[COUNT], gradients[COUNT], result[COUNT];
  test_random random;
  test_random_seed(&random, 8);
  test_random_fill(&random, weights, COUNT, -1, 1);
  test_random_fill(&random, gradients, COUNT, -1, 1);
  float *w, *g, *velocity;
  int32_t *flag;
  assert_int_equal(b->vtable->alloc(b, sizeof weights, (void **)&w), BPT_OK);
  assert_int_equal(b->vtable->alloc(b, sizeof gradients, (void **)&g), BPT_OK);
  assert_int_equal(b->vtable->alloc(b, sizeof weights, (void **)&velocity), BPT_OK);
  assert_int_equal(b->vtable->alloc(b, sizeof(int32_t), (void **)&flag), BPT_OK);
  assert_int_equal(b->vtable->upload(b, w, weights, sizeof weights), BPT_OK);
  assert_int_equal(b->vtable->memset_zero(b, velocity, sizeof weights), BPT_OK);
  float scale = 65536.0f;
  for (int step = 0; step < 2; step++) {
    bool overflow = step == 0;
    float scaled[COUNT];
    for (int i = 0; i < COUNT; i++) scaled[i] = gradients[i] * scale; /* exact: scale is a power of two */
    if (overflow) scaled[COUNT / 3] = NAN;
    assert_int_equal(b->vtable->upload(b, g, scaled, sizeof scaled), BPT_OK);
    assert_int_equal(b->vtable->memset_zero(b, flag, sizeof(int32_t)), BPT_OK);
    assert_int_equal(CALL(b, unscale_check_finite, COUNT, g, 1.0f / scale, flag), BPT_OK);
    int32_t found = -1;
    assert_int_equal(b->vtable->download(b, &found, flag, sizeof found), BPT_OK);
    assert_int_equal(found, overflow ? 1 : 0);
    if (found) {
      scale *= 0.5f;
      continue;
    }
    assert_int_equal(b->vtable->download(b, result, g, sizeof result), BPT_OK);
    for (int i = 0; i < COUNT; i++) assert_true(result[i] == gradients[i]);
    bpt_update_args args = {.count = COUNT, .parameters = w, .gradients = g, .state0 = velocity,
                            .learning_rate = 0.1f, .momentum = 0.9f};
    assert_int_equal(b->vtable->sgd_update(b, &args), BPT_OK);
  }
  assert_true(scale == 32768.0f);
  assert_int_equal(b->vtable->download(b, result, w, sizeof result), BPT_OK);
  /* Exactly one update happened: w - 0.1 g. */
  for (int i = 0; i < COUNT; i++) assert_float_equal(result[i], weights[i] - 0.1f * gradients[i], 1e-6);
  b->vtable->free(b, w);
  b->vtable->free(b, g);
  b->vtable->free(b, velocity);
  b->vtable->free(b, flag);
  bpt_context_destroy(gpu);
}

typedef struct mlp {
  bpt_graph *graph;
  bpt_node *images, *labels, *loss;
  bpt_optimizer *optimizer;
} mlp;

static void mlp_build(bpt_context *context, mlp *m, int64_t features, int64_t classes, int64_t batch) {
  bpt_node *hidden, *logits;
  assert_ok(context, bpt_graph_create(context, &m->graph));
  assert_ok(context, bpt_graph_input(m->graph, "images", BPT_DTYPE_F32, 1, &features, &m->images));
  assert_ok(context, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
  assert_ok(context, bpt_layer_linear(m->graph, "fc1", m->images, 128, BPT_INIT_HE_UNIFORM, &hidden));
  assert_ok(context, bpt_relu(m->graph, "relu1", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(m->graph, "fc2", hidden, 64, BPT_INIT_HE_UNIFORM, &hidden));
  assert_ok(context, bpt_relu(m->graph, "relu2", hidden, &hidden));
  assert_ok(context, bpt_layer_linear(m->graph, "fc3", hidden, classes, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(m->graph, "loss", logits, m->labels, &m->loss));
  assert_ok(context, bpt_graph_compile(m->graph, m->loss, batch));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = 0.05f;
  options.momentum = 0.9f;
  assert_ok(context, bpt_optimizer_create(m->graph, &options, &m->optimizer));
}

/* The MLP of examples/mnist_mlp.c (narrower) trained for a few steps on both backends from the same
 * weights and batches: losses and weights follow the CPU trajectory in f32. */
static void mlp_training_follows_the_cpu_trajectory(void **state) {
  (void)state;
  CUDA_OR_SKIP(gpu, 9);
  bpt_context *cpu = test_context(9);
  enum { FEATURES = 784, CLASSES = 10, BATCH = 64, STEPS = 8 };
  mlp on_cpu, on_gpu;
  mlp_build(cpu, &on_cpu, FEATURES, CLASSES, BATCH);
  mlp_build(gpu, &on_gpu, FEATURES, CLASSES, BATCH);
  int64_t parameters = bpt_graph_parameter_count(on_cpu.graph);
  float *expected = malloc((size_t)parameters * sizeof *expected), *actual = malloc((size_t)parameters * sizeof *actual);
  assert_ok(cpu, bpt_graph_read_parameters(on_cpu.graph, expected, parameters));
  assert_ok(gpu, bpt_graph_write_parameters(on_gpu.graph, expected, parameters));
  int64_t image_dims[2] = {BATCH, FEATURES}, label_dims[1] = {BATCH};
  bpt_tensor *images, *labels;
  assert_ok(cpu, bpt_tensor_create(cpu, BPT_DTYPE_F32, 2, image_dims, &images));
  assert_ok(cpu, bpt_tensor_create(cpu, BPT_DTYPE_I32, 1, label_dims, &labels));
  test_random random;
  test_random_seed(&random, 10);
  for (int step = 0; step < STEPS; step++) {
    test_random_fill(&random, bpt_tensor_data(images), BATCH * FEATURES, 0, 1);
    int32_t *label_values = bpt_tensor_data(labels);
    for (int i = 0; i < BATCH; i++) label_values[i] = (int32_t)(test_random_uniform(&random, 0, 1) * CLASSES) % CLASSES;
    float losses[2];
    mlp *models[2] = {&on_cpu, &on_gpu};
    bpt_context *contexts[2] = {cpu, gpu};
    for (int side = 0; side < 2; side++) {
      mlp *m = models[side];
      assert_ok(contexts[side], bpt_graph_set_input(m->graph, m->images, images));
      assert_ok(contexts[side], bpt_graph_set_input(m->graph, m->labels, labels));
      assert_ok(contexts[side], bpt_graph_forward(m->graph));
      assert_ok(contexts[side], bpt_graph_backward(m->graph));
      assert_ok(contexts[side], bpt_optimizer_step(m->optimizer));
      assert_ok(contexts[side], bpt_graph_loss(m->graph, &losses[side]));
    }
    if (!(fabsf(losses[1] - losses[0]) <= 1e-4f * fabsf(losses[0])))
      fail_msg("step %d: loss %.7f on cuda, %.7f on cpu", step, (double)losses[1], (double)losses[0]);
  }
  assert_ok(cpu, bpt_graph_read_parameters(on_cpu.graph, expected, parameters));
  assert_ok(gpu, bpt_graph_read_parameters(on_gpu.graph, actual, parameters));
  double error = test_relative_error(actual, expected, parameters);
  if (!(error <= 1e-4)) fail_msg("weights after %d steps: relative error %g", STEPS, error);
  free(expected);
  free(actual);
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
  for (int side = 0; side < 2; side++) {
    mlp *m = side ? &on_gpu : &on_cpu;
    bpt_optimizer_destroy(m->optimizer);
    bpt_graph_destroy(m->graph);
  }
  bpt_context_destroy(cpu);
  bpt_context_destroy(gpu);
}

/* Runs where there is no device: the context fails cleanly, with a status and a message. */
static void cuda_context_without_a_device_fails_cleanly(void **state) {
  (void)state;
  if (!bpt_backend_registry_find("cuda")) skip();
  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = (bpt_context *)0x1;
  bpt_status status = bpt_context_create(&options, &context);
  if (status == BPT_OK) {
    bpt_context_destroy(context);
    skip(); /* a device is present: the other tests cover it */
  }
  assert_int_equal(status, BPT_ERR_DEVICE);
  assert_null(context);
  assert_non_null(strstr(bpt_context_last_error(NULL), "CUDA"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cuda_context_without_a_device_fails_cleanly),
      cmocka_unit_test(memory_round_trips_exactly),
      cmocka_unit_test(every_kernel_matches_the_cpu),
      cmocka_unit_test(loss_scaler_skips_and_backs_off_on_the_device),
      cmocka_unit_test(mlp_training_follows_the_cpu_trajectory),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (failed == 0 && device_missing_reported) {
    fprintf(stderr, "test_cuda_parity: skipped: %s\n", device_missing_reason);
    return 77;
  }
  return failed;
}
