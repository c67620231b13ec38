/* Argument structs of the op kernels that several backends implement alike (activations, convolution, batch
 * norm, pooling, softmax cross-entropy), and how each is read from a bpt_kernel_node, so the backends' op files
 * unpack a node the same way. The attribute positions are those the op files in src/core/ops/ set. A new op needs
 * nothing here: its kernels read the node themselves. */
#ifndef BPT_BACKENDS_KERNEL_ARGS_H
#define BPT_BACKENDS_KERNEL_ARGS_H

#include <string.h>

#include "backends/backend.h"

/* Element-wise activations share one kernel pair. Values are internal and may change. */
typedef enum bpt_activation {
  BPT_ACTIVATION_RELU,
  BPT_ACTIVATION_LEAKY_RELU,
  BPT_ACTIVATION_SIGMOID,
  BPT_ACTIVATION_TANH
} bpt_activation;

static inline bpt_activation bpt_activation_of(bpt_op_id op) {
  switch (op) {
  case BPT_OP_LEAKY_RELU: return BPT_ACTIVATION_LEAKY_RELU;
  case BPT_OP_SIGMOID: return BPT_ACTIVATION_SIGMOID;
  case BPT_OP_TANH: return BPT_ACTIVATION_TANH;
  default: return BPT_ACTIVATION_RELU;
  }
}

/* The attribute slots the shared unpackers below read: each op file in src/core/ops/ declares its parameters in
 * these slots (its bpt_param_decl table), so the op and its kernels agree on one list. */
enum { BPT_LEAKY_RELU_SLOPE = 0 }; /* float */
enum {
  BPT_CONV2D_STRIDE_H,
  BPT_CONV2D_STRIDE_W,
  BPT_CONV2D_PADDING_H,
  BPT_CONV2D_PADDING_W,
  BPT_CONV2D_DILATION_H,
  BPT_CONV2D_DILATION_W,
  BPT_CONV2D_GROUPS
};                                                                /* int */
enum { BPT_BATCH_NORM_MOMENTUM = 0, BPT_BATCH_NORM_EPSILON = 1 }; /* float */
enum {
  BPT_POOL2D_KERNEL_H,
  BPT_POOL2D_KERNEL_W,
  BPT_POOL2D_STRIDE_H,
  BPT_POOL2D_STRIDE_W,
  BPT_POOL2D_PADDING_H,
  BPT_POOL2D_PADDING_W
};                                                                             /* int */
enum { BPT_CROSS_ENTROPY_HAS_IGNORE = 0, BPT_CROSS_ENTROPY_IGNORE_INDEX = 1 }; /* int */
enum { BPT_CROSS_ENTROPY_SMOOTHING = 0 };                                      /* float */

/* An activation node: x -> y over count values, leaky_relu's slope in float attribute 0; dy and dx in backward. */
typedef struct bpt_activation_args {
  bpt_activation kind;
  float parameter;
  int64_t count;
  const float *x, *y, *dy;
  float *dx;
} bpt_activation_args;

static inline bpt_activation_args bpt_activation_args_of(const bpt_kernel_node *node) {
  bpt_activation_args args;
  args.kind = bpt_activation_of(node->op), args.parameter = node->float_attributes[BPT_LEAKY_RELU_SLOPE];
  args.count = node->output.count;
  args.x = (const float *)node->inputs[0].value, args.y = (const float *)node->output.value;
  args.dy = node->output.grad, args.dx = node->inputs[0].grad;
  return args;
}

/* 2-D convolution over NCHW tensors with an OIHW weight, (out_channels, in_channels / groups, kh, kw). */
typedef struct bpt_conv2d_args {
  int64_t batch, in_channels, in_height, in_width;
  int64_t out_channels, out_height, out_width;
  int64_t kernel_height, kernel_width;
  int64_t stride_height, stride_width, padding_height, padding_width, dilation_height, dilation_width;
  int64_t groups;
  bool assign_input_gradient; /* conv2d_backward_data: dx = rather than += (beta 0) */
  bool bf16_products;         /* bf16 policy: the lowerings' GEMMs may run in bf16 (bpt_gemm_args) */
} bpt_conv2d_args;

/* conv2d's int attributes: stride (0, 1), padding (2, 3), dilation (4, 5), groups (6); inputs x, weight, bias. */
static inline bpt_conv2d_args bpt_conv2d_args_of(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0], *weight = &node->inputs[1], *y = &node->output;
  const int64_t *a = node->int_attributes;
  bpt_conv2d_args args;
  args.batch = x->dims[0], args.in_channels = x->dims[1], args.in_height = x->dims[2], args.in_width = x->dims[3];
  args.out_channels = y->dims[1], args.out_height = y->dims[2], args.out_width = y->dims[3];
  args.kernel_height = weight->dims[2], args.kernel_width = weight->dims[3];
  args.stride_height = a[BPT_CONV2D_STRIDE_H], args.stride_width = a[BPT_CONV2D_STRIDE_W];
  args.padding_height = a[BPT_CONV2D_PADDING_H], args.padding_width = a[BPT_CONV2D_PADDING_W];
  args.dilation_height = a[BPT_CONV2D_DILATION_H], args.dilation_width = a[BPT_CONV2D_DILATION_W];
  args.groups = a[BPT_CONV2D_GROUPS];
  args.assign_input_gradient = x->beta == 0.0f;
  args.bf16_products = node->bf16_products;
  return args;
}

/* Batch norm over (batch, channels, spatial): statistics per channel over batch * spatial values. */
typedef struct bpt_batch_norm_args {
  int64_t batch, channels, spatial;
  float epsilon;
  float momentum; /* running = (1 - momentum) * running + momentum * batch statistic (PyTorch's convention) */
  bool training;  /* false: normalise with the running statistics */
  bool assign_input_gradient; /* backward: dx = rather than += (beta 0) */
  /* Fused ReLU, NULL otherwise. Forward: y = max(bn(x), 0) and one bit per element, set where y > 0; backward:
   * dy is taken as zero where the bit is clear. Row (n, c) of spatial values has its own (spatial + 7) / 8
   * bytes, at byte (n channels + c) ((spatial + 7) / 8), bit i % 8 of byte i / 8 for its value i, so a row's
   * bits never share a byte with another row's. */
  uint8_t *relu_mask;
} bpt_batch_norm_args;

/* batch_norm(_relu): inputs x, gamma, beta, running mean, running variance; float attributes momentum (0) and
 * epsilon (1); int attribute 0 set when folded into the convolution before it; saved holds mean and 1/std per
 * channel, then (batch_norm_relu) the ReLU mask. */
enum { BPT_BATCH_NORM_FOLDED = 0 };
static inline bpt_batch_norm_args bpt_batch_norm_args_of(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  bpt_batch_norm_args args;
  args.batch = x->dims[0], args.channels = x->dims[1], args.spatial = x->count / (x->dims[0] * x->dims[1]);
  args.epsilon = node->float_attributes[BPT_BATCH_NORM_EPSILON],
  args.momentum = node->float_attributes[BPT_BATCH_NORM_MOMENTUM];
  args.training = !node->evaluation;
  args.assign_input_gradient = x->grad && x->beta == 0.0f;
  args.relu_mask = NULL;
  return args;
}
static inline float *bpt_batch_norm_saved_mean(const bpt_kernel_node *node) { return (float *)node->saved; }
static inline float *bpt_batch_norm_saved_inverse_std(const bpt_kernel_node *node) {
  return (float *)node->saved + node->inputs[0].dims[1];
}
static inline uint8_t *bpt_batch_norm_relu_mask(const bpt_kernel_node *node) {
  return (uint8_t *)((float *)node->saved + 2 * node->inputs[0].dims[1]);
}

typedef enum bpt_pool_kind { BPT_POOL_MAX, BPT_POOL_AVERAGE } bpt_pool_kind;

/* 2-D pooling over NCHW; average pooling divides by the full window (padding counted, as PyTorch's default). */
typedef struct bpt_pool2d_args {
  bpt_pool_kind kind;
  int64_t batch, channels, in_height, in_width, out_height, out_width;
  int64_t kernel_height, kernel_width, stride_height, stride_width, padding_height, padding_width;
} bpt_pool2d_args;

/* max_pool2d / avg_pool2d: int attributes kernel (0, 1), stride (2, 3), padding (4, 5); max pooling saves the
 * winning input index (int32) of every output. global_avg_pool: one window over the whole plane. */
static inline bpt_pool2d_args bpt_pool2d_args_of(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  const int64_t *a = node->int_attributes;
  const bool global = node->op == BPT_OP_GLOBAL_AVG_POOL;
  bpt_pool2d_args args;
  args.kind = node->op == BPT_OP_MAX_POOL2D ? BPT_POOL_MAX : BPT_POOL_AVERAGE;
  args.batch = x->dims[0], args.channels = x->dims[1], args.in_height = x->dims[2], args.in_width = x->dims[3];
  args.out_height = global ? 1 : node->output.dims[2], args.out_width = global ? 1 : node->output.dims[3];
  args.kernel_height = global ? x->dims[2] : a[BPT_POOL2D_KERNEL_H];
  args.kernel_width = global ? x->dims[3] : a[BPT_POOL2D_KERNEL_W];
  args.stride_height = global ? 1 : a[BPT_POOL2D_STRIDE_H], args.stride_width = global ? 1 : a[BPT_POOL2D_STRIDE_W];
  args.padding_height = global ? 0 : a[BPT_POOL2D_PADDING_H];
  args.padding_width = global ? 0 : a[BPT_POOL2D_PADDING_W];
  return args;
}

/* softmax_cross_entropy's options (int attributes 0 and 1, float attribute 0; src/core/ops/softmax_cross_entropy.c):
 * an ignore index and label smoothing. The defaults (neither) take exactly the arithmetic the op had before them. */
typedef struct bpt_cross_entropy_options {
  bool has_ignore;
  int64_t ignore_index;
  float smoothing;
} bpt_cross_entropy_options;

/* softmax_cross_entropy: logits (rows, C) and i32 labels (rows), rows the samples or, for a sequence, the tokens;
 * saved holds the probabilities (rows, C) (then, on CUDA with an ignore index, the count of positions); the output
 * is the mean loss over the positions that count. */
typedef struct bpt_softmax_cross_entropy_args {
  int64_t rows, classes;
  const float *logits;
  const int32_t *labels;
  float *probabilities;
  bpt_cross_entropy_options options;
} bpt_softmax_cross_entropy_args;

static inline bpt_softmax_cross_entropy_args bpt_softmax_cross_entropy_args_of(const bpt_kernel_node *node) {
  const bpt_kernel_tensor *x = &node->inputs[0];
  bpt_softmax_cross_entropy_args args;
  args.classes = x->dims[x->rank - 1], args.rows = x->count / args.classes;
  args.logits = (const float *)x->value, args.labels = (const int32_t *)node->inputs[1].value;
  args.probabilities = (float *)node->saved;
  args.options.has_ignore = node->int_attributes[BPT_CROSS_ENTROPY_HAS_IGNORE] != 0;
  args.options.ignore_index = node->int_attributes[BPT_CROSS_ENTROPY_IGNORE_INDEX];
  args.options.smoothing = node->float_attributes[BPT_CROSS_ENTROPY_SMOOTHING];
  return args;
}

/* Whether label is the ignore index (and so counts neither in the loss nor in its divisor). */
static inline bool bpt_cross_entropy_ignored(const bpt_cross_entropy_options *options, int32_t label) {
  return options->has_ignore && label == options->ignore_index;
}

/* For backends whose labels the host can read: BPT_ERR_INVALID_ARGUMENT naming the first label outside
 * [0, classes) that is not the ignore index, else BPT_OK. */
static inline bpt_status bpt_softmax_cross_entropy_check_labels(bpt_backend *backend,
                                                                const bpt_softmax_cross_entropy_args *args) {
  for (int64_t n = 0; n < args->rows; n++)
    if (!bpt_cross_entropy_ignored(&args->options, args->labels[n]) &&
        (args->labels[n] < 0 || args->labels[n] >= args->classes))
      return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "label %d of sample %lld is outside [0, %lld)%s",
                              args->labels[n], (long long)n, (long long)args->classes,
                              args->options.has_ignore ? " and is not the ignore index" : "");
  return BPT_OK;
}

/* relu: int attribute 0 set when the node keeps a 1-bit mask in saved (see relu_mask kernels) rather than
 * reading x in backward; the op asks supports with it set first. It is the op's run-time state "uses_mask"
 * (node->int_state), handed to the kernels in this slot (bpt_state_decl.kernel_slot). */
enum { BPT_RELU_USES_MASK = 0 };

/* For a kernel of node that ends in a ReLU it does not fuse (batch_norm_relu folded into its convolution, or
 * without a fused kernel): runs the backend's own RELU kernel in place on tensor, forward (y = max(y, 0)) or
 * backward (dy = dy where y > 0, else 0), keeping the 1-bit mask in mask (NULL: none; backward needs it). */
static inline bpt_status bpt_kernel_relu_in_place(bpt_backend *backend, const bpt_kernel_node *node,
                                                  const bpt_kernel_tensor *tensor, uint8_t *mask, bool backward) {
  const bpt_op_kernels *kernels = backend->vtable->kernels(backend, BPT_OP_RELU);
  bpt_status (*kernel)(bpt_backend *, const bpt_kernel_node *) =
      kernels ? (backward ? kernels->backward : kernels->forward) : NULL;
  if (!kernel) return bpt_backend_fail(backend, BPT_ERR_UNSUPPORTED, "%s: this backend has no relu kernel", node->name);
  bpt_kernel_node relu;
  memset(&relu, 0, sizeof relu);
  relu.op = BPT_OP_RELU;
  relu.name = node->name;
  relu.input_count = 1;
  relu.inputs[0] = *tensor;
  relu.inputs[0].beta = 0.0f; /* in place: the gradient is replaced */
  relu.output = *tensor;
  relu.saved = mask;
  relu.int_attributes[BPT_RELU_USES_MASK] = mask != NULL;
  return kernel(backend, &relu);
}

#endif
