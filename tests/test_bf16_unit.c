/* Which units take the bf16 policy's products (src/backends/cpu/bf16_unit.c): the choice follows
 * BPT_BF16_GEMM where it is set and the throughput probe where it is not, the mode string says which, and a
 * product with the policy's flag runs on the chosen units: bit for bit cblas_sgemm on the widened values on the
 * f32 units (with f32, bf16-stored and padded operands, and a bf16 C read and rounded back), within the f32
 * summation bound of the bf16 reference on a bf16 unit. CTest runs it unset and under each setting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/bf16_unit.h"
#include "backends/cpu/blas_library.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn.h"
#include "core/context.h"
#include "test_support.h"

static const char *setting(void) {
  const char *value = getenv("BPT_BF16_GEMM");
  return value ? value : "";
}

static bool starts_with(const char *text, const char *prefix) { return strncmp(text, prefix, strlen(prefix)) == 0; }

static void choice_follows_setting(void **state) {
  (void)state;
  const char *mode = bpt_cpu_bf16_gemm_mode();
  print_message("BPT_BF16_GEMM='%s': %s\n", setting(), mode);
  if (!bpt_cpu_has_avx512_bf16()) {
    assert_false(bpt_cpu_bf16_products_native());
    assert_null(bpt_cpu_bf16_unit_choice());
    assert_true(bpt_cpu_bf16_unit_ratio() == 0.0);
    assert_true(starts_with(mode, "emulated: bf16 storage"));
    return;
  }
  const bool native = bpt_cpu_bf16_products_native();
  const char *choice = bpt_cpu_bf16_unit_choice();
  assert_non_null(choice);
  assert_int_equal(!native, starts_with(mode, "f32 units"));
  if (strcmp(setting(), "f32") == 0) {
    assert_false(native);
    assert_string_equal(choice, "BPT_BF16_GEMM=f32");
  } else if (strcmp(setting(), "bf16") == 0 || strcmp(setting(), "own") == 0) {
    assert_true(native);
    assert_non_null(strstr(choice, setting()));
    if (strcmp(setting(), "own") == 0) assert_null(bpt_cpu_onednn_mode());
  } else {
#if defined(BPT_AVX512_EMULATION)
    assert_true(native);
#else
    const char *onednn = bpt_cpu_onednn_mode();
    if (onednn && strstr(onednn, "amx")) {
      assert_true(native);
    } else {
      /* The probe decided: the ratio it reports, on the right side of the threshold. */
      const double ratio = bpt_cpu_bf16_unit_ratio();
      assert_true(ratio > 0.0);
      assert_int_equal(native, ratio >= BPT_CPU_BF16_UNIT_MIN_RATIO);
      char figure[32];
      snprintf(figure, sizeof figure, "%.2fx", ratio);
      assert_non_null(strstr(choice, figure));
    }
#endif
  }
}

/* vdpbf16ps does 32 multiply-adds to vfmadd231ps's 16; no x86 core issues either at more than four times the
 * other's rate, so a ratio outside [1/8, 8] is a miscount or a dropped loop. */
static void probe_is_plausible(void **state) {
  (void)state;
#if defined(BPT_AVX512_EMULATION)
  skip();
#else
  if (!bpt_cpu_has_avx512_bf16()) {
    assert_true(bpt_cpu_bf16_unit_probe(3) == 0.0);
    return;
  }
  const double ratio = bpt_cpu_bf16_unit_probe(3);
  print_message("probe: vdpbf16ps does %.2fx the f32 FMA's multiply-adds per second\n", ratio);
  assert_true(ratio >= 0.125 && ratio <= 8.0);
#endif
}

/* A rows x cols block of ld as packed f32, read from f32 or bf16 storage. */
static float *packed_f32(const void *source, bool bf16, int64_t rows, int64_t cols, int64_t ld) {
  float *out = malloc((size_t)(rows * cols) * sizeof *out);
  assert_non_null(out);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      out[r * cols + c] = bpt_storage_load(source, bf16, r * ld + c);
  return out;
}

/* C = 1.5 A B^T + 0.5 C with A f32 (holding bf16 values) and B bf16, both padded; C bf16 or f32, padded. With a
 * bf16 C the rounding back hides summation order, so the f32 C is what tells the f32 units from a bf16 unit. */
static void product_on_the_chosen_units(bpt_backend *backend, bpt_dtype c_dtype) {
  test_random random;
  test_random_seed(&random, 271);
  enum { M = 37, N = 70, K = 129, PAD = 3 };
  const int64_t lda = K + PAD, ldb = K + PAD, ldc = N + PAD;
  const bool c_bf16 = c_dtype == BPT_DTYPE_BF16;
  const size_t c_size = c_bf16 ? sizeof(uint16_t) : sizeof(float);
  float *a = malloc(sizeof(float) * M * lda), *scratch = malloc(sizeof(float) * N * ldb);
  uint16_t *b = malloc(sizeof(uint16_t) * N * ldb);
  char *c = malloc(c_size * M * ldc), *c0 = malloc(c_size * M * ldc);
  assert_true(a && scratch && b && c && c0);
  test_random_fill(&random, a, M * lda, -1.0f, 1.0f);
  for (int64_t i = 0; i < M * lda; i++)
    a[i] = bpt_bf16_widen(bpt_bf16_narrow(a[i])); /* the policy's operands hold bf16 values */
  test_random_fill(&random, scratch, N * ldb, -1.0f, 1.0f);
  for (int64_t i = 0; i < N * ldb; i++)
    b[i] = bpt_bf16_narrow(scratch[i]);
  test_random_fill(&random, scratch, M * ldc, -1.0f, 1.0f);
  for (int64_t i = 0; i < M * ldc; i++)
    bpt_storage_store(c0, c_bf16, i, scratch[i]);
  memcpy(c, c0, c_size * M * ldc);
  bpt_gemm_args args = {.transpose_b = true,
                        .a_dtype = BPT_DTYPE_F32,
                        .b_dtype = BPT_DTYPE_BF16,
                        .c_dtype = c_dtype,
                        .m = M,
                        .n = N,
                        .k = K,
                        .alpha = 1.5f,
                        .a = a,
                        .lda = lda,
                        .b = (const float *)b,
                        .ldb = ldb,
                        .beta = 0.5f,
                        .c = (float *)c,
                        .ldc = ldc,
                        .bf16_products = true};
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  float *wide_b = packed_f32(b, true, N, K, ldb), *wide_c = packed_f32(c0, c_bf16, M, N, ldc);
#define C_AT(i, j) bpt_storage_load(c, c_bf16, (i)*ldc + (j))
  if (!bpt_cpu_bf16_products_native()) {
    /* The f32 units: what gemm_mixed.c hands cblas_sgemm, so the same bits. */
    bpt_cpu_sgemm(false, true, M, N, K, args.alpha, a, lda, wide_b, K, args.beta, wide_c, N);
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        const float expected = c_bf16 ? bpt_bf16_widen(bpt_bf16_narrow(wide_c[i * N + j])) : wide_c[i * N + j];
        if (memcmp(&(float){C_AT(i, j)}, &expected, sizeof expected) != 0)
          fail_msg("%s C[%lld][%lld] = %a, cblas_sgemm's %a", bpt_dtype_name(c_dtype), (long long)i, (long long)j,
                   (double)C_AT(i, j), (double)expected);
      }
  } else {
    /* A bf16 unit: within the f32 summation bound of the reference, plus one bf16 rounding of a bf16 C. */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double sum = 0.0, magnitude = 0.0;
        for (int64_t l = 0; l < K; l++) {
          sum += (double)a[i * lda + l] * wide_b[j * K + l];
          magnitude += fabs((double)a[i * lda + l] * wide_b[j * K + l]);
        }
        const double expected = args.alpha * sum + args.beta * wide_c[i * N + j];
        const double bound = 0x1p-24 * (K + 2) * args.alpha * magnitude +
                             0x1p-24 * fabs(args.beta * wide_c[i * N + j]) + (c_bf16 ? 0x1p-8 * fabs(expected) : 0.0);
        if (!(fabs(C_AT(i, j) - expected) <= bound))
          fail_msg("%s C[%lld][%lld] = %.9g, expected %.9g", bpt_dtype_name(c_dtype), (long long)i, (long long)j,
                   (double)C_AT(i, j), expected);
      }
  }
#undef C_AT
  /* The padding between rows is nobody's: untouched. */
  for (int64_t i = 0; i < M; i++)
    assert_memory_equal(c + (size_t)(i * ldc + N) * c_size, c0 + (size_t)(i * ldc + N) * c_size, PAD * c_size);
  free(a), free(scratch), free(b), free(c), free(c0), free(wide_b), free(wide_c);
}

static void policy_product_runs_on_the_chosen_units(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  product_on_the_chosen_units(&context->backend, BPT_DTYPE_BF16);
  product_on_the_chosen_units(&context->backend, BPT_DTYPE_F32);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(choice_follows_setting), cmocka_unit_test(probe_is_plausible),
                                     cmocka_unit_test(policy_product_runs_on_the_chosen_units)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
