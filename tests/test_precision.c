/* Mixed precision: the CPU cast, unscale and narrow-operand GEMM kernels against the scalar reference,
 * the dynamic loss scaler (skip and back off on overflow, grow after clean steps, rescue of gradients that
 * underflow in f16), the refusal of a non-finite step naming the op, and the binary stochastic neuron
 * against its straight-through formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/graph.h"
#include "base/number_format.h"
#include "test_support.h"

static bpt_backend *backend_of(bpt_context *context) { return &context->backend; }

static void cast_kernel_matches_scalar_reference(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = backend_of(context);
  enum { COUNT = 100003 }; /* above the parallel threshold, not a multiple of anything */
  float *values = malloc(COUNT * sizeof *values), *back = malloc(COUNT * sizeof *back);
  uint16_t *half = malloc(COUNT * sizeof *half);
  test_random random;
  test_random_seed(&random, 3);
  for (int i = 0; i < COUNT; i++) values[i] = ldexpf(test_random_uniform(&random, -1.0f, 1.0f), i % 40 - 20);
  values[7] = INFINITY;
  values[8] = 70000.0f;
  values[9] = NAN;
  /* Exact ties, where nearest-even and half-away rounding differ (random values almost never hit one): bf16
   * keeps 8 significant bits, f16 11. */
  values[10] = 1.0f + 0x1p-8f;
  values[11] = 1.0f + 3 * 0x1p-8f;
  values[12] = -(1.0f + 0x1p-8f);
  values[13] = 1.0f + 0x1p-11f;
  values[14] = 1.0f + 3 * 0x1p-11f;
  const uint32_t low_payload_nan = 0x7f800001u; /* rounded as a number, its payload is cut off: infinity */
  memcpy(&values[15], &low_payload_nan, sizeof low_payload_nan);
  bpt_dtype dtypes[] = {BPT_DTYPE_F16, BPT_DTYPE_BF16, BPT_DTYPE_FP8_E4M3, BPT_DTYPE_FP8_E5M2};
  for (size_t d = 0; d < 4; d++) {
    const bpt_number_format *format = bpt_number_format_of(dtypes[d]);
    bool narrow8 = bpt_dtype_size(dtypes[d]) == 1;
    float scale = narrow8 ? 0.25f : 1.0f;
    assert_int_equal(backend->vtable->cast(backend, COUNT, BPT_DTYPE_F32, values, dtypes[d], half, scale), BPT_OK);
    assert_int_equal(backend->vtable->cast(backend, COUNT, dtypes[d], half, BPT_DTYPE_F32, back, 1.0f / scale),
                     BPT_OK);
    for (int i = 0; i < COUNT; i++) {
      uint32_t code = narrow8 ? ((uint8_t *)half)[i] : half[i];
      /* FP8 saturates; f16 and bf16 overflow to infinity so loss scaling can see it. */
      uint32_t expected = bpt_number_format_encode(format, values[i] * scale, narrow8, false, 0);
      if (code != expected) fail_msg("%s element %d: 0x%x, expected 0x%x", bpt_dtype_name(dtypes[d]), i, code, expected);
      float decoded = bpt_number_format_decode(format, expected) * (1.0f / scale);
      if (memcmp(&decoded, &back[i], sizeof decoded) != 0 && !(isnan(decoded) && isnan(back[i])))
        fail_msg("%s element %d decodes to %g, expected %g", bpt_dtype_name(dtypes[d]), i, (double)back[i],
                 (double)decoded);
    }
    /* round_to_dtype is decode(encode(x)) in place. */
    memcpy(back, values, COUNT * sizeof *back);
    assert_int_equal(backend->vtable->round_to_dtype(backend, COUNT, dtypes[d], back), BPT_OK);
    for (int i = 0; i < COUNT; i++) {
      float expected = bpt_number_format_decode(format, bpt_number_format_encode(format, values[i], narrow8, false, 0));
      assert_true(expected == back[i] || (isnan(expected) && isnan(back[i])));
    }
    /* Stochastic cast: only neighbours, and the same seed gives the same codes. */
    uint16_t *again = malloc(COUNT * sizeof *again);
    assert_int_equal(backend->vtable->cast_stochastic(backend, COUNT, values, dtypes[d], half, 1.0f, 9), BPT_OK);
    assert_int_equal(backend->vtable->cast_stochastic(backend, COUNT, values, dtypes[d], again, 1.0f, 9), BPT_OK);
    assert_memory_equal(half, again, COUNT * bpt_dtype_size(dtypes[d]));
    free(again);
  }
  assert_int_equal(backend->vtable->cast(backend, 4, BPT_DTYPE_I32, values, BPT_DTYPE_F16, half, 1.0f), BPT_ERR_DTYPE);
  free(values);
  free(back);
  free(half);
  bpt_context_destroy(context);
}

/* y = x W^T + b on one sample x = (1, 1), after writing parameters (W0, W1, b); also reads W and b back. */
static void one_linear(const bpt_precision_options *options, const float parameters[2][3], float y[2], float w[2],
                       float b[1], size_t *parameter_bytes) {
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *t, *weight, *bias, *out, *loss;
  const int64_t features = 2, weight_dims[2] = {1, 2}, bias_dims[1] = {1}, one = 1;
  assert_ok(context, bpt_graph_create(context, &graph));
  if (options) assert_ok(context, bpt_graph_set_precision(graph, options));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "t", BPT_DTYPE_F32, 1, &one, &t));
  assert_ok(context, bpt_graph_parameter(graph, "w", 2, weight_dims, BPT_INIT_ZEROS, &weight));
  assert_ok(context, bpt_graph_parameter(graph, "b", 1, bias_dims, BPT_INIT_ZEROS, &bias));
  assert_ok(context, bpt_linear(graph, "y", x, weight, bias, &out));
  assert_ok(context, bpt_mse_loss(graph, "loss", out, t, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 1));
  bpt_graph_memory_stats memory = {.size = sizeof memory};
  assert_ok(context, bpt_graph_memory(graph, &memory));
  *parameter_bytes = memory.parameter_bytes;
  const int64_t dims[2] = {1, 2}, out_dims[2] = {1, 1};
  bpt_tensor *x_values, *t_values, *y_values, *w_values, *b_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, out_dims, &t_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, out_dims, &y_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, weight_dims, &w_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 1, bias_dims, &b_values));
  float *xs = bpt_tensor_data(x_values);
  xs[0] = xs[1] = 1.0f;
  ((float *)bpt_tensor_data(t_values))[0] = 0.0f;
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_set_input(graph, t, t_values));
  for (int run = 0; run < 2; run++) { /* the second run checks that forward refreshes the copies */
    assert_ok(context, bpt_graph_write_parameters(graph, parameters[run], 3));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_read(graph, out, y_values));
    y[run] = ((float *)bpt_tensor_data(y_values))[0];
  }
  assert_ok(context, bpt_graph_read(graph, weight, w_values));
  assert_ok(context, bpt_graph_read(graph, bias, b_values));
  memcpy(w, bpt_tensor_data(w_values), 2 * sizeof *w);
  b[0] = ((float *)bpt_tensor_data(b_values))[0];
  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(t_values);
  bpt_tensor_destroy(y_values);
  bpt_tensor_destroy(w_values);
  bpt_tensor_destroy(b_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* Under the bf16 policy forward reads every trainable parameter rounded to bf16, refreshed from the masters
 * each forward, whether through the bf16 copy (a weight only linears read, which has no f32 copy) or the f32
 * copy (the bias); bpt_graph_read gives what forward read, and bpt_graph_memory counts the copies there are. fine = 1 + 2^-9 rounds to 1 (a tie, to even), and
 * y is stored or rounded as bf16 too: the first run's y is 0 (f32: 2^-9); the second's is 2^-8 + 1, a tie that
 * rounds to 1, where an unrounded bias would give 2^-8 + fine, which rounds up to 1 + 2^-7. */
static void bf16_policy_forward_reads_rounded_parameters(void **state) {
  (void)state;
  const float fine = 1.0f + 0x1p-9f;
  const float parameters[2][3] = {{fine, -1.0f, 0.0f}, {0x1p-8f * fine, 0.0f, fine}};
  float y[2], w[2], b[1];
  size_t bytes;
  one_linear(NULL, parameters, y, w, b, &bytes);
  /* Two parameters of 16 aligned values each: masters and gradients. */
  assert_int_equal(bytes, 2 * 32 * sizeof(float));
  if (y[0] != 0x1p-9f || y[1] != 0x1p-8f * fine + fine) fail_msg("f32: y = %a then %a", y[0], y[1]);
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_BF16;
  one_linear(&options, parameters, y, w, b, &bytes);
  /* Then 2-byte copies of both, and an f32 copy of the bias alone. */
  assert_int_equal(bytes, 2 * 32 * sizeof(float) + 32 * sizeof(uint16_t) + 16 * sizeof(float));
  if (y[0] != 0.0f || y[1] != 1.0f) fail_msg("bf16 policy: y = %a then %a, expected 0 then 1", y[0], y[1]);
  if (w[0] != 0x1p-8f || w[1] != 0.0f || b[0] != 1.0f) fail_msg("bf16 policy: read W = (%a, %a), b = %a", w[0], w[1], b[0]);
}

/* The bf16 casts have their own loops on the bits (the bf16 policy casts every weight each step): every bf16 code
 * widens to the reference's f32 bit for bit, signalling NaNs made quiet; f32 patterns spread over the whole
 * range, with every rounding position's ties and the NaN payloads, narrow to the reference's code. */
static void bf16_casts_match_reference_bit_for_bit(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_backend *backend = backend_of(context);
  const bpt_number_format *format = bpt_number_format_of(BPT_DTYPE_BF16);
  enum { CODES = 65536, PATTERNS = 3 * 65536 };
  uint16_t *codes = malloc(PATTERNS * sizeof *codes);
  float *wide = malloc(PATTERNS * sizeof *wide);
  assert_non_null(codes);
  assert_non_null(wide);
  for (int i = 0; i < CODES; i++)
    codes[i] = (uint16_t)i;
  assert_int_equal(backend->vtable->cast(backend, CODES, BPT_DTYPE_BF16, codes, BPT_DTYPE_F32, wide, 1.0f), BPT_OK);
  for (int i = 0; i < CODES; i++) {
    const float expected = bpt_number_format_decode(format, (uint32_t)i);
    if (memcmp(&expected, &wide[i], sizeof expected) != 0) fail_msg("bf16 code 0x%04x widens to the wrong bits", i);
  }
  /* Upper halves from every code; lower halves: a tie (0x8000), just below and above it, and a varied one. */
  const uint32_t lows[] = {0x8000u, 0x7fffu, 0x8001u};
  for (int i = 0; i < PATTERNS; i++) {
    const uint32_t bits = ((uint32_t)(i % CODES) << 16) | (i < CODES ? lows[0] : i < 2 * CODES ? lows[1] : lows[2]);
    memcpy(&wide[i], &bits, sizeof bits);
  }
  assert_int_equal(backend->vtable->cast(backend, PATTERNS, BPT_DTYPE_F32, wide, BPT_DTYPE_BF16, codes, 1.0f), BPT_OK);
  for (int i = 0; i < PATTERNS; i++) {
    const uint32_t expected = bpt_number_format_encode(format, wide[i], false, false, 0);
    if (codes[i] != expected) fail_msg("f32 pattern %d narrows to 0x%04x, expected 0x%04x", i, codes[i], expected);
  }
  free(codes);
  free(wide);
  bpt_context_destroy(context);
}

static void unscale_check_finite_kernel(void **state) {
  (void)state;
  bpt_context *context = test_context(2);
  bpt_backend *backend = backend_of(context);
  enum { COUNT = 70001 };
  float *values = malloc(COUNT * sizeof *values);
  for (int i = 0; i < COUNT; i++) values[i] = (float)(i % 97) - 48.0f;
  int32_t flag = 0;
  assert_int_equal(backend->vtable->unscale_check_finite(backend, COUNT, values, 0.25f, &flag), BPT_OK);
  assert_int_equal(flag, 0);
  for (int i = 0; i < COUNT; i++) assert_true(values[i] == ((float)(i % 97) - 48.0f) * 0.25f);
  float poisons[] = {INFINITY, -INFINITY, NAN};
  for (int p = 0; p < 3; p++) {
    values[COUNT - 1 - p * 1000] = poisons[p];
    flag = 0;
    assert_int_equal(backend->vtable->unscale_check_finite(backend, COUNT, values, 1.0f, &flag), BPT_OK);
    assert_int_equal(flag, 1);
    values[COUNT - 1 - p * 1000] = 1.0f;
  }
  free(values);
  bpt_context_destroy(context);
}

static void narrow_gemm_matches_reference(void **state) {
  (void)state;
  bpt_context *context = test_context(3);
  bpt_backend *backend = backend_of(context);
  enum { M = 37, N = 29, K = 53 };
  float a[K * M], b[K * N], c[M * N], a_wide[K * M], b_wide[K * N], c_wide[M * N], expected[M * N];
  uint16_t a_half[K * M], b_brain[K * N], c_half[M * N];
  test_random random;
  test_random_seed(&random, 4);
  test_random_fill(&random, a, K * M, -2.0f, 2.0f);
  test_random_fill(&random, b, K * N, -2.0f, 2.0f);
  test_random_fill(&random, c, M * N, -1.0f, 1.0f);
  /* A transposed (K, M) in f16, B (K, N) in bf16, C (M, N) in f16 with beta 0.5. */
  assert_int_equal(backend->vtable->cast(backend, K * M, BPT_DTYPE_F32, a, BPT_DTYPE_F16, a_half, 1.0f), BPT_OK);
  assert_int_equal(backend->vtable->cast(backend, K * N, BPT_DTYPE_F32, b, BPT_DTYPE_BF16, b_brain, 1.0f), BPT_OK);
  assert_int_equal(backend->vtable->cast(backend, M * N, BPT_DTYPE_F32, c, BPT_DTYPE_F16, c_half, 1.0f), BPT_OK);
  assert_int_equal(backend->vtable->cast(backend, K * M, BPT_DTYPE_F16, a_half, BPT_DTYPE_F32, a_wide, 1.0f), BPT_OK);
  assert_int_equal(backend->vtable->cast(backend, K * N, BPT_DTYPE_BF16, b_brain, BPT_DTYPE_F32, b_wide, 1.0f), BPT_OK);
  assert_int_equal(backend->vtable->cast(backend, M * N, BPT_DTYPE_F16, c_half, BPT_DTYPE_F32, c_wide, 1.0f), BPT_OK);
  memcpy(expected, c_wide, sizeof expected);
  test_reference_gemm(1, 0, M, N, K, 1.5f, a_wide, M, b_wide, N, 0.5f, expected, N);
  bpt_gemm_args args = {.transpose_a = true, .a_dtype = BPT_DTYPE_F16, .b_dtype = BPT_DTYPE_BF16,
                        .c_dtype = BPT_DTYPE_F16, .m = M, .n = N, .k = K, .alpha = 1.5f,
                        .a = (const float *)a_half, .lda = M, .b = (const float *)b_brain, .ldb = N, .beta = 0.5f,
                        .c = (float *)c_half, .ldc = N};
  assert_int_equal(backend->vtable->gemm(backend, &args), BPT_OK);
  const bpt_number_format *f16 = bpt_number_format_of(BPT_DTYPE_F16);
  for (int i = 0; i < M * N; i++) {
    /* f32 accumulation, then one rounding to f16: within one f16 ulp of the exact result. */
    float got = bpt_number_format_decode(f16, c_half[i]);
    assert_true(fabsf(got - expected[i]) <= ldexpf(fabsf(expected[i]), -10) + 1e-3f);
  }
  bpt_context_destroy(context);
}

/* A one-layer regression graph: y = x W^T (no bias), loss = mean (y - t)^2. */
typedef struct regression {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *t, *y, *loss;
  bpt_optimizer *optimizer;
  bpt_tensor *x_values, *t_values;
  int64_t features, batch;
} regression;

static void regression_create(regression *r, int64_t batch, int64_t features, const bpt_precision_options *options,
                              float learning_rate) {
  memset(r, 0, sizeof *r);
  r->features = features;
  r->batch = batch;
  r->context = test_context(5);
  bpt_context *context = r->context;
  bpt_node *weight;
  int64_t weight_dims[2] = {features, features};
  assert_ok(context, bpt_graph_create(context, &r->graph));
  if (options) assert_ok(context, bpt_graph_set_precision(r->graph, options));
  assert_ok(context, bpt_graph_input(r->graph, "x", BPT_DTYPE_F32, 1, &features, &r->x));
  assert_ok(context, bpt_graph_input(r->graph, "t", BPT_DTYPE_F32, 1, &features, &r->t));
  assert_ok(context, bpt_graph_parameter(r->graph, "w", 2, weight_dims, BPT_INIT_ZEROS, &weight));
  assert_ok(context, bpt_linear(r->graph, "y", r->x, weight, NULL, &r->y));
  assert_ok(context, bpt_mse_loss(r->graph, "loss", r->y, r->t, &r->loss));
  assert_ok(context, bpt_graph_compile(r->graph, r->loss, batch));
  bpt_optimizer_options optimizer_options = bpt_optimizer_options_default();
  optimizer_options.learning_rate = learning_rate;
  assert_ok(context, bpt_optimizer_create(r->graph, &optimizer_options, &r->optimizer));
  int64_t dims[2] = {batch, features};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &r->x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &r->t_values));
  /* W = identity */
  float *w = calloc((size_t)(features * features), sizeof *w);
  for (int64_t i = 0; i < features; i++) w[i * features + i] = 1.0f;
  assert_ok(context, bpt_graph_write_parameters(r->graph, w, features * features));
  free(w);
}

static void regression_fill(regression *r, float x, float t) {
  float *xs = bpt_tensor_data(r->x_values), *ts = bpt_tensor_data(r->t_values);
  for (int64_t i = 0; i < r->batch * r->features; i++) {
    xs[i] = x;
    ts[i] = t;
  }
  assert_ok(r->context, bpt_graph_set_input(r->graph, r->x, r->x_values));
  assert_ok(r->context, bpt_graph_set_input(r->graph, r->t, r->t_values));
}

static void regression_step(regression *r) {
  assert_ok(r->context, bpt_graph_forward(r->graph));
  assert_ok(r->context, bpt_graph_backward(r->graph));
  assert_ok(r->context, bpt_optimizer_step(r->optimizer));
}

static void regression_destroy(regression *r) {
  bpt_tensor_destroy(r->x_values);
  bpt_tensor_destroy(r->t_values);
  bpt_optimizer_destroy(r->optimizer);
  bpt_graph_destroy(r->graph);
  bpt_context_destroy(r->context);
}

static float first_parameter(regression *r) {
  int64_t count = bpt_graph_parameter_count(r->graph);
  float *values = malloc((size_t)count * sizeof *values);
  assert_ok(r->context, bpt_graph_read_parameters(r->graph, values, count));
  float first = values[0];
  free(values);
  return first;
}

/* The defaults are the issue's: 2^16, x2 after 2000 clean steps, x0.5 on overflow. */
static void loss_scaler_defaults(void **state) {
  (void)state;
  bpt_precision_options options = bpt_precision_options_default();
  assert_true(options.initial_loss_scale == 65536.0f && options.growth_interval == 2000 &&
              options.growth_factor == 2.0f && options.backoff_factor == 0.5f);
  options.compute_dtype = BPT_DTYPE_F16;
  regression r;
  regression_create(&r, 2, 4, &options, 0.01f);
  assert_true(bpt_graph_loss_scale(r.graph) == 65536.0f); /* automatic: dynamic for f16 */
  regression_destroy(&r);
  options.compute_dtype = BPT_DTYPE_BF16;
  regression_create(&r, 2, 4, &options, 0.01f);
  assert_true(bpt_graph_loss_scale(r.graph) == 1.0f); /* automatic: none for bf16 */
  regression_destroy(&r);
}

/* An overflowing gradient skips the update (parameters untouched) and halves the scale. */
static void loss_scaler_skips_and_halves_on_overflow(void **state) {
  (void)state;
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_F16;
  options.initial_loss_scale = 0x1p30f; /* the gradient of y, 2 (y - t) / count * 2^30, overflows f16 */
  regression r;
  regression_create(&r, 2, 4, &options, 0.1f);
  regression_fill(&r, 1.0f, 3.0f);
  regression_step(&r);
  assert_int_equal(bpt_graph_skipped_steps(r.graph), 1);
  assert_true(bpt_graph_loss_scale(r.graph) == 0x1p29f);
  assert_true(first_parameter(&r) == 1.0f);
  assert_int_equal(bpt_optimizer_step_count(r.optimizer), 0);
  /* It keeps halving until the gradients fit, then updates. */
  for (int i = 0; i < 30 && bpt_graph_skipped_steps(r.graph) == i + 1; i++) regression_step(&r);
  int64_t skipped = bpt_graph_skipped_steps(r.graph);
  assert_true(skipped > 1 && skipped < 30);
  assert_true(bpt_graph_loss_scale(r.graph) == ldexpf(1.0f, 30 - (int)skipped));
  assert_int_equal(bpt_optimizer_step_count(r.optimizer), 1);
  assert_true(first_parameter(&r) != 1.0f);
  regression_destroy(&r);
}

/* An inf injected into a parameter makes the gradients non-finite: the step is skipped, the scale halved. */
static void loss_scaler_skips_injected_inf(void **state) {
  (void)state;
  bpt_precision_options options = bpt_precision_options_default();
  options.loss_scaling = BPT_LOSS_SCALING_DYNAMIC; /* in f32 too */
  regression r;
  regression_create(&r, 2, 4, &options, 0.1f);
  regression_fill(&r, 1.0f, 3.0f);
  assert_ok(r.context, bpt_graph_forward(r.graph));
  assert_ok(r.context, bpt_graph_backward(r.graph));
  float gradients[16];
  assert_ok(r.context, bpt_graph_read_gradients(r.graph, gradients, 16));
  /* Inject: overwrite one gradient with inf through the backend, as an overflowing kernel would leave it. */
  float infinity = INFINITY;
  bpt_backend *backend = backend_of(r.context);
  assert_int_equal(backend->vtable->upload(backend, r.graph->gradient_block + 5, &infinity, sizeof infinity), BPT_OK);
  assert_ok(r.context, bpt_optimizer_step(r.optimizer));
  assert_int_equal(bpt_graph_skipped_steps(r.graph), 1);
  assert_true(bpt_graph_loss_scale(r.graph) == 32768.0f);
  assert_true(first_parameter(&r) == 1.0f);
  regression_destroy(&r);
}

/* N clean steps double the scale; an overflow restarts the count. */
static void loss_scaler_grows_after_clean_steps(void **state) {
  (void)state;
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_F16;
  options.initial_loss_scale = 256.0f;
  options.growth_interval = 3;
  regression r;
  regression_create(&r, 2, 4, &options, 0.01f);
  regression_fill(&r, 1.0f, 1.5f);
  float expected[] = {256, 256, 512, 512, 512, 1024, 1024};
  for (int i = 0; i < 7; i++) {
    regression_step(&r);
    if (bpt_graph_loss_scale(r.graph) != expected[i])
      fail_msg("after step %d the scale is %g, expected %g", i + 1, (double)bpt_graph_loss_scale(r.graph),
               (double)expected[i]);
  }
  assert_int_equal(bpt_graph_skipped_steps(r.graph), 0);
  assert_int_equal(bpt_optimizer_step_count(r.optimizer), 7);
  regression_destroy(&r);
}

/* The gradient of y is 2 (y - t) / count = -2^-27 per element here: below half the smallest f16 subnormal
 * (2^-25), so f16 storage flushes it to zero; scaled by 2^16 it is 2^-11 and survives, and the unscaled
 * weight gradient matches f32. */
static void loss_scaling_rescues_underflowing_gradient(void **state) {
  (void)state;
  enum { BATCH = 256, FEATURES = 256 };
  float x = 0.25f, t = 0.25f + 0x1p-12f; /* t is one f16 ulp above x, so y - t survives forward in f16 */
  float results[3];
  for (int mode = 0; mode < 3; mode++) {
    bpt_precision_options options = bpt_precision_options_default();
    options.compute_dtype = mode == 0 ? BPT_DTYPE_F32 : BPT_DTYPE_F16;
    options.loss_scaling = mode == 1 ? BPT_LOSS_SCALING_NONE : BPT_LOSS_SCALING_AUTO;
    regression r;
    regression_create(&r, BATCH, FEATURES, &options, 0.0f);
    regression_fill(&r, x, t);
    regression_step(&r); /* learning rate 0: the step only unscales */
    float *gradients = malloc(FEATURES * FEATURES * sizeof *gradients);
    assert_ok(r.context, bpt_graph_read_gradients(r.graph, gradients, FEATURES * FEATURES));
    results[mode] = gradients[FEATURES + 3];
    free(gradients);
    regression_destroy(&r);
  }
  /* dW_ij = sum_n dy_ni x_nj = 256 * -2^-27 * 0.25 = -2^-21 */
  assert_true(results[0] == -0x1p-21f);
  assert_true(results[1] == 0.0f);
  assert_true(fabsf(results[2] - results[0]) <= 1e-3f * fabsf(results[0]));
}

/* A policy without loss scaling: a non-finite loss refuses the step and names the first op that went non-finite. */
static void nonfinite_loss_is_refused_naming_the_op(void **state) {
  (void)state;
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_F16;
  options.loss_scaling = BPT_LOSS_SCALING_NONE;
  regression r;
  regression_create(&r, 2, 4, &options, 0.1f);
  regression_fill(&r, 40000.0f, 0.0f); /* y = x W^T with W = 2 I: 80000 overflows f16 in 'y' */
  float w[16] = {0};
  for (int i = 0; i < 4; i++) w[i * 4 + i] = 2.0f;
  assert_ok(r.context, bpt_graph_write_parameters(r.graph, w, 16));
  assert_ok(r.context, bpt_graph_forward(r.graph));
  assert_ok(r.context, bpt_graph_backward(r.graph));
  assert_fails(r.context, BPT_ERR_NUMERIC, "linear 'y'", bpt_optimizer_step(r.optimizer));
  assert_int_equal(bpt_optimizer_step_count(r.optimizer), 0);
  assert_true(first_parameter(&r) == 2.0f);
  regression_destroy(&r);
  /* The same with an f32 policy and a NaN input: the message names the input. (Without any policy the step
   * makes no check, so that it never waits for the device; anomaly mode is the check there.) */
  bpt_precision_options f32 = bpt_precision_options_default();
  regression_create(&r, 2, 4, &f32, 0.1f);
  regression_fill(&r, NAN, 0.0f);
  assert_ok(r.context, bpt_graph_forward(r.graph));
  assert_ok(r.context, bpt_graph_backward(r.graph));
  assert_fails(r.context, BPT_ERR_NUMERIC, "input 'x'", bpt_optimizer_step(r.optimizer));
  regression_destroy(&r);
}

static void precision_options_are_validated(void **state) {
  (void)state;
  bpt_context *context = test_context(6);
  bpt_graph *graph;
  assert_ok(context, bpt_graph_create(context, &graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_FP8_E4M3;
  assert_fails(context, BPT_ERR_DTYPE, "fp8", bpt_graph_set_precision(graph, &options));
  options = bpt_precision_options_default();
  options.backoff_factor = 1.5f;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "backoff_factor", bpt_graph_set_precision(graph, &options));
  options = bpt_precision_options_default();
  options.size = 3;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "size", bpt_graph_set_precision(graph, &options));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cast_kernel_matches_scalar_reference),
      cmocka_unit_test(bf16_casts_match_reference_bit_for_bit),
      cmocka_unit_test(bf16_policy_forward_reads_rounded_parameters),
      cmocka_unit_test(unscale_check_finite_kernel),
      cmocka_unit_test(narrow_gemm_matches_reference),
      cmocka_unit_test(loss_scaler_defaults),
      cmocka_unit_test(loss_scaler_skips_and_halves_on_overflow),
      cmocka_unit_test(loss_scaler_skips_injected_inf),
      cmocka_unit_test(loss_scaler_grows_after_clean_steps),
      cmocka_unit_test(loss_scaling_rescues_underflowing_gradient),
      cmocka_unit_test(nonfinite_loss_is_refused_naming_the_op),
      cmocka_unit_test(precision_options_are_validated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
