/* Every fpga-sim kernel against the CPU backend on random, non-zero inputs: in f32 to a tight tolerance
 * (only summation order differs), in fixed point within the quantisation bound derived below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/fpga/fpga.h"
#include "core/context.h"
#include "test_kernels.h"
#include "test_support.h"

typedef struct pair {
  bpt_context *cpu_context, *fpga_context;
  bpt_backend *cpu, *fpga;
  double step; /* fixed point: 2^-F; f32: 0 */
} pair;

/* ap_fixed<20, 6, AP_RND, AP_SAT>: 14 fraction bits, range [-32, 32), wide enough for every test value. */
static pair make_pair(bool fixed) {
  pair p;
  p.cpu_context = test_context(3);
  bpt_context_options options = bpt_context_options_default();
  options.backend = "fpga-sim";
  assert_ok(NULL, bpt_context_create(&options, &p.fpga_context));
  bpt_fpga_options fpga = bpt_fpga_options_default();
  if (fixed) {
    fpga.format = BPT_FPGA_FORMAT_FIXED;
    fpga.word_bits = 20;
    fpga.integer_bits = 6;
    fpga.rounding = BPT_FPGA_ROUND;
    fpga.overflow = BPT_FPGA_SATURATE;
  }
  assert_ok(p.fpga_context, bpt_fpga_configure(p.fpga_context, &fpga));
  p.cpu = &p.cpu_context->backend;
  p.fpga = &p.fpga_context->backend;
  p.step = fixed ? ldexp(1.0, -14) : 0.0;
  return p;
}

static void free_pair(pair *p) {
  bpt_context_destroy(p->cpu_context);
  bpt_context_destroy(p->fpga_context);
}

static float *random_values(test_random *random, int64_t count, float low, float high) {
  float *values = malloc((size_t)count * sizeof *values);
  test_random_fill(random, values, count, low, high);
  return values;
}

static float *copy_of(const float *values, int64_t count) {
  float *copy = malloc((size_t)count * sizeof *copy);
  memcpy(copy, values, (size_t)count * sizeof *copy);
  return copy;
}

/* |a - b| <= bound for every element, and report the largest error (so a bound that is never tight shows). */
static void assert_within(const float *a, const float *b, int64_t count, double bound, const char *what) {
  double worst = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double error = fabs((double)a[i] - (double)b[i]);
    if (!(error <= bound))
      fail_msg("%s: element %lld differs by %g > bound %g (%g vs %g)", what, (long long)i, error, bound, (double)a[i],
               (double)b[i]);
    worst = error > worst ? error : worst;
  }
  print_message("%s: worst error %.3g, bound %.3g\n", what, worst, bound);
}

/* GEMM error bound in fixed point with inputs |a|, |b| <= 1 rounded to the grid (error <= step / 2 each):
 * each product is off by at most |a| step/2 + |b| step/2 + step^2/4 <= step + step^2/4, k of them are summed
 * exactly, alpha = 1, and the old C (scaled by beta = 0.5) and the result are each rounded once more. */
static void gemm_matches(bool fixed, bool transpose_a, bool transpose_b) {
  pair p = make_pair(fixed);
  test_random random;
  test_random_seed(&random, 11 + transpose_a * 2 + transpose_b);
  const int64_t m = 7, n = 37, k = 29;
  float *a = random_values(&random, m * k, -1.0f, 1.0f), *b = random_values(&random, k * n, -1.0f, 1.0f);
  float *c_cpu = random_values(&random, m * n, -1.0f, 1.0f), *c_fpga = copy_of(c_cpu, m * n);
  bpt_gemm_args args = {.transpose_a = transpose_a,
                        .transpose_b = transpose_b,
                        .m = m,
                        .n = n,
                        .k = k,
                        .alpha = 1.0f,
                        .a = a,
                        .lda = transpose_a ? m : k,
                        .b = b,
                        .ldb = transpose_b ? k : n,
                        .beta = 0.5f,
                        .ldc = n};
  args.c = c_cpu;
  assert_int_equal(p.cpu->vtable->gemm(p.cpu, &args), BPT_OK);
  args.c = c_fpga;
  assert_int_equal(p.fpga->vtable->gemm(p.fpga, &args), BPT_OK);
  double bound = fixed ? (double)k * (p.step + p.step * p.step / 4) + 0.5 * p.step / 2 + p.step / 2 + 1e-5 : 2e-6 * k;
  assert_within(c_fpga, c_cpu, m * n, bound, fixed ? "gemm fixed" : "gemm f32");
  free(a), free(b), free(c_cpu), free(c_fpga);
  free_pair(&p);
}

static void gemm_f32(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      gemm_matches(false, ta, tb);
}

/* k = 0 leaves alpha times an empty sum: C = beta C, as BLAS does. */
static void gemm_empty_inner_dimension(void **state) {
  (void)state;
  pair p = make_pair(false);
  float c[6] = {1, -2, 3, -4, 5, -6};
  bpt_gemm_args args = {.m = 2, .n = 3, .k = 0, .alpha = 1.0f, .lda = 1, .ldb = 3, .beta = 0.5f, .c = c, .ldc = 3};
  assert_int_equal(p.fpga->vtable->gemm(p.fpga, &args), BPT_OK);
  assert_true(c[0] == 0.5f && c[5] == -3.0f);
  args.beta = 0.0f;
  assert_int_equal(p.fpga->vtable->gemm(p.fpga, &args), BPT_OK);
  assert_true(c[0] == 0.0f && c[5] == 0.0f);
  free_pair(&p);
}

static void gemm_fixed(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      gemm_matches(true, ta, tb);
}

/* Element-wise kernels: in f32 they use the CPU's expressions, so they agree exactly (sigmoid and tanh up to
 * libm); in fixed point each output is a few roundings of step / 2 away (bounds per kernel below). */
static void elementwise_matches(bool fixed) {
  pair p = make_pair(fixed);
  test_random random;
  test_random_seed(&random, 5);
  const int64_t rows = 6, cols = 45, count = rows * cols;
  const double h = p.step / 2;
  float *x = random_values(&random, count, -2.0f, 2.0f), *bias = random_values(&random, cols, -1.0f, 1.0f);
  float *y_cpu = copy_of(x, count), *y_fpga = copy_of(x, count);
  bpt_kernel_node cpu = test_linear_bias_node(rows, cols, bias, NULL, y_cpu, NULL);
  bpt_kernel_node fpga = test_linear_bias_node(rows, cols, bias, NULL, y_fpga, NULL);
  assert_int_equal(test_kernel_run(p.cpu, &cpu, false), BPT_OK);
  assert_int_equal(test_kernel_run(p.fpga, &fpga, false), BPT_OK);
  assert_within(y_fpga, y_cpu, count, fixed ? 3 * h : 0.0, "bias_add");

  float *g_cpu = random_values(&random, cols, -1.0f, 1.0f), *g_fpga = copy_of(g_cpu, cols);
  cpu = test_linear_bias_node(rows, cols, bias, g_cpu, y_cpu, x);
  fpga = test_linear_bias_node(rows, cols, bias, g_fpga, y_fpga, x);
  assert_int_equal(test_kernel_run(p.cpu, &cpu, true), BPT_OK);
  assert_int_equal(test_kernel_run(p.fpga, &fpga, true), BPT_OK);
  assert_within(g_fpga, g_cpu, cols, fixed ? (rows + 2) * h : 1e-6, "bias_backward");

  const bpt_op_id kinds[4] = {BPT_OP_RELU, BPT_OP_LEAKY_RELU, BPT_OP_SIGMOID, BPT_OP_TANH};
  float *dy = random_values(&random, count, -1.0f, 1.0f);
  for (int i = 0; i < 4; i++) {
    float *a_cpu = malloc((size_t)count * sizeof(float)), *a_fpga = malloc((size_t)count * sizeof(float));
    bpt_kernel_node cpu_node = test_activation_node(kinds[i], 0.1f, count, x, a_cpu, NULL, NULL);
    bpt_kernel_node fpga_node = test_activation_node(kinds[i], 0.1f, count, x, a_fpga, NULL, NULL);
    assert_int_equal(test_kernel_run(p.cpu, &cpu_node, false), BPT_OK);
    assert_int_equal(test_kernel_run(p.fpga, &fpga_node, false), BPT_OK);
    /* Input and output rounded; the derivatives are at most 1, so the input error passes through at most 1x. */
    assert_within(a_fpga, a_cpu, count, fixed ? 2 * h : 1e-7, "activation_forward");
    float *dx_cpu = copy_of(dy, count), *dx_fpga = copy_of(dy, count);
    /* Both backward passes read the CPU's outputs, so only the backward kernels differ. */
    cpu_node = test_activation_node(kinds[i], 0.1f, count, x, a_cpu, dx_cpu, dy);
    fpga_node = test_activation_node(kinds[i], 0.1f, count, x, a_cpu, dx_fpga, dy);
    assert_int_equal(test_kernel_run(p.cpu, &cpu_node, true), BPT_OK);
    assert_int_equal(test_kernel_run(p.fpga, &fpga_node, true), BPT_OK);
    assert_within(dx_fpga, dx_cpu, count, fixed ? 6 * h : 1e-7, "activation_backward");
    free(a_cpu), free(a_fpga), free(dx_cpu), free(dx_fpga);
  }
  float *s_cpu = copy_of(dy, count), *s_fpga = copy_of(dy, count);
  assert_int_equal(p.fpga->vtable->add_scaled(p.fpga, count, -0.5f, x, s_fpga), BPT_OK);
  for (int64_t i = 0; i < count; i++)
    s_cpu[i] += -0.5f * x[i]; /* the CPU backend has no add_scaled yet */
  assert_within(s_fpga, s_cpu, count, fixed ? 3 * h : 0.0, "add_scaled");
  free(x), free(bias), free(y_cpu), free(y_fpga), free(g_cpu), free(g_fpga), free(dy), free(s_cpu), free(s_fpga);
  free_pair(&p);
}

static void elementwise_f32(void **state) {
  (void)state;
  elementwise_matches(false);
}

static void elementwise_fixed(void **state) {
  (void)state;
  elementwise_matches(true);
}

/* Softmax: logits rounded by h shift each probability by at most 2h p (the softmax Jacobian's row sums of
 * |d p / d z| are at most 2p), plus the final rounding; the loss moves by at most 2h. */
static void losses_match(bool fixed) {
  pair p = make_pair(fixed);
  test_random random;
  test_random_seed(&random, 9);
  const int64_t batch = 5, classes = 10;
  const double h = p.step / 2;
  float *logits = random_values(&random, batch * classes, -3.0f, 3.0f);
  int32_t labels[5] = {0, 3, 9, 3, 7};
  float p_cpu[50], p_fpga[50], loss_cpu, loss_fpga;
  bpt_kernel_node cpu = test_kernel_node(BPT_OP_SOFTMAX_CROSS_ENTROPY);
  cpu.input_count = 2;
  cpu.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, logits, NULL, 2, (const int64_t[]){batch, classes});
  cpu.inputs[1] = test_kernel_tensor(BPT_DTYPE_I32, labels, NULL, 1, (const int64_t[]){batch});
  cpu.output = test_kernel_tensor(BPT_DTYPE_F32, &loss_cpu, NULL, 0, NULL);
  cpu.saved = p_cpu;
  bpt_kernel_node fpga = cpu;
  fpga.output.value = &loss_fpga;
  fpga.saved = p_fpga;
  assert_int_equal(test_kernel_run(p.cpu, &cpu, false), BPT_OK);
  assert_int_equal(test_kernel_run(p.fpga, &fpga, false), BPT_OK);
  assert_within(p_fpga, p_cpu, batch * classes, fixed ? 3 * h : 1e-7, "softmax probabilities");
  assert_within(&loss_fpga, &loss_cpu, 1, fixed ? 3 * h : 1e-6, "softmax loss");
  float seed = 0.7f;
  float *d_cpu = random_values(&random, batch * classes, -1.0f, 1.0f), *d_fpga = copy_of(d_cpu, batch * classes);
  /* Both backward passes read the CPU's probabilities, so only the backward kernels differ. */
  cpu.output.grad = &seed, cpu.inputs[0].grad = d_cpu;
  fpga.output.grad = &seed, fpga.inputs[0].grad = d_fpga, fpga.saved = p_cpu;
  assert_int_equal(test_kernel_run(p.cpu, &cpu, true), BPT_OK);
  assert_int_equal(test_kernel_run(p.fpga, &fpga, true), BPT_OK);
  assert_within(d_fpga, d_cpu, batch * classes, fixed ? 4 * h : 1e-7, "softmax backward");
  int32_t bad[5] = {0, 1, 10, 2, 3};
  fpga.inputs[1].value = bad, fpga.saved = p_fpga;
  assert_int_equal(test_kernel_run(p.fpga, &fpga, false), BPT_ERR_INVALID_ARGUMENT);

  const int64_t count = 40;
  float *prediction = random_values(&random, count, -1.0f, 1.0f), *target = random_values(&random, count, -1.0f, 1.0f);
  float mse_cpu, mse_fpga;
  bpt_kernel_node mse = test_kernel_node(BPT_OP_MSE);
  mse.input_count = 2;
  mse.inputs[0] = test_kernel_tensor(BPT_DTYPE_F32, prediction, NULL, 1, (const int64_t[]){count});
  mse.inputs[1] = test_kernel_tensor(BPT_DTYPE_F32, target, NULL, 1, (const int64_t[]){count});
  mse.output = test_kernel_tensor(BPT_DTYPE_F32, &mse_cpu, &seed, 0, NULL);
  assert_int_equal(test_kernel_run(p.cpu, &mse, false), BPT_OK);
  mse.output.value = &mse_fpga;
  assert_int_equal(test_kernel_run(p.fpga, &mse, false), BPT_OK);
  assert_within(&mse_fpga, &mse_cpu, 1, fixed ? 10 * h : 1e-6, "mse forward");
  float dp_cpu[40] = {0}, dp_fpga[40] = {0}, dt_cpu[40] = {0}, dt_fpga[40] = {0};
  mse.inputs[0].grad = dp_cpu, mse.inputs[1].grad = dt_cpu;
  assert_int_equal(test_kernel_run(p.cpu, &mse, true), BPT_OK);
  mse.inputs[0].grad = dp_fpga, mse.inputs[1].grad = dt_fpga;
  assert_int_equal(test_kernel_run(p.fpga, &mse, true), BPT_OK);
  assert_within(dp_fpga, dp_cpu, count, fixed ? 3 * h : 0.0, "mse backward prediction");
  assert_within(dt_fpga, dt_cpu, count, fixed ? 3 * h : 0.0, "mse backward target");
  free(logits), free(d_cpu), free(d_fpga), free(prediction), free(target);
  free_pair(&p);
}

static void losses_f32(void **state) {
  (void)state;
  losses_match(false);
}

static void losses_fixed(void **state) {
  (void)state;
  losses_match(true);
}

/* Updates: f32 uses the CPU's expressions exactly; in fixed point every stored value is rounded (h each) and
 * the stored state feeds the next step, so the bound covers one step from identical starting points. */
static void updates_match(bool fixed) {
  pair p = make_pair(fixed);
  test_random random;
  test_random_seed(&random, 13);
  const int64_t count = 300;
  const double h = p.step / 2;
  float *w = random_values(&random, count, -1.0f, 1.0f), *g = random_values(&random, count, -1.0f, 1.0f);
  float *v = random_values(&random, count, -0.5f, 0.5f), *s = random_values(&random, count, 0.01f, 0.5f);
  for (int kind = 0; kind < 3; kind++) { /* SGD momentum, SGD Nesterov, Adam */
    float *w_cpu = copy_of(w, count), *w_fpga = copy_of(w, count), *v_cpu = copy_of(v, count),
          *v_fpga = copy_of(v, count), *s_cpu = copy_of(s, count), *s_fpga = copy_of(s, count);
    bpt_update_args args = {.count = count,
                            .gradients = g,
                            .learning_rate = 0.05f,
                            .weight_decay = 0.01f,
                            .momentum = 0.9f,
                            .nesterov = kind == 1,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .epsilon = 1e-8f,
                            .step = 3};
    bpt_status (*cpu_update)(bpt_backend *, const bpt_update_args *) =
        kind < 2 ? p.cpu->vtable->sgd_update : p.cpu->vtable->adam_update;
    bpt_status (*fpga_update)(bpt_backend *, const bpt_update_args *) =
        kind < 2 ? p.fpga->vtable->sgd_update : p.fpga->vtable->adam_update;
    args.parameters = w_cpu, args.state0 = v_cpu, args.state1 = s_cpu;
    assert_int_equal(cpu_update(p.cpu, &args), BPT_OK);
    args.parameters = w_fpga, args.state0 = v_fpga, args.state1 = s_fpga;
    assert_int_equal(fpga_update(p.fpga, &args), BPT_OK);
    /* Adam divides by sqrt(v): with v >= 0.01 its step changes by at most lr * (h / 0.01 + ...) -> use 60h. */
    assert_within(w_fpga, w_cpu, count, fixed ? (kind < 2 ? 6 * h : 60 * h + 3e-3 * h) : 0.0, "update weights");
    assert_within(v_fpga, v_cpu, count, fixed ? 4 * h : 0.0, "update state");
    free(w_cpu), free(w_fpga), free(v_cpu), free(v_fpga), free(s_cpu), free(s_fpga);
  }
  free(w), free(g), free(v), free(s);
  free_pair(&p);
}

static void updates_f32(void **state) {
  (void)state;
  updates_match(false);
}

static void updates_fixed(void **state) {
  (void)state;
  updates_match(true);
}

/* The kernels the MLP, LeNet and a batch-normalised CNN need are registered; ops fpga-sim does not implement have none ("unsupported"), and
 * shared primitives it lacks stay NULL. */
static void unsupported_members_are_null(void **state) {
  (void)state;
  pair p = make_pair(false);
  assert_non_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_CONV2D));
  assert_non_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_MAX_POOL2D));
  assert_non_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_BATCH_NORM));
  assert_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_GLOBAL_AVG_POOL));
  assert_non_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_LINEAR));
  assert_non_null(p.fpga->vtable->kernels(p.fpga, BPT_OP_SOFTMAX_CROSS_ENTROPY));
  assert_null(p.fpga->vtable->cast);
  assert_non_null(p.fpga->vtable->gemm);
  free_pair(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gemm_f32),
      cmocka_unit_test(gemm_fixed),
      cmocka_unit_test(gemm_empty_inner_dimension),
      cmocka_unit_test(elementwise_f32),
      cmocka_unit_test(elementwise_fixed),
      cmocka_unit_test(losses_f32),
      cmocka_unit_test(losses_fixed),
      cmocka_unit_test(updates_f32),
      cmocka_unit_test(updates_fixed),
      cmocka_unit_test(unsupported_members_are_null),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
