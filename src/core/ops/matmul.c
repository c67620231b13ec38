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

/* An operand's matrix as gemm sees it: row-major with leading dimension ld, transposed when the op asks for it
 * or when the operand is a strided view whose rows are its contiguous axis (a permute that swapped the last two
 * axes), the two cancelling when both hold. */
typedef struct matmul_operand {
  bool transpose;
  int64_t ld;
} matmul_operand;

/* The product's dimensions for the current batch. The batch axes (C's leading axes) are merged where every
 * operand steps evenly across them (always, for contiguous operands: one batched call); each operand's step
 * along a batch axis is 0 when it has none (a single matrix repeated). */
typedef struct matmul_shape {
  int64_t m, n, k;
  matmul_operand a, b;
  int axes; /* batch axes after merging, >= 1 (one of extent 1 for a single product) */
  int64_t extent[BPT_MAX_RANK];
  int64_t step_a[BPT_MAX_RANK], step_b[BPT_MAX_RANK], step_c[BPT_MAX_RANK];
} matmul_shape;

/* Leading (batch) axes of an operand: all but the last two; none for a batched rank-2 one (its rows). */
static int batch_axes(const bpt_node *x) { return x->rank > 2 ? x->rank - 2 : 0; }

/* x's last two axes (the batch and the features for a batched rank 2, whose rows are the samples) as a
 * row-major matrix: false when neither axis has unit steps, which no gemm can read. */
static bool operand_layout(const bpt_node *x, bool transpose, matmul_operand *out) {
  const int r = x->rank - 2, c = x->rank - 1;
  const int64_t rows = r == 0 && x->batched ? x->graph->max_batch : x->dims[r], cols = x->dims[c];
  if (cols == 1 || x->strides[c] == 1) {
    out->transpose = transpose;
    out->ld = rows == 1 ? cols : x->strides[r];
    return out->ld >= cols;
  }
  if (rows == 1 || x->strides[r] == 1) {
    out->transpose = !transpose;
    out->ld = x->strides[c];
    return out->ld >= rows;
  }
  return false;
}

static matmul_shape shape_of(const bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  const bool transpose_a = node->int_attributes[MATMUL_TRANSPOSE_A] != 0;
  const bool transpose_b = node->int_attributes[MATMUL_TRANSPOSE_B] != 0;
  matmul_shape s = {0};
  const int64_t a_rows = a->rank == 2 && a->batched ? node->graph->batch : a->dims[a->rank - 2];
  s.m = transpose_a ? a->dims[a->rank - 1] : a_rows;
  s.k = transpose_a ? a_rows : a->dims[a->rank - 1];
  s.n = transpose_b ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
  (void)operand_layout(a, transpose_a, &s.a); /* reads_strided_input refused the layouts it cannot take */
  (void)operand_layout(b, transpose_b, &s.b);
  /* C's batch axes, innermost last, then merged outward where all three step evenly. */
  const int axes = node->rank == 2 ? 0 : node->rank - 2;
  int64_t extent[BPT_MAX_RANK], step_c = s.m * s.n;
  for (int i = axes - 1; i >= 0; i--) {
    extent[i] = i == 0 && node->batched ? node->graph->batch : node->dims[i];
    s.step_c[i] = step_c;
    step_c *= extent[i];
    s.step_a[i] = batch_axes(a) ? a->strides[i] : 0;
    s.step_b[i] = batch_axes(b) ? b->strides[i] : 0;
  }
  s.axes = 0;
  s.extent[0] = 1;
  for (int i = 0; i < axes; i++) {
    const int last = s.axes - 1;
    if (s.axes > 0 && s.step_a[last] == s.step_a[i] * extent[i] && s.step_b[last] == s.step_b[i] * extent[i] &&
        s.step_c[last] == s.step_c[i] * extent[i]) {
      s.extent[last] *= extent[i];
      s.step_a[last] = s.step_a[i], s.step_b[last] = s.step_b[i], s.step_c[last] = s.step_c[i];
      continue;
    }
    s.extent[s.axes] = extent[i];
    s.step_a[s.axes] = s.step_a[i], s.step_b[s.axes] = s.step_b[i], s.step_c[s.axes] = s.step_c[i];
    s.axes++;
  }
  if (s.axes == 0) s.axes = 1, s.step_a[0] = s.step_b[0] = s.step_c[0] = 0;
  return s;
}

/* Strided views (strided_views.c): an operand whose last two axes one gemm can read, any steps between the
 * products. */
static bool matmul_reads_strided_input(const bpt_node *node, int input) {
  matmul_operand layout;
  return operand_layout(node->inputs[input], node->int_attributes[input] != 0, &layout);
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
  /* The rows follow a sequence along a's rows (the heads' scores (N, H, T, T)), the leading axes batch's. */
  if (a->sequence_axis && a->sequence_axis == (transpose_a ? a->rank - 1 : a->rank - 2))
    node->sequence_axis = node->rank - 2;
  else if (batch->sequence_axis && batch->sequence_axis < batch->rank - 2)
    node->sequence_axis = batch->sequence_axis;
  return BPT_OK;
}

/* C (m, n) += op(A) op(B) with A, B and C row-major at leading dimensions lda, ldb, ldc. */
static bpt_gemm_args product(const bpt_node *node, matmul_operand a_layout, matmul_operand b_layout, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b, float *c, int64_t ldc) {
  bpt_gemm_args args = {.transpose_a = a_layout.transpose,
                        .transpose_b = b_layout.transpose,
                        .m = m,
                        .n = n,
                        .k = k,
                        .alpha = 1.0f,
                        .a = a,
                        .lda = a_layout.ld,
                        .b = b,
                        .ldb = b_layout.ld,
                        .beta = 1.0f,
                        .c = c,
                        .ldc = ldc,
                        .bf16_products = bpt_graph_bf16_products(node->graph)};
  return args;
}

static matmul_operand flipped(matmul_operand x) {
  x.transpose = !x.transpose;
  return x;
}

/* Runs args over the products, A, B and C stepping by step_a, step_b and step_c along the shape's batch axes:
 * one batched call per run of the innermost axis when its products write disjoint C, one product at a time
 * (accumulating, in order) when they do not (a repeated operand's gradient, step 0, or a strided view's
 * gradient whose products interleave). */
static bpt_status run_products(const bpt_node *node, bpt_gemm_args args, const matmul_shape *s,
                               const int64_t *step_a, const int64_t *step_b, const int64_t *step_c) {
  const int inner = s->axes - 1;
  int64_t outer = 1;
  for (int i = 0; i < inner; i++) outer *= s->extent[i];
  const float *a = args.a, *b = args.b;
  float *c = args.c;
  for (int64_t o = 0; o < outer; o++) {
    int64_t rest = o, at_a = 0, at_b = 0, at_c = 0;
    for (int i = inner - 1; i >= 0; i--) {
      const int64_t index = rest % s->extent[i];
      rest /= s->extent[i];
      at_a += index * step_a[i], at_b += index * step_b[i], at_c += index * step_c[i];
    }
    args.a = a + at_a, args.b = b + at_b, args.c = c + at_c;
    args.batch_count = s->extent[inner];
    args.stride_a = step_a[inner], args.stride_b = step_b[inner], args.stride_c = step_c[inner];
    if (args.batch_count == 1 || (args.stride_c != 0 && bpt_gemm_batch_valid(&args))) {
      BPT_CHECK(BPT_KERNEL(node, gemm, &args));
      continue;
    }
    bpt_gemm_args one = args;
    one.batch_count = 0, one.stride_a = one.stride_b = one.stride_c = 0;
    for (int64_t p = 0; p < args.batch_count; p++) {
      one.a = args.a + p * args.stride_a, one.b = args.b + p * args.stride_b, one.c = args.c + p * args.stride_c;
      BPT_CHECK(BPT_KERNEL(node, gemm, &one));
    }
  }
  return BPT_OK;
}

static bpt_status matmul_forward(bpt_node *node) {
  const matmul_shape s = shape_of(node);
  bpt_gemm_args args =
      product(node, s.a, s.b, s.m, s.n, s.k, node->inputs[0]->value, node->inputs[1]->value, node->value, s.n);
  args.beta = 0.0f;
  return run_products(node, args, &s, s.step_a, s.step_b, s.step_c);
}

static bpt_status matmul_backward(bpt_node *node) {
  const bpt_node *a = node->inputs[0], *b = node->inputs[1];
  const matmul_shape s = shape_of(node);
  const float *dc = node->grad;
  const matmul_operand c_layout = {.transpose = false, .ld = s.n};
  if (a->requires_grad) {
    /* A (m, k): dA = dC op(B)^T. A stored (k, m): dA = op(B) dC^T. */
    bpt_gemm_args args = s.a.transpose
                             ? product(node, s.b, flipped(c_layout), s.k, s.m, s.n, b->value, dc, a->grad, s.a.ld)
                             : product(node, c_layout, flipped(s.b), s.m, s.k, s.n, dc, b->value, a->grad, s.a.ld);
    BPT_CHECK(s.a.transpose ? run_products(node, args, &s, s.step_b, s.step_c, s.step_a)
                            : run_products(node, args, &s, s.step_c, s.step_b, s.step_a));
  }
  if (b->requires_grad) {
    /* B (k, n): dB = op(A)^T dC. B stored (n, k): dB = dC^T op(A). */
    bpt_gemm_args args = s.b.transpose
                             ? product(node, flipped(c_layout), s.a, s.n, s.k, s.m, dc, a->value, b->grad, s.b.ld)
                             : product(node, flipped(s.a), c_layout, s.k, s.n, s.m, a->value, dc, b->grad, s.b.ld);
    BPT_CHECK(s.b.transpose ? run_products(node, args, &s, s.step_c, s.step_a, s.step_b)
                            : run_products(node, args, &s, s.step_a, s.step_c, s.step_b));
  }
  return BPT_OK;
}

/* Backward reads B for dA and A for dB. */
static bool matmul_backward_reads_input(const bpt_node *node, int input) {
  return node->inputs[1 - input]->requires_grad;
}

static void matmul_cost(const bpt_node *node, int backward, double *flops, double *bytes) {
  const matmul_shape s = shape_of(node);
  double count = 1.0;
  for (int i = 0; i < s.axes; i++) count *= (double)s.extent[i];
  const double one = 2.0 * (double)s.m * (double)s.n * (double)s.k * count;
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
                                         .uses_kernels = bpt_op_uses_no_kernels,
                                         .reads_strided_input = matmul_reads_strided_input};

bpt_status bpt_matmul(bpt_graph *graph, const char *name, bpt_node *a, bpt_node *b, int transpose_a, int transpose_b,
                      bpt_node **out) {
  bpt_node *inputs[2] = {a, b};
  const int64_t attributes[2] = {transpose_a != 0, transpose_b != 0};
  return bpt_graph_add_node_with_attributes(graph, BPT_OP_MATMUL, name, inputs, 2, attributes, 2, NULL, 0, out);
}
