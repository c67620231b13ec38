/* One emitter per op: the ONNX nodes that compute the op in evaluation mode, with its attributes mapped to
 * ONNX's. An op without an entry in the table at the end has no ONNX equivalent and is refused by the
 * exporter; supporting a new op is one function here and one table line. */
#include <math.h>

#include "export/onnx_model.h"

/* Integer attributes of conv2d and pool2d (see their op files). */
enum { CONV_STRIDE_H, CONV_STRIDE_W, CONV_PADDING_H, CONV_PADDING_W, CONV_DILATION_H, CONV_DILATION_W, CONV_GROUPS };
enum { POOL_KERNEL_H, POOL_KERNEL_W, POOL_STRIDE_H, POOL_STRIDE_W, POOL_PADDING_H, POOL_PADDING_W };
enum { BATCH_NORM_FOLDED }; /* int attribute 0 of batch_norm, set by fold.c */

static const char *input(const onnx_builder *b, const bpt_node *node, int i) {
  return i < node->input_count ? onnx_value(b, node->inputs[i]) : NULL;
}

/* op_type(input 0) -> output, the node returned in *out (may be NULL). */
static bpt_status unary(onnx_builder *b, const bpt_node *node, const char *op_type, const char *output,
                        Onnx__NodeProto **out) {
  const char *x = input(b, node, 0);
  return onnx_node(b, op_type, output, &x, 1, output, out);
}

static bpt_status emit_relu(onnx_builder *b, const bpt_node *node) {
  return unary(b, node, "Relu", onnx_value(b, node), NULL);
}
static bpt_status emit_sigmoid(onnx_builder *b, const bpt_node *node) {
  return unary(b, node, "Sigmoid", onnx_value(b, node), NULL);
}
static bpt_status emit_tanh(onnx_builder *b, const bpt_node *node) {
  return unary(b, node, "Tanh", onnx_value(b, node), NULL);
}
/* Evaluation mode passes values through. */
static bpt_status emit_dropout(onnx_builder *b, const bpt_node *node) {
  return unary(b, node, "Identity", onnx_value(b, node), NULL);
}

static bpt_status emit_leaky_relu(onnx_builder *b, const bpt_node *node) {
  Onnx__NodeProto *n;
  BPT_CHECK(unary(b, node, "LeakyRelu", onnx_value(b, node), &n));
  return onnx_attribute_float(b, n, "alpha", node->float_attributes[0]);
}

/* Exact GELU, 0.5 x (1 + erf(x / sqrt 2)): ONNX's Gelu from opset 20, its Erf pattern before. */
static bpt_status emit_gelu(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node);
  if (onnx_opset(b) >= 20) return onnx_node(b, "Gelu", y, &x, 1, y, NULL);
  const float sqrt2 = (float)sqrt(2.0), one = 1.0f, half = 0.5f;
  const char *c_sqrt2 = onnx_name(b, y, "sqrt2"), *c_one = onnx_name(b, y, "one"), *c_half = onnx_name(b, y, "half");
  const char *scaled = onnx_name(b, y, "scaled"), *erf = onnx_name(b, y, "erf"), *shifted = onnx_name(b, y, "shifted"),
             *product = onnx_name(b, y, "product");
  BPT_CHECK(onnx_constant_floats(b, c_sqrt2, 0, NULL, &sqrt2, 1));
  BPT_CHECK(onnx_constant_floats(b, c_one, 0, NULL, &one, 1));
  BPT_CHECK(onnx_constant_floats(b, c_half, 0, NULL, &half, 1));
  BPT_CHECK(onnx_node(b, "Div", scaled, (const char *[]){x, c_sqrt2}, 2, scaled, NULL));
  BPT_CHECK(onnx_node(b, "Erf", erf, &scaled, 1, erf, NULL));
  BPT_CHECK(onnx_node(b, "Add", shifted, (const char *[]){erf, c_one}, 2, shifted, NULL));
  BPT_CHECK(onnx_node(b, "Mul", product, (const char *[]){x, shifted}, 2, product, NULL));
  return onnx_node(b, "Mul", y, (const char *[]){product, c_half}, 2, y, NULL);
}

/* y = x W^T + b: Gemm with transB, on x flattened to (N, features) when it has more dimensions. */
/* A sequence's per-token product is MatMul by W^T (a transposed initializer would be a second copy of W, so
 * Transpose runs in the graph, folded by runtimes) plus the bias; otherwise Gemm on the flattened input. */
static bpt_status emit_sequence_linear(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node), *bias = input(b, node, 2);
  const char *transposed = onnx_name(b, y, "weight_t"), *product = bias ? onnx_name(b, y, "product") : y;
  const char *weight = input(b, node, 1);
  if (node->inputs[0]->rank != bpt_node_leading_axes(node->inputs[0]) + 1)
    return bpt_node_error(node, BPT_ERR_UNSUPPORTED, "ONNX export: a sequence input with more than one feature axis");
  BPT_CHECK(onnx_node(b, "Transpose", transposed, &weight, 1, transposed, NULL));
  BPT_CHECK(onnx_node(b, "MatMul", product, (const char *[]){x, transposed}, 2, product, NULL));
  if (!bias) return BPT_OK;
  return onnx_node(b, "Add", y, (const char *[]){product, bias}, 2, y, NULL);
}

static bpt_status emit_mul(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node);
  return onnx_node(b, "Mul", y, (const char *[]){input(b, node, 0), input(b, node, 1)}, 2, y, NULL);
}

/* MatMul broadcasts its leading axes as matmul does; a transposed operand goes through Transpose of its last
 * two axes. */
static bpt_status transposed_last(onnx_builder *b, const bpt_node *node, int i, const char *suffix,
                                  const char **value) {
  const bpt_node *x = node->inputs[i];
  if (!node->int_attributes[i]) return BPT_OK;
  int64_t permutation[BPT_MAX_RANK];
  for (int d = 0; d < x->rank; d++) permutation[d] = d;
  permutation[x->rank - 2] = x->rank - 1;
  permutation[x->rank - 1] = x->rank - 2;
  const char *t = onnx_name(b, onnx_value(b, node), suffix);
  Onnx__NodeProto *n;
  BPT_CHECK(onnx_node(b, "Transpose", t, value, 1, t, &n));
  BPT_CHECK(onnx_attribute_ints(b, n, "perm", permutation, x->rank));
  *value = t;
  return BPT_OK;
}

static bpt_status emit_matmul(onnx_builder *b, const bpt_node *node) {
  const char *a = input(b, node, 0), *bb = input(b, node, 1), *y = onnx_value(b, node);
  BPT_CHECK(transposed_last(b, node, 0, "a_t", &a));
  BPT_CHECK(transposed_last(b, node, 1, "b_t", &bb));
  return onnx_node(b, "MatMul", y, (const char *[]){a, bb}, 2, y, NULL);
}

static bpt_status emit_permute(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node);
  Onnx__NodeProto *n;
  BPT_CHECK(onnx_node(b, "Transpose", y, &x, 1, y, &n));
  return onnx_attribute_ints(b, n, "perm", node->int_attributes + 1, (int)node->int_attributes[0]);
}

/* Gather(table, ids) along the table's rows: (N, T) ids give (N, T, C), as the op. */
static bpt_status emit_embedding(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node);
  Onnx__NodeProto *n;
  BPT_CHECK(onnx_node(b, "Gather", y, (const char *[]){input(b, node, 1), input(b, node, 0)}, 2, y, &n));
  return onnx_attribute_int(b, n, "axis", 0);
}

/* Slice with its starts, ends and axes as int64 constants (inputs since opset 10). */
static bpt_status emit_slice(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *starts = onnx_name(b, y, "starts"), *ends = onnx_name(b, y, "ends"),
             *axes = onnx_name(b, y, "axes");
  const int64_t one = 1, start = node->int_attributes[1], end = start + node->int_attributes[2],
                axis = node->int_attributes[0];
  BPT_CHECK(onnx_constant_ints(b, starts, 1, &one, &start, 1));
  BPT_CHECK(onnx_constant_ints(b, ends, 1, &one, &end, 1));
  BPT_CHECK(onnx_constant_ints(b, axes, 1, &one, &axis, 1));
  return onnx_node(b, "Slice", y, (const char *[]){input(b, node, 0), starts, ends, axes}, 4, y, NULL);
}

static bpt_status emit_concat(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *inputs[BPT_MAX_INPUTS];
  for (int i = 0; i < node->input_count; i++)
    inputs[i] = input(b, node, i);
  Onnx__NodeProto *n;
  BPT_CHECK(onnx_node(b, "Concat", y, inputs, node->input_count, y, &n));
  return onnx_attribute_int(b, n, "axis", node->int_attributes[0]);
}

static bpt_status emit_linear(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node);
  if (node->inputs[0]->sequence) return emit_sequence_linear(b, node);
  if (node->inputs[0]->rank != 2) {
    const char *flat = onnx_name(b, y, "flatten");
    Onnx__NodeProto *flatten;
    BPT_CHECK(onnx_node(b, "Flatten", flat, &x, 1, flat, &flatten));
    BPT_CHECK(onnx_attribute_int(b, flatten, "axis", 1));
    x = flat;
  }
  Onnx__NodeProto *gemm;
  BPT_CHECK(onnx_node(b, "Gemm", y, (const char *[]){x, input(b, node, 1), input(b, node, 2)}, 3, y, &gemm));
  return onnx_attribute_int(b, gemm, "transB", 1);
}

static bpt_status emit_conv2d(onnx_builder *b, const bpt_node *node) {
  const int64_t *a = node->int_attributes, *w = node->inputs[1]->dims;
  const char *y = onnx_value(b, node);
  Onnx__NodeProto *conv;
  BPT_CHECK(
      onnx_node(b, "Conv", y, (const char *[]){input(b, node, 0), input(b, node, 1), input(b, node, 2)}, 3, y, &conv));
  BPT_CHECK(onnx_attribute_ints(b, conv, "kernel_shape", (const int64_t[]){w[2], w[3]}, 2));
  BPT_CHECK(onnx_attribute_ints(b, conv, "strides", (const int64_t[]){a[CONV_STRIDE_H], a[CONV_STRIDE_W]}, 2));
  BPT_CHECK(onnx_attribute_ints(
      b, conv, "pads", (const int64_t[]){a[CONV_PADDING_H], a[CONV_PADDING_W], a[CONV_PADDING_H], a[CONV_PADDING_W]},
      4));
  BPT_CHECK(onnx_attribute_ints(b, conv, "dilations", (const int64_t[]){a[CONV_DILATION_H], a[CONV_DILATION_W]}, 2));
  return onnx_attribute_int(b, conv, "group", a[CONV_GROUPS]);
}

/* Our pooling floors the output size (ONNX's ceil_mode 0) and averages over the whole window, padding
 * included (count_include_pad 1). */
static bpt_status pool2d(onnx_builder *b, const bpt_node *node, const char *op_type) {
  const int64_t *a = node->int_attributes;
  const char *y = onnx_value(b, node);
  Onnx__NodeProto *pool;
  BPT_CHECK(unary(b, node, op_type, y, &pool));
  BPT_CHECK(onnx_attribute_ints(b, pool, "kernel_shape", (const int64_t[]){a[POOL_KERNEL_H], a[POOL_KERNEL_W]}, 2));
  BPT_CHECK(onnx_attribute_ints(b, pool, "strides", (const int64_t[]){a[POOL_STRIDE_H], a[POOL_STRIDE_W]}, 2));
  BPT_CHECK(onnx_attribute_ints(
      b, pool, "pads", (const int64_t[]){a[POOL_PADDING_H], a[POOL_PADDING_W], a[POOL_PADDING_H], a[POOL_PADDING_W]},
      4));
  return node->op == BPT_OP_AVG_POOL2D ? onnx_attribute_int(b, pool, "count_include_pad", 1) : BPT_OK;
}
static bpt_status emit_max_pool2d(onnx_builder *b, const bpt_node *node) { return pool2d(b, node, "MaxPool"); }
static bpt_status emit_avg_pool2d(onnx_builder *b, const bpt_node *node) { return pool2d(b, node, "AveragePool"); }

/* (N, C, H, W) -> (N, C): ONNX keeps the 1 x 1 plane, which Flatten drops. */
static bpt_status emit_global_avg_pool(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *pooled = onnx_name(b, y, "pooled");
  Onnx__NodeProto *flatten;
  BPT_CHECK(unary(b, node, "GlobalAveragePool", pooled, NULL));
  BPT_CHECK(onnx_node(b, "Flatten", y, &pooled, 1, y, &flatten));
  return onnx_attribute_int(b, flatten, "axis", 1);
}

/* Running statistics (evaluation mode). A batch norm folded into its convolution (fold.c) already lives in
 * that convolution's weights: it passes values through. */
static bpt_status batch_norm(onnx_builder *b, const bpt_node *node, const char *output) {
  if (node->int_attributes[BATCH_NORM_FOLDED]) return unary(b, node, "Identity", output, NULL);
  Onnx__NodeProto *norm;
  const char *inputs[5];
  for (int i = 0; i < 5; i++)
    inputs[i] = input(b, node, i);
  BPT_CHECK(onnx_node(b, "BatchNormalization", output, inputs, 5, output, &norm));
  return onnx_attribute_float(b, norm, "epsilon", node->float_attributes[1]);
}
static bpt_status emit_batch_norm(onnx_builder *b, const bpt_node *node) {
  return batch_norm(b, node, onnx_value(b, node));
}

static bpt_status then_relu(onnx_builder *b, const char *x, const char *y) {
  return onnx_node(b, "Relu", y, &x, 1, y, NULL);
}
static bpt_status emit_batch_norm_relu(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *normalized = onnx_name(b, y, "normalized");
  BPT_CHECK(batch_norm(b, node, normalized));
  return then_relu(b, normalized, y);
}

static bpt_status emit_add(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node);
  return onnx_node(b, "Add", y, (const char *[]){input(b, node, 0), input(b, node, 1)}, 2, y, NULL);
}
static bpt_status emit_add_relu(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *sum = onnx_name(b, y, "sum");
  BPT_CHECK(onnx_node(b, "Add", sum, (const char *[]){input(b, node, 0), input(b, node, 1)}, 2, sum, NULL));
  return then_relu(b, sum, y);
}

/* The batch stays dynamic (-1); the per-sample dims are the node's. */
static bpt_status emit_reshape(onnx_builder *b, const bpt_node *node) {
  const char *y = onnx_value(b, node), *shape_name = onnx_name(b, y, "shape");
  int64_t shape[BPT_MAX_RANK] = {-1};
  for (int i = 1; i < node->rank; i++)
    shape[i] = node->dims[i];
  const int64_t rank = node->rank;
  BPT_CHECK(onnx_constant_ints(b, shape_name, 1, &rank, shape, rank));
  return onnx_node(b, "Reshape", y, (const char *[]){input(b, node, 0), shape_name}, 2, y, NULL);
}

static const onnx_emitter emitters[BPT_OP_COUNT] = {
    [BPT_OP_LINEAR] = emit_linear,
    [BPT_OP_RELU] = emit_relu,
    [BPT_OP_LEAKY_RELU] = emit_leaky_relu,
    [BPT_OP_SIGMOID] = emit_sigmoid,
    [BPT_OP_TANH] = emit_tanh,
    [BPT_OP_CONV2D] = emit_conv2d,
    [BPT_OP_BATCH_NORM] = emit_batch_norm,
    [BPT_OP_MAX_POOL2D] = emit_max_pool2d,
    [BPT_OP_AVG_POOL2D] = emit_avg_pool2d,
    [BPT_OP_GLOBAL_AVG_POOL] = emit_global_avg_pool,
    [BPT_OP_ADD] = emit_add,
    [BPT_OP_RESHAPE] = emit_reshape,
    [BPT_OP_DROPOUT] = emit_dropout,
    [BPT_OP_BATCH_NORM_RELU] = emit_batch_norm_relu,
    [BPT_OP_ADD_RELU] = emit_add_relu,
    [BPT_OP_GELU] = emit_gelu,
    [BPT_OP_MUL] = emit_mul,
    [BPT_OP_MATMUL] = emit_matmul,
    [BPT_OP_PERMUTE] = emit_permute,
    [BPT_OP_EMBEDDING] = emit_embedding,
    [BPT_OP_SLICE] = emit_slice,
    [BPT_OP_CONCAT] = emit_concat,
};

onnx_emitter onnx_emitter_for(bpt_op_id op) { return op >= 0 && op < BPT_OP_COUNT ? emitters[op] : NULL; }

int onnx_input_count(const bpt_node *node) {
  const bool folded =
      (node->op == BPT_OP_BATCH_NORM || node->op == BPT_OP_BATCH_NORM_RELU) && node->int_attributes[BATCH_NORM_FOLDED];
  return folded ? 1 : node->input_count;
}
