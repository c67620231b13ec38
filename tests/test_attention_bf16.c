/* The CPU attention's bf16 block products (src/backends/cpu/attention_bf16.c), run under the bf16 policy on CPUs
 * with AVX512_BF16: the packers and the product against a plain double reference on odd sizes (a pair padded at
 * every edge), and whole attention graphs under the bf16 policy against the same graphs in f32, forward and
 * backward, with odd head widths, lengths that are no multiple of the 64 x 64 blocks and causal masks whose
 * first visible query is odd. The policy rounds the probabilities and dS to bf16, so the two agree to bf16's
 * precision, not bit for bit; a packing or offset error is off by the size of the values themselves. */
#define _DEFAULT_SOURCE /* setenv */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/attention_bf16.h"
#include "backends/cpu/gemm_bf16.h"
#include "bptrain/precision.h"
#include "core/graph.h"
#include "test_support.h"

static float bf16_value(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  bits = (uint32_t)bpt_bf16_from_f32_bits(bits) << 16;
  memcpy(&x, &bits, sizeof x);
  return x;
}

static bool native(void) {
  if (bpt_cpu_has_avx512_bf16()) return true;
  print_message("skipped: this CPU has no AVX512_BF16, so the attention runs its f32 products under bf16 too\n");
  return false;
}

/* C = alpha A B + beta C for A (m x k) and B (k x n) packed every way the attention packs them. For odd k, B is
 * packed from one row more than A has columns, as where a block of P meets the next key's values: only A's
 * zero padding keeps that row out of the sum. */
static void products_match_reference(void **state) {
  (void)state;
  if (!native()) return;
  test_random random;
  test_random_seed(&random, 3);
  const int64_t shapes[][3] = {{5, 7, 3}, {64, 64, 64}, {17, 33, 9}, {1, 70, 65}, {9, 130, 2}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t m = shapes[t][0], n = shapes[t][1], k = shapes[t][2];
    const int64_t lda = k + 3, ldbt = k + 2, ldb = n + 2, ldc = n + 5, pairs = (k + 1) / 2;
    float *a = malloc((size_t)(m * lda) * sizeof *a), *bt = malloc((size_t)(n * ldbt) * sizeof *bt);
    const int64_t kb = k + k % 2; /* B's reduction rows: a real row beyond A's last column */
    float *b = malloc((size_t)(kb * ldb) * sizeof *b), *c = malloc((size_t)(m * ldc) * sizeof *c);
    float *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
    const int64_t words_b = pairs * bpt_attention_vectors(n);
    uint32_t *a_rows = malloc((size_t)(m * pairs) * sizeof *a_rows), *a_pairs = calloc((size_t)(pairs * m + 16), 4);
    uint32_t *b_columns = malloc((size_t)words_b * 4), *b_rows = malloc((size_t)words_b * 4);
    assert_true(a && bt && b && c && c0 && a_rows && a_pairs && b_columns && b_rows);
    test_random_fill(&random, a, m * lda, -1.0f, 1.0f);
    test_random_fill(&random, b, kb * ldb, -1.0f, 1.0f);
    for (int64_t j = 0; j < n; j++)
      for (int64_t p = 0; p < kb; p++) bt[j * ldbt + p] = b[p * ldb + j];
    test_random_fill(&random, c0, m * ldc, -1.0f, 1.0f);
    bpt_attention_pack_rows(a, lda, m, k, a_rows, pairs);
    /* A transposed from pairs of rows of A^T (m columns): the attention's P^T and dS^T. */
    float *at = malloc((size_t)(k * m) * sizeof *at);
    assert_non_null(at);
    for (int64_t r = 0; r < m; r++)
      for (int64_t p = 0; p < k; p++) at[p * m + r] = a[r * lda + p];
    bpt_attention_pack_row_pairs(at, m, k, m, a_pairs, m);
    bpt_attention_pack_column_pairs(bt, ldbt, n, kb, b_columns, bpt_attention_vectors(n));
    bpt_attention_pack_row_pairs(b, ldb, kb, n, b_rows, bpt_attention_vectors(n));
    for (int form = 0; form < 4; form++) {
      memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);
      const bool transposed_a = form & 1, b_from_columns = form & 2;
      const float beta = form == 3 ? 0.0f : 0.5f;
      bpt_attention_bf16_product(m, n, pairs, 1.25f, transposed_a ? a_pairs : a_rows, transposed_a ? 1 : pairs,
                                 transposed_a ? m : 1, b_from_columns ? b_columns : b_rows,
                                 bpt_attention_vectors(n), beta, c, ldc);
      for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
          double sum = 0.0;
          for (int64_t p = 0; p < k; p++) sum += (double)bf16_value(a[r * lda + p]) * bf16_value(b[p * ldb + j]);
          const double expected = 1.25 * sum + beta * c0[r * ldc + j];
          if (fabs(c[r * ldc + j] - expected) > 1e-4 * (1.0 + fabs(expected)))
            fail_msg("shape %lld x %lld x %lld form %d: c[%lld][%lld] = %g, expected %g", (long long)m, (long long)n,
                     (long long)k, form, (long long)r, (long long)j, c[r * ldc + j], expected);
        }
      /* Past the n columns of C nothing is written. */
      for (int64_t r = 0; r < m; r++)
        for (int64_t j = n; j < ldc; j++) assert_true(c[r * ldc + j] == c0[r * ldc + j]);
    }
    free(a), free(bt), free(b), free(c), free(c0), free(at);
    free(a_rows), free(a_pairs), free(b_columns), free(b_rows);
  }
}

/* A pair's missing second element and the columns past the matrix pack as 0 even where the memory beyond holds
 * NaN (the next head's channels, the next row): B's padding meets A's in a product, and 0 x NaN would be NaN. */
static void padding_is_zero_beside_nan(void **state) {
  (void)state;
  if (!native()) return;
  enum { LD = 8, ROWS = 5, COLS = 3, OUT = 32 };
  float x[ROWS * LD + LD];
  for (int i = 0; i < ROWS * LD + LD; i++) x[i] = NAN;
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) x[r * LD + c] = (float)(r * COLS + c + 1);
  uint32_t words[OUT * OUT];
  memset(words, 0xff, sizeof words);
  bpt_attention_pack_column_pairs(x, LD, ROWS, COLS, words, OUT);
  for (int p = 0; p < (COLS + 1) / 2; p++)
    for (int r = 0; r < OUT; r++) {
      const uint32_t expected_high = 2 * p + 1 < COLS ? 1u : 0u; /* a value, or the pad */
      if (r >= ROWS) assert_int_equal(words[p * OUT + r], 0);
      else if (!expected_high) assert_int_equal(words[p * OUT + r] >> 16, 0);
    }
  memset(words, 0xff, sizeof words);
  bpt_attention_pack_row_pairs(x, LD, ROWS, COLS, words, OUT);
  for (int c = 0; c < OUT; c++) {
    if (c >= COLS) assert_int_equal(words[(ROWS / 2) * OUT + c], 0);
    else assert_int_equal(words[(ROWS / 2) * OUT + c] >> 16, 0); /* row 5 does not exist */
  }
  memset(words, 0xff, sizeof words);
  bpt_attention_pack_rows(x, LD, ROWS, COLS, words, OUT);
  for (int r = 0; r < ROWS; r++) assert_int_equal(words[r * OUT + COLS / 2] >> 16, 0);
}

typedef struct run {
  float *output, *gradients;
  int64_t output_count, gradient_count;
} run;

/* x (N, T, C) -> linear q, and y (N, Tk, C) -> linear k, v -> attention -> MSE against a target; one forward
 * and backward, under the bf16 policy or in f32, on inputs and weights that are bf16 values already. */
static run attention_run(bool bf16, int64_t queries, int64_t keys, int64_t channels, int64_t heads, bool causal) {
  enum { BATCH = 2 };
  bpt_context *context = test_context(9);
  bpt_graph *graph;
  assert_ok(context, bpt_graph_create(context, &graph));
  if (bf16) {
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = BPT_DTYPE_BF16;
    assert_ok(context, bpt_graph_set_precision(graph, &options));
  }
  bpt_node *x, *y, *target, *q, *k, *v, *out, *loss;
  assert_ok(context, bpt_graph_input_sequence(graph, "x", BPT_DTYPE_F32, queries, 1, &channels, &x));
  assert_ok(context, bpt_graph_input_sequence(graph, "y", BPT_DTYPE_F32, keys, 1, &channels, &y));
  assert_ok(context, bpt_graph_input_sequence(graph, "target", BPT_DTYPE_F32, queries, 1, &channels, &target));
  assert_ok(context, bpt_layer_linear(graph, "wq", x, channels, BPT_INIT_XAVIER_UNIFORM, &q));
  assert_ok(context, bpt_layer_linear(graph, "wk", y, channels, BPT_INIT_XAVIER_UNIFORM, &k));
  assert_ok(context, bpt_layer_linear(graph, "wv", y, channels, BPT_INIT_XAVIER_UNIFORM, &v));
  assert_ok(context, bpt_scaled_dot_product_attention(graph, "attention", q, k, v, heads, causal, 0.0f, &out));
  assert_ok(context, bpt_mse_loss(graph, "loss", out, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  run r = {.gradient_count = bpt_graph_parameter_count(graph), .output_count = BATCH * queries * channels};
  float *parameters = malloc((size_t)r.gradient_count * sizeof *parameters);
  assert_non_null(parameters);
  assert_ok(context, bpt_graph_read_parameters(graph, parameters, r.gradient_count));
  for (int64_t i = 0; i < r.gradient_count; i++) parameters[i] = bf16_value(parameters[i]);
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, r.gradient_count));
  free(parameters);
  test_random random;
  test_random_seed(&random, 21);
  bpt_node *inputs[3] = {x, y, target};
  const int64_t lengths[3] = {queries, keys, queries};
  for (int i = 0; i < 3; i++) {
    const int64_t dims[3] = {BATCH, lengths[i], channels};
    bpt_tensor *values;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &values));
    float *data = bpt_tensor_data(values);
    test_random_fill(&random, data, BATCH * lengths[i] * channels, -2.0f, 2.0f);
    for (int64_t e = 0; e < BATCH * lengths[i] * channels; e++) data[e] = bf16_value(data[e]);
    assert_ok(context, bpt_graph_set_input(graph, inputs[i], values));
    bpt_tensor_destroy(values);
  }
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  r.output = malloc((size_t)r.output_count * sizeof *r.output);
  r.gradients = malloc((size_t)r.gradient_count * sizeof *r.gradients);
  assert_true(r.output && r.gradients);
  const int64_t dims[3] = {BATCH, queries, channels};
  bpt_tensor *read;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, dims, &read));
  assert_ok(context, bpt_graph_read(graph, out, read));
  memcpy(r.output, bpt_tensor_data(read), (size_t)r.output_count * sizeof *r.output);
  bpt_tensor_destroy(read);
  assert_ok(context, bpt_graph_read_gradients(graph, r.gradients, r.gradient_count));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return r;
}

static void graphs_agree_with_f32(void **state) {
  (void)state;
  if (!native()) return;
  /* queries, keys, channels, heads, causal */
  const int64_t cases[][5] = {{70, 67, 6, 2, 1}, {130, 130, 128, 2, 1}, {33, 90, 20, 4, 0}, {5, 150, 64, 1, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    run f32 = attention_run(false, cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4] != 0);
    run bf16 = attention_run(true, cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4] != 0);
    const double output_error = test_relative_error(bf16.output, f32.output, f32.output_count);
    const double gradient_error = test_relative_error(bf16.gradients, f32.gradients, f32.gradient_count);
    print_message("case %zu: relative error of the output %.2e, of the weight gradients %.2e\n", c, output_error,
                  gradient_error);
    assert_true(output_error < 1e-2);
    assert_true(gradient_error < 3e-2);
    free(f32.output), free(f32.gradients), free(bf16.output), free(bf16.gradients);
  }
}

int main(void) {
  /* The bf16 unit's kernels are this test's subject, also on CPUs whose f32 units take the bf16 policy's
   * products by default (bf16_unit.h); a setting already there (BPT_BF16_GEMM=own) stays. */
  const char *setting = getenv("BPT_BF16_GEMM");
  if (!setting || !*setting) setenv("BPT_BF16_GEMM", "bf16", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(products_match_reference),
      cmocka_unit_test(padding_is_zero_beside_nan),
      cmocka_unit_test(graphs_agree_with_f32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
