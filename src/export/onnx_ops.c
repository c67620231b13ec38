/* One emitter per op: the ONNX nodes that compute the op in evaluation mode, with its attributes mapped to
 * ONNX's. An op without an entry in the table at the end has no ONNX equivalent and is refused by the
 * exporter; supporting a new op is one function here and one table line. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "export/onnx_model.h"

/* Op parameters are read by the names their op files declare (bpt_node_int_parameter), never by slot. */
static int64_t parameter(const bpt_node *node, const char *name) { return bpt_node_int_parameter(node, name, 0); }

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
  return onnx_attribute_float(b, n, "alpha", (float)bpt_node_float_parameter(node, "slope"));
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

/* Gelu's approximate="tanh" needs opset 20 and a string attribute; x sigmoid(2u) (0.5 (1 + tanh(u)) =
 * sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3)) needs neither, at every opset: z = x (a + b x^2). */
static bpt_status emit_gelu_tanh(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node);
  const float a = 1.5957691216057308f, cubic = 1.5957691216057308f * 0.044715f;
  const char *c_a = onnx_name(b, y, "a"), *c_b = onnx_name(b, y, "b"), *square = onnx_name(b, y, "square"),
             *scaled = onnx_name(b, y, "scaled"), *shifted = onnx_name(b, y, "shifted"), *z = onnx_name(b, y, "z"),
             *gate = onnx_name(b, y, "gate");
  BPT_CHECK(onnx_constant_floats(b, c_a, 0, NULL, &a, 1));
  BPT_CHECK(onnx_constant_floats(b, c_b, 0, NULL, &cubic, 1));
  BPT_CHECK(onnx_node(b, "Mul", square, (const char *[]){x, x}, 2, square, NULL));
  BPT_CHECK(onnx_node(b, "Mul", scaled, (const char *[]){square, c_b}, 2, scaled, NULL));
  BPT_CHECK(onnx_node(b, "Add", shifted, (const char *[]){scaled, c_a}, 2, shifted, NULL));
  BPT_CHECK(onnx_node(b, "Mul", z, (const char *[]){x, shifted}, 2, z, NULL));
  BPT_CHECK(onnx_node(b, "Sigmoid", gate, &z, 1, gate, NULL));
  return onnx_node(b, "Mul", y, (const char *[]){x, gate}, 2, y, NULL);
}

/* x sigmoid(x): ONNX has no SiLU before Swish (opset 24). */
static bpt_status emit_silu(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *y = onnx_value(b, node), *gate = onnx_name(b, y, "gate");
  BPT_CHECK(onnx_node(b, "Sigmoid", gate, &x, 1, gate, NULL));
  return onnx_node(b, "Mul", y, (const char *[]){x, gate}, 2, y, NULL);
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
  if (!parameter(node, i == 0 ? "transpose_a" : "transpose_b")) return BPT_OK;
  int64_t permutation[BPT_MAX_RANK];
  for (int d = 0; d < x->rank; d++)
    permutation[d] = d;
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
  int64_t axes[BPT_MAX_RANK];
  const int rank = (int)parameter(node, "rank");
  for (int d = 0; d < rank; d++)
    axes[d] = bpt_node_int_parameter(node, "axes", d);
  BPT_CHECK(onnx_node(b, "Transpose", y, &x, 1, y, &n));
  return onnx_attribute_ints(b, n, "perm", axes, rank);
}

/* ReduceMean over the last axis, keeping it (1): axes an attribute before opset 18, an input from 18. */
static bpt_status reduce_mean_last(onnx_builder *b, const char *x, const char *y) {
  const int64_t last = -1, one = 1;
  Onnx__NodeProto *n;
  if (onnx_opset(b) >= 18) {
    const char *axes = onnx_name(b, y, "axes");
    BPT_CHECK(onnx_constant_ints(b, axes, 1, &one, &last, 1));
    BPT_CHECK(onnx_node(b, "ReduceMean", y, (const char *[]){x, axes}, 2, y, &n));
  } else {
    BPT_CHECK(onnx_node(b, "ReduceMean", y, &x, 1, y, &n));
    BPT_CHECK(onnx_attribute_ints(b, n, "axes", &last, 1));
  }
  return onnx_attribute_int(b, n, "keepdims", 1);
}

/* LayerNormalization over the last axis from opset 17; before it, the same arithmetic in plain nodes:
 * (x - mean) / sqrt(mean((x - mean)^2) + epsilon) * gamma + beta. */
static bpt_status emit_layer_norm(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *gamma = input(b, node, 1), *beta = input(b, node, 2), *y = onnx_value(b, node);
  const float epsilon = (float)bpt_node_float_parameter(node, "epsilon");
  if (onnx_opset(b) >= 17) {
    Onnx__NodeProto *n;
    BPT_CHECK(onnx_node(b, "LayerNormalization", y, (const char *[]){x, gamma, beta}, 3, y, &n));
    BPT_CHECK(onnx_attribute_int(b, n, "axis", -1));
    return onnx_attribute_float(b, n, "epsilon", epsilon);
  }
  const char *mean = onnx_name(b, y, "mean"), *centred = onnx_name(b, y, "centred"),
             *squares = onnx_name(b, y, "squares"), *variance = onnx_name(b, y, "variance"),
             *c_epsilon = onnx_name(b, y, "epsilon"), *shifted = onnx_name(b, y, "shifted"),
             *deviation = onnx_name(b, y, "std"), *normalised = onnx_name(b, y, "normalised"),
             *scaled = beta ? onnx_name(b, y, "scaled") : y;
  BPT_CHECK(onnx_constant_floats(b, c_epsilon, 0, NULL, &epsilon, 1));
  BPT_CHECK(reduce_mean_last(b, x, mean));
  BPT_CHECK(onnx_node(b, "Sub", centred, (const char *[]){x, mean}, 2, centred, NULL));
  BPT_CHECK(onnx_node(b, "Mul", squares, (const char *[]){centred, centred}, 2, squares, NULL));
  BPT_CHECK(reduce_mean_last(b, squares, variance));
  BPT_CHECK(onnx_node(b, "Add", shifted, (const char *[]){variance, c_epsilon}, 2, shifted, NULL));
  BPT_CHECK(onnx_node(b, "Sqrt", deviation, &shifted, 1, deviation, NULL));
  BPT_CHECK(onnx_node(b, "Div", normalised, (const char *[]){centred, deviation}, 2, normalised, NULL));
  BPT_CHECK(onnx_node(b, "Mul", scaled, (const char *[]){normalised, gamma}, 2, scaled, NULL));
  if (!beta) return BPT_OK;
  return onnx_node(b, "Add", y, (const char *[]){scaled, beta}, 2, y, NULL);
}

/* ONNX's RMSNormalization is opset 23, past the exporter's range: x / sqrt(mean(x^2) + epsilon) * gamma. */
static bpt_status emit_rms_norm(onnx_builder *b, const bpt_node *node) {
  const char *x = input(b, node, 0), *gamma = input(b, node, 1), *y = onnx_value(b, node);
  const float epsilon = (float)bpt_node_float_parameter(node, "epsilon");
  const char *squares = onnx_name(b, y, "squares"), *mean_square = onnx_name(b, y, "mean_square"),
             *c_epsilon = onnx_name(b, y, "epsilon"), *shifted = onnx_name(b, y, "shifted"),
             *rms = onnx_name(b, y, "rms"), *normalised = onnx_name(b, y, "normalised");
  BPT_CHECK(onnx_constant_floats(b, c_epsilon, 0, NULL, &epsilon, 1));
  BPT_CHECK(onnx_node(b, "Mul", squares, (const char *[]){x, x}, 2, squares, NULL));
  BPT_CHECK(reduce_mean_last(b, squares, mean_square));
  BPT_CHECK(onnx_node(b, "Add", shifted, (const char *[]){mean_square, c_epsilon}, 2, shifted, NULL));
  BPT_CHECK(onnx_node(b, "Sqrt", rms, &shifted, 1, rms, NULL));
  BPT_CHECK(onnx_node(b, "Div", normalised, (const char *[]){x, rms}, 2, normalised, NULL));
  return onnx_node(b, "Mul", y, (const char *[]){normalised, gamma}, 2, y, NULL);
}

/* The causal mask of softmax and attention over (rows, columns) as two constants named after y: "mask_bias",
 * 0 where visible and -FLT_MAX where masked (j > i + columns - rows), added to the scores, and "mask_keep", 1 or
 * 0, multiplied into the probabilities, so masked elements are exactly 0 and a row with nothing visible gives
 * zeros, where Softmax alone would spread it uniformly (a finite bias) or give NaN (-inf). */
static bpt_status causal_constants(onnx_builder *b, const bpt_node *node, const char *y, int64_t rows, int64_t columns,
                                   const char **bias, const char **keep) {
  float *values = malloc((size_t)(2 * rows * columns) * sizeof *values);
  if (!values) return bpt_node_error(node, BPT_ERR_OUT_OF_MEMORY, "ONNX export: cannot allocate the causal mask");
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < columns; j++) {
      const bool visible = j <= i + columns - rows;
      values[i * columns + j] = visible ? 0.0f : -FLT_MAX;
      values[(rows + i) * columns + j] = visible ? 1.0f : 0.0f;
    }
  *bias = onnx_name(b, y, "mask_bias");
  *keep = onnx_name(b, y, "mask_keep");
  const int64_t dims[2] = {rows, columns};
  bpt_status status = onnx_constant_floats(b, *bias, 2, dims, values, rows * columns);
  if (status == BPT_OK) status = onnx_constant_floats(b, *keep, 2, dims, values + rows * columns, rows * columns);
  free(values);
  return status;
}

/* Softmax over the last axis (axis rank - 1: also right for opsets before 13, which flatten at the axis);
 * causal: Softmax(x + mask_bias) * mask_keep. */
static bpt_status masked_softmax(onnx_builder *b, const bpt_node *node, const char *x, int rank, bool causal,
                                 int64_t rows, int64_t columns, const char *y) {
  const char *scores = x, *probabilities = y, *bias = NULL, *keep = NULL;
  if (causal) {
    BPT_CHECK(causal_constants(b, node, y, rows, columns, &bias, &keep));
    scores = onnx_name(b, y, "masked");
    probabilities = onnx_name(b, y, "probabilities");
    BPT_CHECK(onnx_node(b, "Add", scores, (const char *[]){x, bias}, 2, scores, NULL));
  }
  Onnx__NodeProto *softmax;
  BPT_CHECK(onnx_node(b, "Softmax", probabilities, &scores, 1, probabilities, &softmax));
  BPT_CHECK(onnx_attribute_int(b, softmax, "axis", rank - 1));
  if (!causal) return BPT_OK;
  return onnx_node(b, "Mul", y, (const char *[]){probabilities, keep}, 2, y, NULL);
}

static bpt_status emit_softmax(onnx_builder *b, const bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  const int64_t rows = x->rank >= 2 ? x->dims[x->rank - 2] : 1;
  return masked_softmax(b, node, input(b, node, 0), x->rank, parameter(node, "causal") != 0, rows, x->dims[x->rank - 1],
                        onnx_value(b, node));
}

/* (N, T, C) -> (N, H, T, D) by Reshape and Transpose (perm, which may also put T last for K^T), named after y. */
static bpt_status split_heads(onnx_builder *b, const char *x, const char *y, const char *suffix, int64_t length,
                              int64_t heads, int64_t width, const int64_t *perm, const char **out) {
  const char *shape = onnx_name(b, y, suffix), *reshaped = onnx_name(b, shape, "reshaped"),
             *split = onnx_name(b, shape, "heads");
  const int64_t dims[4] = {-1, length, heads, width}, four = 4;
  Onnx__NodeProto *transpose;
  BPT_CHECK(onnx_constant_ints(b, shape, 1, &four, dims, 4));
  BPT_CHECK(onnx_node(b, "Reshape", reshaped, (const char *[]){x, shape}, 2, reshaped, NULL));
  BPT_CHECK(onnx_node(b, "Transpose", split, &reshaped, 1, split, &transpose));
  BPT_CHECK(onnx_attribute_ints(b, transpose, "perm", perm, 4));
  *out = split;
  return BPT_OK;
}

/* Attention decomposed per head: MatMul(Q, K^T), Mul by 1 / sqrt(D), the (causal) softmax above, MatMul by V,
 * heads merged back by Transpose and Reshape. Evaluation mode: no dropout. */
static bpt_status emit_attention(onnx_builder *b, const bpt_node *node) {
  const bpt_node *q = node->inputs[0], *k = node->inputs[1];
  const int64_t heads = parameter(node, "heads"), C = q->dims[2], D = C / heads, queries = q->dims[1],
                keys = k->dims[1];
  const char *y = onnx_value(b, node), *qh, *kt, *vh;
  const int64_t to_heads[4] = {0, 2, 1, 3}, to_keys_last[4] = {0, 2, 3, 1};
  BPT_CHECK(split_heads(b, input(b, node, 0), y, "q_shape", queries, heads, D, to_heads, &qh));
  BPT_CHECK(split_heads(b, input(b, node, 1), y, "k_shape", keys, heads, D, to_keys_last, &kt));
  BPT_CHECK(split_heads(b, input(b, node, 2), y, "v_shape", keys, heads, D, to_heads, &vh));
  const float scale = (float)(1.0 / sqrt((double)D));
  const char *c_scale = onnx_name(b, y, "scale"), *products = onnx_name(b, y, "products"),
             *scores = onnx_name(b, y, "scores"), *probabilities = onnx_name(b, y, "attention"),
             *mixed = onnx_name(b, y, "mixed"), *merged = onnx_name(b, y, "merged"),
             *shape = onnx_name(b, y, "out_shape");
  BPT_CHECK(onnx_constant_floats(b, c_scale, 0, NULL, &scale, 1));
  BPT_CHECK(onnx_node(b, "MatMul", products, (const char *[]){qh, kt}, 2, products, NULL));
  BPT_CHECK(onnx_node(b, "Mul", scores, (const char *[]){products, c_scale}, 2, scores, NULL));
  BPT_CHECK(masked_softmax(b, node, scores, 4, parameter(node, "causal") != 0, queries, keys, probabilities));
  BPT_CHECK(onnx_node(b, "MatMul", mixed, (const char *[]){probabilities, vh}, 2, mixed, NULL));
  Onnx__NodeProto *transpose;
  BPT_CHECK(onnx_node(b, "Transpose", merged, &mixed, 1, merged, &transpose));
  BPT_CHECK(onnx_attribute_ints(b, transpose, "perm", to_heads, 4));
  const int64_t dims[3] = {-1, queries, C}, three = 3;
  BPT_CHECK(onnx_constant_ints(b, shape, 1, &three, dims, 3));
  return onnx_node(b, "Reshape", y, (const char *[]){merged, shape}, 2, y, NULL);
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
  const int64_t one = 1, start = parameter(node, "start"), end = start + parameter(node, "length"),
                axis = parameter(node, "axis");
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
  return onnx_attribute_int(b, n, "axis", parameter(node, "axis"));
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
  const int64_t *w = node->inputs[1]->dims, padding_h = parameter(node, "padding_height"),
                padding_w = parameter(node, "padding_width");
  const char *y = onnx_value(b, node);
  Onnx__NodeProto *conv;
  BPT_CHECK(
      onnx_node(b, "Conv", y, (const char *[]){input(b, node, 0), input(b, node, 1), input(b, node, 2)}, 3, y, &conv));
  BPT_CHECK(onnx_attribute_ints(b, conv, "kernel_shape", (const int64_t[]){w[2], w[3]}, 2));
  BPT_CHECK(onnx_attribute_ints(
      b, conv, "strides", (const int64_t[]){parameter(node, "stride_height"), parameter(node, "stride_width")}, 2));
  BPT_CHECK(onnx_attribute_ints(b, conv, "pads", (const int64_t[]){padding_h, padding_w, padding_h, padding_w}, 4));
  BPT_CHECK(
      onnx_attribute_ints(b, conv, "dilations",
                          (const int64_t[]){parameter(node, "dilation_height"), parameter(node, "dilation_width")}, 2));
  return onnx_attribute_int(b, conv, "group", parameter(node, "groups"));
}

/* Our pooling floors the output size (ONNX's ceil_mode 0) and averages over the whole window, padding
 * included (count_include_pad 1). */
static bpt_status pool2d(onnx_builder *b, const bpt_node *node, const char *op_type) {
  const int64_t padding_h = parameter(node, "padding_height"), padding_w = parameter(node, "padding_width");
  const char *y = onnx_value(b, node);
  Onnx__NodeProto *pool;
  BPT_CHECK(unary(b, node, op_type, y, &pool));
  BPT_CHECK(onnx_attribute_ints(b, pool, "kernel_shape",
                                (const int64_t[]){parameter(node, "kernel_height"), parameter(node, "kernel_width")},
                                2));
  BPT_CHECK(onnx_attribute_ints(
      b, pool, "strides", (const int64_t[]){parameter(node, "stride_height"), parameter(node, "stride_width")}, 2));
  BPT_CHECK(onnx_attribute_ints(b, pool, "pads", (const int64_t[]){padding_h, padding_w, padding_h, padding_w}, 4));
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
  if (parameter(node, "folded")) return unary(b, node, "Identity", output, NULL);
  Onnx__NodeProto *norm;
  const char *inputs[5];
  for (int i = 0; i < 5; i++)
    inputs[i] = input(b, node, i);
  BPT_CHECK(onnx_node(b, "BatchNormalization", output, inputs, 5, output, &norm));
  return onnx_attribute_float(b, norm, "epsilon", (float)bpt_node_float_parameter(node, "epsilon"));
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
    [BPT_OP_LAYER_NORM] = emit_layer_norm,
    [BPT_OP_RMS_NORM] = emit_rms_norm,
    [BPT_OP_GELU_TANH] = emit_gelu_tanh,
    [BPT_OP_SILU] = emit_silu,
    [BPT_OP_SOFTMAX] = emit_softmax,
    [BPT_OP_SCALED_DOT_PRODUCT_ATTENTION] = emit_attention,
    [BPT_OP_EMBEDDING] = emit_embedding,
    [BPT_OP_SLICE] = emit_slice,
    [BPT_OP_CONCAT] = emit_concat,
};

onnx_emitter onnx_emitter_for(bpt_op_id op) { return op >= 0 && op < BPT_OP_COUNT ? emitters[op] : NULL; }

int onnx_input_count(const bpt_node *node) {
  const bool folded =
      (node->op == BPT_OP_BATCH_NORM || node->op == BPT_OP_BATCH_NORM_RELU) && parameter(node, "folded");
  return folded ? 1 : node->input_count;
}
