/* bf16 GEMM (issue 16.2) on any CPU: the rounding and the portable reference against hand-computed bf16
 * products, the shared packing against a hand-written layout, the native kernel's blocking, packing and edge
 * tiles driven by the scalar micro-kernel of the same layout against the reference, the dispatching GEMM of
 * the bf16 policy against the f32 GEMM, and the policy's flag reaching the products of linear and conv2d.
 * The vdpbf16ps micro-kernel itself is checked in test_bf16_gemm_native.c (skipped without AVX512_BF16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_storage.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/kernel_args.h"
#include "core/context.h"
#include "core/graph.h"
#include "test_support.h"

/* The native micro-kernel compiled once more with plain-C intrinsics, under its own name. */
#define BPT_BF16_EMULATED_INTRINSICS "avx512_emulation.h"
#define bpt_bf16_micro_kernel_avx512 emulated_avx512_micro_kernel
#include "backends/cpu/gemm_bf16_avx512.c"
#undef bpt_bf16_micro_kernel_avx512

static uint32_t f32_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static float bf16_value(uint16_t code) {
  uint32_t bits = (uint32_t)code << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

static void rounding_is_nearest_even_with_subnormals_flushed(void **state) {
  (void)state;
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the even neighbour is 1. 1 + 3 2^-8 is halfway between
   * 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6. Just above a tie rounds up. */
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(1.0f + 0x1p-8f)), 0x3f80);
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(1.0f + 3 * 0x1p-8f)), 0x3f82);
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(1.0f + 0x1p-8f + 0x1p-20f)), 0x3f81);
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(-1.0f - 0x1p-8f - 0x1p-20f)), 0xbf81);
  /* 1/3 = 0x3eaaaaab: the lower half 0xaaab is above the tie, so up to 0x3eab = 0.333984375. */
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(1.0f / 3.0f)), 0x3eab);
  /* The largest f32 rounds to infinity; infinity and NaN stay (NaN quiet); subnormals go to signed zero. */
  assert_int_equal(bpt_bf16_from_f32_bits(0x7f7fffffu), 0x7f80);
  assert_int_equal(bpt_bf16_from_f32_bits(0xff800000u), 0xff80);
  assert_int_equal(bpt_bf16_from_f32_bits(0x7f800001u), 0x7fc0);
  assert_int_equal(bpt_bf16_from_f32_bits(0x00400000u), 0x0000);
  assert_int_equal(bpt_bf16_from_f32_bits(0x80000001u), 0x8000);
  assert_int_equal(bpt_bf16_from_f32_bits(f32_bits(0x1p-126f)), 0x0080);
}

/* Stores the (rows, cols) matrix values row-major, or transposed, with leading dimension ld. */
static void store_matrix(const float *values, int64_t rows, int64_t cols, bool transposed, int64_t ld, float *out) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) out[transposed ? j * ld + i : i * ld + j] = values[i * cols + j];
}

static void reference_matches_hand_computed_products(void **state) {
  (void)state;
  /* op(A) (2, 3) . op(B) (3, 2). In bf16, A's first row is (1, 1 + 2^-6, 3), B's first column (1, 1, 0.333984375):
   * 1 + 1.015625 + 1.001953125 = 3.017578125 exactly (f32 operands would give 3.0195...). Second row of A
   * (256, 1, -256) against B's second column (1, 1, 1): 256 + 1 - 256 = 1, exact in f32 summed in order. */
  const float a_values[6] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.0f, 256.0f, 1.0f + 0x1p-9f, -256.0f};
  const float b_values[6] = {1.0f + 0x1p-8f, 1.0f, 1.0f, 1.0f, 1.0f / 3.0f, 1.0f};
  /* C[0][1] = 1 + 1.015625 + 3 = 5.015625; C[1][0] = 256 + 1 - 256 0.333984375 = 171.5 (f32 operands: 171.67). */
  const float expected[4] = {3.017578125f, 5.015625f, 171.5f, 1.0f};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      float a[12], b[12], c[6] = {NAN, NAN, -7.0f, NAN, NAN, -7.0f};
      const int64_t lda = ta ? 2 + 1 : 3 + 1, ldb = tb ? 3 + 1 : 2 + 1, ldc = 3;
      store_matrix(a_values, 2, 3, ta, lda, a);
      store_matrix(b_values, 3, 2, tb, ldb, b);
      bpt_gemm_args args = {.transpose_a = ta, .transpose_b = tb, .m = 2, .n = 2, .k = 3, .alpha = 1.0f, .a = a,
                            .lda = lda, .b = b, .ldb = ldb, .beta = 0.0f, .c = c, .ldc = ldc};
      bpt_bf16_gemm_reference(&args);
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) assert_float_equal(c[i * ldc + j], expected[i * 2 + j], 0.0f);
      assert_float_equal(c[2], -7.0f, 0.0f); /* beyond n, inside ldc: untouched */
      /* alpha and beta: C = 0.5 product + 2 C. */
      args.alpha = 0.5f;
      args.beta = 2.0f;
      bpt_bf16_gemm_reference(&args);
      assert_float_equal(c[0], 0.5f * 3.017578125f + 2.0f * 3.017578125f, 0.0f);
      /* The same product through the portable layout (scalar micro-kernel): these sums are exact in any order. */
      c[0] = c[1] = c[3] = c[4] = NAN;
      args.alpha = 1.0f;
      args.beta = 0.0f;
      assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_scalar), BPT_OK);
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) assert_float_equal(c[i * ldc + j], expected[i * 2 + j], 0.0f);
    }
  /* bf16 operands as stored: A's codes for (1, 1 + 2^-6, 3), B's column (1, 1, 0x3eab). */
  const uint16_t a_codes[3] = {0x3f80, 0x3f82, 0x4040}, b_codes[3] = {0x3f80, 0x3f80, 0x3eab};
  float c = 0.0f;
  bpt_gemm_args args = {.a_dtype = BPT_DTYPE_BF16, .b_dtype = BPT_DTYPE_BF16, .m = 1, .n = 1, .k = 3, .alpha = 1.0f,
                        .a = (const float *)a_codes, .lda = 3, .b = (const float *)b_codes, .ldb = 1, .c = &c,
                        .ldc = 1};
  bpt_bf16_gemm_reference(&args);
  assert_float_equal(c, 3.017578125f, 0.0f);
  c = 0.0f;
  assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_scalar), BPT_OK);
  assert_float_equal(c, 3.017578125f, 0.0f);
}

static void packing_lays_out_pairs_with_zero_edges(void **state) {
  (void)state;
  /* op(A) (3, 3) and op(B) (3, 2), both odd in the reduction and short of a whole panel. Element (i, l) is
   * (i + 1) + l / 4 + 2^-8 (A) or (l + 1) + j / 4 + 2^-8 (B), so each word says where it came from and every
   * element needs rounding (the 2^-8 is below half an ulp for values of 1 or more: it vanishes). */
  float a_values[9], b_values[6];
  for (int i = 0; i < 3; i++)
    for (int l = 0; l < 3; l++) a_values[i * 3 + l] = (float)(i + 1) + (float)l / 4 + 0x1p-8f;
  for (int l = 0; l < 3; l++)
    for (int j = 0; j < 2; j++) b_values[l * 2 + j] = (float)(l + 1) + (float)j / 4 + 0x1p-8f;
  for (int transposed = 0; transposed < 2; transposed++) {
    float a[16], b[16];
    const int64_t lda = 4, ldb = 4;
    store_matrix(a_values, 3, 3, transposed, lda, a);
    store_matrix(b_values, 3, 2, transposed, ldb, b);
    bpt_gemm_args args = {.transpose_a = transposed, .transpose_b = transposed, .m = 3, .n = 2, .k = 3, .a = a,
                          .lda = lda, .b = b, .ldb = ldb};
    uint32_t a_panel[2 * BPT_BF16_MR], b_panel[2 * BPT_BF16_NR];
    memset(a_panel, 0xab, sizeof a_panel);
    memset(b_panel, 0xab, sizeof b_panel);
    bpt_bf16_pack_a(&args, 0, 0, 3, a_panel);
    bpt_bf16_pack_b(&args, 0, 3, 0, b_panel);
    for (int p = 0; p < 2; p++) {
      for (int r = 0; r < BPT_BF16_MR; r++) {
        uint32_t even = 0, odd = 0;
        if (r < 3) even = bpt_bf16_from_f32_bits(f32_bits(a_values[r * 3 + 2 * p]));
        if (r < 3 && 2 * p + 1 < 3) odd = bpt_bf16_from_f32_bits(f32_bits(a_values[r * 3 + 2 * p + 1]));
        if (a_panel[p * BPT_BF16_MR + r] != (even | odd << 16))
          fail_msg("A panel (transposed %d) pair %d row %d: %08x, expected %08x", transposed, p, r,
                   a_panel[p * BPT_BF16_MR + r], even | odd << 16);
        if (r < 3) assert_float_equal(bf16_value((uint16_t)even), (float)(r + 1) + (float)(2 * p) / 4, 0.0f);
      }
      for (int j = 0; j < BPT_BF16_NR; j++) {
        uint32_t even = 0, odd = 0;
        if (j < 2) even = bpt_bf16_from_f32_bits(f32_bits(b_values[2 * p * 2 + j]));
        if (j < 2 && 2 * p + 1 < 3) odd = bpt_bf16_from_f32_bits(f32_bits(b_values[(2 * p + 1) * 2 + j]));
        if (b_panel[p * BPT_BF16_NR + j] != (even | odd << 16))
          fail_msg("B panel (transposed %d) pair %d column %d: %08x, expected %08x", transposed, p, j,
                   b_panel[p * BPT_BF16_NR + j], even | odd << 16);
      }
    }
    /* A panel that starts inside the matrix: rows 1-2 of A, reduction 1-2 (one whole pair). */
    bpt_bf16_pack_a(&args, 1, 1, 2, a_panel);
    for (int r = 0; r < BPT_BF16_MR; r++) {
      uint32_t expected = 0;
      if (r < 2)
        expected = bpt_bf16_from_f32_bits(f32_bits(a_values[(r + 1) * 3 + 1])) |
                   (uint32_t)bpt_bf16_from_f32_bits(f32_bits(a_values[(r + 1) * 3 + 2])) << 16;
      assert_int_equal(a_panel[r], expected);
    }
  }
}

/* Per element, |c - expected| <= factor 2^-24 (k + 2) sum_l |a b| |alpha| + 2^-24 |beta c|: the summation
 * bound of an f32 sum of k products in any order (the products themselves are exact). */
static void assert_within_summation_bound(const char *what, const bpt_gemm_args *args, const float *c,
                                          const float *expected, const float *magnitude, double factor) {
  for (int64_t i = 0; i < args->m; i++)
    for (int64_t j = 0; j < args->n; j++) {
      const int64_t at = i * args->ldc + j;
      const double bound = factor * 0x1p-24 * ((double)(args->k + 2) * fabs((double)magnitude[at]) + 1e-30);
      if (!(fabs((double)c[at] - (double)expected[at]) <= bound))
        fail_msg("%s %lldx%lldx%lld ta=%d tb=%d: C[%lld][%lld] = %.9g, expected %.9g (bound %.3g)", what,
                 (long long)args->m, (long long)args->n, (long long)args->k, args->transpose_a, args->transpose_b,
                 (long long)i, (long long)j, c[at], expected[at], bound);
    }
}

typedef struct product_case {
  bpt_gemm_args args;
  float *a, *b, *c, *expected, *magnitude;
} product_case;

/* Random operands (with leading dimensions beyond the rows), C and its reference, and |alpha| |A| |B| + |beta C|
 * for the bound. */
static void product_case_make(test_random *random, int64_t m, int64_t n, int64_t k, int ta, int tb, float beta,
                              product_case *t) {
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
  const int64_t a_count = (ta ? k : m) * lda + 1, b_count = (tb ? n : k) * ldb + 1, c_count = m * ldc + 1;
  t->a = malloc((size_t)a_count * sizeof(float));
  t->b = malloc((size_t)b_count * sizeof(float));
  t->c = malloc((size_t)c_count * sizeof(float));
  t->expected = malloc((size_t)c_count * sizeof(float));
  t->magnitude = malloc((size_t)c_count * sizeof(float));
  float *a_abs = malloc((size_t)a_count * sizeof(float)), *b_abs = malloc((size_t)b_count * sizeof(float));
  assert_non_null(t->a), assert_non_null(t->b), assert_non_null(t->c), assert_non_null(t->expected);
  assert_non_null(t->magnitude), assert_non_null(a_abs), assert_non_null(b_abs);
  test_random_fill(random, t->a, a_count, -1.0f, 1.0f);
  test_random_fill(random, t->b, b_count, -1.0f, 1.0f);
  test_random_fill(random, t->c, c_count, -1.0f, 1.0f);
  for (int64_t i = 0; i < a_count; i++) a_abs[i] = fabsf(t->a[i]);
  for (int64_t i = 0; i < b_count; i++) b_abs[i] = fabsf(t->b[i]);
  for (int64_t i = 0; i < c_count; i++) t->magnitude[i] = fabsf(t->c[i]);
  memcpy(t->expected, t->c, (size_t)c_count * sizeof(float));
  t->args = (bpt_gemm_args){.transpose_a = ta, .transpose_b = tb, .m = m, .n = n, .k = k, .alpha = 0.75f,
                            .a = t->a, .lda = lda, .b = t->b, .ldb = ldb, .beta = beta, .c = t->c, .ldc = ldc};
  bpt_gemm_args reference = t->args;
  reference.c = t->expected;
  bpt_bf16_gemm_reference(&reference);
  reference = (bpt_gemm_args){.transpose_a = ta, .transpose_b = tb, .m = m, .n = n, .k = k, .alpha = 0.75f,
                              .a = a_abs, .lda = lda, .b = b_abs, .ldb = ldb, .beta = fabsf(beta), .c = t->magnitude,
                              .ldc = ldc};
  bpt_bf16_gemm_reference(&reference);
  free(a_abs);
  free(b_abs);
}

static void product_case_free(product_case *t) {
  free(t->a);
  free(t->b);
  free(t->c);
  free(t->expected);
  free(t->magnitude);
}

/* Whole tiles, edge tiles in both directions, an odd reduction, more than one reduction block, one row or
 * column, and the linear layers' shapes shrunk to fit a unit test. */
static const int64_t shapes[][3] = {{1, 1, 1},    {8, 48, 256}, {9, 49, 257}, {7, 47, 3}, {17, 97, 513},
                                    {3, 1, 600},  {1, 50, 31},  {64, 10, 77}, {24, 96, 2}, {33, 130, 260}};

static void portable_layout_matches_reference(void **state) {
  (void)state;
  test_random random;
  test_random_seed(&random, 161);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        product_case t;
        product_case_make(&random, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, s % 2 ? 1.0f : 0.0f, &t);
        assert_int_equal(bpt_bf16_gemm_run(NULL, &t.args, bpt_bf16_micro_kernel_scalar), BPT_OK);
        assert_within_summation_bound("portable layout", &t.args, t.c, t.expected, t.magnitude, 1.0);
        /* Outside op(C)'s columns, inside ldc: never written. */
        for (int64_t i = 0; i < t.args.m; i++)
          for (int64_t j = t.args.n; j < t.args.ldc; j++)
            assert_float_equal(t.c[i * t.args.ldc + j], t.expected[i * t.args.ldc + j], 0.0f);
        product_case_free(&t);
      }
}

static void portable_layout_handles_empty_reduction_and_stored_bf16(void **state) {
  (void)state;
  /* k = 0: C = beta C, and beta 0 overwrites NaN. */
  float c[6] = {1.0f, 2.0f, 3.0f, NAN, NAN, NAN}, unused = 0.0f;
  bpt_gemm_args args = {.m = 2, .n = 3, .k = 0, .alpha = 1.0f, .a = &unused, .lda = 1, .b = &unused, .ldb = 3,
                        .beta = 2.0f, .c = c, .ldc = 3};
  args.m = 1;
  assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_scalar), BPT_OK);
  assert_float_equal(c[0], 2.0f, 0.0f);
  assert_float_equal(c[2], 6.0f, 0.0f);
  args.m = 2;
  args.beta = 0.0f;
  assert_int_equal(bpt_bf16_gemm_run(NULL, &args, bpt_bf16_micro_kernel_scalar), BPT_OK);
  for (int i = 0; i < 6; i++) assert_float_equal(c[i], 0.0f, 0.0f);
  /* A stored bf16 B (a saved activation's compressed copy) against the reference on the same codes. */
  test_random random;
  test_random_seed(&random, 162);
  product_case t;
  product_case_make(&random, 13, 50, 129, 1, 0, 1.0f, &t);
  const int64_t b_count = t.args.k * t.args.ldb;
  uint16_t *codes = malloc((size_t)b_count * sizeof *codes);
  assert_non_null(codes);
  for (int64_t i = 0; i < b_count; i++) codes[i] = bpt_bf16_from_f32_bits(f32_bits(t.b[i]));
  t.args.b_dtype = BPT_DTYPE_BF16;
  t.args.b = (const float *)codes;
  assert_int_equal(bpt_bf16_gemm_run(NULL, &t.args, bpt_bf16_micro_kernel_scalar), BPT_OK);
  assert_within_summation_bound("stored bf16 B", &t.args, t.c, t.expected, t.magnitude, 1.0);
  /* A bf16 C (16-bit storage's output) over three reduction blocks: summed in f32 and rounded once, the same bits
   * as the f32 C of the same product rounded (vector row loops, bf16_rows.c), with beta reading the stored C. */
  {
    product_case w;
    product_case_make(&random, 9, 53, 600, 0, 1, 1.0f, &w);
    const int64_t c_count = w.args.m * w.args.ldc;
    uint16_t *narrow_c = malloc((size_t)c_count * sizeof *narrow_c);
    assert_non_null(narrow_c);
    for (int64_t i = 0; i < c_count; i++) {
      narrow_c[i] = bpt_bf16_narrow(w.c[i]);
      w.c[i] = bpt_bf16_widen(narrow_c[i]); /* the f32 run starts from the same C */
    }
    bpt_gemm_args narrow = w.args;
    narrow.c_dtype = BPT_DTYPE_BF16;
    narrow.c = (float *)narrow_c;
    narrow.beta = 0.5f;
    w.args.beta = 0.5f;
    assert_int_equal(bpt_bf16_gemm_run(NULL, &w.args, bpt_bf16_micro_kernel_scalar), BPT_OK);
    assert_int_equal(bpt_bf16_gemm_run(NULL, &narrow, bpt_bf16_micro_kernel_scalar), BPT_OK);
    for (int64_t i = 0; i < w.args.m; i++)
      for (int64_t j = 0; j < w.args.n; j++)
        assert_int_equal(narrow_c[i * w.args.ldc + j], bpt_bf16_narrow(w.c[i * w.args.ldc + j]));
    free(narrow_c);
    product_case_free(&w);
  }
  /* Operands the kernel has no packing for are refused, not misread. */
  t.args.b_dtype = BPT_DTYPE_F16;
  assert_int_equal(bpt_bf16_gemm_run(NULL, &t.args, bpt_bf16_micro_kernel_scalar), BPT_ERR_UNSUPPORTED);
  free(codes);
  product_case_free(&t);
}

/* The bf16 policy's GEMM through the backend table, whatever this CPU runs (vdpbf16ps or the emulation), against
 * the f32 GEMM on operands that are not bf16 values: each operand's rounding moves a product by up to 2^-8 of
 * itself, so |c - c_f32| <= 2^-7 sum |a b| (+ the f32 summation bound). On bf16 values it is held to the
 * bf16 reference within the f32 summation bound, like the kernels. */
static void dispatching_gemm_matches_f32_within_bf16_rounding(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = &context->backend;
  print_message("bf16 policy GEMM on this CPU: %s\n", bpt_cpu_bf16_gemm_mode());
  test_random random;
  test_random_seed(&random, 163);
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        product_case t;
        const float beta = s % 2 ? 1.0f : 0.0f;
        product_case_make(&random, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, beta, &t);
        const int64_t c_count = t.args.m * t.args.ldc + 1;
        float *f32 = malloc((size_t)c_count * sizeof *f32), *c_start = malloc((size_t)c_count * sizeof *c_start);
        assert_non_null(f32), assert_non_null(c_start);
        memcpy(f32, t.c, (size_t)c_count * sizeof *f32);
        memcpy(c_start, t.c, (size_t)c_count * sizeof *c_start);
        bpt_gemm_args plain = t.args;
        plain.c = f32;
        assert_int_equal(backend->vtable->gemm(backend, &plain), BPT_OK);
        t.args.bf16_products = true;
        assert_int_equal(backend->vtable->gemm(backend, &t.args), BPT_OK);
        /* 2^-7 of sum |a b| is 2^17 / (k + 2) in units of the bound's 2^-24 (k + 2). */
        assert_within_summation_bound("bf16 policy vs f32", &t.args, t.c, f32, t.magnitude,
                                      0x1p17 / (double)(t.args.k + 2) + 1.0);
        /* Operands rounded to bf16 beforehand (as the policy stores them): the bf16 reference, tightly. */
        const int64_t a_count = (ta ? t.args.k : t.args.m) * t.args.lda;
        const int64_t b_count = (tb ? t.args.n : t.args.k) * t.args.ldb;
        for (int64_t i = 0; i < a_count; i++) t.a[i] = bf16_value(bpt_bf16_from_f32_bits(f32_bits(t.a[i])));
        for (int64_t i = 0; i < b_count; i++) t.b[i] = bf16_value(bpt_bf16_from_f32_bits(f32_bits(t.b[i])));
        memcpy(t.c, c_start, (size_t)c_count * sizeof *f32);
        assert_int_equal(backend->vtable->gemm(backend, &t.args), BPT_OK);
        assert_within_summation_bound("bf16 policy on bf16 values", &t.args, t.c, t.expected, t.magnitude, 1.0);
        free(f32);
        free(c_start);
        product_case_free(&t);
      }
  bpt_context_destroy(context);
}

/* The native kernel's own code (registers, offsets, stores) with emulated intrinsics gives the scalar layout
 * kernel's tiles bit for bit, alone and through the blocking on edge shapes. What this cannot check is the
 * hardware's vdpbf16ps itself (test_bf16_gemm_native.c, on CPUs with AVX512_BF16). */
static void native_kernel_code_matches_scalar_kernel(void **state) {
  (void)state;
  test_random random;
  test_random_seed(&random, 167);
  const int64_t pair_counts[4] = {1, 2, 37, BPT_BF16_KC / 2};
  for (int t = 0; t < 4; t++) {
    const int64_t pairs = pair_counts[t];
    uint32_t *a_panel = malloc((size_t)(pairs * BPT_BF16_MR) * sizeof *a_panel);
    uint32_t *b_panel = malloc((size_t)(pairs * BPT_BF16_NR) * sizeof *b_panel);
    assert_non_null(a_panel), assert_non_null(b_panel);
    for (int64_t i = 0; i < pairs * BPT_BF16_MR; i++)
      a_panel[i] = bpt_bf16_from_f32_bits(f32_bits(test_random_uniform(&random, -2.0f, 2.0f))) |
                   (uint32_t)bpt_bf16_from_f32_bits(f32_bits(test_random_uniform(&random, -2.0f, 2.0f))) << 16;
    for (int64_t i = 0; i < pairs * BPT_BF16_NR; i++)
      b_panel[i] = bpt_bf16_from_f32_bits(f32_bits(test_random_uniform(&random, -2.0f, 2.0f))) |
                   (uint32_t)bpt_bf16_from_f32_bits(f32_bits(test_random_uniform(&random, -2.0f, 2.0f))) << 16;
    float scalar[BPT_BF16_MR * BPT_BF16_NR], native[BPT_BF16_MR * BPT_BF16_NR];
    bpt_bf16_micro_kernel_scalar(pairs, a_panel, b_panel, scalar);
    emulated_avx512_micro_kernel(pairs, a_panel, b_panel, native);
    for (int i = 0; i < BPT_BF16_MR * BPT_BF16_NR; i++)
      if (memcmp(&scalar[i], &native[i], sizeof(float)) != 0)
        fail_msg("%lld pairs: tile row %d column %d: native code %.9g, scalar %.9g", (long long)pairs,
                 i / BPT_BF16_NR, i % BPT_BF16_NR, native[i], scalar[i]);
    free(a_panel);
    free(b_panel);
  }
  for (size_t s = 0; s < 4; s++)
    for (int ta = 0; ta < 2; ta++) {
      product_case t;
      product_case_make(&random, shapes[s + 2][0], shapes[s + 2][1], shapes[s + 2][2], ta, !ta, 1.0f, &t);
      const int64_t c_count = t.args.m * t.args.ldc;
      float *native = malloc((size_t)c_count * sizeof *native);
      assert_non_null(native);
      memcpy(native, t.c, (size_t)c_count * sizeof *native);
      assert_int_equal(bpt_bf16_gemm_run(NULL, &t.args, bpt_bf16_micro_kernel_scalar), BPT_OK);
      t.args.c = native;
      assert_int_equal(bpt_bf16_gemm_run(NULL, &t.args, emulated_avx512_micro_kernel), BPT_OK);
      assert_memory_equal(native, t.c, (size_t)c_count * sizeof *native);
      free(native);
      product_case_free(&t);
    }
}

/* Records the bf16_products flag of every GEMM the graph runs. */
static bpt_status (*real_gemm)(bpt_backend *backend, const bpt_gemm_args *args);
static int flagged_gemms, plain_gemms;
static bpt_status recording_gemm(bpt_backend *backend, const bpt_gemm_args *args) {
  *(args->bf16_products ? &flagged_gemms : &plain_gemms) += 1;
  return real_gemm(backend, args);
}

/* Under the bf16 policy every product of linear (forward, data and weight gradient) carries the flag, conv2d's
 * kernels are told (their GEMM lowerings pass it on), and other policies leave both alone. */
static void bf16_policy_flags_the_products_of_linear_and_conv2d(void **state) {
  (void)state;
  const bpt_dtype dtypes[3] = {BPT_DTYPE_BF16, BPT_DTYPE_F32, BPT_DTYPE_F16};
  for (int d = 0; d < 3; d++) {
    bpt_context *context = test_context(7);
    bpt_backend_vtable spy = *context->backend.vtable;
    real_gemm = spy.gemm;
    spy.gemm = recording_gemm;
    context->backend.vtable = &spy;
    bpt_graph *graph;
    bpt_node *x, *labels, *conv, *flat, *hidden, *logits, *loss;
    const int64_t image[3] = {2, 5, 5};
    assert_ok(context, bpt_graph_create(context, &graph));
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = dtypes[d];
    assert_ok(context, bpt_graph_set_precision(graph, &options));
    assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
    assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
    assert_ok(context, bpt_layer_conv2d(graph, "conv", x, 4, 3, 1, 1, 1, &conv));
    assert_ok(context, bpt_flatten(graph, "flat", conv, &flat));
    assert_ok(context, bpt_layer_linear(graph, "fc1", flat, 6, BPT_INIT_HE_UNIFORM, &hidden));
    assert_ok(context, bpt_relu(graph, "relu", hidden, &hidden));
    assert_ok(context, bpt_layer_linear(graph, "fc2", hidden, 3, BPT_INIT_HE_UNIFORM, &logits));
    assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
    assert_ok(context, bpt_graph_compile(graph, loss, 4));
    int64_t x_dims[4] = {4, 2, 5, 5}, label_dims[1] = {4};
    bpt_tensor *x_value, *label_value;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, x_dims, &x_value));
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &label_value));
    test_random random;
    test_random_seed(&random, 164);
    test_random_fill(&random, bpt_tensor_data(x_value), 4 * 2 * 5 * 5, -1.0f, 1.0f);
    for (int i = 0; i < 4; i++) ((int32_t *)bpt_tensor_data(label_value))[i] = i % 3;
    assert_ok(context, bpt_graph_set_input(graph, x, x_value));
    assert_ok(context, bpt_graph_set_input(graph, labels, label_value));
    flagged_gemms = plain_gemms = 0;
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_backward(graph));
    /* fc1: forward, weight and data gradient; fc2: the same three. */
    const bool bf16 = dtypes[d] == BPT_DTYPE_BF16;
    assert_int_equal(flagged_gemms, bf16 ? 6 : 0);
    assert_int_equal(plain_gemms, bf16 ? 0 : 6);
    bpt_kernel_node description;
    bpt_node_describe(conv, &description);
    assert_int_equal(description.bf16_products, bf16);
    assert_int_equal(bpt_conv2d_args_of(&description).bf16_products, bf16);
    bpt_tensor_destroy(x_value);
    bpt_tensor_destroy(label_value);
    bpt_graph_destroy(graph);
    bpt_context_destroy(context);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(rounding_is_nearest_even_with_subnormals_flushed),
      cmocka_unit_test(reference_matches_hand_computed_products),
      cmocka_unit_test(packing_lays_out_pairs_with_zero_edges),
      cmocka_unit_test(portable_layout_matches_reference),
      cmocka_unit_test(portable_layout_handles_empty_reduction_and_stored_bf16),
      cmocka_unit_test(native_kernel_code_matches_scalar_kernel),
      cmocka_unit_test(dispatching_gemm_matches_f32_within_bf16_rounding),
      cmocka_unit_test(bf16_policy_flags_the_products_of_linear_and_conv2d),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
