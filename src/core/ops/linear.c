/* linear: y = x W^T + b, with x (N, in), W (out, in), b (out), y (N, out); a sequence x (N, T, in) is a
 * product per token, y (N, T, out), the rows of every product then being the N T tokens. All three products run as one
 * GEMM each through the backend's shared gemm; the bias terms are the op's kernels. x, y and their gradients are passed
 * in their storage dtype (f32, or bf16 under the bf16 policy). */
#include "core/checked.h"
#include "core/graph.h"
#include "core/precision.h"

/* Compressed saved activations (issue 4): when the precision policy asks for it, the forward keeps x for the
 * weight gradient in node->saved as f16, bf16 or FP8 E4M3 (per-tensor power-of-two scale in the node's state
 * "fp8_scale", float state 0), so x itself need not stay in memory. The first 64 bytes of saved hold the device
 * amax. */
#define LINEAR_SAVED_HEADER 64
enum { FP8_SCALE }; /* float state */

/* Run-time state, not configuration: written by every forward that keeps a compressed x, read by its backward. */
static const bpt_state_decl linear_state[] = {
    {.name = "fp8_scale", .type = BPT_OP_VALUE_FLOAT, .slot = FP8_SCALE, .kernel_slot = -1, .restored = true}};

static bpt_dtype saved_input_dtype(const bpt_node *node) {
  const bpt_node *x = node->inputs[0], *weight = node->inputs[1];
  const bpt_precision_state *precision = node->graph->precision;
  if (!precision || !weight->requires_grad || x->op == BPT_OP_INPUT || !node->graph->loss) return BPT_DTYPE_F32;
  switch (precision->options.saved_activation_storage) {
  case BPT_ACTIVATION_STORAGE_F16: return BPT_DTYPE_F16;
  case BPT_ACTIVATION_STORAGE_BF16: return BPT_DTYPE_BF16;
  case BPT_ACTIVATION_STORAGE_FP8: return BPT_DTYPE_FP8_E4M3;
  default: return BPT_DTYPE_F32;
  }
}

static size_t linear_saved_bytes(const bpt_node *node) {
  bpt_dtype dtype = saved_input_dtype(node);
  if (dtype == BPT_DTYPE_F32) return 0;
  int64_t count = node->graph->max_batch * bpt_node_inner_count(node->inputs[0]);
  return LINEAR_SAVED_HEADER + (size_t)count * bpt_dtype_size(dtype);
}

static bpt_status save_input(bpt_node *node) {
  const bpt_node *x = node->inputs[0];
  bpt_dtype dtype = saved_input_dtype(node);
  int64_t count = bpt_node_count(x);
  float scale = 1.0f;
  if (dtype == BPT_DTYPE_FP8_E4M3) {
    /* The largest power of two that keeps max |x| within E4M3's 448. */
    float maximum = 0.0f;
    bpt_backend *backend = node->graph->backend;
    BPT_CHECK(BPT_KERNEL(node, absolute_max, count, x->value, (float *)node->saved));
    if (backend->vtable->download(backend, &maximum, node->saved, sizeof maximum) != BPT_OK)
      return bpt_node_error(node, BPT_ERR_DEVICE, "reading the activation maximum");
    BPT_CHECK(bpt_fp8_scale(node->graph->context, dtype, &maximum, 1, &scale));
  }
  node->float_state[FP8_SCALE] = scale;
  return BPT_KERNEL(node, cast, count, BPT_DTYPE_F32, x->value, dtype, (char *)node->saved + LINEAR_SAVED_HEADER,
                    scale);
}

static bpt_status linear_infer_shape(bpt_node *node) {
  bpt_node *x = node->inputs[0], *weight = node->inputs[1], *bias = node->input_count > 2 ? node->inputs[2] : NULL;
  if (x->dtype != BPT_DTYPE_F32 || weight->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "input and weight must be f32");
  if (!x->batched) return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has no batch dimension", x->name);
  if (weight->batched || weight->rank != 2)
    return bpt_node_error(node, BPT_ERR_SHAPE, "weight '%s' must be a 2-D (out, in) tensor without batch", weight->name);
  int64_t in_features = bpt_node_features(x);
  /* The GEMMs take in and out features (and their leading dimensions) as int (cblas blasint). */
  if (in_features > BPT_MAX_DIM)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has %lld features, more than the GEMMs' 2^31 - 1", x->name,
                          (long long)in_features);
  if (weight->dims[1] != in_features)
    return bpt_node_error(node, BPT_ERR_SHAPE, "input '%s' has %lld features, weight '%s' expects %lld", x->name,
                          (long long)in_features, weight->name, (long long)weight->dims[1]);
  if (bias && (bias->batched || bpt_node_inner_count(bias) != weight->dims[0]))
    return bpt_node_error(node, BPT_ERR_SHAPE, "bias '%s' has %lld values, weight '%s' has %lld outputs", bias->name,
                          (long long)bpt_node_inner_count(bias), weight->name, (long long)weight->dims[0]);
  const int leading = bpt_node_leading_axes(x);
  node->batched = true;
  node->sequence = x->sequence;
  node->rank = leading + 1;
  for (int i = 0; i < leading; i++) node->dims[i] = x->dims[i];
  node->dims[leading] = weight->dims[0];
  return BPT_OK;
}

/* The rows of every product: the samples of the current batch, times the sequence length for a sequence. */
static int64_t linear_rows(const bpt_node *node) { return bpt_node_count(node) / node->inputs[1]->dims[0]; }

static bpt_status linear_forward(bpt_node *node) {
  bpt_node *x = node->inputs[0], *weight = node->inputs[1], *bias = node->input_count > 2 ? node->inputs[2] : NULL;
  int64_t batch = linear_rows(node), in = weight->dims[1], out = weight->dims[0];
  const void *weight_bf16 = bpt_precision_weight_bf16(node, weight);
  /* y (N, out) = x (N, in) . W^T (in, out) */
  bpt_gemm_args product = {.transpose_a = false, .transpose_b = true, .m = batch, .n = out, .k = in, .alpha = 1.0f,
                           .a = x->value, .lda = in, .b = weight_bf16 ? weight_bf16 : weight->value, .ldb = in,
                           .beta = 0.0f, .c = node->value, .ldc = out, .a_dtype = x->storage,
                           .b_dtype = weight_bf16 ? BPT_DTYPE_BF16 : BPT_DTYPE_F32, .c_dtype = node->storage,
                           .bf16_products = bpt_graph_bf16_products(node->graph)};
  /* With y stored as bf16 (only where the backend's linear kernels take bf16 storage) the kernels compute the
   * product too, so that x W^T + b is rounded once, not the product and then the sum. */
  if (bias && node->storage != BPT_DTYPE_F32) {
    bpt_kernel_node description;
    bpt_node_describe(node, &description);
    if (weight_bf16) { /* the kernels' product reads the bf16 copy too; they never touch W's gradient */
      description.inputs[1].dtype = BPT_DTYPE_BF16;
      description.inputs[1].value = (void *)weight_bf16;
      description.inputs[1].grad = NULL;
    }
    BPT_CHECK(bpt_node_run_forward_kernels(node, &description)); /* y = x W^T + b */
  } else {
    BPT_CHECK(BPT_KERNEL(node, gemm, &product));
    if (bias) BPT_CHECK(bpt_node_forward_kernels(node)); /* y += b */
  }
  if (node->saved) BPT_CHECK(save_input(node));
  return BPT_OK;
}

static bpt_status linear_backward(bpt_node *node) {
  bpt_node *x = node->inputs[0], *weight = node->inputs[1], *bias = node->input_count > 2 ? node->inputs[2] : NULL;
  int64_t batch = linear_rows(node), in = weight->dims[1], out = weight->dims[0];
  if (weight->requires_grad) {
    /* dW (out, in) += dy^T (out, N) . x (N, in) */
    bpt_gemm_args product = {.transpose_a = true, .transpose_b = false, .m = out, .n = in, .k = batch, .alpha = 1.0f,
                             .a = node->grad, .lda = out, .b = x->value, .ldb = in, .beta = 1.0f,
                             .c = weight->grad, .ldc = in, .a_dtype = node->storage, .b_dtype = x->storage,
                             .bf16_products = bpt_graph_bf16_products(node->graph)};
    if (node->saved) {
      /* x from its compressed copy; alpha undoes the FP8 scale. */
      product.b_dtype = saved_input_dtype(node);
      product.b = (const float *)((const char *)node->saved + LINEAR_SAVED_HEADER);
      product.alpha = 1.0f / node->float_state[FP8_SCALE];
    }
    BPT_CHECK(BPT_KERNEL(node, gemm, &product));
  }
  if (bias && bias->requires_grad) BPT_CHECK(bpt_node_backward_kernels(node)); /* db += column sums of dy */
  if (x->requires_grad) {
    /* dx (N, in) += dy (N, out) . W (out, in); skipped for inputs, which saves a third of the first layer. */
    const void *weight_bf16 = bpt_precision_weight_bf16(node, weight);
    bpt_gemm_args product = {.transpose_a = false, .transpose_b = false, .m = batch, .n = in, .k = out, .alpha = 1.0f,
                             .a = node->grad, .lda = out, .b = weight_bf16 ? weight_bf16 : weight->value, .ldb = in,
                             .beta = 1.0f, .c = x->grad, .ldc = in, .a_dtype = node->storage,
                             .b_dtype = weight_bf16 ? BPT_DTYPE_BF16 : BPT_DTYPE_F32, .c_dtype = x->storage,
                             .bf16_products = bpt_graph_bf16_products(node->graph)};
    BPT_CHECK(BPT_KERNEL(node, gemm, &product));
  }
  return BPT_OK;
}

/* Backward reads x for the weight gradient (unless it kept a compressed copy) and W for the input gradient. */
static bool linear_backward_reads_input(const bpt_node *node, int input) {
  if (input == 0) return node->inputs[1]->requires_grad && saved_input_dtype(node) == BPT_DTYPE_F32;
  if (input == 1) return node->inputs[0]->requires_grad;
  return false;
}

/* For the profiler: each GEMM is 2 m n k FLOPs over its three f32 operands. */
static void linear_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const bpt_node *x = node->inputs[0], *weight = node->inputs[1];
  double batch = (double)linear_rows(node), in = (double)weight->dims[1], out = (double)weight->dims[0];
  double gemm_flops = 2.0 * batch * in * out, gemm_bytes = 4.0 * (batch * in + in * out + batch * out);
  bool has_bias = node->input_count > 2 && node->inputs[2];
  if (!backward) {
    *flops = gemm_flops + (has_bias ? batch * out : 0.0);
    *bytes = gemm_bytes + (has_bias ? 4.0 * out : 0.0);
    return;
  }
  int products = (weight->requires_grad ? 1 : 0) + (x->requires_grad ? 1 : 0);
  *flops = products * gemm_flops + (has_bias ? batch * out : 0.0);
  *bytes = products * gemm_bytes + (has_bias ? 4.0 * (batch * out + out) : 0.0);
}

/* The products run on the shared gemm; the op's kernels are its bias terms. */
static bool linear_uses_kernels(const bpt_node *node) { return node->input_count > 2 && node->inputs[2]; }

const bpt_op_definition bpt_op_linear = {.name = "linear",
                                         BPT_OP_STATE(linear_state),
                                         .infer_shape = linear_infer_shape,
                                         .saved_bytes = linear_saved_bytes,
                                         .forward = linear_forward,
                                         .backward = linear_backward,
                                         .backward_reads_input = linear_backward_reads_input,
                                         .backward_reads_output = bpt_op_reads_no_output,
                                         .cost = linear_cost,
                                         .speculative = BPT_SPECULATIVE_LINEAR,
                                         .uses_kernels = linear_uses_kernels};

bpt_status bpt_linear(bpt_graph *graph, const char *name, bpt_node *x, bpt_node *weight, bpt_node *bias,
                      bpt_node **out) {
  bpt_node *inputs[3] = {x, weight, bias};
  return bpt_graph_add_node(graph, BPT_OP_LINEAR, name, inputs, bias ? 3 : 2, out);
}
