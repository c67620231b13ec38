/* The native vdpbf16ps micro-kernel (issue 16.2) against the bf16 reference, through the same blocking and
 * packing that test_bf16_gemm.c checks with the scalar micro-kernel. It needs a CPU with AVX512_BF16: elsewhere
 * it prints why and exits 77, which CTest reports as skipped. The test build that emulates
 * AVX-512 (scripts/check-avx512-emulated.sh) runs it on AVX2 CPUs. */
#define _DEFAULT_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn.h"
#include "core/context.h"
#include "test_support.h"

/* Shapes as in test_bf16_gemm.c plus the MLP's products (784-512-256 at batch 128: forward, data and weight
 * gradients) and a convolution's lowering (16 output channels, 3x3 over 16 channels, 32x32 pixels). */
static const int64_t shapes[][3] = {{1, 1, 1},      {8, 48, 256},    {9, 49, 257},   {7, 47, 3},    {17, 97, 513},
                                    {3, 1, 600},    {1, 50, 31},     {64, 10, 77},   {128, 512, 784}, {128, 256, 512},
                                    {128, 784, 512}, {512, 784, 128}, {256, 512, 128}, {16, 1024, 144}};

static void native_kernel_matches_reference(void **state) {
  (void)state;
  test_random random;
  test_random_seed(&random, 165);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
        const int64_t a_count = (ta ? k : m) * lda, b_count = (tb ? n : k) * ldb, c_count = m * ldc;
        float *a = malloc((size_t)a_count * sizeof *a), *b = malloc((size_t)b_count * sizeof *b);
        float *c = malloc((size_t)c_count * sizeof *c), *expected = malloc((size_t)c_count * sizeof *c);
        float *layout = malloc((size_t)c_count * sizeof *c), *magnitude = malloc((size_t)c_count * sizeof *c);
        float *a_abs = malloc((size_t)a_count * sizeof *a), *b_abs = malloc((size_t)b_count * sizeof *b);
        assert_true(a && b && c && expected && layout && magnitude && a_abs && b_abs);
        test_random_fill(&random, a, a_count, -1.0f, 1.0f);
        test_random_fill(&random, b, b_count, -1.0f, 1.0f);
        test_random_fill(&random, c, c_count, -1.0f, 1.0f);
        for (int64_t i = 0; i < a_count; i++) a_abs[i] = fabsf(a[i]);
        for (int64_t i = 0; i < b_count; i++) b_abs[i] = fabsf(b[i]);
        for (int64_t i = 0; i < c_count; i++) magnitude[i] = fabsf(c[i]);
        memcpy(expected, c, (size_t)c_count * sizeof *c);
        memcpy(layout, c, (size_t)c_count * sizeof *c);
        const float beta = s % 2 ? 1.0f : 0.0f;
        bpt_gemm_args args = {.transpose_a = ta, .transpose_b = tb, .m = m, .n = n, .k = k, .alpha = 0.75f, .a = a,
                              .lda = lda, .b = b, .ldb = ldb, .beta = beta, .c = expected, .ldc = ldc};
        bpt_bf16_gemm_reference(&args);
        args.c = layout;
        assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_scalar), BPT_OK);
        args.c = c;
        assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_avx512), BPT_OK);
        bpt_gemm_args bound = {.transpose_a = ta, .transpose_b = tb, .m = m, .n = n, .k = k, .alpha = 0.75f,
                               .a = a_abs, .lda = lda, .b = b_abs, .ldb = ldb, .beta = fabsf(beta), .c = magnitude,
                               .ldc = ldc};
        bpt_bf16_gemm_reference(&bound);
        /* The f32 summation bound, (k + 2) 2^-24 sum |a b|: the reference and the kernel sum the same exact
         * products in different orders. */
        int64_t differing = 0;
        for (int64_t i = 0; i < m; i++)
          for (int64_t j = 0; j < n; j++) {
            const int64_t at = i * ldc + j;
            const double tolerance = 0x1p-24 * (double)(k + 2) * (double)magnitude[at] + 1e-30;
            if (!(fabs((double)c[at] - (double)expected[at]) <= tolerance))
              fail_msg("vdpbf16ps %lldx%lldx%lld ta=%d tb=%d: C[%lld][%lld] = %.9g, reference %.9g", (long long)m,
                       (long long)n, (long long)k, ta, tb, (long long)i, (long long)j, c[at], expected[at]);
            differing += memcmp(&c[at], &layout[at], sizeof(float)) != 0;
          }
        /* The scalar kernel follows the SDM's description of VDPBF16PS; a difference is reported, not failed,
         * since the tolerance above is what the library promises. */
        if (differing)
          print_message("note: %lldx%lldx%lld ta=%d tb=%d: %lld of %lld values differ in bits from the scalar "
                        "layout kernel\n",
                        (long long)m, (long long)n, (long long)k, ta, tb, (long long)differing, (long long)(m * n));
        free(a), free(b), free(c), free(expected), free(layout), free(magnitude), free(a_abs), free(b_abs);
      }
}

/* The backend's GEMM with the bf16 policy's flag runs this kernel, its result the kernel's bit for bit (each
 * tile is summed by one thread in a fixed order, so the thread count does not matter), unless oneDNN's matmul
 * took the product (onednn.c; test_onednn_gemm checks it): CTest runs this test a second time with
 * BPT_BF16_GEMM=own, so the own kernel's route is checked on machines that have oneDNN too. */
static void policy_gemm_runs_the_chosen_kernel(void **state) {
  (void)state;
  if (!bpt_cpu_bf16_products_native()) { /* BPT_BF16_GEMM=f32: test_bf16_unit checks that route */
    print_message("note: the bf16 policy's products run on the f32 units here (%s)\n", bpt_cpu_bf16_unit_choice());
    return;
  }
  bpt_context *context = test_context(1);
  bpt_backend *backend = &context->backend;
  test_random random;
  test_random_seed(&random, 166);
  enum { M = 128, N = 256, K = 512 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K), *c = malloc(sizeof(float) * M * N);
  float *direct = malloc(sizeof(float) * M * N);
  assert_true(a && b && c && direct);
  test_random_fill(&random, a, M * K, -1.0f, 1.0f);
  test_random_fill(&random, b, N * K, -1.0f, 1.0f);
  bpt_gemm_args args = {.transpose_b = true, .m = M, .n = N, .k = K, .alpha = 1.0f, .a = a, .lda = K, .b = b,
                        .ldb = K, .c = c, .ldc = N, .bf16_products = true};
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  args.c = direct;
  const char *onednn = bpt_cpu_onednn_mode();
  if (onednn) {
    /* oneDNN sums in its own order: within the f32 summation bound of the reference, (K + 2) 2^-24 K (|a| <= 1). */
    bpt_bf16_gemm_reference(&args);
    for (int i = 0; i < M * N; i++)
      if (!(fabsf(c[i] - direct[i]) <= 0x1p-24f * (K + 2) * K))
        fail_msg("oneDNN's C[%d] = %.9g, reference %.9g", i, c[i], direct[i]);
    assert_string_equal(bpt_cpu_bf16_gemm_mode(), onednn);
    assert_true(strncmp(onednn, "oneDNN ", 7) == 0);
  } else {
    assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_avx512), BPT_OK);
    assert_memory_equal(c, direct, sizeof(float) * M * N);
#if defined(BPT_AVX512_EMULATION)
    assert_string_equal(bpt_cpu_bf16_gemm_mode(),
                        "emulated AVX512_BF16 in plain C (a test build of the library, not for use)");
#else
    assert_string_equal(bpt_cpu_bf16_gemm_mode(), "native AVX512_BF16 (vdpbf16ps)");
#endif
    print_message("note: oneDNN not used (%s): the own kernel ran\n", bpt_cpu_onednn_absent_reason());
  }
  free(a), free(b), free(c), free(direct);
  bpt_context_destroy(context);
}

int main(void) {
  /* The bf16 unit's kernels are this test's subject, also on CPUs whose f32 units take the bf16 policy's
   * products by default (bf16_unit.h); a setting already there (BPT_BF16_GEMM=own) stays. */
  const char *setting = getenv("BPT_BF16_GEMM");
  if (!setting || !*setting) setenv("BPT_BF16_GEMM", "bf16", 1);
  if (!bpt_cpu_has_avx512_bf16()) {
    printf("skipped: this CPU has no AVX512_BF16, so the native vdpbf16ps kernel cannot run here "
           "(test_bf16_gemm checks its packing and edges with the scalar kernel of the same layout)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(native_kernel_matches_reference),
                                     cmocka_unit_test(policy_gemm_runs_the_chosen_kernel)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
