/* Misuse of the public API: NULL handles, wrong shapes and dtypes, out-of-range options, calls out of order
 * and handles from another graph or context. Each must return the documented status with a message that
 * names the problem, and never crash (this test also runs under ASan/UBSan and valgrind). */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "test_support.h"

static int cases; /* bad calls made, reported at the end */

#define FAILS(context, status, fragment, expression)                                                                   \
  do {                                                                                                                 \
    assert_fails((context), (status), (fragment), (expression));                                                       \
    cases++;                                                                                                           \
  } while (0)

static void constants_and_queries_tolerate_bad_values(void **state) {
  (void)state;
  assert_string_equal(bpt_status_string((bpt_status)999), "unknown status");
  assert_int_equal(bpt_dtype_size((bpt_dtype)-1), 0);
  assert_string_equal(bpt_dtype_name((bpt_dtype)77), "unknown");
  assert_null(bpt_backend_name(-1));
  assert_null(bpt_backend_name(bpt_backend_count()));
  assert_null(bpt_context_backend(NULL));
  assert_int_equal(bpt_context_num_threads(NULL), 0);
  assert_null(bpt_tensor_data(NULL));
  assert_int_equal(bpt_tensor_rank(NULL), 0);
  assert_int_equal(bpt_tensor_dim(NULL, 0), 0);
  assert_int_equal(bpt_tensor_element_count(NULL), 0);
  assert_int_equal(bpt_graph_parameter_count(NULL), 0);
  assert_string_equal(bpt_node_name(NULL), "");
  assert_int_equal(bpt_node_rank(NULL), 0);
  assert_int_equal(bpt_node_dim(NULL, 0), 0);
  assert_true(bpt_optimizer_learning_rate(NULL) == 0.0f);
  assert_int_equal(bpt_optimizer_step_count(NULL), 0);
  assert_int_equal(bpt_dataset_size(NULL), 0);
  assert_int_equal(bpt_dataset_sample_size(NULL), 0);
  assert_int_equal(bpt_dataset_sample_shape(NULL, NULL), 0);
  assert_int_equal(bpt_dataset_class_count(NULL), 0);
  assert_int_equal(bpt_dataset_batch_count(NULL, 10), 0);
  /* Destroying NULL is a no-op everywhere. */
  bpt_context_destroy(NULL);
  bpt_tensor_destroy(NULL);
  bpt_graph_destroy(NULL);
  bpt_optimizer_destroy(NULL);
  bpt_dataset_destroy(NULL);
}

static void context_creation(void **state) {
  (void)state;
  bpt_context *context = (bpt_context *)&cases; /* must be reset to NULL on failure */
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_context_create(NULL, NULL));
  bpt_context_options options = bpt_context_options_default();
  options.backend = "abacus";
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "unknown backend 'abacus' (known: cpu, cuda, fpga-sim)",
        bpt_context_create(&options, &context));
  assert_null(context);
  options = bpt_context_options_default();
  options.num_threads = -3;
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "num_threads is -3", bpt_context_create(&options, &context));
  options = bpt_context_options_default();
  options.size = 3;
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "size field is 3", bpt_context_create(&options, &context));
  options.size = SIZE_MAX;
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "initialise options", bpt_context_create(&options, &context));
  /* A NULL backend name means the default. */
  options = bpt_context_options_default();
  options.backend = NULL;
  assert_ok(NULL, bpt_context_create(&options, &context));
  assert_string_equal(bpt_context_backend(context), "cpu");
  assert_string_equal(bpt_context_last_error(context), "");
  bpt_context_destroy(context);
}

static void tensors(void **state) {
  (void)state;
  bpt_context *c = test_context(1);
  bpt_tensor *tensor;
  int64_t dims[3] = {2, 3, 4}, zero[2] = {2, 0}, negative[1] = {-5}, huge[3] = {INT64_C(1) << 30, INT64_C(1) << 30, 8};
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_tensor_create(c, BPT_DTYPE_F32, 3, dims, NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "context is NULL", bpt_tensor_create(NULL, BPT_DTYPE_F32, 3, dims, &tensor));
  FAILS(c, BPT_ERR_DTYPE, "unknown dtype 42", bpt_tensor_create(c, (bpt_dtype)42, 3, dims, &tensor));
  FAILS(c, BPT_ERR_SHAPE, "rank 0 is outside", bpt_tensor_create(c, BPT_DTYPE_F32, 0, dims, &tensor));
  FAILS(c, BPT_ERR_SHAPE, "rank 7 is outside", bpt_tensor_create(c, BPT_DTYPE_F32, 7, dims, &tensor));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "dims is NULL", bpt_tensor_create(c, BPT_DTYPE_F32, 2, NULL, &tensor));
  FAILS(c, BPT_ERR_SHAPE, "dimension 1 is 0", bpt_tensor_create(c, BPT_DTYPE_F32, 2, zero, &tensor));
  FAILS(c, BPT_ERR_SHAPE, "dimension 0 is -5", bpt_tensor_create(c, BPT_DTYPE_F32, 1, negative, &tensor));
  FAILS(c, BPT_ERR_SHAPE, "too large", bpt_tensor_create(c, BPT_DTYPE_F32, 3, huge, &tensor));
  assert_null(tensor);
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 3, dims, &tensor));
  assert_int_equal(bpt_tensor_dim(tensor, -1), 0);
  assert_int_equal(bpt_tensor_dim(tensor, 3), 0);
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "tensor is NULL", bpt_tensor_set_batch(NULL, 1));
  FAILS(c, BPT_ERR_SHAPE, "batch 3 is outside [1, 2]", bpt_tensor_set_batch(tensor, 3));
  FAILS(c, BPT_ERR_SHAPE, "batch 0 is outside", bpt_tensor_set_batch(tensor, 0));
  bpt_tensor_destroy(tensor);
  bpt_context_destroy(c);
}

/* A small graph: x (4) -> fc (3) -> loss with labels; built per test. */
typedef struct small {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *logits, *loss;
} small;

static void small_build(small *s, bool compile) {
  s->context = test_context(2);
  int64_t features = 4;
  assert_ok(s->context, bpt_graph_create(s->context, &s->graph));
  assert_ok(s->context, bpt_graph_input(s->graph, "x", BPT_DTYPE_F32, 1, &features, &s->x));
  assert_ok(s->context, bpt_graph_input(s->graph, "labels", BPT_DTYPE_I32, 0, NULL, &s->labels));
  assert_ok(s->context, bpt_layer_linear(s->graph, "fc", s->x, 3, BPT_INIT_HE_NORMAL, &s->logits));
  assert_ok(s->context, bpt_softmax_cross_entropy(s->graph, "loss", s->logits, s->labels, &s->loss));
  if (compile) assert_ok(s->context, bpt_graph_compile(s->graph, s->loss, 4));
}

static void small_destroy(small *s) {
  bpt_graph_destroy(s->graph);
  bpt_context_destroy(s->context);
}

static void graph_building(void **state) {
  (void)state;
  small s, other;
  small_build(&s, false);
  small_build(&other, false); /* another context and graph */
  bpt_context *c = s.context;
  bpt_graph *g = s.graph;
  bpt_node *node = NULL;
  int64_t dims[2] = {4, 5}, bad[2] = {4, 0}, big[3] = {INT32_MAX, INT32_MAX, INT32_MAX};

  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_graph_create(c, NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "context is NULL", bpt_graph_create(NULL, &g));
  g = s.graph;
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_input(NULL, "a", BPT_DTYPE_F32, 1, dims, &node));
  FAILS(c, BPT_ERR_DTYPE, "dtype bf16 is not accepted", bpt_graph_input(g, "a", BPT_DTYPE_BF16, 1, dims, &node));
  FAILS(c, BPT_ERR_DTYPE, "dtype unknown is not accepted", bpt_graph_input(g, "a", (bpt_dtype)99, 1, dims, &node));
  FAILS(c, BPT_ERR_SHAPE, "rank -1 is outside", bpt_graph_input(g, "a", BPT_DTYPE_F32, -1, dims, &node));
  FAILS(c, BPT_ERR_SHAPE, "rank 6 is outside", bpt_graph_input(g, "a", BPT_DTYPE_F32, 6, dims, &node));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "dims is NULL", bpt_graph_input(g, "a", BPT_DTYPE_F32, 2, NULL, &node));
  FAILS(c, BPT_ERR_SHAPE, "dimension 1 is 0", bpt_graph_input(g, "a", BPT_DTYPE_F32, 2, bad, &node));
  FAILS(c, BPT_ERR_SHAPE, "elements", bpt_graph_input(g, "a", BPT_DTYPE_F32, 3, big, &node));
  FAILS(c, BPT_ERR_SHAPE, "elements", bpt_graph_parameter(g, "p", 3, big, BPT_INIT_ZEROS, &node));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_graph_input(g, "a", BPT_DTYPE_F32, 2, dims, NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "a node named 'x' already exists",
        bpt_graph_input(g, "x", BPT_DTYPE_F32, 2, dims, &node));
  char long_name[200];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "longer than 63", bpt_graph_input(g, long_name, BPT_DTYPE_F32, 2, dims, &node));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "unknown initializer 17",
        bpt_graph_parameter(g, "p", 2, dims, (bpt_initializer)17, &node));
  FAILS(c, BPT_ERR_SHAPE, "rank 0 is outside", bpt_graph_parameter(g, "p", 0, dims, BPT_INIT_ZEROS, &node));

  /* Ops: NULL inputs, wrong dtypes and shapes, nodes from another graph (and context). */
  bpt_node *weight, *y;
  int64_t weight_dims[2] = {3, 7};
  assert_ok(c, bpt_graph_parameter(g, "w7", 2, weight_dims, BPT_INIT_ZEROS, &weight));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_relu(NULL, "r", s.x, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "input 0 is NULL", bpt_relu(g, "r", NULL, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_relu(g, "r", s.x, NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "input 'x' belongs to another graph", bpt_relu(g, "r", other.x, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "belongs to another graph", bpt_sigmoid(g, "r", other.logits, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "input 1 is NULL", bpt_linear(g, "l", s.x, NULL, NULL, &y));
  /* A NULL input left by an earlier builder that failed: the node being built is named and the failure repeated. */
  bpt_node *failed = s.x;
  FAILS(c, BPT_ERR_SHAPE, "dimension 0 is 0", bpt_layer_linear(g, "fc_zero", s.x, 0, BPT_INIT_ZEROS, &failed));
  assert_null(failed);
  FAILS(c, BPT_ERR_INVALID_ARGUMENT,
        "mse 'loss2': input 0 is NULL (did an earlier builder fail? the last error was: "
        "parameter 'fc_zero.weight': dimension 0 is 0",
        bpt_mse_loss(g, "loss2", failed, s.x, &y));
  FAILS(c, BPT_ERR_SHAPE, "input 'x' has 4 features, weight 'w7' expects 7", bpt_linear(g, "l", s.x, weight, NULL, &y));
  FAILS(c, BPT_ERR_DTYPE, "input and weight must be f32", bpt_linear(g, "l", s.labels, weight, NULL, &y));
  FAILS(c, BPT_ERR_SHAPE, "must be a 2-D (out, in) tensor", bpt_linear(g, "l", s.x, s.x, NULL, &y));
  FAILS(c, BPT_ERR_DTYPE, "input 'labels' must be f32", bpt_relu(g, "r", s.labels, &y));
  FAILS(c, BPT_ERR_DTYPE, "labels 'x' must be an i32 input", bpt_softmax_cross_entropy(g, "ce", s.logits, s.x, &y));
  FAILS(c, BPT_ERR_SHAPE, "logits 'labels' must be f32", bpt_softmax_cross_entropy(g, "ce", s.labels, s.labels, &y));
  FAILS(c, BPT_ERR_SHAPE, "prediction 'fc' has 3 values per sample, target 'x' has 4",
        bpt_mse_loss(g, "mse", s.logits, s.x, &y));
  FAILS(c, BPT_ERR_DTYPE, "must be f32", bpt_mse_loss(g, "mse", s.logits, s.labels, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "slope nan", bpt_leaky_relu(g, "lr", s.x, NAN, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "slope inf", bpt_leaky_relu(g, "lr", s.x, INFINITY, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "must be non-NULL", bpt_layer_linear(g, NULL, s.x, 3, BPT_INIT_ZEROS, &y));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_layer_linear(NULL, "l", s.x, 3, BPT_INIT_ZEROS, &y));
  FAILS(c, BPT_ERR_SHAPE, "dimension 0 is -3", bpt_layer_linear(g, "neg", s.x, -3, BPT_INIT_ZEROS, &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "belongs to another graph",
        bpt_layer_linear(g, "foreign", other.x, 3, BPT_INIT_ZEROS, &y));

  /* Lookups. */
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "no node named 'nope'", bpt_graph_find_node(g, "nope", &y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "NULL argument", bpt_graph_find_node(g, NULL, &y));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_find_node(NULL, "x", &y));

  /* Out of order before compile. */
  FAILS(c, BPT_ERR_STATE, "compile the graph first", bpt_graph_forward(g));
  FAILS(c, BPT_ERR_STATE, "compile the graph first", bpt_graph_backward(g));
  FAILS(c, BPT_ERR_STATE, "compile the graph first", bpt_graph_zero_gradients(g));
  bpt_optimizer *optimizer;
  FAILS(c, BPT_ERR_STATE, "must be compiled with a loss", bpt_optimizer_create(g, NULL, &optimizer));
  FAILS(c, BPT_ERR_STATE, "compile the graph first", bpt_checkpoint_save(g, "x.ckpt", NULL));

  /* Compile: bad batch, foreign or non-scalar loss, twice. */
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_compile(NULL, s.loss, 4));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "max_batch is 0", bpt_graph_compile(g, s.loss, 0));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "max_batch is -1", bpt_graph_compile(g, s.loss, -1));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "loss 'loss' belongs to another graph", bpt_graph_compile(g, other.loss, 4));
  FAILS(c, BPT_ERR_SHAPE, "loss 'fc' is not a scalar f32", bpt_graph_compile(g, s.logits, 4));
  assert_ok(c, bpt_graph_compile(g, s.loss, 4));
  FAILS(c, BPT_ERR_STATE, "already compiled", bpt_graph_compile(g, s.loss, 4));
  FAILS(c, BPT_ERR_STATE, "relu 'late': the graph is already compiled; nodes cannot be added", bpt_relu(g, "late", s.x, &y));
  /* A layer added after compile is named (its parameters used to fail first, as an anonymous "parameter"). */
  FAILS(c, BPT_ERR_STATE, "bpt_layer_linear 'late_fc': the graph is already compiled",
        bpt_layer_linear(g, "late_fc", s.x, 3, BPT_INIT_ZEROS, &y));
  FAILS(c, BPT_ERR_STATE, "parameter 'late_w': the graph is already compiled",
        bpt_graph_parameter(g, "late_w", 2, dims, BPT_INIT_ZEROS, &y));
  small_destroy(&other);
  small_destroy(&s);
}

/* A graph whose nodes multiply to more memory than can exist must fail to compile, not overflow. */
static void oversized_graphs_fail_to_compile(void **state) {
  (void)state;
  bpt_context *c = test_context(3);
  bpt_graph *graph;
  bpt_node *x, *weight, *y;
  int64_t features = INT64_C(1) << 30, weight_dims[2] = {INT64_C(1) << 30, INT64_C(1) << 30};
  assert_ok(c, bpt_graph_create(c, &graph));
  assert_ok(c, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  FAILS(c, BPT_ERR_SHAPE, "elements", bpt_graph_parameter(graph, "w", 2, weight_dims, BPT_INIT_ZEROS, &weight));
  FAILS(c, BPT_ERR_OUT_OF_MEMORY, "input 'x' needs", bpt_graph_compile(graph, NULL, INT64_C(1) << 24));
  FAILS(c, BPT_ERR_OUT_OF_MEMORY, "allocating", bpt_graph_compile(graph, NULL, 1 << 9));
  (void)y;
  bpt_graph_destroy(graph);
  bpt_context_destroy(c);
}

static void running_out_of_order(void **state) {
  (void)state;
  small s, other;
  small_build(&s, true);
  small_build(&other, true);
  bpt_context *c = s.context;
  bpt_graph *g = s.graph;
  bpt_tensor *x, *labels, *wrong_dtype, *wrong_shape, *too_big, *output, *small_output;
  int64_t x_dims[2] = {4, 4}, label_dims[1] = {4}, wrong_dims[2] = {4, 5}, big_dims[2] = {5, 4}, out_dims[2] = {4, 3},
          small_dims[2] = {1, 3};
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, x_dims, &x));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, label_dims, &labels));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 2, x_dims, &wrong_dtype));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, wrong_dims, &wrong_shape));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, big_dims, &too_big));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, out_dims, &output));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, small_dims, &small_output));

  bpt_optimizer *optimizer;
  assert_ok(c, bpt_optimizer_create(g, NULL, &optimizer));
  /* Before any forward: "run forward first". */
  bpt_context *oc = other.context;
  FAILS(oc, BPT_ERR_STATE, "bpt_graph_backward: run bpt_graph_forward first", bpt_graph_backward(other.graph));
  FAILS(oc, BPT_ERR_STATE, "run bpt_graph_forward first", bpt_graph_backward_accumulate(other.graph));
  FAILS(oc, BPT_ERR_STATE, "bpt_graph_loss: run bpt_graph_forward first", bpt_graph_loss(other.graph, &(float){0}));
  FAILS(oc, BPT_ERR_STATE, "run forward before reading 'fc'", bpt_graph_read(other.graph, other.logits, output));
  /* After a forward that failed: its error, repeated. */
  FAILS(c, BPT_ERR_STATE, "input 'x' was not set", bpt_graph_forward(g));
  FAILS(c, BPT_ERR_STATE, "the last bpt_graph_forward failed, so there is no forward pass to differentiate "
                          "(bpt_graph_forward: input 'x' was not set)", bpt_graph_backward(g));
  FAILS(c, BPT_ERR_STATE, "the last bpt_graph_forward failed", bpt_graph_backward_accumulate(g));
  FAILS(c, BPT_ERR_STATE, "the last bpt_graph_forward failed, so there is no loss to read", bpt_graph_loss(g, &(float){0}));
  FAILS(c, BPT_ERR_STATE, "run bpt_graph_backward first", bpt_optimizer_step(optimizer));
  FAILS(c, BPT_ERR_STATE, "so 'fc' has no value to read (bpt_graph_forward: input 'x' was not set)",
        bpt_graph_read(g, s.logits, output));

  /* set_input: NULLs, non-inputs, foreign nodes, wrong dtype, shape and batch. */
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_set_input(NULL, s.x, x));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "NULL node or tensor", bpt_graph_set_input(g, NULL, x));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "NULL node or tensor", bpt_graph_set_input(g, s.x, NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "node 'fc' is not an input", bpt_graph_set_input(g, s.logits, x));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "node 'x' belongs to another graph", bpt_graph_set_input(g, other.x, x));
  FAILS(c, BPT_ERR_DTYPE, "input 'x' is f32, tensor is i32", bpt_graph_set_input(g, s.x, wrong_dtype));
  FAILS(c, BPT_ERR_SHAPE, "4 values per sample; the tensor has 5", bpt_graph_set_input(g, s.x, wrong_shape));
  FAILS(c, BPT_ERR_SHAPE, "batch 5 is outside [1, 4]", bpt_graph_set_input(g, s.x, too_big));

  /* Labels out of range are caught by the loss kernel, not read out of bounds. */
  int32_t *label_values = bpt_tensor_data(labels);
  label_values[2] = 3;
  assert_ok(c, bpt_graph_set_input(g, s.x, x));
  assert_ok(c, bpt_graph_set_input(g, s.labels, labels));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "label 3 of sample 2 is outside [0, 3)", bpt_graph_forward(g));
  /* After a forward that failed, the calls that need one repeat its error instead of "run forward first". */
  FAILS(c, BPT_ERR_STATE, "bpt_graph_backward: the last bpt_graph_forward failed, so there is no forward pass "
                          "to differentiate (softmax_cross_entropy 'loss': forward kernel failed on backend 'cpu': label 3 of sample 2",
        bpt_graph_backward(g));
  FAILS(c, BPT_ERR_STATE, "bpt_graph_loss: the last bpt_graph_forward failed, so there is no loss to read (",
        bpt_graph_loss(g, &(float){0}));
  FAILS(c, BPT_ERR_STATE, "the last bpt_graph_forward failed, so 'fc' has no value to read (",
        bpt_graph_read(g, s.logits, output));
  label_values[2] = -1;
  assert_ok(c, bpt_graph_set_input(g, s.labels, labels));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "label -1 of sample 2", bpt_graph_forward(g));
  label_values[2] = 0;

  /* Inputs of different batches in one run. */
  assert_ok(c, bpt_tensor_set_batch(x, 2));
  assert_ok(c, bpt_graph_set_input(g, s.x, x));
  assert_ok(c, bpt_graph_set_input(g, s.labels, labels));
  FAILS(c, BPT_ERR_SHAPE, "has batch 4, others 2", bpt_graph_forward(g));
  assert_ok(c, bpt_tensor_set_batch(x, 4));
  assert_ok(c, bpt_graph_set_input(g, s.x, x));

  /* Reads and parameter transfers with wrong arguments after a good forward. */
  assert_ok(c, bpt_graph_forward(g));
  FAILS(c, BPT_ERR_STATE, "run bpt_graph_backward first", bpt_optimizer_step(optimizer));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "loss is NULL", bpt_graph_loss(g, NULL));
  FAILS(c, BPT_ERR_DTYPE, "node 'fc' is f32, tensor is i32", bpt_graph_read(g, s.logits, wrong_dtype));
  FAILS(c, BPT_ERR_SHAPE, "node 'fc' has 12 values, tensor holds 3", bpt_graph_read(g, s.logits, small_output));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "node 'fc' belongs to another graph", bpt_graph_read(g, other.logits, output));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "NULL node or tensor", bpt_graph_read(g, NULL, output));
  int64_t count = bpt_graph_parameter_count(g);
  float *values = calloc((size_t)count + 1, sizeof *values);
  FAILS(c, BPT_ERR_SHAPE, "count is 16, the graph has 15", bpt_graph_read_parameters(g, values, count + 1));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "values is NULL", bpt_graph_write_parameters(g, NULL, count));
  FAILS(c, BPT_ERR_SHAPE, "count is -1", bpt_graph_read_gradients(g, values, -1));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_read_parameters(NULL, values, count));
  assert_ok(c, bpt_graph_backward(g));
  assert_ok(c, bpt_optimizer_step(optimizer));

  /* An inference-only graph has no backward. */
  {
    bpt_graph *inference;
    bpt_node *input, *out;
    int64_t features = 4;
    assert_ok(c, bpt_graph_create(c, &inference));
    assert_ok(c, bpt_graph_input(inference, "x", BPT_DTYPE_F32, 1, &features, &input));
    assert_ok(c, bpt_layer_linear(inference, "fc", input, 2, BPT_INIT_ZEROS, &out));
    assert_ok(c, bpt_graph_compile(inference, NULL, 4));
    assert_ok(c, bpt_graph_set_input(inference, input, x));
    assert_ok(c, bpt_graph_forward(inference));
    FAILS(c, BPT_ERR_STATE, "compiled without a loss", bpt_graph_backward(inference));
    FAILS(c, BPT_ERR_STATE, "the graph has no loss", bpt_graph_loss(inference, &(float){0}));
    bpt_optimizer *none;
    FAILS(c, BPT_ERR_STATE, "must be compiled with a loss", bpt_optimizer_create(inference, NULL, &none));
    bpt_graph_destroy(inference);
  }
  free(values);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(wrong_dtype);
  bpt_tensor_destroy(wrong_shape);
  bpt_tensor_destroy(too_big);
  bpt_tensor_destroy(output);
  bpt_tensor_destroy(small_output);
  bpt_optimizer_destroy(optimizer);
  small_destroy(&other);
  small_destroy(&s);
}

static void optimizer_options(void **state) {
  (void)state;
  small s;
  small_build(&s, true);
  bpt_context *c = s.context;
  bpt_optimizer *optimizer = NULL;
  bpt_optimizer_options o = bpt_optimizer_options_default();
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_optimizer_create(NULL, &o, &optimizer));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_optimizer_create(s.graph, &o, NULL));
#define OPTION_CASE(statement, fragment)                                                                               \
  do {                                                                                                                 \
    o = bpt_optimizer_options_default();                                                                               \
    statement;                                                                                                         \
    FAILS(c, BPT_ERR_INVALID_ARGUMENT, fragment, bpt_optimizer_create(s.graph, &o, &optimizer));                       \
    assert_null(optimizer);                                                                                            \
  } while (0)
  OPTION_CASE(o.size = 0, "size field is 0");
  OPTION_CASE(o.kind = (bpt_optimizer_kind)9, "unknown optimizer kind 9");
  OPTION_CASE(o.learning_rate = -0.1f, "learning_rate -0.1");
  OPTION_CASE(o.learning_rate = NAN, "learning_rate nan");
  OPTION_CASE(o.learning_rate = INFINITY, "learning_rate inf");
  OPTION_CASE(o.weight_decay = -1.0f, "weight_decay -1");
  OPTION_CASE(o.momentum = 1.0f, "momentum 1 is outside [0, 1)");
  OPTION_CASE(o.momentum = NAN, "momentum nan");
  OPTION_CASE(o.nesterov = 1, "Nesterov momentum needs momentum > 0");
  OPTION_CASE((o.kind = BPT_OPTIMIZER_ADAM, o.beta1 = 1.0f), "beta1 1 and beta2 0.999");
  OPTION_CASE((o.kind = BPT_OPTIMIZER_ADAMW, o.beta2 = -0.5f), "beta2 -0.5");
  OPTION_CASE((o.kind = BPT_OPTIMIZER_ADAM, o.epsilon = 0.0f), "epsilon 0 must be > 0");
  OPTION_CASE((o.kind = BPT_OPTIMIZER_ADAM, o.epsilon = NAN), "epsilon nan");
#undef OPTION_CASE
  assert_ok(c, bpt_optimizer_create(s.graph, NULL, &optimizer));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "optimizer is NULL", bpt_optimizer_set_learning_rate(NULL, 0.1f));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "optimizer is NULL", bpt_optimizer_step(NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "nan must be finite", bpt_optimizer_set_learning_rate(optimizer, NAN));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "-1 must be finite and >= 0", bpt_optimizer_set_learning_rate(optimizer, -1));
  assert_true(bpt_optimizer_learning_rate(optimizer) == 0.01f);
  bpt_optimizer_destroy(optimizer);
  small_destroy(&s);
}

static void data_sets(void **state) {
  (void)state;
  bpt_context *c = test_context(4);
  bpt_dataset *data = (bpt_dataset *)&cases;
  const unsigned char images[16 + 6 * 4] = {0, 0, 8, 3, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3};
  const unsigned char labels[8 + 6] = {0, 0, 8, 1, 0, 0, 0, 6, 0, 1, 2, 0, 1, 2};
  const unsigned char five_labels[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5, 0, 1, 2, 0, 1};
  char images_path[4096], labels_path[4096];
  strcpy(images_path, test_write_file("misuse-images", images, sizeof images));
  strcpy(labels_path, test_write_file("misuse-labels", labels, sizeof labels));
  const char *five = test_write_file("misuse-five-labels", five_labels, sizeof five_labels);

  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "out is NULL", bpt_dataset_load_idx(c, images_path, labels_path, NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "context is NULL", bpt_dataset_load_idx(NULL, images_path, NULL, &data));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "images_path is NULL", bpt_dataset_load_idx(c, NULL, labels_path, &data));
  FAILS(c, BPT_ERR_IO, "cannot open", bpt_dataset_load_idx(c, "/nonexistent/images", NULL, &data));
  FAILS(c, BPT_ERR_FORMAT, "6 images but 5 labels", bpt_dataset_load_idx(c, images_path, five, &data));
  FAILS(c, BPT_ERR_FORMAT, "rank 3, expected 1", bpt_dataset_load_idx(c, images_path, images_path, &data));
  FAILS(c, BPT_ERR_FORMAT, "rank 1 (one value per sample, as in a label file)",
        bpt_dataset_load_idx(c, labels_path, NULL, &data));
  FAILS(c, BPT_ERR_FORMAT, "IDX image file", bpt_dataset_load_idx(c, labels_path, labels_path, &data));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "NULL argument", bpt_dataset_load_idx_directory(c, NULL, "train", &data));
  FAILS(c, BPT_ERR_IO, "neither train-images-idx3-ubyte.gz nor", bpt_dataset_load_idx_directory(c, "/", "train", &data));
  FAILS(c, BPT_ERR_IO, "cannot open: No such file or directory",
        bpt_dataset_load_idx_directory(c, "/nonexistent", "train", &data));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "context is NULL", bpt_dataset_load_idx_directory(NULL, "/", "train", &data));
  assert_null(data);

  assert_ok(c, bpt_dataset_load_idx(c, images_path, labels_path, &data));
  bpt_tensor *x, *y, *wrong, *narrow, *y_f32;
  int64_t x_dims[3] = {4, 2, 2}, y_dims[1] = {4}, wrong_dims[2] = {4, 5}, narrow_dims[2] = {1, 4};
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 3, x_dims, &x));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, y_dims, &y));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, wrong_dims, &wrong));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, narrow_dims, &narrow));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 1, y_dims, &y_f32));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "std 0 must be finite, std > 0", bpt_dataset_set_normalization(data, 0.5f, 0.0f));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "std nan must be finite", bpt_dataset_set_normalization(data, 0.5f, NAN));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "mean inf", bpt_dataset_set_normalization(data, INFINITY, 1.0f));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "data set is NULL", bpt_dataset_set_normalization(NULL, 0.0f, 1.0f));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "data set is NULL", bpt_dataset_shuffle(NULL, 1));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "data set is NULL", bpt_dataset_reset_order(NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "data set is NULL", bpt_dataset_batch(NULL, 0, 4, x, y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "images tensor is NULL", bpt_dataset_batch(data, 0, 4, NULL, y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "batch 2 of size 4 is outside the 6 samples", bpt_dataset_batch(data, 2, 4, x, y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "batch -1", bpt_dataset_batch(data, -1, 4, x, y));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "of size 0", bpt_dataset_batch(data, 0, 0, x, y));
  FAILS(c, BPT_ERR_DTYPE, "images tensor must be f32, not i32", bpt_dataset_batch(data, 0, 4, y, y));
  FAILS(c, BPT_ERR_DTYPE, "labels tensor must be i32, not f32", bpt_dataset_batch(data, 0, 4, x, y_f32));
  FAILS(c, BPT_ERR_SHAPE, "holds 5 values per sample, the data set has 4", bpt_dataset_batch(data, 0, 4, wrong, y));
  FAILS(c, BPT_ERR_SHAPE, "fewer than 4 samples", bpt_dataset_batch(data, 0, 4, narrow, y));
  assert_int_equal(bpt_dataset_batch_count(data, 0), 0);
  assert_int_equal(bpt_dataset_batch_count(data, -4), 0);
  assert_ok(c, bpt_dataset_batch(data, 1, 4, x, y)); /* the short last batch */
  assert_int_equal(bpt_tensor_dim(x, 0), 2);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_tensor_destroy(wrong);
  bpt_tensor_destroy(narrow);
  bpt_tensor_destroy(y_f32);
  bpt_dataset_destroy(data);

  /* A data set without labels cannot fill a label tensor. */
  assert_ok(c, bpt_dataset_load_idx(c, images_path, NULL, &data));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 3, x_dims, &x));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, y_dims, &y));
  FAILS(c, BPT_ERR_STATE, "has no labels", bpt_dataset_batch(data, 0, 4, x, y));
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_dataset_destroy(data);
  bpt_context_destroy(c);
}

static void checkpoints_and_anomaly_mode(void **state) {
  (void)state;
  small s, other;
  small_build(&s, true);
  small_build(&other, true);
  bpt_context *c = s.context;
  bpt_optimizer *foreign;
  assert_ok(other.context, bpt_optimizer_create(other.graph, NULL, &foreign));
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_checkpoint_save(NULL, "x.ckpt", NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_checkpoint_load(NULL, "x.ckpt", NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "path is NULL or empty", bpt_checkpoint_save(s.graph, NULL, NULL));
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "path is NULL or empty", bpt_checkpoint_load(s.graph, "", NULL));
  contents.optimizer = foreign;
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "the optimizer belongs to another graph",
        bpt_checkpoint_save(s.graph, "x.ckpt", &contents));
  contents = bpt_checkpoint_contents_default();
  contents.size = 1;
  FAILS(c, BPT_ERR_INVALID_ARGUMENT, "size field is 1", bpt_checkpoint_save(s.graph, "x.ckpt", &contents));
  FAILS(c, BPT_ERR_IO, "not a regular file", bpt_checkpoint_load(s.graph, "/", NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_set_anomaly_detection(NULL, 1));
  bpt_optimizer_destroy(foreign);
  small_destroy(&other);
  small_destroy(&s);
}

/* Every graph, op and run function given a NULL graph: a status and a message, never a dereference. */
static void null_graph_everywhere(void **state) {
  (void)state;
  small s;
  small_build(&s, false);
  bpt_node *node = NULL, *x = s.x;
  int64_t dims[1] = {3};
  float value = 0.0f;
  bpt_tensor *tensor = NULL;
  assert_ok(s.context, bpt_tensor_create(s.context, BPT_DTYPE_F32, 1, dims, &tensor));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL",
        bpt_graph_parameter(NULL, "p", 1, dims, BPT_INIT_ZEROS, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_linear(NULL, "l", x, x, NULL, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_leaky_relu(NULL, "l", x, 0.1f, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_sigmoid(NULL, "s", x, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_tanh(NULL, "t", x, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_softmax_cross_entropy(NULL, "c", x, s.labels, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_mse_loss(NULL, "m", x, x, &node));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_forward(NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_backward(NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_backward_accumulate(NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_zero_gradients(NULL));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_loss(NULL, &value));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_read(NULL, x, tensor));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_write_parameters(NULL, &value, 1));
  FAILS(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_read_gradients(NULL, &value, 1));
  /* Calls on an uncompiled graph that need compiled memory. */
  FAILS(s.context, BPT_ERR_STATE, "compile the graph first", bpt_graph_set_input(s.graph, x, tensor));
  FAILS(s.context, BPT_ERR_STATE, "compile the graph first", bpt_graph_read(s.graph, x, tensor));
  FAILS(s.context, BPT_ERR_STATE, "compile the graph first", bpt_graph_loss(s.graph, &value));
  FAILS(s.context, BPT_ERR_STATE, "compile the graph first", bpt_graph_read_parameters(s.graph, &value, 1));
  FAILS(s.context, BPT_ERR_STATE, "compile the graph first", bpt_checkpoint_load(s.graph, "x.ckpt", NULL));
  assert_int_equal(bpt_graph_parameter_count(s.graph), 0);
  bpt_tensor_destroy(tensor);
  small_destroy(&s);
}

/* ---- Two threads in one graph (issue 30) ---------------------------------------------------------------- */

typedef struct intruder {
  bpt_graph *graph;
  bpt_optimizer *optimizer;
  bpt_status forward, backward, step;
  char message[BPT_ERROR_MESSAGE_SIZE];
} intruder;

/* The second thread: each call must be refused while the first thread is inside the graph. */
static void *intrude(void *argument) {
  intruder *in = argument;
  in->forward = bpt_graph_forward(in->graph);
  snprintf(in->message, sizeof in->message, "%s", bpt_context_last_error(in->graph->context));
  in->backward = bpt_graph_backward(in->graph);
  in->step = bpt_optimizer_step(in->optimizer);
  return NULL;
}

static intruder *current_intruder;
static int intrusions;
static char intrusion_messages[2][BPT_ERROR_MESSAGE_SIZE];
static bpt_status intrusion_statuses[2][3];

/* A graph hook runs inside backward and inside the step on the first thread: the second thread is started
 * and joined from there, so it is inside the graph's call for certain, with no timing involved. */
static bpt_status hook_lets_intruder_in(void *data, bpt_graph *graph, bpt_graph_event event, int position) {
  (void)data;
  (void)graph;
  (void)position;
  if (event != BPT_GRAPH_EVENT_BACKWARD_BEGIN && event != BPT_GRAPH_EVENT_BEFORE_UPDATE) return BPT_OK;
  if (intrusions >= 2) return BPT_OK;
  pthread_t thread;
  if (pthread_create(&thread, NULL, intrude, current_intruder) != 0) return BPT_ERR_INTERNAL;
  pthread_join(thread, NULL);
  snprintf(intrusion_messages[intrusions], BPT_ERROR_MESSAGE_SIZE, "%s", current_intruder->message);
  intrusion_statuses[intrusions][0] = current_intruder->forward;
  intrusion_statuses[intrusions][1] = current_intruder->backward;
  intrusion_statuses[intrusions][2] = current_intruder->step;
  intrusions++;
  return BPT_OK;
}

static void second_thread_inside_a_graph_is_refused(void **state) {
  (void)state;
  small s;
  small_build(&s, true);
  bpt_context *c = s.context;
  bpt_optimizer *optimizer;
  assert_ok(c, bpt_optimizer_create(s.graph, NULL, &optimizer));
  bpt_tensor *x, *labels;
  int64_t x_dims[2] = {4, 4}, label_dims[1] = {4};
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_F32, 2, x_dims, &x));
  assert_ok(c, bpt_tensor_create(c, BPT_DTYPE_I32, 1, label_dims, &labels));
  memset(bpt_tensor_data(x), 0, 16 * sizeof(float));
  memset(bpt_tensor_data(labels), 0, 4 * sizeof(int32_t));
  assert_ok(c, bpt_graph_set_input(s.graph, s.x, x));
  assert_ok(c, bpt_graph_set_input(s.graph, s.labels, labels));
  intruder in = {.graph = s.graph, .optimizer = optimizer};
  current_intruder = &in;
  intrusions = 0;
  s.graph->hook = hook_lets_intruder_in;
  assert_ok(c, bpt_graph_forward(s.graph));
  assert_ok(c, bpt_graph_backward(s.graph));
  assert_ok(c, bpt_optimizer_step(optimizer));
  s.graph->hook = NULL;
  assert_int_equal(intrusions, 2);
  const char *inside[2] = {"another thread is inside bpt_graph_backward", "another thread is inside bpt_optimizer_step"};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 3; k++)
      assert_int_equal(intrusion_statuses[i][k], BPT_ERR_STATE);
    assert_non_null(strstr(intrusion_messages[i], "bpt_graph_forward: "));
    if (!strstr(intrusion_messages[i], inside[i])) fail_msg("message %d: %s", i, intrusion_messages[i]);
    cases += 3;
  }
  /* Once the first thread is out, the graph is anyone's: a call from another thread runs. */
  pthread_t thread;
  intrusions = 2;
  assert_int_equal(pthread_create(&thread, NULL, intrude, &in), 0);
  pthread_join(thread, NULL);
  assert_int_equal(in.forward, BPT_OK);
  assert_int_equal(in.backward, BPT_OK);
  assert_int_equal(in.step, BPT_OK);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(labels);
  bpt_optimizer_destroy(optimizer);
  small_destroy(&s);
}

/* A layer helper that fails part-way leaves the graph as it found it: no parameter from before the failing op
 * stays behind to reach compile, a checkpoint or a load report ('linear1.weight' used to stay after
 * model.linear on an i32 input raised). Each helper is built once to learn the name of the last node it makes;
 * in a second graph a node already holds that name, so the helper fails at its very last node. */
enum { HELPER_LINEAR, HELPER_CONV2D, HELPER_BATCH_NORM, HELPER_BATCH_NORM_RELU, HELPER_LAYER_NORM,
       HELPER_RMS_NORM, HELPER_EMBEDDING, HELPER_RESNET_BLOCK, HELPER_SEQUENTIAL, HELPER_TRANSFORMER_BLOCK,
       HELPER_COUNT };

typedef struct {
  bpt_graph *graph;
  bpt_node *vector, *image, *ids, *tokens;
} helper_inputs;

static void helper_inputs_create(bpt_context *c, helper_inputs *in) {
  const int64_t vector = 8, image[3] = {2, 8, 8}, ids = 4, tokens[2] = {4, 8};
  assert_ok(c, bpt_graph_create(c, &in->graph));
  assert_ok(c, bpt_graph_input(in->graph, "vector", BPT_DTYPE_F32, 1, &vector, &in->vector));
  assert_ok(c, bpt_graph_input(in->graph, "image", BPT_DTYPE_F32, 3, image, &in->image));
  assert_ok(c, bpt_graph_input(in->graph, "ids", BPT_DTYPE_I32, 1, &ids, &in->ids));
  assert_ok(c, bpt_graph_input_sequence(in->graph, "tokens", BPT_DTYPE_F32, 4, 1, &tokens[1], &in->tokens));
}

static bpt_status build_helper(const helper_inputs *in, int helper, bpt_node **out) {
  bpt_graph *g = in->graph;
  switch (helper) {
  case HELPER_LINEAR: return bpt_layer_linear(g, "h", in->vector, 3, BPT_INIT_HE_UNIFORM, out);
  case HELPER_CONV2D: return bpt_layer_conv2d(g, "h", in->image, 4, 3, 1, 1, 1, out);
  case HELPER_BATCH_NORM: return bpt_layer_batch_norm(g, "h", in->image, out);
  case HELPER_BATCH_NORM_RELU: return bpt_layer_batch_norm_relu(g, "h", in->image, out);
  case HELPER_LAYER_NORM: return bpt_layer_layer_norm(g, "h", in->vector, 1e-5f, out);
  case HELPER_RMS_NORM: return bpt_layer_rms_norm(g, "h", in->vector, 1e-5f, out);
  case HELPER_EMBEDDING: return bpt_layer_embedding(g, "h", in->ids, 10, 4, out);
  case HELPER_RESNET_BLOCK: return bpt_layer_resnet_basic_block(g, "h", in->image, 4, 2, out);
  case HELPER_SEQUENTIAL: {
    const bpt_layer_spec layers[] = {{BPT_LAYER(BPT_LAYER_LINEAR), .units = 6}, {BPT_LAYER(BPT_LAYER_RELU)},
                                     {BPT_LAYER(BPT_LAYER_LINEAR), .units = 3}};
    return bpt_layer_sequential(g, "h", in->vector, layers, 3, out);
  }
  default: {
    bpt_transformer_block_options options = bpt_transformer_block_options_default();
    options.heads = 2;
    return bpt_layer_transformer_block(g, "h", in->tokens, &options, out);
  }
  }
}

static void failed_layers_leave_the_graph_as_it_was(void **state) {
  (void)state;
  bpt_context *c = NULL;
  assert_ok(NULL, bpt_context_create(NULL, &c));
  for (int helper = 0; helper < HELPER_COUNT; helper++) {
    helper_inputs built, refused;
    bpt_node *out = NULL, *taken = NULL;
    helper_inputs_create(c, &built);
    const int before = bpt_graph_node_count(built.graph);
    assert_ok(c, build_helper(&built, helper, &out));
    const int made = bpt_graph_node_count(built.graph) - before;
    assert_true(made >= 2); /* a parameter and an op at least, so there is something to leave behind */
    char last[BPT_NAME_SIZE];
    snprintf(last, sizeof last, "%s", bpt_graph_node(built.graph, bpt_graph_node_count(built.graph) - 1)->name);

    helper_inputs_create(c, &refused);
    const int64_t one = 1;
    assert_ok(c, bpt_graph_input(refused.graph, last, BPT_DTYPE_F32, 1, &one, &taken));
    const int count = bpt_graph_node_count(refused.graph);
    out = taken;
    FAILS(c, BPT_ERR_INVALID_ARGUMENT, "already exists", build_helper(&refused, helper, &out));
    if (bpt_graph_node_count(refused.graph) != count)
      fail_msg("helper %d: %d nodes left behind after it failed at '%s'", helper,
               bpt_graph_node_count(refused.graph) - count, last);
    assert_null(out);
    bpt_graph_destroy(refused.graph);
    bpt_graph_destroy(built.graph);
  }
  bpt_context_destroy(c);
}

static void report(void **state) {
  (void)state;
  print_message("%d misuse cases returned the expected status and message\n", cases);
  assert_true(cases > 150);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(constants_and_queries_tolerate_bad_values),
      cmocka_unit_test(context_creation),
      cmocka_unit_test(tensors),
      cmocka_unit_test(graph_building),
      cmocka_unit_test(oversized_graphs_fail_to_compile),
      cmocka_unit_test(running_out_of_order),
      cmocka_unit_test(optimizer_options),
      cmocka_unit_test(data_sets),
      cmocka_unit_test(checkpoints_and_anomaly_mode),
      cmocka_unit_test(null_graph_everywhere),
      cmocka_unit_test(second_thread_inside_a_graph_is_refused),
      cmocka_unit_test(failed_layers_leave_the_graph_as_it_was),
      cmocka_unit_test(report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
