/* Optimiser update kernels against closed-form trajectories under a constant gradient, and the public
 * optimiser against one hand-computed step from the graph's own gradients. */
#include <math.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "core/context.h"
#include "test_support.h"

enum { COUNT = 40000, STEPS = 7 };

typedef struct fixture {
  bpt_context *context;
  float *w, *g, *s0, *s1;
} fixture;

static fixture make_fixture(void) {
  fixture f = {test_context(1), malloc(COUNT * sizeof(float)), malloc(COUNT * sizeof(float)),
               calloc(COUNT, sizeof(float)), calloc(COUNT, sizeof(float))};
  test_random random;
  test_random_seed(&random, 5);
  test_random_fill(&random, f.w, COUNT, -1.0f, 1.0f);
  test_random_fill(&random, f.g, COUNT, -2.0f, 2.0f);
  return f;
}

static void free_fixture(fixture *f) {
  free(f->w);
  free(f->g);
  free(f->s0);
  free(f->s1);
  bpt_context_destroy(f->context);
}

static void run_steps(fixture *f, bpt_update_args args, int adam) {
  bpt_backend *backend = &f->context->backend;
  args.count = COUNT;
  args.parameters = f->w;
  args.gradients = f->g;
  args.state0 = f->s0;
  args.state1 = f->s1;
  for (int t = 1; t <= STEPS; t++) {
    args.step = t;
    assert_int_equal((adam ? backend->vtable->adam_update : backend->vtable->sgd_update)(backend, &args), BPT_OK);
  }
}

static void check_close(double actual, double expected, const char *what, int64_t i) {
  if (fabs(actual - expected) > 1e-5 * (1.0 + fabs(expected)))
    fail_msg("%s element %lld: %.9g, closed form %.9g", what, (long long)i, actual, expected);
}

/* Momentum mu, constant g: v_t = g (1 - mu^t) / (1 - mu), w_T = w_0 - lr sum_t v_t. */
static void sgd_momentum_matches_closed_form(void **state) {
  (void)state;
  fixture f = make_fixture();
  float *w0 = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) w0[i] = f.w[i];
  const double lr = 0.05, mu = 0.9;
  run_steps(&f, (bpt_update_args){.learning_rate = (float)lr, .momentum = (float)mu}, 0);
  double sum = 0.0;
  for (int t = 1; t <= STEPS; t++) sum += (1.0 - pow(mu, t)) / (1.0 - mu);
  for (int i = 0; i < COUNT; i += 97) {
    check_close(f.w[i], w0[i] - lr * f.g[i] * sum, "sgd momentum", i);
    check_close(f.s0[i], f.g[i] * (1.0 - pow(mu, STEPS)) / (1.0 - mu), "velocity", i);
  }
  free(w0);
  free_fixture(&f);
}

/* Nesterov, constant g: w_T = w_0 - lr sum_t (g + mu v_t). */
static void sgd_nesterov_matches_closed_form(void **state) {
  (void)state;
  fixture f = make_fixture();
  float *w0 = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) w0[i] = f.w[i];
  const double lr = 0.01, mu = 0.8;
  run_steps(&f, (bpt_update_args){.learning_rate = (float)lr, .momentum = (float)mu, .nesterov = true}, 0);
  double sum = 0.0;
  for (int t = 1; t <= STEPS; t++) sum += 1.0 + mu * (1.0 - pow(mu, t)) / (1.0 - mu);
  for (int i = 0; i < COUNT; i += 97) check_close(f.w[i], w0[i] - lr * f.g[i] * sum, "nesterov", i);
  free(w0);
  free_fixture(&f);
}

/* Plain SGD with L2 decay: w_t = a w_{t-1} - lr g with a = 1 - lr wd, a geometric series. */
static void sgd_weight_decay_matches_closed_form(void **state) {
  (void)state;
  fixture f = make_fixture();
  float *w0 = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) w0[i] = f.w[i];
  const double lr = 0.1, wd = 0.5, a = 1.0 - lr * wd;
  run_steps(&f, (bpt_update_args){.learning_rate = (float)lr, .weight_decay = (float)wd}, 0);
  for (int i = 0; i < COUNT; i += 97)
    check_close(f.w[i], pow(a, STEPS) * w0[i] - lr * f.g[i] * (1.0 - pow(a, STEPS)) / (1.0 - a), "sgd decay", i);
  free(w0);
  free_fixture(&f);
}

/* Adam, constant g: bias-corrected moments are g and g^2, so each step moves lr * g / (|g| + eps). */
static void adam_matches_closed_form(void **state) {
  (void)state;
  fixture f = make_fixture();
  float *w0 = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) w0[i] = f.w[i];
  const double lr = 0.001, eps = 1e-8;
  run_steps(&f, (bpt_update_args){.learning_rate = (float)lr, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = (float)eps},
            1);
  for (int i = 0; i < COUNT; i += 97) {
    check_close(f.w[i], w0[i] - STEPS * lr * f.g[i] / (fabs(f.g[i]) + eps), "adam", i);
    check_close(f.s0[i], (1.0 - pow(0.9, STEPS)) * f.g[i], "first moment", i);
    check_close(f.s1[i], (1.0 - pow(0.999, STEPS)) * f.g[i] * f.g[i], "second moment", i);
  }
  free(w0);
  free_fixture(&f);
}

/* AdamW decays the weight outside the adaptive step: w_t = (1 - lr wd) w_{t-1} - lr g / (|g| + eps). */
static void adamw_matches_closed_form(void **state) {
  (void)state;
  fixture f = make_fixture();
  float *w0 = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) w0[i] = f.w[i];
  const double lr = 0.01, wd = 0.1, a = 1.0 - lr * wd;
  run_steps(&f, (bpt_update_args){.learning_rate = (float)lr, .weight_decay = (float)wd, .beta1 = 0.9f,
                                  .beta2 = 0.999f, .epsilon = 1e-8f, .decoupled_weight_decay = true},
            1);
  for (int i = 0; i < COUNT; i += 97) {
    double step = lr * f.g[i] / (fabs(f.g[i]) + 1e-8);
    check_close(f.w[i], pow(a, STEPS) * w0[i] - step * (1.0 - pow(a, STEPS)) / (1.0 - a), "adamw", i);
  }
  free(w0);
  free_fixture(&f);
}

/* Through the public API: one SGD step moves every parameter by exactly -lr * gradient. */
static void public_sgd_step_uses_graph_gradients(void **state) {
  (void)state;
  bpt_context *context = test_context(3);
  bpt_graph *graph;
  bpt_node *x, *target, *y, *loss;
  int64_t features = 6, outputs = 3;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &outputs, &target));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, outputs, BPT_INIT_HE_NORMAL, &y));
  assert_ok(context, bpt_mse_loss(graph, "loss", y, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 4));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.learning_rate = 0.25f;
  bpt_optimizer *optimizer;
  assert_ok(context, bpt_optimizer_create(graph, &options, &optimizer));
  assert_fails(context, BPT_ERR_STATE, "backward", bpt_optimizer_step(optimizer));

  int64_t dims_x[2] = {4, features}, dims_t[2] = {4, outputs};
  bpt_tensor *xs, *ts;
  test_random random;
  test_random_seed(&random, 3);
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims_x, &xs));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims_t, &ts));
  test_random_fill(&random, bpt_tensor_data(xs), 4 * features, -1.0f, 1.0f);
  test_random_fill(&random, bpt_tensor_data(ts), 4 * outputs, -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, xs));
  assert_ok(context, bpt_graph_set_input(graph, target, ts));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  int64_t count = bpt_graph_parameter_count(graph);
  assert_int_equal(count, features * outputs + outputs);
  float before[21], gradients[21], after[21];
  assert_ok(context, bpt_graph_read_parameters(graph, before, count));
  assert_ok(context, bpt_graph_read_gradients(graph, gradients, count));
  assert_ok(context, bpt_optimizer_step(optimizer));
  assert_ok(context, bpt_graph_read_parameters(graph, after, count));
  for (int i = 0; i < count; i++) {
    assert_true(gradients[i] != 0.0f);
    check_close(after[i], before[i] - 0.25 * gradients[i], "public sgd", i);
  }
  assert_int_equal(bpt_optimizer_step_count(optimizer), 1);

  options.momentum = 1.5f;
  bpt_optimizer *bad = NULL;
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "momentum", bpt_optimizer_create(graph, &options, &bad));
  assert_null(bad);
  assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "learning_rate", bpt_optimizer_set_learning_rate(optimizer, -1.0f));

  bpt_tensor_destroy(xs);
  bpt_tensor_destroy(ts);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sgd_momentum_matches_closed_form), cmocka_unit_test(sgd_nesterov_matches_closed_form),
      cmocka_unit_test(sgd_weight_decay_matches_closed_form), cmocka_unit_test(adam_matches_closed_form),
      cmocka_unit_test(adamw_matches_closed_form), cmocka_unit_test(public_sgd_step_uses_graph_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
