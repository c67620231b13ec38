/* Hostile sizes (robustness, issue 18 class 1): for every op that takes sizes, values that are "valid looking"
 * but make size arithmetic wrap (a padding around 2^30, dims whose product wraps to a small count, a batch
 * near INT64_MAX). Each case builds a small graph, compiles it and runs a forward if it gets that far; some
 * call must fail with a clean status and a message naming the op, node or call, and nothing may crash (this
 * test also runs under ASan/UBSan, where a wrapped product is a fatal signed-overflow report).
 * One case alone: BPT_HOSTILE_CASE=<name> (a cmocka test filter). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/optimizer_state.h"
#include "test_support.h"

#define BIG30 (INT64_C(1) << 30)
#define BIG31 (INT64_C(1) << 31)
#define BIG32 (INT64_C(1) << 32)
#define BIG62 (INT64_C(1) << 62)

typedef enum case_kind {
  INPUT_DIMS,      /* v: rank, dims... */
  PARAMETER_DIMS,  /* v: rank, dims... */
  LINEAR_UNITS,    /* v: in features, out features */
  LINEAR_WEIGHT,   /* v: in features, weight (out, in) */
  CONV,            /* v: C, H, W, O, kh, kw, stride h, w, padding h, w, dilation h, w, groups */
  MAX_POOL,        /* v: C, H, W, kernel, stride, padding */
  AVG_POOL,        /* v: C, H, W, kernel, stride, padding */
  GLOBAL_POOL,     /* v: C, H, W; compile batch */
  RESHAPE,         /* v: features, rank, dims... */
  BATCH_NORM,      /* v: C, H, W, gamma count; compile batch */
  DROPOUT,         /* v: rank, dims...; compile batch */
  COMPILE_BATCH,   /* v: features, compile batch */
  SET_INPUT_BATCH, /* v: features, compile batch, tensor batch */
  TENSOR_BATCH,    /* v: features, capacity, new batch */
} case_kind;

typedef struct hostile_case {
  const char *name;
  case_kind kind;
  int64_t v[14];
  const char *fragment; /* expected in the error message */
} hostile_case;

static const hostile_case cases[] = {
    {"input_dim_zero", INPUT_DIMS, {2, 4, 0}, "input 'x'"},
    {"input_dim_negative", INPUT_DIMS, {1, -5}, "input 'x'"},
    {"input_dim_int64_max", INPUT_DIMS, {1, INT64_MAX}, "input 'x'"},
    {"input_dim_2_31", INPUT_DIMS, {1, BIG31}, "input 'x'"},
    {"input_dims_product_wraps", INPUT_DIMS, {3, BIG31 - 1, BIG31 - 1, BIG31 - 1}, "input 'x'"},
    {"input_dims_product_2_64", INPUT_DIMS, {4, BIG32, BIG32, BIG32, BIG32}, "input 'x'"},
    {"parameter_dim_int64_max", PARAMETER_DIMS, {2, INT64_MAX, 2}, "parameter 'p'"},
    {"parameter_dims_product_wraps", PARAMETER_DIMS, {2, BIG62 + 1, 4}, "parameter 'p'"},
    {"parameter_dim_2_31", PARAMETER_DIMS, {1, BIG31}, "parameter 'p'"},
    {"linear_units_int64_max", LINEAR_UNITS, {4, INT64_MAX}, "fc"},
    {"linear_units_2_31", LINEAR_UNITS, {4, BIG31}, "fc"},
    {"linear_units_negative", LINEAR_UNITS, {4, -3}, "fc"},
    {"linear_weight_out_wraps", LINEAR_WEIGHT, {4, BIG62 + 1, 4}, "w"},
    {"conv_padding_2_30", CONV, {1, 4, 4, 1, 3, 3, 1, 1, BIG30, BIG30, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_padding_h_2_31_w_2_32", CONV, {4, 1, 1, 1, 1, 1, 1, 1, BIG31, BIG32, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_padding_int64_half", CONV, {1, 4, 4, 1, 3, 3, 1, 1, INT64_MAX / 2, 0, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_padding_int64_max", CONV, {1, 4, 4, 1, 3, 3, 1, 1, 0, INT64_MAX, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_dilation_int64_max", CONV, {1, 4, 4, 1, 3, 3, 1, 1, 0, 0, INT64_MAX, 1, 1}, "conv2d 'conv'"},
    {"conv_dilation_wraps_span", CONV, {1, 4, 4, 1, 3, 3, 1, 1, 0, 0, BIG62 + 1, 1, 1}, "conv2d 'conv'"},
    {"conv_dilation_2_31", CONV, {1, 4, 4, 1, 3, 3, 1, 1, BIG31, 0, BIG31, 1, 1}, "conv2d 'conv'"},
    {"conv_stride_int64_max", CONV, {1, 4, 4, 1, 3, 3, INT64_MAX, INT64_MAX, 1, 1, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_groups_int64_max", CONV, {1, 4, 4, 1, 3, 3, 1, 1, 0, 0, 1, 1, INT64_MAX}, "conv2d 'conv'"},
    {"conv_kernel_huge", CONV, {1, 4, 4, 1, BIG31 - 1, 3, 1, 1, BIG30, 1, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_padding_2_29_plane_exceeds_int", CONV, {1, 4, 4, 1, 3, 3, 1, 1, 1 << 29, 1 << 29, 1, 1, 1}, "conv2d 'conv'"},
    {"conv_column_rows_exceed_int", CONV, {1 << 16, 2, 2, 1, 1 << 8, 1 << 8, 1, 1, 1 << 8, 1 << 8, 1, 1, 1},
     "conv2d 'conv'"},
    {"max_pool_padding_int64_max", MAX_POOL, {1, 4, 4, INT64_MAX, 1, INT64_MAX / 2}, "max_pool2d 'pool'"},
    {"max_pool_kernel_int64_max", MAX_POOL, {1, 4, 4, INT64_MAX, 1, 0}, "max_pool2d 'pool'"},
    {"max_pool_padding_2_30", MAX_POOL, {1, 4, 4, BIG31, 1, BIG30}, "max_pool2d 'pool'"},
    {"max_pool_padding_wraps", MAX_POOL, {1, 4, 4, INT64_MAX - 1, 1, INT64_MAX / 2}, "max_pool2d 'pool'"},
    {"max_pool_stride_int64_max", MAX_POOL, {1, 4, 4, 2, INT64_MAX, 1}, NULL},
    {"max_pool_argmax_exceeds_int32", MAX_POOL, {1, 1 << 16, 1 << 16, 2, 2, 0}, "max_pool2d 'pool'"},
    {"avg_pool_padding_int64_max", AVG_POOL, {1, 4, 4, INT64_MAX, 1, INT64_MAX / 2}, "avg_pool2d 'pool'"},
    {"avg_pool_padding_2_30", AVG_POOL, {1, 4, 4, BIG31, 1, BIG30}, "avg_pool2d 'pool'"},
    {"global_pool_plane_exceeds_int32", GLOBAL_POOL, {1, 1 << 16, 1 << 16, 2}, "global_avg_pool 'gap'"},
    {"global_pool_batch_too_big", GLOBAL_POOL, {4, 1 << 15, 1 << 15, 1 << 20}, "bpt_graph_compile"},
    {"reshape_dims_wrap_to_count", RESHAPE, {4, 2, 4, BIG62 + 1}, "reshape 'r'"},
    {"reshape_dims_wrap_to_zero", RESHAPE, {4, 3, BIG32, BIG32, 4}, "reshape 'r'"},
    {"reshape_dim_int64_max", RESHAPE, {4, 2, INT64_MAX, INT64_MAX}, "reshape 'r'"},
    {"reshape_dim_negative_pair", RESHAPE, {4, 2, -2, -2}, "reshape 'r'"},
    {"reshape_rank_too_big", RESHAPE, {4, 100, 1}, "bpt_reshape"},
    {"batch_norm_gamma_mismatch", BATCH_NORM, {4, 2, 2, BIG62 + 4, 8}, "parameter"},
    {"batch_norm_batch_too_big", BATCH_NORM, {1 << 10, 1 << 10, 1 << 10, 1 << 10, 1 << 20}, "bpt_graph_compile"},
    {"dropout_batch_too_big", DROPOUT, {2, 1 << 20, 1 << 10, 1 << 24}, "bpt_graph_compile"},
    {"compile_batch_int64_max", COMPILE_BATCH, {4, INT64_MAX}, "bpt_graph_compile"},
    {"compile_batch_zero", COMPILE_BATCH, {4, 0}, "bpt_graph_compile"},
    {"compile_batch_negative", COMPILE_BATCH, {4, INT64_MIN}, "bpt_graph_compile"},
    {"compile_batch_times_features", COMPILE_BATCH, {1 << 30, 1 << 24}, "bpt_graph_compile"},
    {"set_input_batch_above_compiled", SET_INPUT_BATCH, {4, 2, 3}, "bpt_graph_set_input"},
    {"tensor_batch_int64_max", TENSOR_BATCH, {4, 8, INT64_MAX}, "bpt_tensor_set_batch"},
    {"tensor_batch_negative", TENSOR_BATCH, {4, 8, -1}, "bpt_tensor_set_batch"},
};

/* Builds, compiles (batch 2 unless the case says otherwise) and runs one case; returns the first failure. */
static bpt_status run_case(bpt_context *context, const hostile_case *c) {
  const int64_t *v = c->v;
  bpt_graph *graph = NULL;
  bpt_tensor *tensor = NULL;
  bpt_node *x = NULL, *y = NULL, *node = NULL;
  int64_t batch = 2;
  bpt_status status = bpt_graph_create(context, &graph);
  if (status != BPT_OK) return status;
#define TRY(expression)                                                                                                \
  do {                                                                                                                 \
    status = (expression);                                                                                             \
    if (status != BPT_OK) goto done;                                                                                   \
  } while (0)
  switch (c->kind) {
  case INPUT_DIMS: TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, (int)v[0], v + 1, &y)); break;
  case PARAMETER_DIMS: TRY(bpt_graph_parameter(graph, "p", (int)v[0], v + 1, BPT_INIT_ONES, &y)); break;
  case LINEAR_UNITS:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, v, &x));
    TRY(bpt_layer_linear(graph, "fc", x, v[1], BPT_INIT_HE_NORMAL, &y));
    break;
  case LINEAR_WEIGHT:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, v, &x));
    TRY(bpt_graph_parameter(graph, "w", 2, v + 1, BPT_INIT_ONES, &node));
    TRY(bpt_linear(graph, "fc", x, node, NULL, &y));
    break;
  case CONV: {
    const int64_t input_dims[3] = {v[0], v[1], v[2]}, weight_dims[4] = {v[3], v[0], v[4], v[5]};
    bpt_conv2d_options options = bpt_conv2d_options_default();
    options.stride_height = v[6];
    options.stride_width = v[7];
    options.padding_height = v[8];
    options.padding_width = v[9];
    options.dilation_height = v[10];
    options.dilation_width = v[11];
    options.groups = v[12];
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, input_dims, &x));
    TRY(bpt_graph_parameter(graph, "w", 4, weight_dims, BPT_INIT_ONES, &node));
    TRY(bpt_conv2d(graph, "conv", x, node, NULL, &options, &y));
    break;
  }
  case MAX_POOL:
  case AVG_POOL:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, v, &x));
    TRY((c->kind == MAX_POOL ? bpt_max_pool2d : bpt_avg_pool2d)(graph, "pool", x, v[3], v[4], v[5], &y));
    break;
  case GLOBAL_POOL:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, v, &x));
    TRY(bpt_global_avg_pool(graph, "gap", x, &y));
    batch = v[3];
    break;
  case RESHAPE:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, v, &x));
    TRY(bpt_reshape(graph, "r", x, (int)v[1], v + 2, &y));
    break;
  case BATCH_NORM: {
    bpt_node *gamma, *beta, *mean, *variance;
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, v, &x));
    TRY(bpt_graph_parameter(graph, "gamma", 1, v + 3, BPT_INIT_ONES, &gamma));
    TRY(bpt_graph_parameter(graph, "beta", 1, v + 3, BPT_INIT_ZEROS, &beta));
    TRY(bpt_graph_nontrainable_parameter(graph, "mean", 1, v + 3, BPT_INIT_ZEROS, &mean));
    TRY(bpt_graph_nontrainable_parameter(graph, "variance", 1, v + 3, BPT_INIT_ONES, &variance));
    TRY(bpt_batch_norm_relu(graph, "bn", x, gamma, beta, mean, variance, 0.1f, 1e-5f, &y));
    batch = v[4];
    break;
  }
  case DROPOUT:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, (int)v[0], v + 1, &x));
    TRY(bpt_dropout(graph, "drop", x, 0.5f, &y));
    batch = v[1 + v[0]];
    break;
  case COMPILE_BATCH:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, v, &x));
    TRY(bpt_relu(graph, "relu", x, &y));
    batch = v[1];
    break;
  case SET_INPUT_BATCH:
  case TENSOR_BATCH:
    TRY(bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, v, &x));
    TRY(bpt_relu(graph, "relu", x, &y));
    batch = v[1];
    break;
  }
  TRY(bpt_graph_compile(graph, NULL, batch));
  if (x) {
    const int64_t rows = c->kind == SET_INPUT_BATCH ? v[2] : batch;
    int64_t dims[BPT_MAX_RANK] = {rows};
    const int rank = bpt_node_rank(x);
    for (int i = 1; i < rank; i++) dims[i] = bpt_node_dim(x, i);
    TRY(bpt_tensor_create(context, BPT_DTYPE_F32, rank, dims, &tensor));
    if (c->kind == TENSOR_BATCH) TRY(bpt_tensor_set_batch(tensor, v[2]));
    TRY(bpt_graph_set_input(graph, x, tensor));
    TRY(bpt_graph_forward(graph));
  }
done:
#undef TRY
  (void)y;
  bpt_tensor_destroy(tensor);
  bpt_graph_destroy(graph);
  return status;
}

static void hostile_size_is_refused(void **state) {
  const hostile_case *c = *state;
  bpt_context *context = test_context(1);
  bpt_status status = run_case(context, c);
  char message[1024];
  snprintf(message, sizeof message, "%s", bpt_context_last_error(context));
  bpt_context_destroy(context); /* before any failure, so a failing case reports no leak of its own */
  if (getenv("BPT_HOSTILE_VERBOSE")) print_message("%s: %s: %s\n", c->name, bpt_status_string(status), message);
  if (status == BPT_OK) fail_msg("%s: every call succeeded", c->name);
  if (status == BPT_ERR_INTERNAL) fail_msg("%s: internal error: %s", c->name, message);
  if (!message[0]) fail_msg("%s: %s without a message", c->name, bpt_status_string(status));
  if (c->fragment && !strstr(message, c->fragment))
    fail_msg("%s: message '%s' does not name '%s'", c->name, message, c->fragment);
}

/* Sizes just inside the limits still build (the checks must not refuse what the kernels can run). */
static void sizes_inside_the_limits_still_work(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *weight, *conv, *pool, *flat;
  assert_ok(context, bpt_graph_create(context, &graph));
  const int64_t input_dims[3] = {1, 5, 5}, weight_dims[4] = {2, 1, 3, 3};
  bpt_conv2d_options options = bpt_conv2d_options_default();
  options.padding_height = options.padding_width = 3; /* (5 + 6 - 3) / 1 + 1 = 9 */
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, input_dims, &x));
  assert_ok(context, bpt_graph_parameter(graph, "w", 4, weight_dims, BPT_INIT_ONES, &weight));
  assert_ok(context, bpt_conv2d(graph, "conv", x, weight, NULL, &options, &conv));
  assert_int_equal(bpt_node_dim(conv, 2), 9);
  assert_ok(context, bpt_max_pool2d(graph, "pool", conv, 3, 2, 1, &pool));
  assert_int_equal(bpt_node_dim(pool, 2), 5);
  assert_ok(context, bpt_flatten(graph, "flat", pool, &flat));
  assert_int_equal(bpt_node_dim(flat, 1), 50);
  assert_ok(context, bpt_graph_compile(graph, NULL, 3));
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

/* The optimiser's step counter (restorable from a checkpoint) reaches INT64_MAX with its last step, parameter
 * check included, and must not wrap on the next step. */
static void step_counter_at_int64_max_is_refused(void **state) {
  (void)state;
  bpt_context *context = test_context(1);
  bpt_graph *graph;
  bpt_node *x, *labels, *logits, *loss;
  bpt_optimizer *optimizer;
  const int64_t features = 3, one = 1;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 1, &one, &labels));
  assert_ok(context, bpt_layer_linear(graph, "fc", x, 2, BPT_INIT_HE_NORMAL, &logits));
  assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, 2));
  bpt_optimizer_options options = bpt_optimizer_options_default();
  assert_ok(context, bpt_optimizer_create(graph, &options, &optimizer));
  bpt_tensor *images, *targets;
  const int64_t image_dims[2] = {2, 3}, label_dims[1] = {2};
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, image_dims, &images));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &targets));
  assert_ok(context, bpt_graph_set_input(graph, x, images));
  assert_ok(context, bpt_graph_set_input(graph, labels, targets));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  bpt_optimizer_state view;
  bpt_optimizer_state_view(optimizer, &view);
  *view.steps = INT64_MAX - 1;
  assert_ok(context, bpt_optimizer_step(optimizer));
  assert_int_equal(bpt_optimizer_step_count(optimizer), INT64_MAX);
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  assert_fails(context, BPT_ERR_STATE, "step count", bpt_optimizer_step(optimizer));
  assert_int_equal(bpt_optimizer_step_count(optimizer), INT64_MAX);
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(targets);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

int main(void) {
  enum { count = sizeof cases / sizeof cases[0] };
  struct CMUnitTest tests[count + 2];
  for (int i = 0; i < count; i++)
    tests[i] = (struct CMUnitTest){.name = cases[i].name, .test_func = hostile_size_is_refused,
                                   .initial_state = (void *)&cases[i]};
  tests[count] = (struct CMUnitTest)cmocka_unit_test(sizes_inside_the_limits_still_work);
  tests[count + 1] = (struct CMUnitTest)cmocka_unit_test(step_counter_at_int64_max_is_refused);
  const char *only = getenv("BPT_HOSTILE_CASE");
  if (only && only[0]) cmocka_set_test_filter(only);
  return _cmocka_run_group_tests("hostile_sizes", tests, count + 2, NULL, NULL);
}
