/* The bf16 policy's matrix products against f32 on the same shapes: the MLP's eight products per step
 * (784-512-256-10 at --batch) and a convolution lowering's three (16 -> 16 channels, 3x3, 32x32, per sample),
 * each timed through the CPU backend's gemm with and without bf16_products, fastest of --rounds alternating
 * rounds. On a CPU with AVX512_BF16 the bf16 column is the vdpbf16ps kernel (gemm_bf16*.c); elsewhere it is
 * the emulation, i.e. the same SGEMM, and the results match f32 bit for bit (the last line says which).
 * --stored-bf16 hands the bf16 policy's side its operands as 16-bit storage does (A and B as bf16, C as bf16
 * except the weight gradients), the f32 side keeping f32 buffers.
 *
 *   bf16_gemm_bench [--batch 128] [--threads 2] [--rounds 5] [--repeats 50] [--stored-bf16]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "example_util.h"

typedef struct product {
  const char *name;
  int transpose_a, transpose_b;
  int64_t m, n, k;
  bool c_activation; /* C is an activation or its gradient (bf16 under 16-bit storage), not a weight gradient */
} product;

/* Seconds per product, best over rounds, of repeats back-to-back calls. */
static double time_product(bpt_backend *backend, bpt_gemm_args *args, long repeats) {
  const double start = example_seconds();
  for (long r = 0; r < repeats; r++)
    if (backend->vtable->gemm(backend, args) != BPT_OK) {
      fprintf(stderr, "gemm failed: %s\n", backend->error_message);
      exit(1);
    }
  return (example_seconds() - start) / (double)repeats;
}

/* A bf16 value (as the policy stores operands), from a small deterministic pattern. */
static float bf16_valued(long i, int modulus, float step) {
  float value = (float)(i % modulus) * step - step * (float)(modulus / 2);
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits &= 0xffff0000u;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static uint16_t bf16_code(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (uint16_t)(bits >> 16);
}

/* Round to nearest even, as the kernels narrow a bf16 C (finite values only here). */
static uint16_t bf16_code_rounded(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static float bf16_from_code(uint16_t code) {
  const uint32_t bits = (uint32_t)code << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--batch", "--threads", "--rounds", "--repeats", NULL};
  static const char *const flags[] = {"--stored-bf16", NULL};
  example_check_arguments(argc, argv, valued, flags,
                          "usage: bf16_gemm_bench [--batch N] [--threads N] [--rounds N] [--repeats N] "
                          "[--stored-bf16]\n");
  const bool stored = example_flag(argc, argv, "--stored-bf16");
  const int64_t batch = example_option_long(argc, argv, "--batch", 128);
  const int threads = (int)example_option_long(argc, argv, "--threads", 2);
  const long rounds = example_option_long(argc, argv, "--rounds", 5);
  const long repeats = example_option_long(argc, argv, "--repeats", 50);
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = threads;
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) return 1;
  bpt_backend *backend = &context->backend;
  const product products[] = {
      {"fc1 forward x W^T", 0, 1, batch, 512, 784, true}, {"fc2 forward", 0, 1, batch, 256, 512, true},
      {"fc3 forward", 0, 1, batch, 10, 256, true},        {"fc1 dW = dy^T x", 1, 0, 512, 784, batch, false},
      {"fc2 dW", 1, 0, 256, 512, batch, false},           {"fc3 dW", 1, 0, 10, 256, batch, false},
      {"fc2 dx = dy W", 0, 0, batch, 512, 256, true},     {"fc3 dx", 0, 0, batch, 256, 10, true},
      {"conv forward W col", 0, 0, 16, 1024, 144, true},  {"conv data W^T dy", 1, 0, 144, 1024, 16, true},
      {"conv filter dy col^T", 0, 1, 16, 144, 1024, false},
  };
  const int count = (int)(sizeof products / sizeof products[0]);
  printf("bf16 policy GEMMs vs f32, %d thread(s), fastest of %ld rounds of %ld calls%s\n", threads, rounds, repeats,
         stored ? ", bf16 side on bf16-stored operands" : "");
  printf("| product | m x n x k | f32 GFLOP/s | bf16 policy GFLOP/s | bf16 / f32 |\n|---|---|---|---|---|\n");
  double f32_total = 0.0, bf16_total = 0.0;
  bool identical = true;
  for (int p = 0; p < count; p++) {
    const product *q = &products[p];
    const int64_t a_count = q->m * q->k, b_count = q->k * q->n, c_count = q->m * q->n;
    float *a = malloc(sizeof(float) * (size_t)a_count), *b = malloc(sizeof(float) * (size_t)b_count);
    float *c32 = calloc((size_t)c_count, sizeof(float)), *c16 = calloc((size_t)c_count, sizeof(float));
    if (!a || !b || !c32 || !c16) return 1;
    for (long i = 0; i < a_count; i++) a[i] = bf16_valued(i, 13, 0.01f);
    for (long i = 0; i < b_count; i++) b[i] = bf16_valued(i, 7, 0.01f);
    bpt_gemm_args f32 = {.transpose_a = q->transpose_a, .transpose_b = q->transpose_b, .m = q->m, .n = q->n,
                         .k = q->k, .alpha = 1.0f, .a = a, .lda = q->transpose_a ? q->m : q->k, .b = b,
                         .ldb = q->transpose_b ? q->k : q->n, .beta = 0.0f, .c = c32, .ldc = q->n};
    bpt_gemm_args bf16 = f32;
    bf16.c = c16;
    bf16.bf16_products = true;
    uint16_t *a16 = malloc(sizeof(uint16_t) * (size_t)a_count), *b16 = malloc(sizeof(uint16_t) * (size_t)b_count);
    if (!a16 || !b16) return 1;
    if (stored) { /* the values are bf16 already: their upper halves */
      for (long i = 0; i < a_count; i++) a16[i] = bf16_code(a[i]);
      for (long i = 0; i < b_count; i++) b16[i] = bf16_code(b[i]);
      bf16.a_dtype = bf16.b_dtype = BPT_DTYPE_BF16;
      bf16.a = (const float *)a16;
      bf16.b = (const float *)b16;
      if (q->c_activation) bf16.c_dtype = BPT_DTYPE_BF16;
    }
    double best32 = INFINITY, best16 = INFINITY;
    for (long r = 0; r < rounds; r++) {
      const double t32 = time_product(backend, &f32, repeats), t16 = time_product(backend, &bf16, repeats);
      best32 = t32 < best32 ? t32 : best32;
      best16 = t16 < best16 ? t16 : best16;
    }
    if (bf16.c_dtype == BPT_DTYPE_BF16) /* compared as f32, as the f32 side rounded would be */
      for (long i = c_count - 1; i >= 0; i--) {
        const uint16_t code = ((const uint16_t *)c16)[i];
        c16[i] = bf16_from_code(code);
        c32[i] = bf16_from_code(bf16_code_rounded(c32[i]));
      }
    identical = identical && memcmp(c32, c16, sizeof(float) * (size_t)c_count) == 0;
    free(a16), free(b16);
    const double flops = 2.0 * (double)q->m * (double)q->n * (double)q->k;
    f32_total += best32;
    bf16_total += best16;
    printf("| %s | %lld x %lld x %lld | %.1f | %.1f | %.2fx |\n", q->name, (long long)q->m, (long long)q->n,
           (long long)q->k, flops / best32 / 1e9, flops / best16 / 1e9, best32 / best16);
    free(a), free(b), free(c32), free(c16);
  }
  bpt_compute_info info = {.size = sizeof info};
  if (bpt_cpu_compute_info(&info) != BPT_OK) return 1;
  /* The inputs are bf16 values, so the two agree bit for bit unless the bf16 products sum in another order. */
  printf("all products: f32 %.3f ms, bf16 policy %.3f ms (%.2fx); bf16 results %s f32's; bf16 GEMM: %s\n",
         f32_total * 1e3, bf16_total * 1e3, f32_total / bf16_total, identical ? "identical to" : "differ from",
         info.bf16_gemm);
  bpt_context_destroy(context);
  return 0;
}
