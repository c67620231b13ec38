/* Every op on every backend, from one table of cases (ggml's test-backend-ops is the model). Each case builds
 * a small graph around one op (its inputs, its parameters, the op, and an MSE loss against a random target so
 * that every output element matters), runs forward and backward on each backend, compares the op's output,
 * the loss, the parameters after forward (batch-norm running statistics) and every input and parameter
 * gradient with the CPU backend, the reference, and checks the gradients against central finite differences
 * on that backend. A second table compares the shared backend primitives (GEMM, casts, reductions, updates,
 * memory) member by member. A backend that cannot run a case reports BPT_ERR_UNSUPPORTED from compile or
 * from the first forward, and the case is skipped there with a printed line. Every difference is recorded and
 * the test fails once, at the end, with the whole list. An op in ops.def without a table line fails too. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"
#include "core/graph.h"
#include "core/precision.h"
#include "test_support.h"

enum {
  MAX_LEAVES = 8,
  MAX_TENSORS = 12,
  MAX_BACKENDS = 8,
  FD_CHECKS_PER_TENSOR = 16,
  FD_TAIL_CHECKS = 4,
  NAME_SIZE = 64
};

/* ---- failures: recorded as they are found, reported once ---- */

static char *failure_log;
static size_t failure_length, failure_capacity;
static int failure_count, skip_count;

static void record_failure(const char *case_name, const char *backend, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void record_failure(const char *case_name, const char *backend, const char *format, ...) {
  char line[768];
  int used = snprintf(line, sizeof line, "  %s on %s: ", case_name, backend);
  if (used < 0 || used >= (int)sizeof line) used = 0;
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(line + used, sizeof line - (size_t)used, format, arguments);
  va_end(arguments);
  size_t length = strlen(line);
  if (failure_length + length + 2 > failure_capacity) {
    size_t capacity = failure_capacity ? 2 * failure_capacity : 4096;
    while (capacity < failure_length + length + 2)
      capacity *= 2;
    char *grown = realloc(failure_log, capacity);
    if (!grown) fail_msg("out of memory recording a failure");
    failure_log = grown;
    failure_capacity = capacity;
  }
  memcpy(failure_log + failure_length, line, length);
  failure_length += length;
  failure_log[failure_length++] = '\n';
  failure_log[failure_length] = '\0';
  failure_count++;
}

static void record_skip(const char *case_name, const char *backend, bpt_status status, const char *message) {
  print_message("skipped: %s on %s (%s: %s)\n", case_name, backend, bpt_status_string(status), message);
  skip_count++;
}

/* ---- the backends under test ---- */

typedef struct backend_under_test {
  char label[48];
  char name[32];
  bpt_cpu_loops loop_limit; /* the CPU with its loops held to this level (0: as shipped, the widest) */
  bpt_context *context;
} backend_under_test;

static backend_under_test backends[MAX_BACKENDS];
static int backend_count;

static void add_backend(const char *name, bpt_cpu_loops loop_limit) {
  if (backend_count == MAX_BACKENDS) return;
  backend_under_test *t = &backends[backend_count];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->label, sizeof t->label, "%s%s", name,
           loop_limit == BPT_CPU_LOOPS_PORTABLE ? " (portable loops)"
           : loop_limit == BPT_CPU_LOOPS_AVX2   ? " (AVX2 loops)"
                                                : "");
  t->loop_limit = loop_limit;
  bpt_context_options options = bpt_context_options_default();
  options.backend = name;
  options.num_threads = 2;
  options.seed = 7;
  bpt_status status = bpt_context_create(&options, &t->context);
  if (status != BPT_OK) {
    /* A missing device is a clean status with a message, never a crash; the backend is then skipped. */
    const char *message = bpt_context_last_error(NULL);
    if (t->context != NULL || !message[0])
      record_failure("context creation", t->label, "failed with %s but %s", bpt_status_string(status),
                     t->context ? "returned a context" : "left no message");
    print_message("skipped: every case on %s: %s (%s)\n", t->label, message, bpt_status_string(status));
    t->context = NULL;
    return;
  }
  if (strcmp(name, "cpu") == 0 && loop_limit) ((bpt_cpu_state *)t->context->backend.state)->loop_limit = loop_limit;
  if (strcmp(name, "fpga-sim") == 0) {
    /* Its f32 mode: fixed point differs from the CPU by design (tests/test_fpga_fixed_point.c covers it). */
    bpt_fpga_options fpga = bpt_fpga_options_default();
    fpga.format = BPT_FPGA_FORMAT_F32;
    if (bpt_fpga_configure(t->context, &fpga) != BPT_OK)
      record_failure("fpga-sim f32 mode", t->label, "%s", bpt_context_last_error(t->context));
  }
  backend_count++;
}

/* The CPU first (the reference), then each narrower level of its loops this CPU has, then every other
 * registered backend. "cuda" is always tried, so a build without it says so. */
static void open_backends(void) {
  const bpt_cpu_loops widest = bpt_cpu_loops_supported();
  add_backend("cpu", 0);
  if (widest > BPT_CPU_LOOPS_AVX2) add_backend("cpu", BPT_CPU_LOOPS_AVX2);
  if (widest > BPT_CPU_LOOPS_PORTABLE) add_backend("cpu", BPT_CPU_LOOPS_PORTABLE);
  print_message("note: \"cpu\" runs this CPU's widest loops: %s\n",
                widest == BPT_CPU_LOOPS_AVX512 ? "AVX-512"
                : widest == BPT_CPU_LOOPS_AVX2 ? "AVX2 (no AVX-512 here, so those loops are not checked)"
                                               : "portable (no AVX2 here, so no vector loops are checked)");
  bool cuda_listed = false;
  for (int i = 0; i < bpt_backend_count(); i++) {
    const char *name = bpt_backend_name(i);
    if (!name || strcmp(name, "cpu") == 0) continue;
    cuda_listed |= strcmp(name, "cuda") == 0;
    add_backend(name, 0);
  }
  if (!cuda_listed) print_message("skipped: every case on cuda: this libbptrain was built without it\n");
}

static void close_backends(void) {
  for (int i = 0; i < backend_count; i++)
    bpt_context_destroy(backends[i].context);
  backend_count = 0;
}

/* ---- results: named tensors of one run, compared tensor by tensor ---- */

typedef struct result_tensor {
  char name[NAME_SIZE];
  bpt_dtype dtype; /* f32 values are compared with the case's tolerance, anything else byte for byte */
  int64_t count;
  void *data;
} result_tensor;

typedef struct case_result {
  int count;
  result_tensor tensors[MAX_TENSORS];
} case_result;

static size_t element_bytes(bpt_dtype dtype) {
  switch (dtype) {
  case BPT_DTYPE_F16:
  case BPT_DTYPE_BF16: return 2;
  case BPT_DTYPE_FP8_E4M3:
  case BPT_DTYPE_FP8_E5M2:
  case BPT_DTYPE_U8: return 1;
  default: return 4;
  }
}

/* A new tensor in the result, zero-filled, or NULL when the result is full. */
static void *result_add(case_result *r, const char *name, bpt_dtype dtype, int64_t count) {
  if (r->count == MAX_TENSORS) return NULL;
  result_tensor *t = &r->tensors[r->count];
  t->data = calloc((size_t)(count > 0 ? count : 1), element_bytes(dtype));
  if (!t->data) return NULL;
  r->count++;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dtype;
  t->count = count;
  return t->data;
}

static void result_free(case_result *r) {
  for (int i = 0; i < r->count; i++)
    free(r->tensors[i].data);
  r->count = 0;
}

/* |got - expected| <= tolerance (|expected| + rms(expected)) element by element, so near-zero elements of a
 * tensor are held to its scale; non-finite values must match exactly. tolerance 0: bit for bit. */
static void compare_results(const char *case_name, const char *backend, const case_result *expected,
                            const case_result *got, double tolerance) {
  if (got->count != expected->count) {
    record_failure(case_name, backend, "%d result tensors, the CPU has %d", got->count, expected->count);
    return;
  }
  for (int t = 0; t < expected->count; t++) {
    const result_tensor *e = &expected->tensors[t], *g = &got->tensors[t];
    if (e->count != g->count || e->dtype != g->dtype) {
      record_failure(case_name, backend, "%s: %lld elements, the CPU has %lld", e->name, (long long)g->count,
                     (long long)e->count);
      continue;
    }
    if (e->dtype != BPT_DTYPE_F32 || tolerance == 0.0) {
      size_t width = element_bytes(e->dtype);
      if (memcmp(e->data, g->data, (size_t)e->count * width) == 0) continue;
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < e->count; i++)
        if (memcmp((const char *)e->data + i * width, (const char *)g->data + i * width, width) != 0) {
          if (first < 0) first = i;
          differ++;
        }
      if (differ == 0) continue;
      if (e->dtype == BPT_DTYPE_F32)
        record_failure(case_name, backend, "%s[%lld] = %.9g, expected %.9g (%lld of %lld differ, bit for bit)", e->name,
                       (long long)first, (double)((const float *)g->data)[first],
                       (double)((const float *)e->data)[first], (long long)differ, (long long)e->count);
      else {
        uint32_t a = 0, b = 0;
        memcpy(&a, (const char *)g->data + first * width, width);
        memcpy(&b, (const char *)e->data + first * width, width);
        record_failure(case_name, backend, "%s[%lld] = 0x%x, expected 0x%x (%lld of %lld differ, bit for bit)", e->name,
                       (long long)first, a, b, (long long)differ, (long long)e->count);
      }
      continue;
    }
    const float *ev = e->data, *gv = g->data;
    double squares = 0.0;
    int64_t finite = 0;
    for (int64_t i = 0; i < e->count; i++)
      if (isfinite(ev[i])) {
        squares += (double)ev[i] * ev[i];
        finite++;
      }
    const double rms = finite ? sqrt(squares / (double)finite) : 0.0;
    int64_t differ = 0, worst = -1;
    double worst_excess = 0.0;
    for (int64_t i = 0; i < e->count; i++) {
      double excess;
      if (!isfinite(ev[i]) || !isfinite(gv[i])) {
        bool same = (isnan(ev[i]) && isnan(gv[i])) || ev[i] == gv[i];
        excess = same ? 0.0 : INFINITY;
      } else {
        double allowed = tolerance * (fabs((double)ev[i]) + rms) + 1e-30;
        excess = fabs((double)gv[i] - (double)ev[i]) / allowed;
        if (excess <= 1.0) excess = 0.0;
      }
      if (excess > 0.0) {
        differ++;
        if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
      }
    }
    if (differ)
      record_failure(case_name, backend, "%s[%lld] = %.9g, expected %.9g (%lld of %lld beyond relative %g)", e->name,
                     (long long)worst, (double)gv[worst], (double)ev[worst], (long long)differ, (long long)e->count,
                     tolerance);
  }
}

/* ---- op cases ---- */

typedef bpt_status (*unary_op)(bpt_graph *, const char *, bpt_node *, bpt_node **);
typedef struct op_case op_case;
typedef struct case_graph case_graph;
/* Builds the op and its leaves (through add_input/add_parameter) and returns the op's node. */
typedef bpt_status (*case_builder)(case_graph *g, const op_case *c, bpt_node **op_output);

/* A host reference of the op's output (the case's leaves in, in their creation order), in double. */
typedef void (*case_reference)(const case_graph *g, double *expected);

typedef enum gradient_check {
  CHECK_FINITE_DIFFERENCES = 0, /* every differentiable leaf against central differences of the loss */
  CHECK_STRAIGHT_THROUGH,       /* binary_stochastic: dz = da (times sigmoid'(z)), computed on the host */
  CHECK_DROPOUT_MASK,           /* dropout: dx = dy * mask, and finite differences (the mask is fixed) */
  CHECK_EVALUATION_FORMULA,     /* batch norm in evaluation mode (forward only): the output against its formula */
  CHECK_FORWARD_ONLY            /* kv_cache_attention (no backward): the output against the case's reference */
} gradient_check;

struct op_case {
  const char *name;
  bpt_op_id op;
  case_builder build;
  unary_op unary; /* build_unary: the op's graph call */
  int64_t batch;
  /* The op's main input, per sample (conv2d and pooling: always (C, H, W)). */
  int rank;
  int64_t shape[3];
  /* Attributes, each read by the builders of the ops it names. */
  int64_t units;                                                   /* linear: output features; embedding: rows */
  bool no_bias;                                                    /* linear, conv2d; layer_norm: no beta */
  int64_t out_channels, kernel, stride, padding, dilation, groups; /* conv2d; pooling: kernel, stride, padding */
  bool sequence;        /* the main input is a sequence input: shape[0] is its length, the rest per token */
  int other_rank;       /* add, mul, matmul: the second operand, per sample when other_batched, else a parameter */
  int64_t other_shape[3];
  bool other_batched;
  bool transpose_a, transpose_b;                                   /* matmul */
  bool twice;                                                      /* permute, norms: x feeds two, summed */
  bool causal;                                                     /* softmax, attention: the causal mask */
  int64_t heads;                                                   /* attention */
  int to_rank;                                                     /* reshape: new per-sample rank (0: flatten) */
  int64_t slice[3]; /* slice: axis (the batch is 0), start, length; with twice, a second slice from start + length */
  /* softmax_cross_entropy's options: with ignore, every third label becomes ignore_index (and labels equal to it
   * are ignored too); smoothing is the label smoothing. Neither: bpt_softmax_cross_entropy() itself. */
  int axis; /* concat: the axis (the batch is 0) */
  bool ignore;
  int32_t ignore_index;
  float smoothing;
  int64_t to_shape[3];
  float slope;                    /* leaky_relu */
  float probability;              /* dropout */
  bpt_straight_through estimator; /* binary_stochastic */
  bool evaluation;                /* batch norm, dropout: evaluation mode */
  bool deterministic;             /* binary_stochastic's deterministic mode */
  /* How the case is run and checked. */
  bool fan_out;     /* the main input also feeds an add after the op: its gradient has two writers */
  bool kinks;       /* non-differentiable points: finite differences skip elements whose output sign flips */
  float margin;     /* the main input keeps |x| >= margin, away from a kink at zero */
  float spacing;    /* > 0: main input values all distinct, this far apart (max pooling's ties) */
  double tolerance; /* against the CPU, relative; default 1e-4 */
  double step;      /* finite-difference step; default 1e-2 */
  gradient_check check;
  case_reference reference; /* optional: the output against it on every backend (a self-consistent wrong forward
                               passes finite differences) */
  bool reference_differs;   /* stochastic ops: the output must differ from the reference (their noise-free form) */
};

typedef struct leaf {
  char name[NAME_SIZE];
  bpt_node *node;
  bool is_input, differentiable, labels;
  int64_t count;         /* elements, with the batch for inputs */
  int64_t packed_offset; /* parameters: where bpt_graph_read_parameters() puts them */
  float *values;         /* host values (labels as int32) */
  bpt_tensor *tensor;
} leaf;

/* How a case's graph stores its activations: f32 (the default policy), or under the bf16 policy with 16-bit
 * storage (values with several readers f32, or bf16 too: SHARED) or with every activation f32 and rounded in
 * place after each op (the rounding path). */
typedef enum case_storage { STORAGE_F32, STORAGE_BF16, STORAGE_BF16_SHARED, STORAGE_ROUNDING } case_storage;

struct case_graph {
  bpt_context *context;
  bpt_graph *graph;
  const op_case *c;
  test_random random; /* seeded per case, so every backend gets the same leaves */
  leaf leaves[MAX_LEAVES];
  int leaf_count;
  bpt_node *op_output, *prediction, *target, *loss; /* prediction, target: the MSE added around the op */
  leaf *target_leaf;
  float *parameters; /* host copy of the parameter block */
  int64_t parameter_count;
};

static leaf *new_leaf(case_graph *g, const char *name, int64_t count) {
  if (g->leaf_count == MAX_LEAVES) return NULL;
  leaf *l = &g->leaves[g->leaf_count++];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  l->count = count;
  l->values = malloc((size_t)count * sizeof(float));
  return l->values ? l : NULL;
}

static int64_t product(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

/* Uniform in [low, high], never zero; |v| >= margin when margin > 0. */
static void fill_values(test_random *random, float *values, int64_t count, float low, float high, float margin) {
  for (int64_t i = 0; i < count; i++) {
    float v;
    int tries = 0;
    do
      v = test_random_uniform(random, low, high);
    while ((v == 0.0f || fabsf(v) < margin) && ++tries < 1000);
    values[i] = v;
  }
}

/* Distinct values spacing apart, in random order, centred on zero. */
static void fill_spaced(test_random *random, float *values, int64_t count, float spacing) {
  for (int64_t i = 0; i < count; i++)
    values[i] = ((float)i - 0.5f * (float)count + 0.25f) * spacing;
  for (int64_t i = count - 1; i > 0; i--) {
    int64_t j = (int64_t)(test_random_uniform(random, 0.0f, 1.0f) * (float)(i + 1)) % (i + 1);
    float swap = values[i];
    values[i] = values[j];
    values[j] = swap;
  }
}

/* An f32 input fed per batch; a differentiable one gets a gradient of its own (inputs normally have none)
 * so the op's input gradient is read directly. The first leaf is the op's main input, filled with the
 * case's margin or spacing. */
static bpt_status add_input(case_graph *g, const char *name, int rank, const int64_t *dims, float low, float high,
                            bool differentiable, bpt_node **out) {
  leaf *l = new_leaf(g, name, g->c->batch * product(rank, dims));
  if (!l) return BPT_ERR_OUT_OF_MEMORY;
  /* The case's main input (the first leaf) is a sequence when the case says so. */
  if (g->c->sequence && g->leaf_count == 1)
    BPT_CHECK(bpt_graph_input_sequence(g->graph, name, BPT_DTYPE_F32, dims[0], rank - 1, dims + 1, out));
  else
    BPT_CHECK(bpt_graph_input(g->graph, name, BPT_DTYPE_F32, rank, dims, out));
  l->node = *out;
  l->is_input = true;
  l->differentiable = differentiable;
  (*out)->requires_grad = differentiable;
  if (g->leaf_count == 1 && g->c->spacing > 0.0f)
    fill_spaced(&g->random, l->values, l->count, g->c->spacing);
  else
    fill_values(&g->random, l->values, l->count, low, high, g->leaf_count == 1 ? g->c->margin : 0.0f);
  return BPT_OK;
}

/* One label per sample, or per token when the case's main input is a sequence. */
static bpt_status add_labels(case_graph *g, const char *name, int64_t classes, bpt_node **out) {
  const int64_t length = g->c->sequence ? g->c->shape[0] : 1;
  leaf *l = new_leaf(g, name, g->c->batch * length);
  if (!l) return BPT_ERR_OUT_OF_MEMORY;
  if (g->c->sequence)
    BPT_CHECK(bpt_graph_input_sequence(g->graph, name, BPT_DTYPE_I32, length, 0, NULL, out));
  else
    BPT_CHECK(bpt_graph_input(g->graph, name, BPT_DTYPE_I32, 0, NULL, out));
  l->node = *out;
  l->is_input = l->labels = true;
  int32_t *labels = (int32_t *)l->values;
  for (int64_t i = 0; i < l->count; i++)
    labels[i] = (int32_t)(test_random_uniform(&g->random, 0.0f, 1.0f) * (float)classes) % (int32_t)classes;
  return BPT_OK;
}

static bpt_status add_parameter(case_graph *g, const char *name, int rank, const int64_t *dims, float low, float high,
                                bool trainable, bpt_node **out) {
  leaf *l = new_leaf(g, name, product(rank, dims));
  if (!l) return BPT_ERR_OUT_OF_MEMORY;
  BPT_CHECK(trainable ? bpt_graph_parameter(g->graph, name, rank, dims, BPT_INIT_ZEROS, out)
                      : bpt_graph_nontrainable_parameter(g->graph, name, rank, dims, BPT_INIT_ZEROS, out));
  l->node = *out;
  l->differentiable = trainable;
  fill_values(&g->random, l->values, l->count, low, high, 0.0f);
  return BPT_OK;
}

/* ---- builders, one per op family ---- */

static bpt_status build_input(case_graph *g, const op_case *c, bpt_node **out) {
  return add_input(g, "x", c->rank, c->shape, -1.0f, 1.0f, true, out);
}

static bpt_status build_unary(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 2.0f, true, &x));
  return c->unary(g->graph, "op", x, out);
}

static bpt_status build_leaky_relu(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 2.0f, true, &x));
  return bpt_leaky_relu(g->graph, "op", x, c->slope, out);
}

static bpt_status build_binary_stochastic(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *z;
  BPT_CHECK(add_input(g, "z", c->rank, c->shape, -3.0f, 3.0f, true, &z));
  return bpt_binary_stochastic(g->graph, "op", z, c->estimator, out);
}

static bpt_status build_dropout(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 2.0f, true, &x));
  return bpt_dropout(g->graph, "op", x, c->probability, out);
}

static bpt_status build_linear(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *weight, *bias = NULL;
  const int64_t in = c->sequence ? product(c->rank - 1, c->shape + 1) : product(c->rank, c->shape),
                weight_dims[2] = {c->units, in};
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -1.0f, 1.0f, true, &x));
  BPT_CHECK(add_parameter(g, "weight", 2, weight_dims, -0.5f, 0.5f, true, &weight));
  if (!c->no_bias) BPT_CHECK(add_parameter(g, "bias", 1, &c->units, -0.5f, 0.5f, true, &bias));
  return bpt_linear(g->graph, "op", x, weight, bias, out);
}

static bpt_status build_softmax_cross_entropy(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *logits, *labels;
  BPT_CHECK(add_input(g, "logits", c->rank, c->shape, -3.0f, 3.0f, true, &logits));
  BPT_CHECK(add_labels(g, "labels", c->shape[c->rank - 1], &labels));
  if (!c->ignore && c->smoothing == 0.0f) return bpt_softmax_cross_entropy(g->graph, "op", logits, labels, out);
  leaf *l = &g->leaves[g->leaf_count - 1];
  for (int64_t i = 0; c->ignore && i < l->count; i += 3)
    ((int32_t *)l->values)[i] = c->ignore_index;
  return bpt_softmax_cross_entropy_options(g->graph, "op", logits, labels, c->ignore ? c->ignore_index : -100,
                                           c->smoothing, out);
}

static bpt_status build_mse(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *prediction, *target;
  BPT_CHECK(add_input(g, "prediction", c->rank, c->shape, -2.0f, 2.0f, true, &prediction));
  BPT_CHECK(add_input(g, "target", c->rank, c->shape, -1.0f, 1.0f, true, &target));
  return bpt_mse_loss(g->graph, "op", prediction, target, out);
}

static bpt_status build_conv2d(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *weight, *bias = NULL;
  const int64_t weight_dims[4] = {c->out_channels, c->shape[0] / c->groups, c->kernel, c->kernel};
  BPT_CHECK(add_input(g, "x", 3, c->shape, -1.0f, 1.0f, true, &x));
  BPT_CHECK(add_parameter(g, "weight", 4, weight_dims, -0.5f, 0.5f, true, &weight));
  if (!c->no_bias) BPT_CHECK(add_parameter(g, "bias", 1, &c->out_channels, -0.5f, 0.5f, true, &bias));
  bpt_conv2d_options options = bpt_conv2d_options_default();
  options.stride_height = options.stride_width = c->stride;
  options.padding_height = options.padding_width = c->padding;
  options.dilation_height = options.dilation_width = c->dilation;
  options.groups = c->groups;
  return bpt_conv2d(g->graph, "op", x, weight, bias, &options, out);
}

/* batch_norm and batch_norm_relu, 1-D (rank 1) or 2-D (rank 3). */
static bpt_status build_batch_norm(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *gamma, *beta, *mean, *variance;
  const int64_t *channels = &c->shape[0];
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 3.0f, true, &x));
  BPT_CHECK(add_parameter(g, "gamma", 1, channels, 0.5f, 1.5f, true, &gamma));
  BPT_CHECK(add_parameter(g, "beta", 1, channels, -0.5f, 0.5f, true, &beta));
  BPT_CHECK(add_parameter(g, "running_mean", 1, channels, -0.5f, 0.5f, false, &mean));
  BPT_CHECK(add_parameter(g, "running_variance", 1, channels, 0.5f, 2.0f, false, &variance));
  if (c->op == BPT_OP_BATCH_NORM_RELU)
    return bpt_batch_norm_relu(g->graph, "op", x, gamma, beta, mean, variance, 0.1f, 1e-5f, out);
  return bpt_batch_norm(g->graph, "op", x, gamma, beta, mean, variance, 0.1f, 1e-5f, out);
}

static bpt_status norm_node(case_graph *g, const op_case *c, const char *name, bpt_node *x, bpt_node *gamma,
                            bpt_node *beta, float epsilon, bpt_node **out) {
  if (c->op == BPT_OP_RMS_NORM) return bpt_rms_norm(g->graph, name, x, gamma, epsilon, out);
  return bpt_layer_norm(g->graph, name, x, gamma, beta, epsilon, out);
}

/* layer_norm and rms_norm over the main input's last axis, with gamma (and layer_norm's beta unless no_bias) of
 * its size. */
static bpt_status build_norm(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *gamma, *beta = NULL;
  const int64_t *features = &c->shape[c->rank - 1];
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 3.0f, true, &x));
  BPT_CHECK(add_parameter(g, "gamma", 1, features, 0.5f, 1.5f, true, &gamma));
  if (!c->no_bias && c->op == BPT_OP_LAYER_NORM)
    BPT_CHECK(add_parameter(g, "beta", 1, features, -0.5f, 0.5f, true, &beta));
  if (!c->twice) return norm_node(g, c, "op", x, gamma, beta, 1e-5f, out);
  /* Two nodes share x and the parameters: the second writer of each gradient adds into it. */
  bpt_node *first, *second;
  BPT_CHECK(norm_node(g, c, "op", x, gamma, beta, 1e-5f, &first));
  BPT_CHECK(norm_node(g, c, "op2", x, gamma, beta, 1e-3f, &second));
  return bpt_add(g->graph, "sum", first, second, out);
}

/* Row-wise ops reading a strided view in place (issue 24.2): x (.., 2W) sliced to its second half, the rows W
 * apart in a buffer twice as wide; on backends whose kernels are not strided the slice is a copy. */
static bpt_status build_of_slice(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *half;
  const int last = c->rank - 1;
  const int64_t width = c->shape[last] / 2;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 3.0f, true, &x));
  BPT_CHECK(bpt_slice(g->graph, "half", x, c->rank, width, width, &half));
  if (c->op == BPT_OP_SOFTMAX) return bpt_softmax(g->graph, "op", half, c->causal, out);
  if (c->op == BPT_OP_LEAKY_RELU) return bpt_leaky_relu(g->graph, "op", half, c->slope, out);
  if (c->op != BPT_OP_LAYER_NORM && c->op != BPT_OP_RMS_NORM) return c->unary(g->graph, "op", half, out);
  bpt_node *gamma, *beta = NULL;
  BPT_CHECK(add_parameter(g, "gamma", 1, &width, 0.5f, 1.5f, true, &gamma));
  if (c->op == BPT_OP_LAYER_NORM) BPT_CHECK(add_parameter(g, "beta", 1, &width, -0.5f, 0.5f, true, &beta));
  return norm_node(g, c, "op", half, gamma, beta, 1e-5f, out);
}

/* SwiGLU's product: a fused (.., 2W) projection's halves multiplied (or, for add, summed), both read in place
 * where the op's kernels are strided. */
static bpt_status build_mul_of_halves(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x, *gate, *value;
  const int64_t width = c->shape[c->rank - 1] / 2;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -2.0f, 2.0f, true, &x));
  BPT_CHECK(bpt_slice(g->graph, "gate", x, c->rank, 0, width, &gate));
  BPT_CHECK(bpt_slice(g->graph, "value", x, c->rank, width, width, &value));
  if (c->op == BPT_OP_ADD) return bpt_add(g->graph, "op", gate, value, out);
  BPT_CHECK(bpt_silu(g->graph, "act", gate, &gate));
  return bpt_mul(g->graph, "op", gate, value, out);
}

/* softmax over D of (N, T, H, D) permuted to (N, H, T, D): rows D long, T H D apart in a permuted view. */
static bpt_status build_softmax_of_permute(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  const int64_t axes[4] = {0, 2, 1, 3};
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -3.0f, 3.0f, true, &x));
  BPT_CHECK(bpt_permute(g->graph, "heads", x, 4, axes, &x));
  return bpt_softmax(g->graph, "op", x, 0, out);
}

static bpt_status build_pool2d(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", 3, c->shape, -1.0f, 1.0f, true, &x));
  if (c->op == BPT_OP_MAX_POOL2D) return bpt_max_pool2d(g->graph, "op", x, c->kernel, c->stride, c->padding, out);
  return bpt_avg_pool2d(g->graph, "op", x, c->kernel, c->stride, c->padding, out);
}

static bpt_status build_global_avg_pool(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", 3, c->shape, -1.0f, 1.0f, true, &x));
  return bpt_global_avg_pool(g->graph, "op", x, out);
}

/* add and add_relu; with fan_out both inputs are the same node. */
static bpt_status build_add(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *a, *b;
  BPT_CHECK(add_input(g, "a", c->rank, c->shape, -1.0f, 1.0f, true, &a));
  if (c->fan_out)
    b = a;
  else
    BPT_CHECK(add_input(g, "b", c->rank, c->shape, -1.0f, 1.0f, true, &b));
  if (c->op == BPT_OP_ADD_RELU) return bpt_add_relu(g->graph, "op", a, b, out);
  return bpt_add(g->graph, "op", a, b, out);
}

/* add, mul and matmul on the case's main input a and a second operand b: another input (batched) or a
 * parameter, whose shape makes the case broadcast or not. */
static bpt_status build_binary(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *a, *b;
  BPT_CHECK(add_input(g, "a", c->rank, c->shape, -1.0f, 1.0f, true, &a));
  if (c->other_batched)
    BPT_CHECK(add_input(g, "b", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &b));
  else
    BPT_CHECK(add_parameter(g, "b", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &b));
  switch (c->op) {
  case BPT_OP_MUL: return bpt_mul(g->graph, "op", a, b, out);
  case BPT_OP_MATMUL: return bpt_matmul(g->graph, "op", a, b, c->transpose_a, c->transpose_b, out);
  default: return bpt_add(g->graph, "op", a, b, out);
  }
}

/* matmul reading permuted views: a (T, H, D) and b (Tk, H, D) per sample, both permuted to (H, T, D) for
 * Q K^T (transpose_b) or with b to (H, D, Tk), whose rows are the unit step; the permutes are views on every
 * backend, which matmul reads through their strides (strided_views.c). */
static bpt_status build_matmul_of_views(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *a, *b;
  const int64_t heads[4] = {0, 2, 1, 3}, keys_transposed[4] = {0, 2, 3, 1};
  BPT_CHECK(add_input(g, "a", c->rank, c->shape, -1.0f, 1.0f, true, &a));
  BPT_CHECK(add_input(g, "b", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &b));
  BPT_CHECK(bpt_permute(g->graph, "a_heads", a, 4, heads, &a));
  BPT_CHECK(bpt_permute(g->graph, "b_heads", b, 4, c->transpose_b ? heads : keys_transposed, &b));
  return bpt_matmul(g->graph, "op", a, b, 0, c->transpose_b, out);
}

/* Both matmul-of-views cases are Q K^T per head: out[n, h, t, s] = sum_d a[n, t, h, d] b[n, s, h, d], in the
 * leaves' own (T, H, D) layout, so a view read with the wrong strides (or its rows as columns) fails here even
 * where backward agrees with its forward. */
static void matmul_views_reference(const case_graph *g, double *expected) {
  const op_case *c = g->c;
  const int64_t T = c->shape[0], H = c->shape[1], D = c->shape[2], S = c->other_shape[0];
  const float *a = g->leaves[0].values, *b = g->leaves[1].values;
  for (int64_t n = 0; n < c->batch; n++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < S; j++) {
          double sum = 0.0;
          for (int64_t d = 0; d < D; d++)
            sum += (double)a[((n * T + t) * H + h) * D + d] * b[((n * S + j) * H + h) * D + d];
          expected[((n * H + h) * T + t) * S + j] = sum;
        }
}

/* permute over the main input's whole shape (the batch is axis 0), order in to_shape. */
static bpt_status build_permute(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -1.0f, 1.0f, true, &x));
  const int64_t axes[4] = {0, c->to_shape[0], c->to_shape[1], c->to_shape[2]};
  if (!c->twice) return bpt_permute(g->graph, "op", x, c->rank + 1, axes, out);
  bpt_node *first, *second;
  BPT_CHECK(bpt_permute(g->graph, "op", x, c->rank + 1, axes, &first));
  BPT_CHECK(bpt_permute(g->graph, "op2", x, c->rank + 1, axes, &second));
  return bpt_add(g->graph, "sum", first, second, out);
}

static bpt_status build_softmax(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -3.0f, 3.0f, true, &x));
  return bpt_softmax(g->graph, "op", x, c->causal, out);
}

/* Softmax rows of the last axis in double, with the causal mask j <= i + (Tk - Tq) and zeros for empty rows. */
static void softmax_reference(const case_graph *g, double *expected) {
  const op_case *c = g->c;
  const leaf *x = &g->leaves[0];
  const int64_t columns = c->shape[c->rank - 1], rows = c->rank >= 2 ? c->shape[c->rank - 2] : 1;
  for (int64_t r = 0; r < x->count / columns; r++) {
    const float *in = x->values + r * columns;
    double *out = expected + r * columns, top = -INFINITY, sum = 0.0;
    const int64_t visible = c->causal ? r % rows + (columns - rows) + 1 : columns;
    for (int64_t j = 0; j < columns; j++)
      if (j < visible) top = fmax(top, in[j]);
    for (int64_t j = 0; j < columns; j++)
      sum += out[j] = j < visible ? exp(in[j] - top) : 0.0;
    for (int64_t j = 0; j < columns; j++)
      out[j] = sum > 0.0 ? out[j] / sum : 0.0;
  }
}

/* Attention: q the case's main input (Tq, C) per sample, k and v (Tk, C) in other_shape; with twice, q = k = v. */
static bpt_status build_attention(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *q, *k, *v;
  BPT_CHECK(add_input(g, "q", c->rank, c->shape, -1.5f, 1.5f, true, &q));
  if (c->twice) {
    k = v = q;
  } else {
    BPT_CHECK(add_input(g, "k", c->other_rank, c->other_shape, -1.5f, 1.5f, true, &k));
    BPT_CHECK(add_input(g, "v", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &v));
  }
  return bpt_scaled_dot_product_attention(g->graph, "op", q, k, v, c->heads, c->causal, c->probability, out);
}

/* attention on q, k and v sliced from one fused (T, 3C) input: views where the kernels take strided rows (the
 * CPU's), copies elsewhere; the backward of the views adds into the one cleared input gradient. */
static bpt_status build_attention_of_slices(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *qkv, *q, *k, *v;
  const int64_t width = c->shape[1] / 3;
  BPT_CHECK(add_input(g, "qkv", c->rank, c->shape, -1.5f, 1.5f, true, &qkv));
  BPT_CHECK(bpt_slice(g->graph, "q", qkv, 2, 0, width, &q));
  BPT_CHECK(bpt_slice(g->graph, "k", qkv, 2, width, width, &k));
  BPT_CHECK(bpt_slice(g->graph, "v", qkv, 2, 2 * width, width, &v));
  return bpt_scaled_dot_product_attention(g->graph, "op", q, k, v, c->heads, c->causal, c->probability, out);
}

/* kv_cache_attention over a whole sequence in one pass from position 0: the causal attention of q over k and v,
 * so attention_reference checks it; a second pass from a later position is test_transformer's. */
static bpt_status build_kv_cache_attention(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *q, *k, *v, *positions;
  BPT_CHECK(add_input(g, "q", c->rank, c->shape, -1.5f, 1.5f, true, &q));
  BPT_CHECK(add_input(g, "k", c->other_rank, c->other_shape, -1.5f, 1.5f, true, &k));
  BPT_CHECK(add_input(g, "v", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &v));
  BPT_CHECK(add_labels(g, "positions", 1, &positions));
  int32_t *where = (int32_t *)g->leaves[g->leaf_count - 1].values;
  for (int64_t i = 0; i < c->batch * c->shape[0]; i++)
    where[i] = (int32_t)(i % c->shape[0]);
  return bpt_kv_cache_attention(g->graph, "op", q, k, v, positions, c->heads, c->shape[0] + 3, out);
}

/* Attention in double, no dropout: per (n, h, i) the softmax of q_i k_j / sqrt(D) over the visible keys
 * j <= i + (Tk - Tq) (all without causal), then the mix of v; a query that sees no key gives zeros. q, k, v
 * (N, T, C) with head h in columns [h D, (h + 1) D). Returns the log-sum-exp per (n, h, i) in lse when given
 * (-inf for none visible), for the gradient reference. */
static void attention_forward_reference(const float *q, const float *k, const float *v, int64_t batch,
                                        int64_t queries, int64_t keys, int64_t channels, int64_t heads, bool causal,
                                        double *out, double *lse) {
  const int64_t D = channels / heads;
  const double scale = 1.0 / sqrt((double)D);
  double *scores = malloc((size_t)keys * sizeof *scores);
  if (!scores) fail_msg("out of memory");
  for (int64_t n = 0; n < batch; n++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < queries; i++) {
        const int64_t visible = causal ? (i + keys - queries + 1 < 0 ? 0 : i + keys - queries + 1) : keys;
        const float *qi = q + (n * queries + i) * channels + h * D;
        double top = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < visible && j < keys; j++) {
          const float *kj = k + (n * keys + j) * channels + h * D;
          double dot = 0.0;
          for (int64_t d = 0; d < D; d++)
            dot += (double)qi[d] * kj[d];
          scores[j] = dot * scale;
          top = fmax(top, scores[j]);
        }
        double *oi = out + (n * queries + i) * channels + h * D;
        for (int64_t d = 0; d < D; d++)
          oi[d] = 0.0;
        for (int64_t j = 0; j < visible && j < keys; j++) {
          const double p = exp(scores[j] - top);
          sum += p;
          for (int64_t d = 0; d < D; d++)
            oi[d] += p * v[(n * keys + j) * channels + h * D + d];
        }
        for (int64_t d = 0; d < D && sum > 0.0; d++)
          oi[d] /= sum;
        if (lse) lse[(n * heads + h) * queries + i] = sum > 0.0 ? top + log(sum) : -INFINITY;
      }
  free(scores);
}

static void attention_reference(const case_graph *g, double *expected) {
  const op_case *c = g->c;
  const float *q = g->leaves[0].values, *k = c->twice ? q : g->leaves[1].values, *v = c->twice ? q : g->leaves[2].values;
  const int64_t keys = c->twice ? c->shape[0] : c->other_shape[0];
  attention_forward_reference(q, k, v, c->batch, c->shape[0], keys, c->shape[1], c->heads, c->causal, expected, NULL);
}

/* The attention of the q, k and v thirds of the fused leaf, unpacked into contiguous copies. */
static void attention_slices_reference(const case_graph *g, double *expected) {
  const op_case *c = g->c;
  const int64_t T = c->shape[0], C = c->shape[1] / 3, rows = c->batch * T;
  float *parts = malloc((size_t)(3 * rows * C) * sizeof *parts);
  if (!parts) return; /* the comparison then fails on the zeros left in expected */
  for (int64_t r = 0; r < rows; r++)
    for (int part = 0; part < 3; part++)
      memcpy(parts + (part * rows + r) * C, g->leaves[0].values + r * 3 * C + part * C, (size_t)C * sizeof *parts);
  attention_forward_reference(parts, parts + rows * C, parts + 2 * rows * C, c->batch, T, T, C, c->heads, c->causal,
                              expected, NULL);
  free(parts);
}

/* embedding: ids (N) or a sequence's (N, T) from add_labels, drawn in [0, units), and a table (units, C) with C
 * the main shape's last axis. More tokens than rows, so some rows are named twice and their gradients summed. */
static bpt_status build_embedding(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *ids, *table;
  const int64_t table_dims[2] = {c->units, c->shape[c->rank - 1]};
  BPT_CHECK(add_labels(g, "ids", c->units, &ids));
  BPT_CHECK(add_parameter(g, "table", 2, table_dims, -1.0f, 1.0f, true, &table));
  return bpt_embedding(g->graph, "op", ids, table, out);
}

/* slice of the main input; with twice, the next equal-length part too and their sum, so dx has two writers:
 * the first to run backward overwrites it (zeros outside its part), the second adds. */
static bpt_status build_slice(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -1.0f, 1.0f, true, &x));
  const int axis = (int)c->slice[0];
  if (!c->twice) return bpt_slice(g->graph, "op", x, axis, c->slice[1], c->slice[2], out);
  bpt_node *first, *second;
  BPT_CHECK(bpt_slice(g->graph, "op", x, axis, c->slice[1], c->slice[2], &first));
  BPT_CHECK(bpt_slice(g->graph, "op2", x, axis, c->slice[1] + c->slice[2], c->slice[2], &second));
  return bpt_add(g->graph, "sum", first, second, out);
}

/* concat of the main input and a second batched input shaped other_shape; with twice, the main input again at
 * the end, so its gradient is its first part overwritten, then its last part added. */
static bpt_status build_concat(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *inputs[3];
  BPT_CHECK(add_input(g, "a", c->rank, c->shape, -1.0f, 1.0f, true, &inputs[0]));
  BPT_CHECK(add_input(g, "b", c->other_rank, c->other_shape, -1.0f, 1.0f, true, &inputs[1]));
  inputs[2] = inputs[0];
  return bpt_concat(g->graph, "op", c->twice ? 3 : 2, inputs, c->axis, out);
}

static bpt_status build_reshape(case_graph *g, const op_case *c, bpt_node **out) {
  bpt_node *x;
  BPT_CHECK(add_input(g, "x", c->rank, c->shape, -1.0f, 1.0f, true, &x));
  if (c->to_rank == 0) return bpt_flatten(g->graph, "op", x, out);
  return bpt_reshape(g->graph, "op", x, c->to_rank, c->to_shape, out);
}

/* One line per case. Sizes are small (the test runs under ASan) but odd, so vector loops run their tails
 * (16-float AVX-512 rows, 8-bit mask bytes), with batch 1 and fan-out where the op allows. Cases taken over
 * from the CUDA parity table keep its shapes. */
#define SHAPE(...) .shape = {__VA_ARGS__}
// clang-format off
static const op_case op_cases[] = {
    {"input: fed straight to the loss", BPT_OP_INPUT, build_input, .batch = 3, .rank = 2, SHAPE(2, 5)},
    {"parameter: linear's weight and bias", BPT_OP_PARAMETER, build_linear, .batch = 2, .rank = 1, SHAPE(3), .units = 2},
    {"linear 5x7->4", BPT_OP_LINEAR, build_linear, .batch = 5, .rank = 1, SHAPE(7), .units = 4},
    {"linear batch 1, no bias", BPT_OP_LINEAR, build_linear, .batch = 1, .rank = 1, SHAPE(9), .units = 3, .no_bias = true},
    {"linear 17x33->19", BPT_OP_LINEAR, build_linear, .batch = 17, .rank = 1, SHAPE(33), .units = 19},
    {"linear rank-2 input flattened", BPT_OP_LINEAR, build_linear, .batch = 3, .rank = 2, SHAPE(2, 5), .units = 6},
    {"relu 3x37", BPT_OP_RELU, build_unary, .unary = bpt_relu, .batch = 3, .rank = 1, SHAPE(37), .kinks = true, .margin = 0.1f},
    {"relu batch 1, 17 (one mask byte and a bit)", BPT_OP_RELU, build_unary, .unary = bpt_relu, .batch = 1, .rank = 1, SHAPE(17), .kinks = true, .margin = 0.1f},
    {"relu fan-out 2x3x5", BPT_OP_RELU, build_unary, .unary = bpt_relu, .batch = 2, .rank = 2, SHAPE(3, 5), .fan_out = true, .kinks = true, .margin = 0.1f},
    {"relu 10007 (parity)", BPT_OP_RELU, build_unary, .unary = bpt_relu, .batch = 1, .rank = 1, SHAPE(10007), .kinks = true, .margin = 0.1f},
    {"leaky_relu 0.1, 4x33", BPT_OP_LEAKY_RELU, build_leaky_relu, .batch = 4, .rank = 1, SHAPE(33), .slope = 0.1f, .kinks = true, .margin = 0.1f},
    {"leaky_relu -0.5 fan-out, 10007 (parity)", BPT_OP_LEAKY_RELU, build_leaky_relu, .batch = 1, .rank = 1, SHAPE(10007), .slope = -0.5f, .fan_out = true, .kinks = true, .margin = 0.1f},
    {"sigmoid 5x7", BPT_OP_SIGMOID, build_unary, .unary = bpt_sigmoid, .batch = 5, .rank = 1, SHAPE(7)},
    {"sigmoid fan-out, 10007 (parity)", BPT_OP_SIGMOID, build_unary, .unary = bpt_sigmoid, .batch = 1, .rank = 1, SHAPE(10007), .fan_out = true},
    {"tanh batch 1, 2x9", BPT_OP_TANH, build_unary, .unary = bpt_tanh, .batch = 1, .rank = 2, SHAPE(2, 9)},
    {"tanh 10007 (parity)", BPT_OP_TANH, build_unary, .unary = bpt_tanh, .batch = 1, .rank = 1, SHAPE(10007)},
    {"gelu 3x37", BPT_OP_GELU, build_unary, .unary = bpt_gelu, .batch = 3, .rank = 1, SHAPE(37)},
    {"gelu_tanh 3x37", BPT_OP_GELU_TANH, build_unary, .unary = bpt_gelu_tanh, .batch = 3, .rank = 1, SHAPE(37)},
    {"gelu_tanh fan-out, sequence 2x5x19", BPT_OP_GELU_TANH, build_unary, .unary = bpt_gelu_tanh, .batch = 2, .rank = 2, SHAPE(5, 19), .sequence = true, .fan_out = true},
    {"gelu_tanh 40009 (threads, blocks)", BPT_OP_GELU_TANH, build_unary, .unary = bpt_gelu_tanh, .batch = 1, .rank = 1, SHAPE(40009)},
    {"silu 3x37", BPT_OP_SILU, build_unary, .unary = bpt_silu, .batch = 3, .rank = 1, SHAPE(37)},
    {"silu fan-out, sequence 2x5x19", BPT_OP_SILU, build_unary, .unary = bpt_silu, .batch = 2, .rank = 2, SHAPE(5, 19), .sequence = true, .fan_out = true},
    {"silu 40009 (threads, blocks)", BPT_OP_SILU, build_unary, .unary = bpt_silu, .batch = 1, .rank = 1, SHAPE(40009)},
    {"softmax_cross_entropy 8x10", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 8, .rank = 1, SHAPE(10)},
    {"softmax_cross_entropy batch 1, 3 classes", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 1, .rank = 1, SHAPE(3)},
    {"softmax_cross_entropy 128x10 (parity)", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 128, .rank = 1, SHAPE(10)},
    {"softmax_cross_entropy 33x1000 (parity)", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 33, .rank = 1, SHAPE(1000)},
    {"softmax_cross_entropy sequence 2x3x7 (mean over tokens)", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 2, .rank = 2, SHAPE(3, 7), .sequence = true},
    {"softmax_cross_entropy sequence 3x4x7, ignore_index -100 on every third token", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 3, .rank = 2, SHAPE(4, 7), .sequence = true, .ignore = true, .ignore_index = -100},
    {"softmax_cross_entropy 9x5, ignore_index 2 (a class id)", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 9, .rank = 1, SHAPE(5), .ignore = true, .ignore_index = 2},
    {"softmax_cross_entropy 6x11, label smoothing 0.1", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 6, .rank = 1, SHAPE(11), .smoothing = 0.1f},
    {"softmax_cross_entropy sequence 2x5x6, ignore -1 and smoothing 0.25", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 2, .rank = 2, SHAPE(5, 6), .sequence = true, .ignore = true, .ignore_index = -1, .smoothing = 0.25f},
    {"softmax_cross_entropy 33x1000, ignore and smoothing 0.1 (parity)", BPT_OP_SOFTMAX_CROSS_ENTROPY, build_softmax_cross_entropy, .batch = 33, .rank = 1, SHAPE(1000), .ignore = true, .ignore_index = -100, .smoothing = 0.1f},
    {"mse 4x9 (both inputs differentiable)", BPT_OP_MSE, build_mse, .batch = 4, .rank = 1, SHAPE(9)},
    {"mse 50000 (parity)", BPT_OP_MSE, build_mse, .batch = 2, .rank = 1, SHAPE(25000)},
    {"binary_stochastic identity", BPT_OP_BINARY_STOCHASTIC, build_binary_stochastic, .batch = 3, .rank = 1, SHAPE(41), .check = CHECK_STRAIGHT_THROUGH},
    {"binary_stochastic sigmoid-adjusted", BPT_OP_BINARY_STOCHASTIC, build_binary_stochastic, .batch = 2, .rank = 1, SHAPE(33), .estimator = BPT_STRAIGHT_THROUGH_SIGMOID, .check = CHECK_STRAIGHT_THROUGH},
    {"binary_stochastic deterministic", BPT_OP_BINARY_STOCHASTIC, build_binary_stochastic, .batch = 1, .rank = 1, SHAPE(19), .deterministic = true, .check = CHECK_STRAIGHT_THROUGH},
    {"conv2d 2x4x9x7->8 k3 s1 p1 (parity)", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(4, 9, 7), .out_channels = 8, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .groups = 1},
    {"conv2d 3x3x16x16->16 k3 s2 p1 (parity)", BPT_OP_CONV2D, build_conv2d, .batch = 3, SHAPE(3, 16, 16), .out_channels = 16, .kernel = 3, .stride = 2, .padding = 1, .dilation = 1, .groups = 1},
    {"conv2d 2x6x11x11->4 k3 d2 g2 (parity)", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(6, 11, 11), .out_channels = 4, .kernel = 3, .stride = 1, .padding = 0, .dilation = 2, .groups = 2},
    /* The 3x3 kernels' shapes (conv2d_direct.h): "cpu" runs its AVX2 or AVX-512 kernels, the portable level the
     * SGEMM lowerings. Winograd on planes of 14 or more; stride 2 direct (data gradient on inputs over 14x14);
     * Winograd with channels in lanes on a small plane (output channels in 64s). */
    {"conv2d 2x16x14x14->16 k3 s1 p1 (Winograd)", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(16, 14, 14), .out_channels = 16, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .groups = 1},
    {"conv2d 2x16x17x17->32 k3 s2 p1 (direct)", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(16, 17, 17), .out_channels = 32, .kernel = 3, .stride = 2, .padding = 1, .dilation = 1, .groups = 1},
    {"conv2d 2x16x7x7->64 k3 s1 p1 (small plane)", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(16, 7, 7), .out_channels = 64, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .groups = 1},
    {"conv2d 4x16x8x8->32 k1 (parity)", BPT_OP_CONV2D, build_conv2d, .batch = 4, SHAPE(16, 8, 8), .out_channels = 32, .kernel = 1, .stride = 1, .padding = 0, .dilation = 1, .groups = 1},
    {"conv2d batch 1, 1x5x5->3 k2 no bias", BPT_OP_CONV2D, build_conv2d, .batch = 1, SHAPE(1, 5, 5), .out_channels = 3, .kernel = 2, .stride = 1, .padding = 0, .dilation = 1, .groups = 1, .no_bias = true},
    {"conv2d depthwise 2x3x6x5 k3 p1 g3", BPT_OP_CONV2D, build_conv2d, .batch = 2, SHAPE(3, 6, 5), .out_channels = 3, .kernel = 3, .stride = 1, .padding = 1, .dilation = 1, .groups = 3},
    {"batch_norm 2-D 8x12x7x7 (parity)", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 8, .rank = 3, SHAPE(12, 7, 7)},
    {"batch_norm 2-D batch 1, 3x5x5", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 1, .rank = 3, SHAPE(3, 5, 5)},
    {"batch_norm 1-D 6x5", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 6, .rank = 1, SHAPE(5)},
    {"batch_norm evaluation 8x12x7x7 (parity)", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 8, .rank = 3, SHAPE(12, 7, 7), .evaluation = true, .check = CHECK_EVALUATION_FORMULA},
    {"batch_norm_relu 2-D 4x3x5x5", BPT_OP_BATCH_NORM_RELU, build_batch_norm, .batch = 4, .rank = 3, SHAPE(3, 5, 5), .kinks = true, .step = 2e-3},
    {"batch_norm_relu 2-D 2x2x17 rows", BPT_OP_BATCH_NORM_RELU, build_batch_norm, .batch = 2, .rank = 3, SHAPE(2, 1, 17), .kinks = true, .step = 2e-3},
    {"batch_norm_relu 1-D 7x6", BPT_OP_BATCH_NORM_RELU, build_batch_norm, .batch = 7, .rank = 1, SHAPE(6), .kinks = true, .step = 2e-3},
    {"batch_norm_relu evaluation 3x4x3x3", BPT_OP_BATCH_NORM_RELU, build_batch_norm, .batch = 3, .rank = 3, SHAPE(4, 3, 3), .evaluation = true, .check = CHECK_EVALUATION_FORMULA},
    {"layer_norm 5x37", BPT_OP_LAYER_NORM, build_norm, .batch = 5, .rank = 1, SHAPE(37)},
    {"layer_norm sequence 2x3x33", BPT_OP_LAYER_NORM, build_norm, .batch = 2, .rank = 2, SHAPE(3, 33), .sequence = true},
    {"layer_norm fan-out, no beta, batch 1, 4x17 rows", BPT_OP_LAYER_NORM, build_norm, .batch = 1, .rank = 2, SHAPE(4, 17), .no_bias = true, .fan_out = true},
    {"layer_norm twice, shared gamma and beta (gradients accumulate), 3x2x9", BPT_OP_LAYER_NORM, build_norm, .batch = 3, .rank = 2, SHAPE(2, 9), .twice = true},
    {"layer_norm sequence 3x80x150 (threads)", BPT_OP_LAYER_NORM, build_norm, .batch = 3, .rank = 2, SHAPE(80, 150), .sequence = true},
    {"rms_norm 5x37", BPT_OP_RMS_NORM, build_norm, .batch = 5, .rank = 1, SHAPE(37)},
    {"rms_norm sequence 2x3x33", BPT_OP_RMS_NORM, build_norm, .batch = 2, .rank = 2, SHAPE(3, 33), .sequence = true},
    {"rms_norm fan-out, batch 1, 4x17 rows", BPT_OP_RMS_NORM, build_norm, .batch = 1, .rank = 2, SHAPE(4, 17), .fan_out = true},
    {"rms_norm twice, shared gamma (gradients accumulate), 3x2x9", BPT_OP_RMS_NORM, build_norm, .batch = 3, .rank = 2, SHAPE(2, 9), .twice = true},
    {"rms_norm sequence 3x80x150 (threads)", BPT_OP_RMS_NORM, build_norm, .batch = 3, .rank = 2, SHAPE(80, 150), .sequence = true},
    {"max_pool2d k2 s2 p0 3x5x12x9 (parity)", BPT_OP_MAX_POOL2D, build_pool2d, .batch = 3, SHAPE(5, 12, 9), .kernel = 2, .stride = 2, .padding = 0, .spacing = 0.01f, .step = 2.5e-3},
    {"max_pool2d k3 s1 p1 3x5x12x9 (parity)", BPT_OP_MAX_POOL2D, build_pool2d, .batch = 3, SHAPE(5, 12, 9), .kernel = 3, .stride = 1, .padding = 1, .spacing = 0.01f, .step = 2.5e-3},
    {"max_pool2d batch 1, k3 s2 p1 2x7x7", BPT_OP_MAX_POOL2D, build_pool2d, .batch = 1, SHAPE(2, 7, 7), .kernel = 3, .stride = 2, .padding = 1, .spacing = 0.02f, .step = 5e-3},
    {"max_pool2d k3 s1 p1 4x16x16x16 (planes on several threads)", BPT_OP_MAX_POOL2D, build_pool2d, .batch = 4, SHAPE(16, 16, 16), .kernel = 3, .stride = 1, .padding = 1, .spacing = 0.01f, .step = 2.5e-3},
    {"avg_pool2d k3 s2 p1 3x5x12x9 (parity)", BPT_OP_AVG_POOL2D, build_pool2d, .batch = 3, SHAPE(5, 12, 9), .kernel = 3, .stride = 2, .padding = 1},
    {"avg_pool2d k2 s2 p0 3x5x12x9 (parity)", BPT_OP_AVG_POOL2D, build_pool2d, .batch = 3, SHAPE(5, 12, 9), .kernel = 2, .stride = 2, .padding = 0},
    {"global_avg_pool 3x4x5x3", BPT_OP_GLOBAL_AVG_POOL, build_global_avg_pool, .batch = 3, SHAPE(4, 5, 3)},
    {"global_avg_pool batch 1, 2x1x1", BPT_OP_GLOBAL_AVG_POOL, build_global_avg_pool, .batch = 1, SHAPE(2, 1, 1)},
    {"add 3x2x7", BPT_OP_ADD, build_add, .batch = 3, .rank = 2, SHAPE(2, 7)},
    {"add fan-out (a + a)", BPT_OP_ADD, build_add, .batch = 2, .rank = 1, SHAPE(9), .fan_out = true},
    {"add 70001 (parity add_scaled)", BPT_OP_ADD, build_add, .batch = 1, .rank = 1, SHAPE(70001)},
    {"add broadcast: sequence 2x3x5 + bias (5)", BPT_OP_ADD, build_binary, .batch = 2, .rank = 2, SHAPE(3, 5), .sequence = true, .other_rank = 1, .other_shape = {5}},
    {"add broadcast: 3x4x6 + position table (4, 6)", BPT_OP_ADD, build_binary, .batch = 3, .rank = 2, SHAPE(4, 6), .other_rank = 2, .other_shape = {4, 6}},
    {"add broadcast: 2x3x1x7 + 2x3x5x1 (both repeated)", BPT_OP_ADD, build_binary, .batch = 2, .rank = 3, SHAPE(3, 1, 7), .other_batched = true, .other_rank = 3, .other_shape = {3, 5, 1}},
    {"add broadcast fan-out: 2x3x1x7 + 2x3x5x1, a's repeated gradient added twice", BPT_OP_ADD, build_binary, .batch = 2, .rank = 3, SHAPE(3, 1, 7), .other_batched = true, .other_rank = 3, .other_shape = {3, 5, 1}, .fan_out = true},
    {"add broadcast: 3x2x37 + (1, 1, 37) against the batch", BPT_OP_ADD, build_binary, .batch = 3, .rank = 2, SHAPE(2, 37), .other_rank = 3, .other_shape = {1, 1, 37}},
    {"mul same shape 3x2x7", BPT_OP_MUL, build_binary, .batch = 3, .rank = 2, SHAPE(2, 7), .other_batched = true, .other_rank = 2, .other_shape = {2, 7}},
    {"mul broadcast: 2x4x5 * per-row scale 2x4x1", BPT_OP_MUL, build_binary, .batch = 2, .rank = 2, SHAPE(4, 5), .other_batched = true, .other_rank = 2, .other_shape = {4, 1}},
    {"mul broadcast: 2x3x5x7 * per-channel scale (3, 1, 1)", BPT_OP_MUL, build_binary, .batch = 2, .rank = 3, SHAPE(3, 5, 7), .other_rank = 3, .other_shape = {3, 1, 1}},
    {"mul broadcast: sequence 2x3x33 * gain (33)", BPT_OP_MUL, build_binary, .batch = 2, .rank = 2, SHAPE(3, 33), .sequence = true, .other_rank = 1, .other_shape = {33}},
    {"matmul heads 2x3x5x4 . 2x3x6x4^T (Q K^T)", BPT_OP_MATMUL, build_binary, .batch = 2, .rank = 3, SHAPE(3, 5, 4), .other_batched = true, .other_rank = 3, .other_shape = {3, 6, 4}, .transpose_b = true},
    {"matmul 2x3x5x6 . 2x3x6x4 (P V)", BPT_OP_MATMUL, build_binary, .batch = 2, .rank = 3, SHAPE(3, 5, 6), .other_batched = true, .other_rank = 3, .other_shape = {3, 6, 4}},
    {"matmul shared weight: 3x4x5 . (5, 7)", BPT_OP_MATMUL, build_binary, .batch = 3, .rank = 2, SHAPE(4, 5), .other_rank = 2, .other_shape = {5, 7}},
    {"matmul transposed both: (3x5x4)^T . ((6, 5))^T", BPT_OP_MATMUL, build_binary, .batch = 3, .rank = 2, SHAPE(5, 4), .other_rank = 2, .other_shape = {6, 5}, .transpose_a = true, .transpose_b = true},
    {"matmul of permuted views 2x(5x3x4 -> 3x5x4) . (6x3x4 -> 3x6x4)^T", BPT_OP_MATMUL, build_matmul_of_views, .batch = 2, .rank = 3, SHAPE(5, 3, 4), .other_rank = 3, .other_shape = {6, 3, 4}, .transpose_b = true, .reference = matmul_views_reference},
    {"matmul of permuted views 2x(5x3x4 -> 3x5x4) . (6x3x4 -> 3x4x6, rows unit-step)", BPT_OP_MATMUL, build_matmul_of_views, .batch = 2, .rank = 3, SHAPE(5, 3, 4), .other_rank = 3, .other_shape = {6, 3, 4}, .reference = matmul_views_reference},
    {"matmul batch rows: 5x9 . (9, 3)", BPT_OP_MATMUL, build_binary, .batch = 5, .rank = 1, SHAPE(9), .other_rank = 2, .other_shape = {9, 3}},
    {"linear per token: sequence 3x4x5 -> 6", BPT_OP_LINEAR, build_linear, .batch = 3, .rank = 2, SHAPE(4, 5), .sequence = true, .units = 6},
    {"linear per token, no bias: sequence 2x3x2x3 -> 4", BPT_OP_LINEAR, build_linear, .batch = 2, .rank = 3, SHAPE(3, 2, 3), .sequence = true, .units = 4, .no_bias = true},
    {"add_relu 2x3x4x5", BPT_OP_ADD_RELU, build_add, .batch = 2, .rank = 3, SHAPE(3, 4, 5), .kinks = true},
    {"add_relu fan-out batch 1, 33", BPT_OP_ADD_RELU, build_add, .batch = 1, .rank = 1, SHAPE(33), .fan_out = true, .kinks = true, .margin = 0.1f},
    {"add_relu 2x2500 (16-bit stage chunks, a ragged last one)", BPT_OP_ADD_RELU, build_add, .batch = 2, .rank = 1, SHAPE(2500), .kinks = true, .margin = 0.1f},
    {"permute heads 2x3x4x5 -> 2x4x3x5", BPT_OP_PERMUTE, build_permute, .batch = 2, .rank = 3, SHAPE(3, 4, 5), .to_shape = {2, 1, 3}},
    {"permute last axis moved 3x4x7 -> 3x7x4", BPT_OP_PERMUTE, build_permute, .batch = 3, .rank = 2, SHAPE(4, 7), .to_shape = {2, 1}},
    {"permute cycle 2x3x5x6 -> 2x6x3x5, twice (dx accumulates)", BPT_OP_PERMUTE, build_permute, .batch = 2, .rank = 3, SHAPE(3, 5, 6), .to_shape = {3, 1, 2}, .twice = true},
    {"embedding sequence 3x5 ids -> 3x5x6, 7 rows (repeated ids summed)", BPT_OP_EMBEDDING, build_embedding, .batch = 3, .rank = 2, SHAPE(5, 6), .sequence = true, .units = 7},
    {"embedding plain 4 ids -> 4x19, 3 rows", BPT_OP_EMBEDDING, build_embedding, .batch = 4, .rank = 1, SHAPE(19), .units = 3},
    {"embedding sequence 2x3 ids -> 2x3x37, 50 rows (most untouched)", BPT_OP_EMBEDDING, build_embedding, .batch = 2, .rank = 2, SHAPE(3, 37), .sequence = true, .units = 50},
    {"slice qkv's k: sequence 2x3x12, axis 2 [4, 8)", BPT_OP_SLICE, build_slice, .batch = 2, .rank = 2, SHAPE(3, 12), .sequence = true, .slice = {2, 4, 4}},
    {"slice the sequence axis: 3x5x4, axis 1 [1, 4)", BPT_OP_SLICE, build_slice, .batch = 3, .rank = 2, SHAPE(5, 4), .sequence = true, .slice = {1, 1, 3}},
    {"slice a middle axis twice: 2x3x7x5, axis 2 [1, 3) + [3, 5) (dx overwritten, then added)", BPT_OP_SLICE, build_slice, .batch = 2, .rank = 3, SHAPE(3, 7, 5), .slice = {2, 1, 2}, .twice = true},
    {"slice batch 1, last axis 1x37 [0, 17)", BPT_OP_SLICE, build_slice, .batch = 1, .rank = 1, SHAPE(37), .slice = {1, 0, 17}},
    {"concat heads: sequence 2x3x4 + 2x3x5 on axis 2", BPT_OP_CONCAT, build_concat, .batch = 2, .rank = 2, SHAPE(3, 4), .sequence = true, .other_rank = 2, .other_shape = {3, 5}, .axis = 2},
    {"concat the sequence axis: 3x2x6 + 3x4x6 on axis 1", BPT_OP_CONCAT, build_concat, .batch = 3, .rank = 2, SHAPE(2, 6), .sequence = true, .other_rank = 2, .other_shape = {4, 6}, .axis = 1},
    {"concat a, b, a on a middle axis 2x3x2x5 + 2x3x1x5 (a's gradient: two parts)", BPT_OP_CONCAT, build_concat, .batch = 2, .rank = 3, SHAPE(3, 2, 5), .other_rank = 3, .other_shape = {3, 1, 5}, .axis = 2, .twice = true},
    {"concat a, b, a 2x1100 + 2x300 (blocks past the 16-bit stage, a's gradient: two parts)", BPT_OP_CONCAT, build_concat, .batch = 2, .rank = 1, SHAPE(1100), .other_rank = 1, .other_shape = {300}, .axis = 1, .twice = true},
    {"reshape 2x3x4 -> 6x4", BPT_OP_RESHAPE, build_reshape, .batch = 2, .rank = 3, SHAPE(2, 3, 4), .to_rank = 2, .to_shape = {6, 4}},
    {"reshape flatten batch 1, 3x5", BPT_OP_RESHAPE, build_reshape, .batch = 1, .rank = 2, SHAPE(3, 5), .to_rank = 0},
    {"dropout 0.3, 4x37", BPT_OP_DROPOUT, build_dropout, .batch = 4, .rank = 1, SHAPE(37), .probability = 0.3f, .check = CHECK_DROPOUT_MASK},
    {"dropout 0.5 batch 1, 2x3x17", BPT_OP_DROPOUT, build_dropout, .batch = 1, .rank = 3, SHAPE(2, 3, 17), .probability = 0.5f, .check = CHECK_DROPOUT_MASK},
    {"dropout evaluation 3x11", BPT_OP_DROPOUT, build_dropout, .batch = 3, .rank = 1, SHAPE(11), .probability = 0.4f, .evaluation = true},
    {"kv_cache_attention 2x6x8 from position 0, 2 heads", BPT_OP_KV_CACHE_ATTENTION, build_kv_cache_attention, .batch = 2, .rank = 2, SHAPE(6, 8), .sequence = true, .other_rank = 2, .other_shape = {6, 8}, .heads = 2, .causal = true, .reference = attention_reference, .check = CHECK_FORWARD_ONLY},
    {"attention 2x5x8, 2 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(5, 8), .sequence = true, .other_rank = 2, .other_shape = {5, 8}, .heads = 2, .reference = attention_reference},
    {"attention causal on slices of a fused 2x6x24 qkv, 2 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention_of_slices, .batch = 2, .rank = 2, SHAPE(6, 24), .sequence = true, .heads = 2, .causal = true, .reference = attention_slices_reference},
    {"attention causal 2x6x8, 2 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(6, 8), .sequence = true, .other_rank = 2, .other_shape = {6, 8}, .heads = 2, .causal = true, .reference = attention_reference},
    {"attention causal Tq 5 < Tk 7, 1 head of 4", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(5, 4), .sequence = true, .other_rank = 2, .other_shape = {7, 4}, .heads = 1, .causal = true, .reference = attention_reference},
    {"attention causal Tq 6 > Tk 4 (queries 0, 1 see no key), 3 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(6, 9), .sequence = true, .other_rank = 2, .other_shape = {4, 9}, .heads = 3, .causal = true, .reference = attention_reference},
    {"attention non-causal Tq 3 != Tk 6, batch 1", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 1, .rank = 2, SHAPE(3, 6), .sequence = true, .other_rank = 2, .other_shape = {6, 6}, .heads = 2, .reference = attention_reference},
    {"attention self (q = k = v) causal 2x4x6, 3 heads (gradients accumulate)", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(4, 6), .sequence = true, .heads = 3, .causal = true, .twice = true, .reference = attention_reference},
    {"attention causal blocks: Tq 150, Tk 200, 2 heads of 4", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 1, .rank = 2, SHAPE(150, 8), .sequence = true, .other_rank = 2, .other_shape = {200, 8}, .heads = 2, .causal = true, .reference = attention_reference},
    {"attention dropout 0.3, 2x5x8, 2 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(5, 8), .sequence = true, .other_rank = 2, .other_shape = {5, 8}, .heads = 2, .probability = 0.3f, .reference = attention_reference, .reference_differs = true},
    {"attention dropout 0.3 causal deterministic (skipped)", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(5, 8), .sequence = true, .other_rank = 2, .other_shape = {5, 8}, .heads = 2, .causal = true, .probability = 0.3f, .deterministic = true, .reference = attention_reference},
    {"softmax 3x37", BPT_OP_SOFTMAX, build_softmax, .batch = 3, .rank = 1, SHAPE(37), .reference = softmax_reference},
    {"softmax fan-out sequence 2x5x7", BPT_OP_SOFTMAX, build_softmax, .batch = 2, .rank = 2, SHAPE(5, 7), .sequence = true, .fan_out = true, .reference = softmax_reference},
    {"softmax causal 2x3x5x5", BPT_OP_SOFTMAX, build_softmax, .batch = 2, .rank = 3, SHAPE(3, 5, 5), .causal = true, .reference = softmax_reference},
    {"softmax causal bottom-right 2x3x6x4 (rows 0 and 1 fully masked)", BPT_OP_SOFTMAX, build_softmax, .batch = 2, .rank = 3, SHAPE(3, 6, 4), .causal = true, .reference = softmax_reference},
    {"softmax causal 2x3x9 (more columns than rows)", BPT_OP_SOFTMAX, build_softmax, .batch = 2, .rank = 2, SHAPE(3, 9), .causal = true, .reference = softmax_reference},
    {"softmax 2x20011 (parity, threads)", BPT_OP_SOFTMAX, build_softmax, .batch = 2, .rank = 2, SHAPE(7, 2859), .reference = softmax_reference},
    {"softmax of a slice 2x3x2x6 (rows read in place)", BPT_OP_SOFTMAX, build_of_slice, .batch = 2, .rank = 3, SHAPE(3, 2, 12)},
    {"softmax causal of a slice 2x5x10", BPT_OP_SOFTMAX, build_of_slice, .batch = 2, .rank = 2, SHAPE(5, 20), .causal = true},
    {"softmax of a permute (N, T, H, D) -> (N, H, T, D), 2x5x3x4", BPT_OP_SOFTMAX, build_softmax_of_permute, .batch = 2, .rank = 3, SHAPE(5, 3, 4)},
    {"layer_norm of a slice 2x4x9", BPT_OP_LAYER_NORM, build_of_slice, .batch = 2, .rank = 2, SHAPE(4, 18)},
    {"rms_norm of a slice 2x4x9", BPT_OP_RMS_NORM, build_of_slice, .batch = 2, .rank = 2, SHAPE(4, 18)},
    {"silu of a slice 3x2x11", BPT_OP_SILU, build_of_slice, .unary = bpt_silu, .batch = 3, .rank = 2, SHAPE(2, 22)},
    {"gelu_tanh of a slice 3x2x11", BPT_OP_GELU_TANH, build_of_slice, .unary = bpt_gelu_tanh, .batch = 3, .rank = 2, SHAPE(2, 22)},
    {"gelu of a slice 3x2x11", BPT_OP_GELU, build_of_slice, .unary = bpt_gelu, .batch = 3, .rank = 2, SHAPE(2, 22)},
    {"sigmoid of a slice 3x2x11", BPT_OP_SIGMOID, build_of_slice, .unary = bpt_sigmoid, .batch = 3, .rank = 2, SHAPE(2, 22)},
    {"tanh of a slice 2x3x1100 (rows past the 16-bit stage)", BPT_OP_TANH, build_of_slice, .unary = bpt_tanh, .batch = 2, .rank = 2, SHAPE(3, 2200)},
    {"leaky_relu 0.2 of a slice 3x2x11", BPT_OP_LEAKY_RELU, build_of_slice, .batch = 3, .rank = 2, SHAPE(2, 22), .slope = 0.2f, .kinks = true, .margin = 0.1f},
    {"mul of a fused projection's halves (SwiGLU) 2x5x7", BPT_OP_MUL, build_mul_of_halves, .batch = 2, .rank = 2, SHAPE(5, 14)},
    {"add of a fused projection's halves 2x5x7 (one shape, strided: on the kernels)", BPT_OP_ADD, build_mul_of_halves, .batch = 2, .rank = 2, SHAPE(5, 14)},
    /* Under 16-bit storage: chunks past the 1024-value stage, gradients added into a stored bf16 value (fan-out),
     * batch norm's staging on several threads. */
    {"gelu 2x3000 (16-bit stage chunks)", BPT_OP_GELU, build_unary, .unary = bpt_gelu, .batch = 2, .rank = 1, SHAPE(3000)},
    {"batch_norm fan-out 4x3x5x5", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 4, .rank = 3, SHAPE(3, 5, 5), .fan_out = true},
    {"batch_norm_relu fan-out 4x3x5x5", BPT_OP_BATCH_NORM_RELU, build_batch_norm, .batch = 4, .rank = 3, SHAPE(3, 5, 5), .kinks = true, .step = 2e-3, .fan_out = true},
    {"batch_norm 8x16x17x17 (threads)", BPT_OP_BATCH_NORM, build_batch_norm, .batch = 8, .rank = 3, SHAPE(16, 17, 17)},
    {"attention fan-out 2x5x8, 2 heads", BPT_OP_SCALED_DOT_PRODUCT_ATTENTION, build_attention, .batch = 2, .rank = 2, SHAPE(5, 8), .sequence = true, .other_rank = 2, .other_shape = {5, 8}, .heads = 2, .fan_out = true, .reference = attention_reference},
};
// clang-format on
#undef SHAPE
enum { OP_CASE_COUNT = sizeof op_cases / sizeof op_cases[0] };

/* ---- running one op case on one backend ---- */

static void case_graph_destroy(case_graph *g) {
  for (int i = 0; i < g->leaf_count; i++) {
    free(g->leaves[i].values);
    bpt_tensor_destroy(g->leaves[i].tensor);
  }
  free(g->parameters);
  bpt_graph_destroy(g->graph);
  memset(g, 0, sizeof *g);
}

static bpt_status set_leaf_input(case_graph *g, leaf *l) { return bpt_graph_set_input(g->graph, l->node, l->tensor); }

static bpt_status write_parameters(case_graph *g) {
  if (g->parameter_count == 0) return BPT_OK;
  for (int i = 0; i < g->leaf_count; i++) {
    const leaf *l = &g->leaves[i];
    if (!l->is_input) memcpy(g->parameters + l->packed_offset, l->values, (size_t)l->count * sizeof(float));
  }
  return bpt_graph_write_parameters(g->graph, g->parameters, g->parameter_count);
}

/* Builds, compiles and feeds the case's graph. Returns the first failing status (with the context's message). */
static bpt_status case_graph_create(case_graph *g, bpt_context *context, const op_case *c, int case_index,
                                    case_storage storage) {
  memset(g, 0, sizeof *g);
  g->context = context;
  g->c = c;
  test_random_seed(&g->random, 1000 + (uint64_t)case_index);
  BPT_CHECK(bpt_graph_create(context, &g->graph));
  BPT_CHECK(c->build(g, c, &g->op_output));
  const bool is_loss = c->op == BPT_OP_MSE || c->op == BPT_OP_SOFTMAX_CROSS_ENTROPY;
  if (is_loss) {
    g->loss = g->op_output;
  } else {
    g->prediction = g->op_output;
    if (c->fan_out) BPT_CHECK(bpt_add(g->graph, "fan_out", g->op_output, g->leaves[0].node, &g->prediction));
    if (storage != STORAGE_F32 && g->prediction->rank > 0) {
      /* A reader that takes bf16 storage (linear, over the last axis), so that the op's output can be stored as
       * bf16 too: the MSE reads f32. */
      bpt_node *weight, *bias;
      const int64_t dims[2] = {3, bpt_node_features(g->prediction)};
      BPT_CHECK(add_parameter(g, "reader", 2, dims, -1.0f, 1.0f, true, &weight));
      BPT_CHECK(add_parameter(g, "reader_bias", 1, dims, -1.0f, 1.0f, true, &bias));
      BPT_CHECK(bpt_linear(g->graph, "read", g->prediction, weight, bias, &g->prediction));
    }
    BPT_CHECK(add_input(g, "target", g->prediction->rank - 1, g->prediction->dims + 1, -1.0f, 1.0f, false, &g->target));
    g->target_leaf = &g->leaves[g->leaf_count - 1];
    BPT_CHECK(bpt_mse_loss(g->graph, "loss", g->prediction, g->target, &g->loss));
  }
  bpt_precision_options precision = bpt_precision_options_default();
  precision.keep_all_values = 1; /* the op's output stays readable after forward, for kink detection */
  if (storage != STORAGE_F32) {
    precision.compute_dtype = BPT_DTYPE_BF16;
    precision.store_activations_16bit = storage == STORAGE_BF16 || storage == STORAGE_BF16_SHARED;
  }
  BPT_CHECK(bpt_graph_set_precision(g->graph, &precision));
  /* Values with several readers stay f32 (storage.c), unless SHARED: each reader then rounds its part of the
   * gradient on neither path, and the two agree to f32 round-off. */
  if (storage != STORAGE_F32) g->graph->precision->single_reader_storage = storage != STORAGE_BF16_SHARED;
  BPT_CHECK(bpt_graph_compile(g->graph, g->loss, c->batch));
  if (c->evaluation) BPT_CHECK(bpt_graph_set_training(g->graph, 0));
  if (c->deterministic) BPT_CHECK(bpt_graph_set_deterministic(g->graph, 1));
  g->parameter_count = bpt_graph_parameter_count(g->graph);
  int64_t packed = 0;
  for (int p = 0; p < g->graph->parameter_count; p++) {
    for (int i = 0; i < g->leaf_count; i++)
      if (g->leaves[i].node == g->graph->parameters[p]) g->leaves[i].packed_offset = packed;
    packed += bpt_node_inner_count(g->graph->parameters[p]);
  }
  if (g->parameter_count) {
    g->parameters = malloc((size_t)g->parameter_count * sizeof(float));
    if (!g->parameters) return BPT_ERR_OUT_OF_MEMORY;
    BPT_CHECK(bpt_graph_read_parameters(g->graph, g->parameters, g->parameter_count));
    BPT_CHECK(write_parameters(g));
  }
  for (int i = 0; i < g->leaf_count; i++) {
    leaf *l = &g->leaves[i];
    if (!l->is_input) continue;
    const bpt_node *node = l->node;
    int64_t dims[BPT_MAX_RANK];
    dims[0] = c->batch;
    for (int d = 1; d < node->rank; d++)
      dims[d] = node->dims[d];
    BPT_CHECK(bpt_tensor_create(context, l->labels ? BPT_DTYPE_I32 : BPT_DTYPE_F32, node->rank, dims, &l->tensor));
    memcpy(bpt_tensor_data(l->tensor), l->values, (size_t)l->count * sizeof(float));
    BPT_CHECK(set_leaf_input(g, l));
  }
  return BPT_OK;
}

/* Elements of a node for the case's batch (bpt_node_count() knows the batch only once forward ran). */
static int64_t node_elements(const case_graph *g, const bpt_node *node) {
  return bpt_node_inner_count(node) * (node->batched ? g->c->batch : 1);
}

static bpt_status download_floats(bpt_graph *graph, const void *device, int64_t count, float *host) {
  bpt_backend *backend = graph->backend;
  return backend->vtable->download(backend, host, device, (size_t)count * sizeof(float));
}

/* A node's value or gradient as f32, whatever its storage. */
static bpt_status download_node(const bpt_node *node, const void *device, int64_t count, float *host) {
  return bpt_node_download_f32(node, device, count, host);
}

/* NaN in every buffer the run must write (f32, or a node's bf16 storage), so an element a kernel leaves
 * unwritten shows. */
static bpt_status poison(const bpt_node *node, void *device, int64_t count) {
  const bool bf16 = node->storage == BPT_DTYPE_BF16;
  float *nan = malloc((size_t)(count > 0 ? count : 1) * sizeof(float));
  if (!nan) return BPT_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < count; i++)
    nan[i] = NAN;
  uint16_t *halves = (uint16_t *)nan; /* bf16 NaNs in the front half */
  for (int64_t i = 0; bf16 && i < count; i++)
    halves[i] = 0x7fc0;
  bpt_backend *backend = node->graph->backend;
  bpt_status status = backend->vtable->upload(backend, device, nan, (size_t)count * (bf16 ? 2 : sizeof(float)));
  free(nan);
  return status;
}

static bool aliases_an_input(const bpt_node *node) {
  for (int i = 0; i < node->input_count; i++)
    if (node->inputs[i]->value == node->value) return true;
  return false;
}

/* Forward and backward; the results are the op's output, the loss, the parameter block after forward and
 * the gradient of every differentiable leaf. */
static bpt_status run_forward_backward(case_graph *g, case_result *r) {
  bpt_node *out = g->op_output;
  const int64_t out_count = node_elements(g, out);
  if (out->op != BPT_OP_INPUT && !aliases_an_input(out)) BPT_CHECK(poison(out, out->value, out_count));
  const bool forward_only = g->c->check == CHECK_EVALUATION_FORMULA || g->c->check == CHECK_FORWARD_ONLY;
  for (int i = 0; i < g->leaf_count && !forward_only; i++)
    if (g->leaves[i].differentiable) BPT_CHECK(poison(g->leaves[i].node, g->leaves[i].node->grad, g->leaves[i].count));
  BPT_CHECK(bpt_graph_forward(g->graph));
  float *values = result_add(r, "output", BPT_DTYPE_F32, out_count);
  float *loss = result_add(r, "loss", BPT_DTYPE_F32, 1);
  if (!values || !loss) return BPT_ERR_OUT_OF_MEMORY;
  BPT_CHECK(download_node(out, out->value, out_count, values));
  BPT_CHECK(bpt_graph_loss(g->graph, loss));
  if (g->parameter_count) {
    float *parameters = result_add(r, "parameters after forward", BPT_DTYPE_F32, g->parameter_count);
    if (!parameters) return BPT_ERR_OUT_OF_MEMORY;
    BPT_CHECK(bpt_graph_read_parameters(g->graph, parameters, g->parameter_count));
  }
  if (forward_only) return BPT_OK; /* batch norm's backward needs batch statistics; the cache has none */
  BPT_CHECK(bpt_graph_backward(g->graph));
  for (int i = 0; i < g->leaf_count; i++) {
    const leaf *l = &g->leaves[i];
    if (!l->differentiable) continue;
    char name[NAME_SIZE];
    if (snprintf(name, sizeof name, "d%s", l->name) >= (int)sizeof name) return BPT_ERR_INVALID_ARGUMENT;
    float *gradient = result_add(r, name, BPT_DTYPE_F32, l->count);
    if (!gradient) return BPT_ERR_OUT_OF_MEMORY;
    BPT_CHECK(download_node(l->node, l->node->grad, l->count, gradient));
  }
  return BPT_OK;
}

static const float *result_tensor_named(const case_result *r, const char *name) {
  for (int i = 0; i < r->count; i++)
    if (strcmp(r->tensors[i].name, name) == 0) return r->tensors[i].data;
  return NULL;
}

/* The loss of one forward. Around an op, the MSE is summed again on the host in double from the prediction,
 * so the finite differences see no f32 rounding of the sum; a loss op's own f32 value is used as it is. The
 * op's output signs go to signs when given (kink detection). */
static bpt_status evaluate(case_graph *g, double *loss, unsigned char *signs, float *scratch) {
  BPT_CHECK(bpt_graph_forward(g->graph));
  if (signs) {
    const int64_t count = node_elements(g, g->op_output);
    BPT_CHECK(download_node(g->op_output, g->op_output->value, count, scratch));
    for (int64_t i = 0; i < count; i++)
      signs[i] = scratch[i] > 0.0f;
  }
  if (!g->prediction) {
    float value;
    BPT_CHECK(bpt_graph_loss(g->graph, &value));
    *loss = value;
    return BPT_OK;
  }
  const int64_t count = node_elements(g, g->prediction);
  BPT_CHECK(download_node(g->prediction, g->prediction->value, count, scratch));
  double sum = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double d = (double)scratch[i] - (double)g->target_leaf->values[i];
    sum += d * d;
  }
  *loss = sum / (double)count;
  return BPT_OK;
}

/* Sets element i of a leaf to value on the device (inputs through their tensor, parameters through the block). */
static bpt_status set_leaf_element(case_graph *g, leaf *l, int64_t i, float value) {
  l->values[i] = value;
  if (l->is_input) {
    ((float *)bpt_tensor_data(l->tensor))[i] = value;
    return set_leaf_input(g, l);
  }
  return write_parameters(g);
}

/* Central differences of the loss for up to FD_CHECKS_PER_TENSOR elements of each differentiable leaf,
 * against the analytic gradients of this backend's run. */
static bpt_status check_finite_differences(case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const double step = c->step > 0.0 ? c->step : 1e-2;
  int64_t largest = node_elements(g, g->op_output);
  if (g->prediction && node_elements(g, g->prediction) > largest) largest = node_elements(g, g->prediction);
  float *scratch = malloc((size_t)largest * sizeof(float));
  unsigned char *plus_signs = c->kinks ? malloc((size_t)largest) : NULL,
                *minus_signs = c->kinks ? malloc((size_t)largest) : NULL;
  bpt_status status = scratch && (!c->kinks || (plus_signs && minus_signs)) ? BPT_OK : BPT_ERR_OUT_OF_MEMORY;
  double base = 0.0;
  if (status == BPT_OK) status = evaluate(g, &base, NULL, scratch);
  const double noise = 2e-7 * fmax(1.0, fabs(base)) / step; /* f32 rounding of the loss, over the step */
  for (int li = 0; li < g->leaf_count && status == BPT_OK; li++) {
    leaf *l = &g->leaves[li];
    if (!l->differentiable) continue;
    char name[NAME_SIZE];
    if (snprintf(name, sizeof name, "d%s", l->name) >= (int)sizeof name) {
      status = BPT_ERR_INVALID_ARGUMENT;
      break;
    }
    const float *analytic = result_tensor_named(r, name);
    /* Spread over the tensor, plus its last elements, where vector loops leave their tails. */
    const int64_t spread = FD_CHECKS_PER_TENSOR - FD_TAIL_CHECKS;
    const int64_t stride = l->count > FD_CHECKS_PER_TENSOR ? l->count / spread : 1;
    int checked = 0, at_kinks = 0, wrong = 0;
    int64_t first_wrong = 0;
    double first_got = 0.0, first_numeric = 0.0;
    for (int64_t k = 0; status == BPT_OK; k++) {
      const int64_t i = stride == 1  ? k
                        : k < spread ? k * stride + (stride - 1) / 2
                                     : l->count - FD_TAIL_CHECKS + (k - spread);
      if (i >= l->count || (stride > 1 && k >= FD_CHECKS_PER_TENSOR)) break;
      const float original = l->values[i];
      double plus = 0.0, minus = 0.0;
      status = set_leaf_element(g, l, i, (float)(original + step));
      if (status == BPT_OK) status = evaluate(g, &plus, plus_signs, scratch);
      if (status == BPT_OK) status = set_leaf_element(g, l, i, (float)(original - step));
      if (status == BPT_OK) status = evaluate(g, &minus, minus_signs, scratch);
      bpt_status restored = set_leaf_element(g, l, i, original);
      if (status == BPT_OK) status = restored;
      if (status != BPT_OK) break;
      if (c->kinks && memcmp(plus_signs, minus_signs, (size_t)node_elements(g, g->op_output)) != 0) {
        at_kinks++; /* an output crossed zero within the step: the loss is not smooth there */
        continue;
      }
      /* Divided by the perturbation f32 could represent, not by the nominal one. */
      const double numeric = (plus - minus) / ((double)(float)(original + step) - (double)(float)(original - step));
      const double got = analytic[i];
      const double allowed = noise + 1e-6 + 2e-2 * fmax(fabs(got), fabs(numeric));
      if (!(fabs(got - numeric) <= allowed) && wrong++ == 0) first_wrong = i, first_got = got, first_numeric = numeric;
      checked++;
    }
    if (wrong)
      record_failure(c->name, backend,
                     "%s[%lld] = %.7g, finite differences give %.7g (%d of %d checked differ, step %g)", name,
                     (long long)first_wrong, first_got, first_numeric, wrong, checked, step);
    if (status == BPT_OK && checked == 0)
      record_failure(c->name, backend, "%s: no element away from a kink to check by finite differences (%d at kinks)",
                     name, at_kinks);
  }
  free(scratch);
  free(plus_signs);
  free(minus_signs);
  return status;
}

/* dy of the MSE right after the op: 2 (y - t) / count. */
static double output_gradient(const case_graph *g, const float *y, int64_t i, int64_t count) {
  return 2.0 * ((double)y[i] - (double)g->target_leaf->values[i]) / (double)count;
}

/* binary_stochastic: a is 0 or 1 (1[z > 0] when deterministic) and the straight-through gradient is
 * dz = da, or da s (1 - s), with da from the MSE computed here. */
static void check_straight_through(const case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const float *a = result_tensor_named(r, "output"), *dz = result_tensor_named(r, "dz"), *z = g->leaves[0].values;
  const int64_t count = g->leaves[0].count;
  int64_t ones = 0;
  for (int64_t i = 0; i < count; i++) {
    if (!(a[i] == 0.0f || a[i] == 1.0f) || (c->deterministic && a[i] != (z[i] > 0.0f ? 1.0f : 0.0f))) {
      record_failure(c->name, backend, "output[%lld] = %.9g for z = %.9g: not a%s binary sample", (long long)i,
                     (double)a[i], (double)z[i], c->deterministic ? " deterministic" : "");
      return;
    }
    ones += a[i] == 1.0f;
    double s = 1.0 / (1.0 + exp(-(double)z[i]));
    double expected =
        output_gradient(g, a, i, count) * (c->estimator == BPT_STRAIGHT_THROUGH_SIGMOID ? s * (1.0 - s) : 1.0);
    if (!(fabs(dz[i] - expected) <= 1e-5 * fabs(expected) + 1e-9)) {
      record_failure(c->name, backend, "dz[%lld] = %.9g, the straight-through estimator gives %.9g", (long long)i,
                     (double)dz[i], expected);
      return;
    }
  }
  if (ones == 0 || ones == count)
    record_failure(c->name, backend, "output: all %lld samples are %s", (long long)count, ones ? "one" : "zero");
}

/* dropout: every mask value is 0 or 1 / (1 - p), about p of them 0, and dx = dy * mask. */
static void check_dropout_mask(const case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const float *y = result_tensor_named(r, "output"), *dx = result_tensor_named(r, "dx"), *x = g->leaves[0].values;
  const int64_t count = g->leaves[0].count;
  const double kept = 1.0 / (1.0 - (double)c->probability);
  int64_t dropped = 0;
  for (int64_t i = 0; i < count; i++) {
    const double mask = (double)y[i] / (double)x[i];
    if (!(y[i] == 0.0f || fabs(mask - kept) <= 1e-6 * kept)) {
      record_failure(c->name, backend, "output[%lld] = %.9g for x = %.9g: the mask is neither 0 nor %g", (long long)i,
                     (double)y[i], (double)x[i], kept);
      return;
    }
    dropped += y[i] == 0.0f;
    const double expected = (y[i] == 0.0f ? 0.0 : kept) * output_gradient(g, y, i, count);
    if (!(fabs(dx[i] - expected) <= 1e-5 * fabs(expected) + 1e-9)) {
      record_failure(c->name, backend, "dx[%lld] = %.9g, dy * mask gives %.9g", (long long)i, (double)dx[i], expected);
      return;
    }
  }
  const double share = (double)dropped / (double)count;
  if (!(fabs(share - (double)c->probability) <= 0.2))
    record_failure(c->name, backend, "%lld of %lld values dropped for p = %g", (long long)dropped, (long long)count,
                   (double)c->probability);
}

/* Batch norm with the running statistics: y = gamma (x - mean) / sqrt(variance + eps) + beta, then the ReLU of
 * batch_norm_relu, in double on the host. */
static void check_evaluation_formula(const case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const float *y = result_tensor_named(r, "output"), *x = g->leaves[0].values, *gamma = g->leaves[1].values;
  const float *beta = g->leaves[2].values, *mean = g->leaves[3].values, *variance = g->leaves[4].values;
  const int64_t channels = c->shape[0], spatial = product(c->rank - 1, c->shape + 1);
  for (int64_t i = 0; i < g->leaves[0].count; i++) {
    const int64_t k = i / spatial % channels;
    double expected = gamma[k] * ((double)x[i] - mean[k]) / sqrt((double)variance[k] + 1e-5) + beta[k];
    if (c->op == BPT_OP_BATCH_NORM_RELU && expected < 0.0) expected = 0.0;
    if (!(fabs(y[i] - expected) <= 1e-5 * fabs(expected) + 1e-6)) {
      record_failure(c->name, backend, "output[%lld] = %.9g, the evaluation formula gives %.9g", (long long)i,
                     (double)y[i], expected);
      return;
    }
  }
}

/* softmax_cross_entropy's loss against PyTorch's F.cross_entropy(ignore_index=, label_smoothing=) formula in
 * double on the host: mean over the positions not ignored of (1 - eps) (lse - x[label]) + eps (lse - mean_c x). */
static void check_cross_entropy_formula(const case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const float *x = g->leaves[0].values, *loss = result_tensor_named(r, "loss");
  const int32_t *labels = (const int32_t *)g->leaves[1].values;
  const int64_t classes = c->shape[c->rank - 1], rows = g->leaves[1].count;
  const double eps = c->smoothing;
  double sum = 0.0;
  int64_t counted = 0;
  for (int64_t n = 0; n < rows; n++) {
    if (c->ignore && labels[n] == c->ignore_index) continue;
    const float *row = x + n * classes;
    double top = row[0], total = 0.0, mean = 0.0;
    for (int64_t k = 1; k < classes; k++)
      top = fmax(top, row[k]);
    for (int64_t k = 0; k < classes; k++) {
      total += exp(row[k] - top);
      mean += row[k];
    }
    const double lse = log(total) + top;
    sum += (1.0 - eps) * (lse - row[labels[n]]) + eps * (lse - mean / (double)classes);
    counted++;
  }
  const double expected = counted ? sum / (double)counted : 0.0;
  if (!(fabs(loss[0] - expected) <= 1e-5 * fabs(expected) + 1e-6))
    record_failure(c->name, backend, "loss = %.9g, F.cross_entropy's formula gives %.9g (%lld of %lld positions)",
                   (double)loss[0], expected, (long long)counted, (long long)rows);
}

/* On the reference: the op's output and every gradient carry information (a case whose gradients are all zero
 * would pass any comparison). */
static void check_informative(const op_case *c, const case_result *r) {
  for (int t = 0; t < r->count; t++) {
    const result_tensor *tensor = &r->tensors[t];
    if (strcmp(tensor->name, "parameters after forward") == 0) continue;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < tensor->count; i++)
      nonzero += ((const float *)tensor->data)[i] != 0.0f;
    if (nonzero == 0) record_failure(c->name, "cpu", "%s is all zeros: the case checks nothing", tensor->name);
  }
}

/* No case expects an infinity or a NaN; one here is usually an element left unwritten (outputs and gradients
 * start as NaN). */
static void check_finite(const op_case *c, const case_result *r, const char *backend) {
  for (int t = 0; t < r->count; t++) {
    const result_tensor *tensor = &r->tensors[t];
    const float *values = tensor->data;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < tensor->count; i++)
      if (!isfinite(values[i]) && bad++ == 0) first = i;
    if (bad)
      record_failure(c->name, backend, "%s[%lld] = %g (%lld of %lld not finite: unwritten?)", tensor->name,
                     (long long)first, (double)values[first], (long long)bad, (long long)tensor->count);
  }
}

/* The op's output against the case's host reference: |got - expected| <= 1e-5 (|expected| + rms(expected)). */
static void check_reference(const case_graph *g, const case_result *r, const char *backend) {
  const op_case *c = g->c;
  const int64_t count = node_elements(g, g->op_output);
  const float *got = result_tensor_named(r, "output");
  double *expected = calloc((size_t)count, sizeof *expected);
  if (!expected || !got) {
    record_failure(c->name, backend, "reference: out of memory");
    free(expected);
    return;
  }
  c->reference(g, expected);
  double squares = 0.0;
  for (int64_t i = 0; i < count; i++)
    squares += expected[i] * expected[i];
  const double rms = sqrt(squares / (double)count);
  int64_t differ = 0, worst = 0;
  double worst_error = 0.0;
  for (int64_t i = 0; i < count; i++) {
    const double error = fabs((double)got[i] - expected[i]) / (fabs(expected[i]) + rms + 1e-30);
    if (!(error <= 1e-5)) {
      if (differ++ == 0 || !(error <= worst_error)) worst = i, worst_error = error;
    }
  }
  if (c->reference_differs && 2 * differ < count)
    record_failure(c->name, backend, "only %lld of %lld outputs differ from the noise-free reference",
                   (long long)differ, (long long)count);
  else if (differ && !c->reference_differs)
    record_failure(c->name, backend, "output[%lld] = %.9g, the host reference gives %.9g (%lld of %lld differ)",
                   (long long)worst, (double)got[worst], expected[worst], (long long)differ, (long long)count);
  free(expected);
}

static bool graph_has_op(const bpt_graph *graph, bpt_op_id op) {
  for (int i = 0; i < graph->node_count; i++)
    if (graph->nodes[i]->op == op) return true;
  return false;
}

static void run_op_case(int index) {
  const op_case *c = &op_cases[index];
  const double tolerance = c->tolerance > 0.0 ? c->tolerance : 1e-4;
  case_result reference = {0};
  for (int b = 0; b < backend_count; b++) {
    backend_under_test *t = &backends[b];
    case_graph g;
    case_result r = {0};
    const char *stage = "build and compile";
    bpt_status status = case_graph_create(&g, t->context, c, index, STORAGE_F32);
    if (status == BPT_OK && b == 0 && !graph_has_op(g.graph, c->op))
      record_failure(c->name, t->label, "the graph has no %s node", bpt_op_get(c->op)->name);
    if (status == BPT_OK) {
      stage = "forward and backward";
      status = run_forward_backward(&g, &r);
    }
    if (status == BPT_ERR_UNSUPPORTED && b > 0) {
      record_skip(c->name, t->label, status, bpt_context_last_error(t->context));
    } else if (status != BPT_OK) {
      record_failure(c->name, t->label, "%s failed with %s: %s", stage, bpt_status_string(status),
                     bpt_context_last_error(t->context));
    } else {
      check_finite(c, &r, t->label);
      if (b == 0)
        check_informative(c, &r);
      else if (reference.count)
        compare_results(c->name, t->label, &reference, &r, tolerance);
      if (c->reference) check_reference(&g, &r, t->label);
      if (c->check == CHECK_STRAIGHT_THROUGH) check_straight_through(&g, &r, t->label);
      if (c->check == CHECK_DROPOUT_MASK) check_dropout_mask(&g, &r, t->label);
      if (c->check == CHECK_EVALUATION_FORMULA) check_evaluation_formula(&g, &r, t->label);
      if (c->op == BPT_OP_SOFTMAX_CROSS_ENTROPY) check_cross_entropy_formula(&g, &r, t->label);
      if (c->check == CHECK_FINITE_DIFFERENCES || c->check == CHECK_DROPOUT_MASK) {
        status = check_finite_differences(&g, &r, t->label);
        if (status != BPT_OK)
          record_failure(c->name, t->label, "finite differences failed with %s: %s", bpt_status_string(status),
                         bpt_context_last_error(t->context));
      }
      if (b == 0) {
        reference = r;
        memset(&r, 0, sizeof r);
      }
    }
    result_free(&r);
    case_graph_destroy(&g);
  }
  result_free(&reference);
}

/* f32 to bf16 and back, nearest even (the cases hold no NaN). */
static float round_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* The gradient of a leaf that 16-bit storage keeps as bf16 (an input read by bf16 kernels) holds the f32
 * gradient rounded; the rounding path rounds an activation's gradient before the backward that reads it, and an
 * input has none, so its f32 gradient is rounded here for the comparison. */
static void round_stored_leaf_gradients(const case_graph *stored, case_result *rounded) {
  for (int i = 0; i < stored->leaf_count; i++) {
    const leaf *l = &stored->leaves[i];
    if (!l->differentiable || l->node->storage != BPT_DTYPE_BF16) continue;
    char name[NAME_SIZE];
    if (snprintf(name, sizeof name, "d%s", l->name) >= (int)sizeof name) continue; /* no result has that name */
    float *gradient = (float *)result_tensor_named(rounded, name);
    for (int64_t k = 0; gradient && k < l->count; k++)
      gradient[k] = round_to_bf16(gradient[k]);
  }
}

/* Under the bf16 policy on the CPU, a case whose op has kernels that take bf16 storage (BPT_REGISTER_KERNELS_16BIT)
 * runs with 16-bit storage, its output and its inputs stored as bf16 (values with several readers f32), and
 * must give what the rounding path gives: the same bf16 values go into the same f32 arithmetic, and what is
 * stored is rounded where the rounding path rounds, so only f32 round-off may part them (tolerance 1e-6). A
 * kernel that reads bf16 as f32 or writes at the wrong place parts them by far more. With SHARED storage a
 * value read twice (fan-out, twice) is bf16 too and each reader rounds its part of the gradient into it, which
 * moves the sum by about a bf16 unit (tolerance 1e-2); a part lost or added twice moves it by tens of percent.
 * Returns whether it ran. */
static bool compare_storage(int index, case_storage storage, double tolerance) {
  const op_case *c = &op_cases[index];
  backend_under_test *t = &backends[0];
  const char *label = storage == STORAGE_BF16 ? "cpu 16-bit storage" : "cpu 16-bit storage, shared values";
  case_graph stored, rounded;
  memset(&rounded, 0, sizeof rounded);
  case_result r_stored = {0}, r_rounded = {0};
  bpt_status status = case_graph_create(&stored, t->context, c, index, storage);
  const bool takes = status == BPT_OK && bpt_node_kernels_take_bf16(stored.op_output);
  if (status == BPT_OK && takes) status = case_graph_create(&rounded, t->context, c, index, STORAGE_ROUNDING);
  if (status == BPT_OK && takes) {
    /* The op's output is read by the linear alone; a loss is f32. */
    if (stored.op_output->storage != BPT_DTYPE_BF16 && stored.op_output != stored.loss)
      record_failure(c->name, label, "the op's output is stored as %s", bpt_dtype_name(stored.op_output->storage));
    status = run_forward_backward(&stored, &r_stored);
    if (status == BPT_OK) status = run_forward_backward(&rounded, &r_rounded);
    if (status == BPT_OK) round_stored_leaf_gradients(&stored, &r_rounded);
    if (status == BPT_OK) {
      check_finite(c, &r_stored, label);
      compare_results(c->name, label, &r_rounded, &r_stored, tolerance);
    }
  }
  if (status != BPT_OK)
    record_failure(c->name, label, "failed with %s: %s", bpt_status_string(status), bpt_context_last_error(t->context));
  result_free(&r_stored);
  result_free(&r_rounded);
  case_graph_destroy(&stored);
  case_graph_destroy(&rounded);
  return takes;
}

static bool run_storage_case(int index) {
  const bool ran = compare_storage(index, STORAGE_BF16, 1e-6);
  if (ran) compare_storage(index, STORAGE_BF16_SHARED, 1e-2);
  return ran;
}

/* Every op in ops.def has at least one line in the table: a newly appended op without one fails here. */
static void check_every_op_has_a_case(void) {
  for (int op = 0; op < BPT_OP_COUNT; op++) {
    bool found = false;
    for (int k = 0; k < OP_CASE_COUNT; k++)
      found |= op_cases[k].op == (bpt_op_id)op;
    if (!found) record_failure(bpt_op_get((bpt_op_id)op)->name, "every backend", "the op has no case in op_cases[]");
  }
}

/* ---- shared primitives, member by member ---- */

typedef struct primitive_case primitive_case;
/* Runs the primitive on t's backend and fills r; reference is true on the CPU run. */
typedef bpt_status (*primitive_run)(backend_under_test *t, const primitive_case *c, bool reference, case_result *r);

struct primitive_case {
  const char *name;
  primitive_run run;
  int64_t count;
  bpt_dtype from, to; /* cast; round_to_dtype rounds to `to` */
  float scale, range; /* cast's scale; inputs uniform in [-range, range] */
  float low, high;    /* scale_clamp's bounds */
  int64_t m, n, k;    /* gemm: op(A) (m, k), op(B) (k, n) */
  bool transpose_a, transpose_b;
  int64_t pad; /* gemm: extra leading-dimension elements */
  float alpha, beta;
  bpt_dtype operand; /* gemm: narrow operand dtype, cast on the device (the CPU multiplies the rounded f32 values) */
  bool only_b;       /* gemm: A stays f32, only B is narrow */
  bool adam, nesterov, decoupled;
  float momentum, weight_decay;
  bool inject_nonfinite; /* unscale, absolute_max: an infinity (and a NaN) among the values */
  double tolerance;      /* f32 results, relative; 0: bit for bit */
};

#define CALL(b, member, ...)                                                                                           \
  ((b)->vtable->member                                                                                                 \
       ? (b)->vtable->member((b), __VA_ARGS__)                                                                         \
       : bpt_backend_fail((b), BPT_ERR_UNSUPPORTED, "backend '%s' has no %s member", (b)->vtable->name, #member))

/* Device buffers of one run, freed together. */
typedef struct device_set {
  bpt_backend *backend;
  void *pointers[10];
  int count;
  bpt_status status;
} device_set;

/* A device buffer holding host's bytes (or zeros for NULL); NULL once the set has failed. */
static void *device_buffer(device_set *s, const void *host, size_t bytes) {
  if (s->status != BPT_OK || s->count == 10) {
    if (s->status == BPT_OK) s->status = BPT_ERR_INTERNAL;
    return NULL;
  }
  bpt_backend *b = s->backend;
  void *device = NULL;
  s->status = b->vtable->alloc(b, bytes, &device);
  if (s->status != BPT_OK) return NULL;
  s->pointers[s->count++] = device;
  s->status = host ? b->vtable->upload(b, device, host, bytes) : b->vtable->memset_zero(b, device, bytes);
  return s->status == BPT_OK ? device : NULL;
}

static bpt_status device_set_download(device_set *s, case_result *r, const char *name, bpt_dtype dtype, int64_t count,
                                      const void *device) {
  if (s->status != BPT_OK) return s->status;
  bpt_backend *b = s->backend;
  if (b->vtable->synchronize) s->status = b->vtable->synchronize(b);
  void *host = s->status == BPT_OK ? result_add(r, name, dtype, count) : NULL;
  if (s->status == BPT_OK && !host) s->status = BPT_ERR_OUT_OF_MEMORY;
  if (s->status == BPT_OK) s->status = b->vtable->download(b, host, device, (size_t)count * element_bytes(dtype));
  return s->status;
}

static bpt_status device_set_free(device_set *s) {
  for (int i = 0; i < s->count; i++)
    s->backend->vtable->free(s->backend, s->pointers[i]);
  s->count = 0;
  return s->status;
}

static float *random_floats(int64_t count, float low, float high, uint64_t seed) {
  float *values = malloc((size_t)count * sizeof(float));
  if (!values) return NULL;
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, values, count, low, high);
  return values;
}

static bpt_backend *reference_backend(void) { return &backends[0].context->backend; }

static bpt_status run_gemm(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  bpt_backend *b = &t->context->backend;
  const int64_t lda = (c->transpose_a ? c->m : c->k) + c->pad, ldb = (c->transpose_b ? c->k : c->n) + c->pad;
  const int64_t ldc = c->n + 1, a_count = (c->transpose_a ? c->k : c->m) * lda;
  const int64_t b_count = (c->transpose_b ? c->n : c->k) * ldb, c_count = c->m * ldc;
  float *a = random_floats(a_count, -1, 1, 1), *bv = random_floats(b_count, -1, 1, 2),
        *cv = random_floats(c_count, -1, 1, 3);
  device_set s = {.backend = b, .status = a && bv && cv ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  const bool narrow = c->operand != BPT_DTYPE_F32;
  if (narrow && reference && s.status == BPT_OK) {
    /* The CPU has no narrow operands: it multiplies f32 copies rounded to the operand format. */
    if (!c->only_b) s.status = CALL(b, round_to_dtype, a_count, c->operand, a);
    if (s.status == BPT_OK) s.status = CALL(b, round_to_dtype, b_count, c->operand, bv);
  }
  void *da = device_buffer(&s, a, (size_t)a_count * 4), *db = device_buffer(&s, bv, (size_t)b_count * 4);
  void *dc = device_buffer(&s, cv, (size_t)c_count * 4);
  bpt_gemm_args args = {.transpose_a = c->transpose_a,
                        .transpose_b = c->transpose_b,
                        .m = c->m,
                        .n = c->n,
                        .k = c->k,
                        .alpha = c->alpha,
                        .a = da,
                        .lda = lda,
                        .b = db,
                        .ldb = ldb,
                        .beta = c->beta,
                        .c = dc,
                        .ldc = ldc};
  if (narrow && !reference) {
    void *a16 = c->only_b ? NULL : device_buffer(&s, NULL, (size_t)a_count * 2),
         *b16 = device_buffer(&s, NULL, (size_t)b_count * 2);
    if (s.status == BPT_OK && !c->only_b) s.status = CALL(b, cast, a_count, BPT_DTYPE_F32, da, c->operand, a16, 1.0f);
    if (s.status == BPT_OK) s.status = CALL(b, cast, b_count, BPT_DTYPE_F32, db, c->operand, b16, 1.0f);
    if (!c->only_b) args.a = a16, args.a_dtype = c->operand;
    args.b = b16, args.b_dtype = c->operand;
  }
  if (s.status == BPT_OK) s.status = CALL(b, gemm, &args);
  device_set_download(&s, r, "c", BPT_DTYPE_F32, c_count, dc);
  free(a);
  free(bv);
  free(cv);
  return device_set_free(&s);
}

/* Narrow sources are made by the CPU's cast, so every backend starts from the same bytes. */
static bpt_status run_cast(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 4);
  void *source = malloc((size_t)c->count * 4);
  device_set s = {.backend = b, .status = values && source ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  if (s.status == BPT_OK && c->from != BPT_DTYPE_F32)
    s.status = CALL(reference_backend(), cast, c->count, BPT_DTYPE_F32, values, c->from, source, 1.0f);
  else if (s.status == BPT_OK)
    memcpy(source, values, (size_t)c->count * 4);
  void *ds = device_buffer(&s, source, (size_t)c->count * element_bytes(c->from));
  void *dd = device_buffer(&s, NULL, (size_t)c->count * element_bytes(c->to));
  if (s.status == BPT_OK) s.status = CALL(b, cast, c->count, c->from, ds, c->to, dd, c->scale);
  device_set_download(&s, r, "destination", c->to, c->count, dd);
  free(values);
  free(source);
  return device_set_free(&s);
}

static bpt_status run_round_to_dtype(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 5);
  device_set s = {.backend = b, .status = values ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  void *dv = device_buffer(&s, values, (size_t)c->count * 4);
  if (s.status == BPT_OK) s.status = CALL(b, round_to_dtype, c->count, c->to, dv);
  device_set_download(&s, r, "values", BPT_DTYPE_F32, c->count, dv);
  free(values);
  return device_set_free(&s);
}

static bpt_status run_absolute_max(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 6);
  if (values && c->inject_nonfinite) values[c->count / 3] = INFINITY, values[c->count / 2] = NAN;
  device_set s = {.backend = b, .status = values ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  void *dv = device_buffer(&s, values, (size_t)c->count * 4), *dm = device_buffer(&s, NULL, 4);
  if (s.status == BPT_OK) s.status = CALL(b, absolute_max, c->count, dv, dm);
  device_set_download(&s, r, "maximum", BPT_DTYPE_F32, 1, dm);
  free(values);
  return device_set_free(&s);
}

/* Sum and sum of squares come back to the host in double; every seventh value is an exact zero. */
static bpt_status run_reduce_statistics(backend_under_test *t, const primitive_case *c, bool reference,
                                        case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 7);
  for (int64_t i = 0; values && i < c->count; i += 7)
    values[i] = 0.0f;
  device_set s = {.backend = b, .status = values ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  void *dv = device_buffer(&s, values, (size_t)c->count * 4);
  double sum = 0.0, squares = 0.0;
  int64_t zeros = -1;
  if (s.status == BPT_OK) s.status = CALL(b, reduce_statistics, c->count, dv, &sum, &squares, &zeros);
  float *moments = s.status == BPT_OK ? result_add(r, "sum, sum of squares", BPT_DTYPE_F32, 2) : NULL;
  int32_t *zero_count = s.status == BPT_OK ? result_add(r, "zeros", BPT_DTYPE_I32, 1) : NULL;
  if (moments && zero_count) moments[0] = (float)sum, moments[1] = (float)squares, zero_count[0] = (int32_t)zeros;
  free(values);
  return device_set_free(&s);
}

static bpt_status run_scale_clamp(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 8);
  device_set s = {.backend = b, .status = values ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  void *dv = device_buffer(&s, values, (size_t)c->count * 4);
  if (s.status == BPT_OK) s.status = CALL(b, scale_clamp, c->count, c->scale, c->low, c->high, dv);
  device_set_download(&s, r, "x", BPT_DTYPE_F32, c->count, dv);
  free(values);
  return device_set_free(&s);
}

static bpt_status run_unscale(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *values = random_floats(c->count, -c->range, c->range, 9);
  if (values && c->inject_nonfinite) values[c->count * 7 / 9] = INFINITY;
  device_set s = {.backend = b, .status = values ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  void *dv = device_buffer(&s, values, (size_t)c->count * 4), *flag = device_buffer(&s, NULL, 4);
  if (s.status == BPT_OK) s.status = CALL(b, unscale_check_finite, c->count, dv, c->scale, flag);
  device_set_download(&s, r, "gradients", BPT_DTYPE_F32, c->count, dv);
  device_set_download(&s, r, "found_nonfinite", BPT_DTYPE_I32, 1, flag);
  free(values);
  return device_set_free(&s);
}

/* Three steps, so the state carried between steps is compared too. */
static bpt_status run_update(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *w = random_floats(c->count, -1, 1, 10), *g = random_floats(c->count, -1, 1, 11);
  float *m = random_floats(c->count, -0.1f, 0.1f, 12), *v = random_floats(c->count, 0.001f, 0.1f, 13);
  device_set s = {.backend = b, .status = w && g && m && v ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  const size_t bytes = (size_t)c->count * 4;
  void *dw = device_buffer(&s, w, bytes), *dg = device_buffer(&s, g, bytes), *dm = device_buffer(&s, m, bytes);
  void *dv = device_buffer(&s, v, bytes);
  bpt_update_args args = {.count = c->count,
                          .parameters = dw,
                          .gradients = dg,
                          .state0 = dm,
                          .state1 = dv,
                          .learning_rate = 0.01f,
                          .weight_decay = c->weight_decay,
                          .momentum = c->momentum,
                          .nesterov = c->nesterov,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .epsilon = 1e-8f,
                          .decoupled_weight_decay = c->decoupled};
  for (int step = 1; step <= 3 && s.status == BPT_OK; step++) {
    args.step = step;
    s.status = c->adam ? CALL(b, adam_update, &args) : CALL(b, sgd_update, &args);
  }
  device_set_download(&s, r, "parameters", BPT_DTYPE_F32, c->count, dw);
  device_set_download(&s, r, "state0", BPT_DTYPE_F32, c->count, dm);
  if (c->adam) device_set_download(&s, r, "state1", BPT_DTYPE_F32, c->count, dv);
  free(w);
  free(g);
  free(m);
  free(v);
  return device_set_free(&s);
}

/* Dynamic loss scaling on the device: an overflowing step is seen (and skipped), the next one unscales exactly
 * and updates with SGD. */
static bpt_status run_loss_scaler(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  float *w = random_floats(c->count, -1, 1, 14), *g = random_floats(c->count, -1, 1, 15);
  float *scaled = malloc((size_t)c->count * 4);
  device_set s = {.backend = b, .status = w && g && scaled ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  const size_t bytes = (size_t)c->count * 4;
  void *dw = device_buffer(&s, w, bytes), *dg = device_buffer(&s, NULL, bytes),
       *velocity = device_buffer(&s, NULL, bytes);
  int32_t *flags = result_add(r, "found_nonfinite per step", BPT_DTYPE_I32, 2);
  void *flag = device_buffer(&s, NULL, 4);
  if (!flags && s.status == BPT_OK) s.status = BPT_ERR_OUT_OF_MEMORY;
  for (int step = 0; step < 2 && s.status == BPT_OK; step++) {
    for (int64_t i = 0; i < c->count; i++)
      scaled[i] = g[i] * c->scale; /* exact: the scale is a power of two */
    if (step == 0) scaled[c->count / 3] = NAN;
    s.status = b->vtable->upload(b, dg, scaled, bytes);
    if (s.status == BPT_OK) s.status = b->vtable->memset_zero(b, flag, 4);
    if (s.status == BPT_OK) s.status = CALL(b, unscale_check_finite, c->count, dg, 1.0f / c->scale, flag);
    if (s.status == BPT_OK && b->vtable->synchronize) s.status = b->vtable->synchronize(b);
    if (s.status == BPT_OK) s.status = b->vtable->download(b, &flags[step], flag, 4);
    if (s.status != BPT_OK || flags[step]) continue;
    bpt_update_args args = {.count = c->count,
                            .parameters = dw,
                            .gradients = dg,
                            .state0 = velocity,
                            .learning_rate = 0.1f,
                            .momentum = 0.9f,
                            .step = 1};
    s.status = CALL(b, sgd_update, &args);
  }
  device_set_download(&s, r, "parameters", BPT_DTYPE_F32, c->count, dw);
  free(w);
  free(g);
  free(scaled);
  return device_set_free(&s);
}

/* Upload, device copy, download and memset_zero round-trip exactly; the host buffer is reused at once. */
static bpt_status run_memory(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  bpt_backend *b = &t->context->backend;
  const size_t bytes = (size_t)c->count * 4;
  uint32_t *host = calloc((size_t)c->count, 4); /* an integer pattern: cheap to make for 20 MiB under ASan */
  device_set s = {.backend = b, .status = host ? BPT_OK : BPT_ERR_OUT_OF_MEMORY};
  for (int64_t i = 0; s.status == BPT_OK && i < c->count; i++)
    host[i] = (uint32_t)i * 2654435761u;
  void *one = device_buffer(&s, host, bytes);
  for (int64_t i = 0; s.status == BPT_OK && i < c->count; i++)
    host[i] = ~host[i];
  void *two = device_buffer(&s, host, bytes), *three = device_buffer(&s, NULL, bytes);
  if (s.status == BPT_OK) s.status = b->vtable->copy(b, three, one, bytes);
  device_set_download(&s, r, "copied", BPT_DTYPE_I32, c->count, three);
  device_set_download(&s, r, "uploaded after reuse", BPT_DTYPE_I32, c->count, two);
  if (s.status == BPT_OK) s.status = b->vtable->memset_zero(b, two, bytes);
  device_set_download(&s, r, "zeroed", BPT_DTYPE_I32, c->count, two);
  free(host);
  return device_set_free(&s);
}

/* An MLP like examples/mnist_mlp.c's (narrower, to stay quick under ASan) trained a few steps from the same weights and
 * batches: the losses and the weights follow the CPU's trajectory. */
static bpt_status run_mlp_steps(backend_under_test *t, const primitive_case *c, bool reference, case_result *r) {
  (void)reference;
  enum { FEATURES = 196, CLASSES = 10, BATCH = 32, STEPS = 6 };
  bpt_context *context = t->context;
  bpt_graph *graph = NULL;
  bpt_optimizer *optimizer = NULL;
  bpt_tensor *images = NULL, *labels = NULL;
  bpt_node *x, *y, *hidden, *logits, *loss;
  const int64_t features = FEATURES, image_dims[2] = {BATCH, FEATURES}, label_dims[1] = {BATCH};
  bpt_status status = bpt_graph_create(context, &graph);
  if (status == BPT_OK) status = bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &x);
  if (status == BPT_OK) status = bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &y);
  if (status == BPT_OK) status = bpt_layer_linear(graph, "fc1", x, 48, BPT_INIT_HE_UNIFORM, &hidden);
  if (status == BPT_OK) status = bpt_relu(graph, "relu1", hidden, &hidden);
  if (status == BPT_OK) status = bpt_layer_linear(graph, "fc2", hidden, 24, BPT_INIT_HE_UNIFORM, &hidden);
  if (status == BPT_OK) status = bpt_relu(graph, "relu2", hidden, &hidden);
  if (status == BPT_OK) status = bpt_layer_linear(graph, "fc3", hidden, CLASSES, BPT_INIT_HE_UNIFORM, &logits);
  if (status == BPT_OK) status = bpt_softmax_cross_entropy(graph, "loss", logits, y, &loss);
  if (status == BPT_OK) status = bpt_graph_compile(graph, loss, BATCH);
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = (float)c->scale;
  options.momentum = c->momentum;
  if (status == BPT_OK) status = bpt_optimizer_create(graph, &options, &optimizer);
  /* The same initial weights on every backend: the context seed initialises them on the host. */
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_F32, 2, image_dims, &images);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &labels);
  float *losses = status == BPT_OK ? result_add(r, "loss per step", BPT_DTYPE_F32, STEPS) : NULL;
  if (status == BPT_OK && !losses) status = BPT_ERR_OUT_OF_MEMORY;
  test_random random;
  test_random_seed(&random, 10);
  for (int step = 0; step < STEPS && status == BPT_OK; step++) {
    test_random_fill(&random, bpt_tensor_data(images), BATCH * FEATURES, 0, 1);
    int32_t *label_values = bpt_tensor_data(labels);
    for (int i = 0; i < BATCH; i++)
      label_values[i] = (int32_t)(test_random_uniform(&random, 0, 1) * CLASSES) % CLASSES;
    status = bpt_graph_set_input(graph, x, images);
    if (status == BPT_OK) status = bpt_graph_set_input(graph, y, labels);
    if (status == BPT_OK) status = bpt_graph_forward(graph);
    if (status == BPT_OK) status = bpt_graph_backward(graph);
    if (status == BPT_OK) status = bpt_optimizer_step(optimizer);
    if (status == BPT_OK) status = bpt_graph_loss(graph, &losses[step]);
  }
  const int64_t count = bpt_graph_parameter_count(graph);
  float *weights = status == BPT_OK ? result_add(r, "weights after the steps", BPT_DTYPE_F32, count) : NULL;
  if (status == BPT_OK && !weights) status = BPT_ERR_OUT_OF_MEMORY;
  if (status == BPT_OK) status = bpt_graph_read_parameters(graph, weights, count);
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  return status;
}

// clang-format off
static const primitive_case primitive_cases[] = {
    {"gemm f32 64x33x128", run_gemm, .m = 64, .n = 33, .k = 128, .pad = 3, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 64x33x128 ta", run_gemm, .m = 64, .n = 33, .k = 128, .transpose_a = true, .pad = 3, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 64x33x128 tb", run_gemm, .m = 64, .n = 33, .k = 128, .transpose_b = true, .pad = 3, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 64x33x128 ta tb", run_gemm, .m = 64, .n = 33, .k = 128, .transpose_a = true, .transpose_b = true, .pad = 3, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 128x784x10 beta 1", run_gemm, .m = 128, .n = 784, .k = 10, .pad = 2, .alpha = 0.75f, .beta = 1.0f, .tolerance = 1e-5},
    {"gemm f32 128x784x10 ta tb beta 1", run_gemm, .m = 128, .n = 784, .k = 10, .transpose_a = true, .transpose_b = true, .pad = 2, .alpha = 0.75f, .beta = 1.0f, .tolerance = 1e-5},
    {"gemm f32 31x257x65 ta", run_gemm, .m = 31, .n = 257, .k = 65, .transpose_a = true, .pad = 1, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 31x257x65 tb", run_gemm, .m = 31, .n = 257, .k = 65, .transpose_b = true, .pad = 1, .alpha = 0.75f, .tolerance = 1e-5},
    {"gemm f32 1x1x1", run_gemm, .m = 1, .n = 1, .k = 1, .alpha = 1.0f, .beta = 1.0f, .tolerance = 1e-6},
    {"gemm bf16 128x784x10", run_gemm, .m = 128, .n = 784, .k = 10, .alpha = 0.75f, .beta = 1.0f, .operand = BPT_DTYPE_BF16, .tolerance = 1e-3},
    {"gemm bf16 128x784x10 ta tb", run_gemm, .m = 128, .n = 784, .k = 10, .transpose_a = true, .transpose_b = true, .alpha = 0.75f, .operand = BPT_DTYPE_BF16, .tolerance = 1e-3},
    {"gemm f16 64x33x128 ta", run_gemm, .m = 64, .n = 33, .k = 128, .transpose_a = true, .alpha = 0.75f, .operand = BPT_DTYPE_F16, .tolerance = 1e-3},
    {"gemm f16 31x257x65 tb", run_gemm, .m = 31, .n = 257, .k = 65, .transpose_b = true, .alpha = 0.75f, .operand = BPT_DTYPE_F16, .tolerance = 1e-3},
    {"gemm f32 x bf16 10x784x128 ta", run_gemm, .m = 10, .n = 784, .k = 128, .transpose_a = true, .alpha = 1.0f, .beta = 1.0f, .operand = BPT_DTYPE_BF16, .only_b = true, .tolerance = 1e-3},
    {"gemm f32 x fp8_e4m3 10x784x128 ta", run_gemm, .m = 10, .n = 784, .k = 128, .transpose_a = true, .alpha = 1.0f, .beta = 1.0f, .operand = BPT_DTYPE_FP8_E4M3, .only_b = true, .tolerance = 1e-3},
    {"cast f32 -> bf16", run_cast, .count = 40009, .from = BPT_DTYPE_F32, .to = BPT_DTYPE_BF16, .scale = 1.0f, .range = 100.0f},
    {"cast f32 -> f16 scale 4", run_cast, .count = 40009, .from = BPT_DTYPE_F32, .to = BPT_DTYPE_F16, .scale = 4.0f, .range = 100.0f},
    {"cast f32 -> fp8_e4m3 scale 2, saturating", run_cast, .count = 40009, .from = BPT_DTYPE_F32, .to = BPT_DTYPE_FP8_E4M3, .scale = 2.0f, .range = 400.0f},
    {"cast f32 -> fp8_e5m2 scale 8, saturating", run_cast, .count = 40009, .from = BPT_DTYPE_F32, .to = BPT_DTYPE_FP8_E5M2, .scale = 8.0f, .range = 10000.0f},
    {"cast bf16 -> f32 scale 0.5", run_cast, .count = 40009, .from = BPT_DTYPE_BF16, .to = BPT_DTYPE_F32, .scale = 0.5f, .range = 100.0f},
    {"cast f16 -> f32", run_cast, .count = 40009, .from = BPT_DTYPE_F16, .to = BPT_DTYPE_F32, .scale = 1.0f, .range = 100.0f},
    {"round_to_dtype bf16", run_round_to_dtype, .count = 4099, .to = BPT_DTYPE_BF16, .range = 1000.0f},
    {"round_to_dtype f16, overflowing to inf", run_round_to_dtype, .count = 4099, .to = BPT_DTYPE_F16, .range = 100000.0f},
    {"round_to_dtype fp8_e4m3", run_round_to_dtype, .count = 4099, .to = BPT_DTYPE_FP8_E4M3, .range = 400.0f},
    {"round_to_dtype fp8_e5m2", run_round_to_dtype, .count = 4099, .to = BPT_DTYPE_FP8_E5M2, .range = 1000.0f},
    {"absolute_max 10007", run_absolute_max, .count = 10007, .range = 50.0f},
    {"absolute_max 1", run_absolute_max, .count = 1, .range = 3.0f},
    {"absolute_max skipping inf and NaN", run_absolute_max, .count = 4099, .range = 5.0f, .inject_nonfinite = true},
    {"reduce_statistics 100003", run_reduce_statistics, .count = 100003, .range = 4.0f, .tolerance = 1e-6},
    {"reduce_statistics 17", run_reduce_statistics, .count = 17, .range = 4.0f, .tolerance = 1e-6},
    {"scale_clamp by norm", run_scale_clamp, .count = 10007, .range = 3.0f, .scale = 0.25f, .low = -INFINITY, .high = INFINITY},
    {"scale_clamp by value", run_scale_clamp, .count = 10007, .range = 3.0f, .scale = 1.0f, .low = -0.5f, .high = 0.75f},
    {"unscale_check_finite, all finite", run_unscale, .count = 100003, .range = 1000.0f, .scale = 1.0f / 1024.0f},
    {"unscale_check_finite with an infinity", run_unscale, .count = 100003, .range = 1000.0f, .scale = 1.0f / 1024.0f, .inject_nonfinite = true},
    {"update sgd", run_update, .count = 100003, .weight_decay = 0.01f, .tolerance = 1e-5},
    {"update sgd momentum", run_update, .count = 100003, .weight_decay = 0.01f, .momentum = 0.9f, .tolerance = 1e-5},
    {"update sgd nesterov", run_update, .count = 100003, .weight_decay = 0.01f, .momentum = 0.9f, .nesterov = true, .tolerance = 1e-5},
    {"update adam (L2)", run_update, .count = 100003, .weight_decay = 0.01f, .adam = true, .tolerance = 1e-5},
    {"update adamw", run_update, .count = 100003, .weight_decay = 0.01f, .adam = true, .decoupled = true, .tolerance = 1e-5},
    {"loss scaler skips an overflow, then steps", run_loss_scaler, .count = 4099, .scale = 65536.0f},
    {"memory round trip 4 bytes", run_memory, .count = 1},
    {"memory round trip 4000 bytes", run_memory, .count = 1000},
    {"memory round trip 300000 bytes", run_memory, .count = 75000},
    {"memory round trip 20 MiB + 12 bytes", run_memory, .count = (20 << 20) / 4 + 3},
    {"mlp 196-48-24-10, 6 sgd steps", run_mlp_steps, .scale = 0.05f, .momentum = 0.9f, .tolerance = 1e-4},
};
// clang-format on
enum { PRIMITIVE_CASE_COUNT = sizeof primitive_cases / sizeof primitive_cases[0] };

static void run_primitive_case(int index) {
  const primitive_case *c = &primitive_cases[index];
  case_result reference = {0};
  for (int b = 0; b < backend_count; b++) {
    backend_under_test *t = &backends[b];
    case_result r = {0};
    t->context->backend.error_message[0] = '\0';
    bpt_status status = c->run(t, c, b == 0, &r);
    if (status == BPT_ERR_UNSUPPORTED && b > 0) {
      record_skip(c->name, t->label, status, t->context->backend.error_message);
    } else if (status != BPT_OK) {
      record_failure(c->name, t->label, "failed with %s: %s %s", bpt_status_string(status),
                     t->context->backend.error_message, bpt_context_last_error(t->context));
    } else if (b == 0) {
      reference = r;
      memset(&r, 0, sizeof r);
    } else {
      compare_results(c->name, t->label, &reference, &r, c->tolerance);
    }
    result_free(&r);
  }
  result_free(&reference);
}

/* ---- attention at lengths the op cases cannot reach ---- */

/* Fused attention against attention_forward_reference and its gradients in double, for sequences long enough
 * to cross many of the kernels' blocks (T = 1024 included): the loss is MSE(out, target), so dO = 2 (O - t) /
 * count, and per (n, h): D_i = dO_i . O_i, P = exp(S - L), dS = P (dO_i . v_j - D_i), dq_i = sum_j dS k_j /
 * sqrt(D), dk_j = sum_i dS q_i / sqrt(D), dv_j = sum_i P dO_i. Finite differences cannot check these sizes:
 * one element's effect on the loss sinks below f32 rounding. */
typedef struct long_attention {
  const char *name;
  int64_t batch, queries, keys, channels, heads;
  bool causal;
} long_attention;

static const long_attention long_attentions[] = {
    {"attention T 1024 causal, 2 heads of 16", 1, 1024, 1024, 32, 2, true},
    {"attention T 1024, 1 head of 8", 1, 1024, 1024, 8, 1, false},
    {"attention causal Tq 300 > Tk 200 (100 queries see no key), 3 heads of 8", 2, 300, 200, 24, 3, true},
    {"attention causal Tq 130 < Tk 333, 1 head of 16", 1, 130, 333, 16, 1, true},
};

/* max |got - expected| / (|expected| + rms(expected)) over count values. */
static double worst_relative(const float *got, const double *expected, int64_t count, int64_t *where) {
  double squares = 0.0, worst = 0.0;
  for (int64_t i = 0; i < count; i++)
    squares += expected[i] * expected[i];
  const double rms = sqrt(squares / (double)count);
  *where = 0;
  for (int64_t i = 0; i < count; i++) {
    const double error = fabs((double)got[i] - expected[i]) / (fabs(expected[i]) + rms + 1e-30);
    if (!(error <= worst)) worst = error, *where = i;
  }
  return worst;
}

static void attention_gradient_reference(const long_attention *a, const float *q, const float *k, const float *v,
                                         const double *out, const double *lse, const float *target, double *dq,
                                         double *dk, double *dv) {
  const int64_t C = a->channels, D = C / a->heads, count = a->batch * a->queries * C;
  const double scale = 1.0 / sqrt((double)D);
  for (int64_t n = 0; n < a->batch; n++)
    for (int64_t h = 0; h < a->heads; h++)
      for (int64_t i = 0; i < a->queries; i++) {
        const double L = lse[(n * a->heads + h) * a->queries + i];
        if (L == -INFINITY) continue;
        const int64_t qi = (n * a->queries + i) * C + h * D;
        double delta = 0.0, dout[64];
        for (int64_t d = 0; d < D; d++) {
          dout[d] = 2.0 * (out[qi + d] - target[qi + d]) / (double)count;
          delta += dout[d] * out[qi + d];
        }
        const int64_t visible = a->causal ? i + a->keys - a->queries + 1 : a->keys;
        for (int64_t j = 0; j < visible && j < a->keys; j++) {
          const int64_t kj = (n * a->keys + j) * C + h * D;
          double s = 0.0, dp = 0.0;
          for (int64_t d = 0; d < D; d++) {
            s += (double)q[qi + d] * k[kj + d];
            dp += dout[d] * v[kj + d];
          }
          const double p = exp(s * scale - L), ds = p * (dp - delta);
          for (int64_t d = 0; d < D; d++) {
            dq[qi + d] += ds * k[kj + d] * scale;
            dk[kj + d] += ds * q[qi + d] * scale;
            dv[kj + d] += p * dout[d];
          }
        }
      }
}

/* One long case on one backend: build, run forward and backward, compare output and gradients. */
static bpt_status run_long_attention(const long_attention *a, backend_under_test *t) {
  const int64_t C = a->channels, q_count = a->batch * a->queries * C, k_count = a->batch * a->keys * C;
  bpt_context *context = t->context;
  bpt_graph *graph = NULL;
  bpt_node *q = NULL, *k = NULL, *v = NULL, *target = NULL, *out = NULL, *loss = NULL;
  bpt_tensor *tensors[4] = {NULL};
  float *host[4] = {NULL}, *got = malloc((size_t)(q_count + 2 * k_count) * sizeof *got);
  double *expected = calloc((size_t)(2 * q_count + 2 * k_count), sizeof *expected),
         *lse = malloc((size_t)(a->batch * a->heads * a->queries) * sizeof *lse);
  bpt_status status = got && expected && lse ? bpt_graph_create(context, &graph) : BPT_ERR_OUT_OF_MEMORY;
  if (status == BPT_OK)
    status = bpt_graph_input_sequence(graph, "q", BPT_DTYPE_F32, a->queries, 1, (const int64_t[]){C}, &q);
  if (status == BPT_OK) status = bpt_graph_input(graph, "k", BPT_DTYPE_F32, 2, (const int64_t[]){a->keys, C}, &k);
  if (status == BPT_OK) status = bpt_graph_input(graph, "v", BPT_DTYPE_F32, 2, (const int64_t[]){a->keys, C}, &v);
  if (status == BPT_OK)
    status = bpt_graph_input(graph, "target", BPT_DTYPE_F32, 2, (const int64_t[]){a->queries, C}, &target);
  if (status == BPT_OK) {
    /* Inputs get gradients of their own (set before their consumers exist, which inherit the flag). */
    q->requires_grad = k->requires_grad = v->requires_grad = true;
    status = bpt_scaled_dot_product_attention(graph, "attention", q, k, v, a->heads, a->causal, 0.0f, &out);
  }
  if (status == BPT_OK) status = bpt_mse_loss(graph, "loss", out, target, &loss);
  if (status == BPT_OK) {
    bpt_precision_options precision = bpt_precision_options_default();
    precision.keep_all_values = 1;
    status = bpt_graph_set_precision(graph, &precision);
  }
  if (status == BPT_OK) status = bpt_graph_compile(graph, loss, a->batch);
  bpt_node *leaves[4] = {q, k, v, target};
  test_random random;
  test_random_seed(&random, 4242 + (uint64_t)a->queries);
  for (int i = 0; i < 4 && status == BPT_OK; i++) {
    const int64_t rows = i == 1 || i == 2 ? a->keys : a->queries;
    status = bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){a->batch, rows, C}, &tensors[i]);
    if (status != BPT_OK) break;
    host[i] = bpt_tensor_data(tensors[i]);
    /* Scores up to about +-D: the online softmax's rescaling matters. */
    test_random_fill(&random, host[i], a->batch * rows * C, i < 2 ? -2.0f : -1.0f, i < 2 ? 2.0f : 1.0f);
    status = bpt_graph_set_input(graph, leaves[i], tensors[i]);
  }
  if (status == BPT_OK) status = bpt_graph_forward(graph);
  if (status == BPT_OK) status = bpt_graph_backward(graph);
  if (status == BPT_OK) status = download_floats(graph, out->value, q_count, got);
  if (status != BPT_OK) {
    if (status == BPT_ERR_UNSUPPORTED && t != &backends[0])
      record_skip(a->name, t->label, status, bpt_context_last_error(context));
    else
      record_failure(a->name, t->label, "failed with %s: %s", bpt_status_string(status),
                     bpt_context_last_error(context));
  } else {
    double *out_ref = expected, *dq = expected + q_count, *dk = dq + q_count, *dv = dk + k_count;
    attention_forward_reference(host[0], host[1], host[2], a->batch, a->queries, a->keys, C, a->heads, a->causal,
                                out_ref, lse);
    attention_gradient_reference(a, host[0], host[1], host[2], out_ref, lse, host[3], dq, dk, dv);
    int64_t where;
    double worst = worst_relative(got, out_ref, q_count, &where);
    if (!(worst <= 1e-5))
      record_failure(a->name, t->label, "output[%lld] = %.9g, the reference gives %.9g (relative %.2g)",
                     (long long)where, (double)got[where], out_ref[where], worst);
    const char *names[3] = {"dq", "dk", "dv"};
    const bpt_node *inputs[3] = {q, k, v};
    const double *references[3] = {dq, dk, dv};
    for (int i = 0; i < 3 && status == BPT_OK; i++) {
      const int64_t count = i == 0 ? q_count : k_count;
      status = download_floats(graph, inputs[i]->grad, count, got);
      if (status != BPT_OK) break;
      worst = worst_relative(got, references[i], count, &where);
      if (!(worst <= 1e-4))
        record_failure(a->name, t->label, "%s[%lld] = %.9g, the reference gives %.9g (relative %.2g)", names[i],
                       (long long)where, (double)got[where], references[i][where], worst);
    }
  }
  for (int i = 0; i < 4; i++)
    bpt_tensor_destroy(tensors[i]);
  bpt_graph_destroy(graph);
  free(got);
  free(expected);
  free(lse);
  return status;
}

/* Every backend but the CPU's narrower loop levels (attention's row loops do not depend on them). */
static void run_long_attentions(void) {
  for (size_t c = 0; c < sizeof long_attentions / sizeof long_attentions[0]; c++)
    for (int b = 0; b < backend_count; b++)
      if (!backends[b].loop_limit) run_long_attention(&long_attentions[c], &backends[b]);
}

/* ---- the test ---- */

static void every_op_and_primitive_matches_the_cpu(void **state) {
  (void)state;
  open_backends();
  assert_true(backend_count > 0 && strcmp(backends[0].name, "cpu") == 0 && !backends[0].loop_limit);
  check_every_op_has_a_case();
  for (int k = 0; k < OP_CASE_COUNT; k++)
    run_op_case(k);
  int storage_cases = 0;
  for (int k = 0; k < OP_CASE_COUNT; k++)
    storage_cases += run_storage_case(k);
  print_message("%d op cases also ran with 16-bit storage against the rounding path\n", storage_cases);
  for (int k = 0; k < PRIMITIVE_CASE_COUNT; k++)
    run_primitive_case(k);
  run_long_attentions();
  print_message("%d op cases and %d primitive cases on %d backends, %d (case, backend) pairs skipped\n", OP_CASE_COUNT,
                PRIMITIVE_CASE_COUNT, backend_count, skip_count);
  close_backends();
  if (failure_count) {
    fprintf(stderr, "%d failures:\n%s", failure_count, failure_log);
    free(failure_log);
    failure_log = NULL;
    fail_msg("%d (case, backend) comparisons failed; the list is above", failure_count);
  }
}

/* An id outside the table fails forward on every backend with a message naming the node, the position and the
 * value (the CPU checks before it copies; CUDA by a device flag read after its kernel), and never reads
 * outside the table. */
static void embedding_ids_out_of_range_fail_on_every_backend(void **state) {
  (void)state;
  open_backends();
  static const struct {
    int32_t value;
    const char *message;
  } bad[] = {{10, "embedding 'tok': forward kernel failed on backend '%s': id 10 at sample 1, token 2 is outside "
                  "the table's [0, 7)"},
             {-1, "id -1 at sample 1, token 2 is outside the table's [0, 7)"}};
  for (int b = 0; b < backend_count; b++) {
    bpt_context *context = backends[b].context;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      bpt_graph *graph;
      bpt_node *ids, *out;
      bpt_tensor *tensor;
      const int64_t dims[2] = {3, 4};
      assert_ok(context, bpt_graph_create(context, &graph));
      assert_ok(context, bpt_graph_input_sequence(graph, "ids", BPT_DTYPE_I32, 4, 0, NULL, &ids));
      assert_ok(context, bpt_layer_embedding(graph, "tok", ids, 7, 5, &out));
      const bpt_status compiled = bpt_graph_compile(graph, NULL, 3);
      if (compiled == BPT_ERR_UNSUPPORTED && b > 0) {
        print_message("skipped: embedding ids out of range on %s (%s)\n", backends[b].label,
                      bpt_context_last_error(context));
        bpt_graph_destroy(graph);
        continue;
      }
      assert_ok(context, compiled);
      assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, dims, &tensor));
      int32_t *values = bpt_tensor_data(tensor);
      for (int i = 0; i < 12; i++)
        values[i] = i % 7;
      values[1 * 4 + 2] = bad[k].value;
      values[2 * 4 + 3] = 99; /* a later bad id: the first in row-major order is named */
      assert_ok(context, bpt_graph_set_input(graph, ids, tensor));
      char expected[256];
      snprintf(expected, sizeof expected, bad[k].message, backends[b].name);
      assert_fails(context, BPT_ERR_INVALID_ARGUMENT, expected, bpt_graph_forward(graph));
      bpt_tensor_destroy(tensor);
      bpt_graph_destroy(graph);
    }
    /* Plain ids (N): the sample alone is named. */
    bpt_graph *graph;
    bpt_node *ids, *table, *out;
    bpt_tensor *tensor;
    assert_ok(context, bpt_graph_create(context, &graph));
    assert_ok(context, bpt_graph_input(graph, "ids", BPT_DTYPE_I32, 0, NULL, &ids));
    assert_ok(context, bpt_graph_parameter(graph, "table", 2, (const int64_t[]){3, 2}, BPT_INIT_NORMAL_SMALL, &table));
    assert_ok(context, bpt_embedding(graph, "rows", ids, table, &out));
    if (bpt_graph_compile(graph, NULL, 4) == BPT_OK) {
      assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, (const int64_t[]){4}, &tensor));
      memcpy(bpt_tensor_data(tensor), (const int32_t[]){0, 2, 1, 3}, 4 * sizeof(int32_t));
      assert_ok(context, bpt_graph_set_input(graph, ids, tensor));
      assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "embedding 'rows': forward kernel failed on backend",
                   bpt_graph_forward(graph));
      assert_non_null(strstr(bpt_context_last_error(context), "id 3 at sample 3 is outside the table's [0, 3)"));
      bpt_tensor_destroy(tensor);
    }
    bpt_graph_destroy(graph);
  }
  close_backends();
}

/* softmax_cross_entropy with every position ignored: loss 0 and zero gradients (not 0/0) on every backend
 * that takes the options; fpga-sim refuses them at compile naming why. A label neither in range nor the
 * ignore index still fails, and smoothing outside [0, 1] is refused when the node is built. */
static void cross_entropy_with_every_position_ignored_is_zero(void **state) {
  (void)state;
  open_backends();
  enum { N = 2, T = 3, V = 4 };
  for (int b = 0; b < backend_count; b++) {
    bpt_context *context = backends[b].context;
    bpt_graph *graph;
    bpt_node *logits, *labels, *loss;
    assert_ok(context, bpt_graph_create(context, &graph));
    assert_ok(context, bpt_graph_input_sequence(graph, "logits", BPT_DTYPE_F32, T, 1, (const int64_t[]){V}, &logits));
    logits->requires_grad = true;
    assert_ok(context, bpt_graph_input_sequence(graph, "labels", BPT_DTYPE_I32, T, 0, NULL, &labels));
    if (b == 0) {
      assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "softmax_cross_entropy 'loss': label smoothing 1.5 is outside [0, 1]",
                   bpt_softmax_cross_entropy_options(graph, "loss", logits, labels, -100, 1.5f, &loss));
      assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "label smoothing nan is outside",
                   bpt_softmax_cross_entropy_options(graph, "loss", logits, labels, -100, NAN, &loss));
    }
    assert_ok(context, bpt_softmax_cross_entropy_options(graph, "loss", logits, labels, -100, 0.1f, &loss));
    const bpt_status compiled = bpt_graph_compile(graph, loss, N);
    if (compiled == BPT_ERR_UNSUPPORTED && b > 0) {
      assert_non_null(strstr(bpt_context_last_error(context), "not supported on backend"));
      print_message("skipped: cross-entropy options on %s (%s)\n", backends[b].label, bpt_context_last_error(context));
      bpt_graph_destroy(graph);
      continue;
    }
    assert_ok(context, compiled);
    bpt_tensor *x, *y;
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){N, T, V}, &x));
    assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, (const int64_t[]){N, T}, &y));
    for (int i = 0; i < N * T * V; i++)
      ((float *)bpt_tensor_data(x))[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < N * T; i++)
      ((int32_t *)bpt_tensor_data(y))[i] = -100;
    assert_ok(context, bpt_graph_set_input(graph, logits, x));
    assert_ok(context, bpt_graph_set_input(graph, labels, y));
    assert_ok(context, bpt_graph_forward(graph));
    float value = -1.0f, gradient[N * T * V];
    assert_ok(context, bpt_graph_loss(graph, &value));
    assert_true(value == 0.0f);
    assert_ok(context, bpt_graph_backward(graph));
    assert_int_equal(download_floats(graph, logits->grad, N * T * V, gradient), BPT_OK);
    for (int i = 0; i < N * T * V; i++)
      assert_true(gradient[i] == 0.0f);
    /* One label in range again: the loss is that position's alone. */
    ((int32_t *)bpt_tensor_data(y))[4] = 1;
    assert_ok(context, bpt_graph_set_input(graph, labels, y));
    assert_ok(context, bpt_graph_forward(graph));
    assert_ok(context, bpt_graph_loss(graph, &value));
    assert_true(value > 0.0f && isfinite(value));
    if (b == 0) { /* CUDA reports a bad label as a NaN loss instead (no synchronisation per step) */
      ((int32_t *)bpt_tensor_data(y))[5] = 7;
      assert_ok(context, bpt_graph_set_input(graph, labels, y));
      assert_fails(context, BPT_ERR_INVALID_ARGUMENT, "label 7 of sample 5 is outside [0, 4) and is not the ignore index",
                   bpt_graph_forward(graph));
    }
    bpt_tensor_destroy(x);
    bpt_tensor_destroy(y);
    bpt_graph_destroy(graph);
  }
  close_backends();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(every_op_and_primitive_matches_the_cpu),
                                     cmocka_unit_test(embedding_ids_out_of_range_fail_on_every_backend),
                                     cmocka_unit_test(cross_entropy_with_every_position_ignored_is_zero)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
