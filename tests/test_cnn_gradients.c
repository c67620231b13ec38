/* Finite-difference gradient checks for every convolutional op over a grid of shapes: odd sizes, stride 2,
 * padding, dilation, groups, batch 1. Inputs carry no gradient, so each op under test sits behind a
 * "pre" convolution with parameters: its weight gradient checks the op's input gradient as well. */
#include <stdlib.h>

#include "test_support.h"

typedef struct op_case {
  const char *label;
  int64_t batch, channels, height, width;
  /* conv2d under test */
  int64_t out_channels, kernel_height, kernel_width, stride, padding, dilation, groups;
  int with_bias;
  int kind;
} op_case;

enum {
  CONV,
  BATCH_NORM_2D,
  BATCH_NORM_1D,
  MAX_POOL,
  AVG_POOL,
  GLOBAL_POOL,
  ADD_RESIDUAL,
  RESHAPE,
  DROPOUT,
  RESNET_BLOCK,
  RESNET_PROJECTION,
  BATCH_NORM_RELU_2D,
  BATCH_NORM_RELU_1D,
  ADD_RELU
};

static bpt_node *build_op(bpt_context *context, bpt_graph *graph, const op_case *c, bpt_node *x) {
  bpt_node *y = NULL;
  switch (c->kind) {
  case CONV: {
    bpt_node *weight, *bias = NULL;
    int64_t dims[4] = {c->out_channels, c->channels / c->groups, c->kernel_height, c->kernel_width};
    assert_ok(context, bpt_graph_parameter(graph, "w", 4, dims, BPT_INIT_HE_UNIFORM, &weight));
    if (c->with_bias) assert_ok(context, bpt_graph_parameter(graph, "b", 1, &c->out_channels, BPT_INIT_ZEROS, &bias));
    bpt_conv2d_options options = bpt_conv2d_options_default();
    options.stride_height = options.stride_width = c->stride;
    options.padding_height = options.padding_width = c->padding;
    options.dilation_height = options.dilation_width = c->dilation;
    options.groups = c->groups;
    assert_ok(context, bpt_conv2d(graph, "op", x, weight, bias, &options, &y));
    break;
  }
  case BATCH_NORM_2D: assert_ok(context, bpt_layer_batch_norm(graph, "op", x, &y)); break;
  case BATCH_NORM_1D:
    assert_ok(context, bpt_flatten(graph, "flat", x, &y));
    assert_ok(context, bpt_layer_batch_norm(graph, "op", y, &y));
    break;
  case MAX_POOL: assert_ok(context, bpt_max_pool2d(graph, "op", x, c->kernel_height, c->stride, c->padding, &y)); break;
  case AVG_POOL: assert_ok(context, bpt_avg_pool2d(graph, "op", x, c->kernel_height, c->stride, c->padding, &y)); break;
  case GLOBAL_POOL: assert_ok(context, bpt_global_avg_pool(graph, "op", x, &y)); break;
  case ADD_RESIDUAL: {
    /* x feeds both the add and a ReLU branch: its gradient is the sum of two paths. */
    bpt_node *branch;
    assert_ok(context, bpt_tanh(graph, "branch", x, &branch));
    assert_ok(context, bpt_add(graph, "op", x, branch, &y));
    break;
  }
  case RESHAPE: {
    int64_t dims[2] = {c->channels * c->height, c->width};
    assert_ok(context, bpt_reshape(graph, "op", x, 2, dims, &y));
    assert_ok(context, bpt_tanh(graph, "after", y, &y));
    break;
  }
  case DROPOUT: assert_ok(context, bpt_dropout(graph, "op", x, 0.3f, &y)); break;
  case RESNET_BLOCK: assert_ok(context, bpt_layer_resnet_basic_block(graph, "block", x, c->channels, 1, &y)); break;
  case RESNET_PROJECTION:
    assert_ok(context, bpt_layer_resnet_basic_block(graph, "block", x, c->out_channels, 2, &y));
    break;
  case BATCH_NORM_RELU_2D: assert_ok(context, bpt_layer_batch_norm_relu(graph, "op", x, &y)); break;
  case BATCH_NORM_RELU_1D:
    assert_ok(context, bpt_flatten(graph, "flat", x, &y));
    assert_ok(context, bpt_layer_batch_norm_relu(graph, "op", y, &y));
    break;
  case ADD_RELU: {
    bpt_node *branch;
    assert_ok(context, bpt_tanh(graph, "branch", x, &branch));
    assert_ok(context, bpt_add_relu(graph, "op", x, branch, &y));
    break;
  }
  }
  return y;
}

static void check_case(const op_case *c, uint64_t seed, double step, double absolute, double relative) {
  bpt_context *context = test_context(seed);
  bpt_graph *graph;
  bpt_node *x, *pre, *y, *target, *loss, *pre_weight, *pre_bias;
  int64_t image[3] = {c->channels, c->height, c->width};
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 3, image, &x));
  int64_t pre_dims[4] = {c->channels, c->channels, 3, 3};
  assert_ok(context, bpt_graph_parameter(graph, "pre.w", 4, pre_dims, BPT_INIT_HE_UNIFORM, &pre_weight));
  assert_ok(context, bpt_graph_parameter(graph, "pre.b", 1, &c->channels, BPT_INIT_ZEROS, &pre_bias));
  bpt_conv2d_options same = bpt_conv2d_options_default();
  same.padding_height = same.padding_width = 1;
  assert_ok(context, bpt_conv2d(graph, "pre", x, pre_weight, pre_bias, &same, &pre));
  y = build_op(context, graph, c, pre);
  int64_t outputs = 1;
  for (int i = 1; i < bpt_node_rank(y); i++)
    outputs *= bpt_node_dim(y, i);
  assert_ok(context, bpt_graph_input(graph, "target", BPT_DTYPE_F32, 1, &outputs, &target));
  assert_ok(context, bpt_mse_loss(graph, "loss", y, target, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, c->batch));

  test_random random;
  test_random_seed(&random, seed);
  int64_t count = bpt_graph_parameter_count(graph);
  float *parameters = malloc((size_t)count * sizeof *parameters);
  assert_ok(context, bpt_graph_read_parameters(graph, parameters, count));
  /* Random weights and biases everywhere, but batch-norm running variances must stay positive. */
  float *noise = malloc((size_t)count * sizeof *noise);
  test_random_fill(&random, noise, count, -0.6f, 0.6f);
  for (int64_t i = 0; i < count; i++)
    parameters[i] = parameters[i] == 1.0f ? 1.0f + noise[i] : noise[i];
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
  free(noise);
  free(parameters);

  int64_t x_dims[4] = {c->batch, c->channels, c->height, c->width}, t_dims[2] = {c->batch, outputs};
  bpt_tensor *x_values, *t_values;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 4, x_dims, &x_values));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, t_dims, &t_values));
  test_random_fill(&random, bpt_tensor_data(x_values), bpt_tensor_element_count(x_values), -1.0f, 1.0f);
  test_random_fill(&random, bpt_tensor_data(t_values), bpt_tensor_element_count(t_values), -1.0f, 1.0f);
  assert_ok(context, bpt_graph_set_input(graph, x, x_values));
  assert_ok(context, bpt_graph_set_input(graph, target, t_values));
  if (c->kind == RESNET_BLOCK || c->kind == RESNET_PROJECTION || c->kind == BATCH_NORM_RELU_2D ||
      c->kind == BATCH_NORM_RELU_1D || c->kind == ADD_RELU) {
    /* Blocks and fused ops have ReLUs right after batch norm or a sum, where many values sit near the kink; a target close to the
     * output makes the loss small, so float rounding allows a step small enough to rarely cross a kink. */
    assert_ok(context, bpt_graph_forward(graph));
    int64_t y_dims[5] = {c->batch};
    for (int i = 1; i < bpt_node_rank(y); i++)
      y_dims[i] = bpt_node_dim(y, i);
    bpt_tensor *y_values;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, bpt_node_rank(y), y_dims, &y_values));
    assert_ok(context, bpt_graph_read(graph, y, y_values));
    float *t = bpt_tensor_data(t_values);
    const float *now = bpt_tensor_data(y_values);
    for (int64_t i = 0; i < c->batch * outputs; i++)
      t[i] = now[i] + 0.05f * t[i];
    assert_ok(context, bpt_graph_set_input(graph, target, t_values));
    bpt_tensor_destroy(y_values);
  }
  print_message("[ case     ] %s\n", c->label);
  test_check_gradients(context, graph, step, absolute, relative, 400);

  bpt_tensor_destroy(x_values);
  bpt_tensor_destroy(t_values);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void conv2d_grid(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"3x3 pad 1, odd 7x5, bias", 2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, CONV},
      {"3x3 stride 2, no pad, 9x9", 2, 2, 9, 9, 3, 3, 3, 2, 0, 1, 1, 1, CONV},
      {"3x3 dilation 2 pad 2", 2, 2, 8, 7, 3, 3, 3, 1, 2, 2, 1, 0, CONV},
      {"groups 2, stride 2, pad 1", 3, 4, 7, 7, 6, 3, 3, 2, 1, 1, 2, 1, CONV},
      {"depthwise groups 3", 2, 3, 6, 5, 3, 3, 3, 1, 1, 1, 3, 0, CONV},
      {"pointwise 1x1, batch 1", 1, 3, 5, 6, 4, 1, 1, 1, 0, 1, 1, 1, CONV},
      {"1x1 stride 2 projection", 2, 3, 7, 7, 5, 1, 1, 2, 0, 1, 1, 0, CONV},
      {"5x3 kernel, pad 1, 3x3 planes chunked", 6, 2, 5, 3, 3, 5, 3, 1, 1, 1, 1, 1, CONV},
      /* Wide enough planes for the padded-width lowering of stride-1 convolutions. */
      {"3x3 pad 1, 12-wide (padded lowering), bias", 2, 2, 5, 12, 3, 3, 3, 1, 1, 1, 1, 1, CONV},
      {"3x3 dilation 2, no pad, 20-wide (padded lowering)", 2, 2, 6, 20, 3, 3, 3, 1, 0, 2, 1, 0, CONV},
      {"3x3 dilation 2 pad 2, 16-wide, batch 1 (padded lowering)", 1, 2, 6, 16, 3, 3, 3, 1, 2, 2, 1, 1, CONV},
      {"groups 2, 3x3 pad 1, 12-wide (padded lowering)", 2, 4, 5, 12, 6, 3, 3, 1, 1, 1, 2, 0, CONV},
      {"3x3 stride 2 pad 1, odd 15-wide (phase planes), bias", 2, 2, 5, 15, 3, 3, 3, 2, 1, 1, 1, 1, CONV},
      {"3x3 stride 2, dilation 2, pad 2, 17-wide (one phase)", 1, 2, 7, 17, 3, 3, 3, 2, 2, 2, 1, 0, CONV},
      {"3x3 stride 3 pad 1, 20-wide (nine phases)", 2, 2, 7, 20, 2, 3, 3, 3, 1, 1, 1, 0, CONV},
      {"3x3 stride 2, no pad, 7x7 (bounds-checked im2col)", 2, 2, 7, 7, 3, 3, 3, 2, 0, 1, 1, 1, CONV},
      {"16 channels, 3x3 pad 1, 9-wide (padded lowering)", 2, 16, 4, 9, 4, 3, 3, 1, 1, 1, 1, 1, CONV},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 10 + i, 1e-2, 3e-4, 2e-2);
}

static void batch_norm_grid(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"2-D, 5x3 planes", 3, 3, 5, 3, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_2D},
      {"2-D, batch 1", 1, 2, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_2D},
      {"1-D over (N, C)", 6, 2, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_1D},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 30 + i, 1e-2, 3e-4, 3e-2);
}

static void pooling_grid(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"max 2x2 stride 2, odd 7x5", 2, 2, 7, 5, 0, 2, 2, 2, 0, 0, 0, 0, MAX_POOL},
      {"max 3x3 stride 2 pad 1", 2, 2, 7, 7, 0, 3, 3, 2, 1, 0, 0, 0, MAX_POOL},
      {"max 3x3 stride 1 overlapping, batch 1", 1, 2, 5, 6, 0, 3, 3, 1, 0, 0, 0, 0, MAX_POOL},
      {"avg 2x2 stride 2, odd 7x5", 2, 2, 7, 5, 0, 2, 2, 2, 0, 0, 0, 0, AVG_POOL},
      {"avg 3x3 stride 2 pad 1", 2, 3, 6, 7, 0, 3, 3, 2, 1, 0, 0, 0, AVG_POOL},
      {"global average", 3, 3, 5, 4, 0, 0, 0, 0, 0, 0, 0, 0, GLOBAL_POOL},
  };
  /* A smaller step keeps max pooling's winners from changing under the perturbation. */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 40 + i, 2e-3, 5e-4, 3e-2);
}

static void residual_reshape_dropout(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"add with fan-out", 2, 2, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, ADD_RESIDUAL},
      {"reshape", 2, 2, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, RESHAPE},
      {"dropout 0.3 (fixed mask between steps)", 3, 2, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, DROPOUT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 50 + i, 1e-2, 3e-4, 2e-2);
}

static void resnet_blocks(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"basic block, identity shortcut", 3, 3, 6, 6, 0, 0, 0, 0, 0, 0, 0, 0, RESNET_BLOCK},
      {"basic block, projection shortcut, stride 2", 3, 2, 7, 7, 4, 0, 0, 0, 0, 0, 0, 0, RESNET_PROJECTION},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 60 + i, 1e-3, 5e-4, 4e-2);
}

/* The fused ReLU ops, on planes whose rows do not fill whole mask bytes (5x3, 5x5) and on 1-D batch norm. */
static void fused_relu_grid(void **state) {
  (void)state;
  static const op_case cases[] = {
      {"batch norm + ReLU, 2-D, 5x3 planes", 3, 3, 5, 3, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_RELU_2D},
      {"batch norm + ReLU, 2-D, 5x5 planes", 2, 2, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_RELU_2D},
      {"batch norm + ReLU, 1-D over (N, C)", 6, 2, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, BATCH_NORM_RELU_1D},
      {"add + ReLU with fan-out", 2, 2, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, ADD_RELU},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check_case(&cases[i], 70 + i, 1e-3, 5e-4, 4e-2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(conv2d_grid),   cmocka_unit_test(batch_norm_grid),
      cmocka_unit_test(pooling_grid),  cmocka_unit_test(residual_reshape_dropout),
      cmocka_unit_test(resnet_blocks),  cmocka_unit_test(fused_relu_grid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
