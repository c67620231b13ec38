/* conv2d: y (N, O, OH, OW) = x (N, C, H, W) * weight (O, C / groups, kh, kw) + bias (O), NCHW throughout.
 * Integer attributes: stride (0, 1), padding (2, 3), dilation (4, 5), groups (6). The three products
 * (forward, input gradient, weight gradient) are the op's kernels; on the CPU direct loops, Winograd or
 * im2col + SGEMM. */
#include <stdbool.h>
#include <string.h>

#include "backends/kernel_args.h"
#include "bptrain/cnn.h"
#include "core/checked.h"
#include "core/graph.h"

enum {
  STRIDE_H = BPT_CONV2D_STRIDE_H,
  STRIDE_W = BPT_CONV2D_STRIDE_W,
  PADDING_H = BPT_CONV2D_PADDING_H,
  PADDING_W = BPT_CONV2D_PADDING_W,
  DILATION_H = BPT_CONV2D_DILATION_H,
  DILATION_W = BPT_CONV2D_DILATION_W,
  GROUPS = BPT_CONV2D_GROUPS
};

/* Each at most BPT_MAX_DIM, so that the shape arithmetic below stays far inside int64_t. */
#define CONV2D_PARAMETER(text, index, low)                                                                             \
  {                                                                                                                    \
    .name = text, .type = BPT_OP_VALUE_INT, .slot = index, .default_value = low, .minimum = low,                       \
    .maximum = BPT_MAX_DIM                                                                                             \
  }
static const bpt_param_decl conv2d_parameters[] = {CONV2D_PARAMETER("stride_height", STRIDE_H, 1),
                                                   CONV2D_PARAMETER("stride_width", STRIDE_W, 1),
                                                   CONV2D_PARAMETER("padding_height", PADDING_H, 0),
                                                   CONV2D_PARAMETER("padding_width", PADDING_W, 0),
                                                   CONV2D_PARAMETER("dilation_height", DILATION_H, 1),
                                                   CONV2D_PARAMETER("dilation_width", DILATION_W, 1),
                                                   CONV2D_PARAMETER("groups", GROUPS, 1)};

/* The output extent, or -1 when the padded input or the dilated kernel span does not fit BPT_MAX_DIM (every
 * attribute is already in [0, BPT_MAX_DIM], so the int64_t arithmetic below cannot wrap). */
static int64_t output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t padded = in + 2 * padding, span = dilation * (kernel - 1) + 1;
  if (padded > BPT_MAX_DIM || span > BPT_MAX_DIM) return -1;
  return padded < span ? 0 : (padded - span) / stride + 1;
}

static bpt_status conv2d_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0], *weight = node->inputs[1], *bias = node->input_count > 2 ? node->inputs[2] : NULL;
  const int64_t *a = node->int_attributes;
  char shape[96];
  if (x->dtype != BPT_DTYPE_F32 || weight->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "input and weight must be f32");
  if (!x->batched || x->rank != 4)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has shape %s; expected (N, C, H, W)", x->name,
                          bpt_shape_string(x, shape, sizeof shape));
  if (weight->batched || weight->rank != 4)
    return bpt_node_error(node, BPT_ERR_SHAPE, "weight '%s' has shape %s; expected (O, C / groups, kh, kw)",
                          weight->name, bpt_shape_string(weight, shape, sizeof shape));
  /* Each attribute's own range (>= 1, paddings >= 0, at most 2^31 - 1) is its declaration's (conv2d_parameters). */
  const int64_t channels = x->dims[1], out_channels = weight->dims[0], groups = a[GROUPS];
  if (channels % groups || out_channels % groups)
    return bpt_node_error(node, BPT_ERR_SHAPE, "%lld groups do not divide %lld input and %lld output channels",
                          (long long)groups, (long long)channels, (long long)out_channels);
  if (weight->dims[1] * groups != channels)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has %lld channels, weight '%s' expects %lld (x %lld groups)",
                          x->name, (long long)channels, weight->name, (long long)weight->dims[1], (long long)groups);
  if (bias && (bias->batched || bpt_node_inner_count(bias) != out_channels))
    return bpt_node_error(node, BPT_ERR_SHAPE, "bias '%s' has %lld values, weight '%s' has %lld output channels",
                          bias->name, (long long)bpt_node_inner_count(bias), weight->name, (long long)out_channels);
  const int64_t height = output_size(x->dims[2], weight->dims[2], a[STRIDE_H], a[PADDING_H], a[DILATION_H]);
  const int64_t width = output_size(x->dims[3], weight->dims[3], a[STRIDE_W], a[PADDING_W], a[DILATION_W]);
  if (height < 0 || width < 0)
    return bpt_node_error(node, BPT_ERR_INVALID_ARGUMENT,
                          "the padded %lldx%lld input (padding %lldx%lld) or the %lldx%lld kernel's span (dilation "
                          "%lldx%lld) exceeds 2^31 - 1",
                          (long long)x->dims[2], (long long)x->dims[3], (long long)a[PADDING_H],
                          (long long)a[PADDING_W], (long long)weight->dims[2], (long long)weight->dims[3],
                          (long long)a[DILATION_H], (long long)a[DILATION_W]);
  if (height < 1 || width < 1)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "a %lldx%lld kernel (dilation %lldx%lld) does not fit the %lldx%lld "
                          "input with padding %lldx%lld",
                          (long long)weight->dims[2], (long long)weight->dims[3], (long long)a[DILATION_H],
                          (long long)a[DILATION_W], (long long)x->dims[2], (long long)x->dims[3],
                          (long long)a[PADDING_H], (long long)a[PADDING_W]);
  /* The kernels' GEMMs take int dims (cblas blasint): the column matrix's rows (C / groups) kh kw and
   * columns OH OW must fit, and so must the padded input plane, whose phase rows the CPU lowering multiplies
   * in place (up to 1.25 OH OW columns). */
  int64_t column_rows, out_plane, padded_plane;
  if (!bpt_checked_product(weight->dims + 1, 3, BPT_MAX_DIM, &column_rows) ||
      !bpt_checked_mul(height, width, &out_plane) || out_plane > BPT_MAX_DIM ||
      !bpt_checked_mul(x->dims[2] + 2 * a[PADDING_H], x->dims[3] + 2 * a[PADDING_W], &padded_plane) ||
      padded_plane > BPT_MAX_DIM)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "weight '%s' (%lld values per output channel) and the %lldx%lld output (padded input "
                          "%lldx%lld) exceed the kernels' limits (2^31 - 1 per GEMM dimension)",
                          weight->name, (long long)(weight->dims[1] * weight->dims[2] * weight->dims[3]),
                          (long long)height, (long long)width, (long long)(x->dims[2] + 2 * a[PADDING_H]),
                          (long long)(x->dims[3] + 2 * a[PADDING_W]));
  node->batched = true;
  node->rank = 4;
  node->dims[0] = x->dims[0];
  node->dims[1] = out_channels;
  node->dims[2] = height;
  node->dims[3] = width;
  return BPT_OK;
}

/* The kernels read the attributes above (bpt_conv2d_args_of) and the shapes of x, weight and y. */
static bpt_status conv2d_forward(bpt_node *node) { return bpt_node_forward_kernels(node); }

/* The input gradient is skipped for the image input, which saves the costliest col2im of the network. */
static bpt_status conv2d_backward(bpt_node *node) {
  bpt_node *weight = node->inputs[1], *bias = node->input_count > 2 ? node->inputs[2] : NULL;
  if (bias && bias->requires_grad && !weight->requires_grad)
    return bpt_node_error(node, BPT_ERR_UNSUPPORTED, "a trainable bias needs a trainable weight");
  if (!weight->requires_grad && !node->inputs[0]->requires_grad) return BPT_OK;
  return bpt_node_backward_kernels(node);
}

/* Activation memory: backward reads x (weight gradient) and the weight (input gradient), never y. */
static bool conv2d_reads_input(const bpt_node *node, int input) {
  (void)node;
  return input < 2;
}

/* For the profiler: each of the three products is 2 N O OH OW (C / groups) kh kw FLOPs, the count of the
 * direct convolution whatever the kernel runs (Winograd multiplies less, im2col more memory): the customary
 * rate, comparable across kernels and with other frameworks. Bytes are each product's operands, once. */
static void conv2d_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const bpt_node *x = node->inputs[0], *weight = node->inputs[1];
  const bool has_bias = node->input_count > 2 && node->inputs[2];
  /* The run's batch, not the compiled one (dims[0] is the largest batch the plan holds). */
  const double outputs = (double)bpt_node_count(node), inputs = (double)bpt_node_count(x);
  const double weights = (double)bpt_node_inner_count(weight);
  const double product = 2.0 * outputs * (double)(weight->dims[1] * weight->dims[2] * weight->dims[3]);
  const double product_bytes = 4.0 * (inputs + weights + outputs);
  if (!backward) {
    *flops = product + (has_bias ? outputs : 0.0);
    *bytes = product_bytes + (has_bias ? 4.0 * (double)weight->dims[0] : 0.0);
    return;
  }
  /* The input gradient is skipped for an input that needs none (the image), and so is its cost. */
  const int products = (weight->requires_grad ? 1 : 0) + (x->requires_grad ? 1 : 0);
  const bool bias_gradient = has_bias && node->inputs[2]->requires_grad;
  *flops = products * product + (bias_gradient ? outputs : 0.0);
  *bytes = products * product_bytes + (bias_gradient ? 4.0 * (outputs + (double)weight->dims[0]) : 0.0);
}

const bpt_op_definition bpt_op_conv2d = {.name = "conv2d",
                                         .kernels_only = true,
                                         BPT_OP_PARAMETERS(conv2d_parameters),
                                         .infer_shape = conv2d_infer_shape,
                                         .forward = conv2d_forward,
                                         .backward = conv2d_backward,
                                         .backward_reads_input = conv2d_reads_input,
                                         .backward_reads_output = bpt_op_reads_no_output,
                                         .cost = conv2d_cost,
                                         .overwrites_unset_gradients = true,
                                         .speculative = BPT_SPECULATIVE_KERNELS};

bpt_conv2d_options bpt_conv2d_options_default(void) {
  bpt_conv2d_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.stride_height = options.stride_width = 1;
  options.dilation_height = options.dilation_width = 1;
  options.groups = 1;
  return options;
}

bpt_status bpt_conv2d(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *weight, bpt_node *bias,
                      const bpt_conv2d_options *options, bpt_node **out) {
  bpt_conv2d_options o = bpt_conv2d_options_default();
  if (options && graph)
    BPT_CHECK(bpt_copy_options(graph->context, &o, sizeof o, options, options->size,
                               offsetof(bpt_conv2d_options, groups) + sizeof o.groups, "bpt_conv2d"));
  const int64_t attributes[] = {o.stride_height,   o.stride_width,   o.padding_height, o.padding_width,
                                o.dilation_height, o.dilation_width, o.groups};
  bpt_node *inputs[3] = {x, weight, bias};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_CONV2D, name, inputs, bias ? 3 : 2, attributes, 7, NULL, 0,
                                            out);
}
