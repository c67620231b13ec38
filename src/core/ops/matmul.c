/* matmul: C = op(A) op(B) over the last two axes of two values, op a transpose when asked (int attributes 0
 * and 1), every leading axis a batch of products. A (..., m, k) (or (..., k, m) transposed), B (..., k, n) (or
 * (..., n, k)), C (..., m, n). The leading axes of A and B are equal, or one operand has none (a single matrix
 * repeated for every product, such as a weight). A batched operand of rank 2 is one matrix whose rows are the
 * samples (A only: the batch cannot be a contracted axis). Every product is one strided-batched call of the
 * backend's shared gemm, so every backend runs it; so do the gradients:
 *   dA += dC op(B)^T (transposed back when A is), dB += op(A)^T dC (likewise),
 * where a repeated operand's gradient sums over the products, product by product, in order. */
#include "core/graph.h"
#include "core/precision.h"

enum { MATMUL_TRANSPOSE_A = 0, MATMUL_TRANSPOSE_B = 1 };

/* The product's dimensions for the current batch. */
typedef struct matmul_shape {
  int64_t m, n, k, count; /* count: products */
  int64_t stride_a, stride_b, stride_c;
  bool transpose_a, transpose_b;
} matmul_shape;

/* Leading (batch) axes of an operand: all but the last two; none for a batched rank-2 one (its rows). */
static int batch_axes(const bpt_node *x) { return x->rank > 2 ? x->rank - 2 : 0; }

static matmul_shape shape_of(const bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  matmul_shape s;
  s.transpose_a = node->int_attributes[MATMUL_TRANSPOSE_A] != 0;
  s.transpose_b = node->int_attributes[MATMUL_TRANSPOSE_B] != 0;
  const int64_t a_rows = a->rank == 2 && a->batched ? node->graph->batch : a->dims[a->rank - 2];
  s.m = s.transpose_a ? a->dims[a->rank - 1] : a_rows;
  s.k = s.transpose_a ? a_rows : a->dims[a->rank - 1];
  s.n = s.transpose_b ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
  s.count = bpt_node_count(node) / (s.m * s.n);
  s.stride_a = batch_axes(a) ? s.m * s.k : 0;
  s.stride_b = batch_axes(b) ? s.k * s.n : 0;
  s.stride_c = s.m * s.n;
  return s;
}

static bpt_status matmul_infer_shape(bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  char shape_a[96], shape_b[96];
  const bool transpose_a = node->int_attributes[MATMUL_TRANSPOSE_A] != 0;
  const bool transpose_b = node->int_attributes[MATMUL_TRANSPOSE_B] != 0;
  if (a->dtype != BPT_DTYPE_F32 || b->dtype != BPT_DTYPE_F32)
    return bpt_node_error(node, BPT_ERR_DTYPE, "inputs '%s' and '%s' must be f32", a->name, b->name);
  if (a->rank < 2 || b->rank < 2)
    return bpt_node_error(node, BPT_ERR_SHAPE, "inputs '%s' (rank %d) and '%s' (rank %d) must have 2 or more axes",
                          a->name, a->rank, b->name, b->rank);
  if (b->batched && b->rank == 2)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "input '%s' (%s) is one matrix over the batch; the batch cannot be "
                          "the second operand's matrix axis",
                          b->name, bpt_shape_string(b, shape_b, sizeof shape_b));
  if (a->batched && a->rank == 2 && (transpose_a || batch_axes(b)))
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "input '%s' (%s) has the batch as its rows: it must not be transposed "
                          "and '%s' must be one matrix",
                          a->name, bpt_shape_string(a, shape_a, sizeof shape_a), b->name);
  const int64_t k_a = transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  const int64_t k_b = transpose_b ? b->dims[b->rank - 1] : b->dims[b->rank - 2];
  if (k_a != k_b)
    return bpt_node_error(node, BPT_ERR_SHAPE,
                          "inputs '%s' (%s%s) and '%s' (%s%s) differ in the contracted axis: %lld "
                          "and %lld",
                          a->name, bpt_shape_string(a, shape_a, sizeof shape_a), transpose_a ? ", transposed" : "",
                          b->name, bpt_shape_string(b, shape_b, sizeof shape_b), transpose_b ? ", transposed" : "",
                          (long long)k_a, (long long)k_b);
  const bpt_node *batch = batch_axes(a) ? a : b; /* whose leading axes C takes */
  if (batch_axes(a) && batch_axes(b)) {
    bool same = a->rank == b->rank && a->batched == b->batched;
    for (int i = a->batched ? 1 : 0; same && i < a->rank - 2; i++)
      same = a->dims[i] == b->dims[i];
    if (!same)
      return bpt_node_error(node, BPT_ERR_SHAPE,
                            "inputs '%s' (%s) and '%s' (%s) differ in their leading axes; they "
                            "must be equal, or one input a single matrix",
                            a->name, bpt_shape_string(a, shape_a, sizeof shape_a), b->name,
                            bpt_shape_string(b, shape_b, sizeof shape_b));
  }
  if (a->batched && a->rank == 2) {
    node->rank = 2;
    node->dims[0] = a->dims[0];
  } else {
    node->rank = batch->rank;
    for (int i = 0; i < batch->rank - 2; i++)
      node->dims[i] = batch->dims[i];
    node->dims[node->rank - 2] = transpose_a ? a->dims[a->rank - 1] : a->dims[a->rank - 2];
  }
  node->dims[node->rank - 1] = transpose_b ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
  node->batched = a->batched || b->batched;
  node->sequence = batch->sequence && node->rank > 2;
  return BPT_OK;
}

static bpt_gemm_args product(const bpt_node *node, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                             const float *a, const float *b, float *c) {
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
                        .beta = 1.0f,
                        .c = c,
                        .ldc = n,
                        .bf16_products = bpt_graph_bf16_products(node->graph)};
  return args;
}

/* Runs args over the products with the given strides: one batched call when every product writes its own C,
 * one product at a time (accumulating) when C is shared (stride 0, a repeated operand's gradient). */
static bpt_status run_products(const bpt_node *node, bpt_gemm_args args, int64_t count, int64_t stride_a,
                               int64_t stride_b, int64_t stride_c) {
  if (stride_c != 0 || count == 1) {
    args.batch_count = count;
    args.stride_a = stride_a, args.stride_b = stride_b, args.stride_c = stride_c;
    return BPT_KERNEL(node, gemm, &args);
  }
  const float *a = args.a, *b = args.b;
  for (int64_t i = 0; i < count; i++) {
    args.a = a + i * stride_a;
    args.b = b + i * stride_b;
    BPT_CHECK(BPT_KERNEL(node, gemm, &args));
  }
  return BPT_OK;
}

static bpt_status matmul_forward(bpt_node *node) {
  const matmul_shape s = shape_of(node);
  bpt_gemm_args args = product(node, s.transpose_a, s.transpose_b, s.m, s.n, s.k, node->inputs[0]->value,
                               node->inputs[1]->value, node->value);
  args.beta = 0.0f;
  return run_products(node, args, s.count, s.stride_a, s.stride_b, s.stride_c);
}

static bpt_status matmul_backward(bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  const matmul_shape s = shape_of(node);
  const float *dc = node->grad;
  if (a->requires_grad) {
    /* A (m, k): dA = dC op(B)^T. A stored (k, m): dA = op(B) dC^T. */
    bpt_gemm_args args = s.transpose_a ? product(node, s.transpose_b, true, s.k, s.m, s.n, b->value, dc, a->grad)
                                       : product(node, false, !s.transpose_b, s.m, s.k, s.n, dc, b->value, a->grad);
    BPT_CHECK(s.transpose_a ? run_products(node, args, s.count, s.stride_b, s.stride_c, s.stride_a)
                            : run_products(node, args, s.count, s.stride_c, s.stride_b, s.stride_a));
  }
  if (b->requires_grad) {
    /* B (k, n): dB = op(A)^T dC. B stored (n, k): dB = dC^T op(A). */
    bpt_gemm_args args = s.transpose_b ? product(node, true, s.transpose_a, s.n, s.k, s.m, dc, a->value, b->grad)
                                       : product(node, !s.transpose_a, false, s.k, s.n, s.m, a->value, dc, b->grad);
    BPT_CHECK(s.transpose_b ? run_products(node, args, s.count, s.stride_c, s.stride_a, s.stride_b)
                            : run_products(node, args, s.count, s.stride_a, s.stride_c, s.stride_b));
  }
  return BPT_OK;
}

/* Backward reads B for dA and A for dB. */
static bool matmul_backward_reads_input(const bpt_node *node, int input) {
  return node->inputs[1 - input]->requires_grad;
}

static void matmul_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const matmul_shape s = shape_of(node);
  const double one = 2.0 * (double)s.m * (double)s.n * (double)s.k * (double)s.count;
  const double moved =
      4.0 * (double)(bpt_node_count(node->inputs[0]) + bpt_node_count(node->inputs[1]) + bpt_node_count(node));
  const int products =
      backward ? (node->inputs[0]->requires_grad ? 1 : 0) + (node->inputs[1]->requires_grad ? 1 : 0) : 1;
  *flops = products * one;
  *bytes = products * moved;
}

static const bpt_param_decl matmul_parameters[] = {
    {.name = "transpose_a", .type = BPT_OP_VALUE_BOOL, .slot = MATMUL_TRANSPOSE_A, .maximum = 1},
    {.name = "transpose_b", .type = BPT_OP_VALUE_BOOL, .slot = MATMUL_TRANSPOSE_B, .maximum = 1}};

const bpt_op_definition bpt_op_matmul = {.name = "matmul",
                                         BPT_OP_PARAMETERS(matmul_parameters),
                                         .infer_shape = matmul_infer_shape,
                                         .forward = matmul_forward,
                                         .backward = matmul_backward,
                                         .backward_reads_input = matmul_backward_reads_input,
                                         .backward_reads_output = bpt_op_reads_no_output,
                                         .cost = matmul_cost,
                                         .uses_kernels = bpt_op_uses_no_kernels};

bpt_status bpt_matmul(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, int transpose_a, int transpose_b,
                      bpt_node **out) {
  bpt_node *inputs[2] = {a, b};
  const int64_t attributes[2] = {transpose_a != 0, transpose_b != 0};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_MATMUL, name, inputs, 2, attributes, 2, NULL, 0, out);
}
