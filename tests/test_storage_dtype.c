/* Storage dtype (issue 24.5): under the bf16 policy the MLP's activations are planned, allocated and passed to
 * kernels as bf16, and the results match the rounding path (every activation f32, rounded in place after each
 * op) that the same graph takes with f32 storage forced; so do they through tanh's kernels (which stage bf16
 * rows themselves, activation.c), where an op is not kernels-only (dropout), whose activations stay
 * f32, where a same-shape add takes the backend's add kernels under 16-bit storage, and through a view
 * (reshape), which takes its source's storage and buffers;
 * bpt_graph_read gives f32; the planned activation memory is about half. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bptrain/memory.h"
#include "core/graph.h"
#include "core/precision.h"
#include "test_support.h"

enum { BATCH = 24, FEATURES = 300, HIDDEN1 = 64, HIDDEN2 = 48, CLASSES = 10 };

typedef struct net {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *x, *labels, *hidden1, *act1, *middle, *logits, *loss;
  float loss_value;
  float logits_values[BATCH * CLASSES];
  float *gradients;
  int64_t parameter_count;
} net;

/* The first layer's activation: relu (kernels that take bf16), tanh (kernels that stage bf16 rows), or relu
 * and then dropout (a shared primitive in evaluation, so not kernels-only), a same-shape add of it to itself
 * (its kernels under 16-bit storage) or a reshape to the same shape (a view). */
typedef enum middle { MIDDLE_RELU, MIDDLE_TANH, MIDDLE_DROPOUT, MIDDLE_ADD, MIDDLE_RESHAPE, MIDDLE_BRANCH } middle;

/* x -> linear -> relu (or the middle above) -> linear -> relu -> linear -> cross-entropy, one forward and
 * backward on fixed inputs and parameters. */
static void net_run(net *n, bool f32_storage, middle first) {
  memset(n, 0, sizeof *n);
  n->context = test_context(11);
  bpt_context *context = n->context;
  assert_ok(context, bpt_graph_create(context, &n->graph));
  bpt_precision_options options = bpt_precision_options_default();
  options.compute_dtype = BPT_DTYPE_BF16;
  options.store_activations_16bit = !f32_storage;
  assert_ok(context, bpt_graph_set_precision(n->graph, &options));
  const int64_t features = FEATURES;
  assert_ok(context, bpt_graph_input(n->graph, "x", BPT_DTYPE_F32, 1, &features, &n->x));
  assert_ok(context, bpt_graph_input(n->graph, "labels", BPT_DTYPE_I32, 0, NULL, &n->labels));
  const int64_t sizes[4] = {FEATURES, HIDDEN1, HIDDEN2, CLASSES};
  bpt_node *h = n->x;
  for (int layer = 0; layer < 3; layer++) {
    char name[32];
    bpt_node *weight, *bias;
    const int64_t weight_dims[2] = {sizes[layer + 1], sizes[layer]};
    snprintf(name, sizeof name, "w%d", layer);
    assert_ok(context, bpt_graph_parameter(n->graph, name, 2, weight_dims, BPT_INIT_ZEROS, &weight));
    snprintf(name, sizeof name, "b%d", layer);
    assert_ok(context, bpt_graph_parameter(n->graph, name, 1, &sizes[layer + 1], BPT_INIT_ZEROS, &bias));
    snprintf(name, sizeof name, "fc%d", layer);
    assert_ok(context, bpt_linear(n->graph, name, h, weight, bias, &h));
    if (layer == 0) n->hidden1 = h;
    if (layer == 2) break;
    snprintf(name, sizeof name, "act%d", layer);
    if (layer == 0 && first == MIDDLE_TANH)
      assert_ok(context, bpt_tanh(n->graph, name, h, &h));
    else
      assert_ok(context, bpt_relu(n->graph, name, h, &h));
    if (layer == 0) n->act1 = h;
    if (layer == 0 && first == MIDDLE_RESHAPE) {
      const int64_t same = HIDDEN1;
      assert_ok(context, bpt_reshape(n->graph, "same_shape", h, 1, &same, &h));
      n->middle = h;
    }
    if (layer == 0 && first == MIDDLE_BRANCH) { /* hidden1 read by the relu and by a side linear, both bf16-native */
      bpt_node *side;
      assert_ok(context, bpt_layer_linear(n->graph, "side", n->hidden1, HIDDEN1, BPT_INIT_ZEROS, &side));
      assert_ok(context, bpt_add(n->graph, "join", h, side, &h));
      n->middle = h;
    }
    if (layer == 0 && first == MIDDLE_DROPOUT) {
      assert_ok(context, bpt_dropout(n->graph, "dropped", h, 0.25f, &h));
      n->middle = h;
    }
    if (layer == 0 && first == MIDDLE_ADD) {
      assert_ok(context, bpt_add(n->graph, "twice", h, h, &h));
      n->middle = h;
    }
  }
  n->logits = h;
  assert_ok(context, bpt_softmax_cross_entropy(n->graph, "loss", n->logits, n->labels, &n->loss));
  assert_ok(context, bpt_graph_compile(n->graph, n->loss, BATCH));

  test_random random;
  test_random_seed(&random, 5);
  n->parameter_count = bpt_graph_parameter_count(n->graph);
  float *parameters = calloc((size_t)n->parameter_count, sizeof *parameters);
  n->gradients = calloc((size_t)n->parameter_count, sizeof *n->gradients);
  assert_non_null(parameters);
  assert_non_null(n->gradients);
  test_random_fill(&random, parameters, n->parameter_count, -0.15f, 0.15f);
  assert_ok(context, bpt_graph_write_parameters(n->graph, parameters, n->parameter_count));
  free(parameters);

  const int64_t x_dims[2] = {BATCH, FEATURES}, label_dims[1] = {BATCH}, logit_dims[2] = {BATCH, CLASSES};
  bpt_tensor *xs, *labels, *logits;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, x_dims, &xs));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 1, label_dims, &labels));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 2, logit_dims, &logits));
  test_random_fill(&random, bpt_tensor_data(xs), BATCH * FEATURES, -1.0f, 1.0f);
  for (int64_t i = 0; i < BATCH; i++) ((int32_t *)bpt_tensor_data(labels))[i] = (int32_t)(i * 7 % CLASSES);
  assert_ok(context, bpt_graph_set_input(n->graph, n->x, xs));
  assert_ok(context, bpt_graph_set_input(n->graph, n->labels, labels));
  assert_ok(context, bpt_graph_forward(n->graph));
  assert_ok(context, bpt_graph_loss(n->graph, &n->loss_value));
  assert_ok(context, bpt_graph_read(n->graph, n->logits, logits));
  memcpy(n->logits_values, bpt_tensor_data(logits), sizeof n->logits_values);
  assert_ok(context, bpt_graph_backward(n->graph));
  assert_ok(context, bpt_graph_read_gradients(n->graph, n->gradients, n->parameter_count));
  bpt_tensor_destroy(xs);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(logits);
}

static void net_destroy(net *n) {
  free(n->gradients);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

/* Every value a bf16-stored node holds is a bf16 number: its low 16 bits are zero once widened. */
static bool all_bf16(const float *values, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &values[i], sizeof bits);
    if (bits & 0xffffu) return false;
  }
  return true;
}

/* The storage path and the rounding path agree: both hold the same bf16 values (every rounding happens at the
 * same place, on the same f32 result), so only a different summation order inside a product could part them;
 * the tolerance is f32 round-off, far below one bf16 unit (2^-8), which a kernel that skipped the bias, a
 * rounding or the mask would exceed by far. */
static void compare(const net *storage, const net *rounding) {
  assert_true(fabsf(storage->loss_value - rounding->loss_value) <= 1e-6f * fabsf(rounding->loss_value));
  assert_true(test_relative_error(storage->logits_values, rounding->logits_values, BATCH * CLASSES) < 1e-6);
  assert_true(test_relative_error(storage->gradients, rounding->gradients, storage->parameter_count) < 1e-6);
}

static void mlp_storage_matches_rounding_path(void **state) {
  (void)state;
  net storage, rounding;
  net_run(&storage, false, MIDDLE_RELU);
  net_run(&rounding, true, MIDDLE_RELU);
  /* The activations are stored as bf16 on one path only. */
  assert_int_equal(storage.x->storage, BPT_DTYPE_BF16);
  assert_int_equal(storage.hidden1->storage, BPT_DTYPE_BF16);
  assert_int_equal(storage.act1->storage, BPT_DTYPE_BF16);
  assert_int_equal(storage.logits->storage, BPT_DTYPE_BF16);
  assert_int_equal(storage.loss->storage, BPT_DTYPE_F32);
  assert_int_equal(storage.labels->storage, BPT_DTYPE_I32);
  assert_int_equal(rounding.hidden1->storage, BPT_DTYPE_F32);
  /* bpt_graph_read widened the bf16 logits to f32: bf16 numbers, the same as the rounding path's. */
  assert_true(all_bf16(storage.logits_values, BATCH * CLASSES));
  assert_true(all_bf16(rounding.logits_values, BATCH * CLASSES));
  compare(&storage, &rounding);
  net_destroy(&storage);
  net_destroy(&rounding);
}

static void tanh_storage_matches_rounding_path(void **state) {
  (void)state;
  net widened, rounding;
  net_run(&widened, false, MIDDLE_TANH);
  net_run(&rounding, true, MIDDLE_TANH);
  /* tanh reads its bf16 input and writes its bf16 output through f32 chunks (widened kernels, test_storage_widened,
   * give the same values). */
  assert_int_equal(widened.hidden1->storage, BPT_DTYPE_BF16);
  assert_int_equal(widened.act1->storage, BPT_DTYPE_BF16);
  assert_int_equal(widened.logits->storage, BPT_DTYPE_BF16);
  assert_true(all_bf16(widened.logits_values, BATCH * CLASSES));
  compare(&widened, &rounding);
  net_destroy(&widened);
  net_destroy(&rounding);
}

static void mixed_storage_matches_rounding_path(void **state) {
  (void)state;
  net mixed, rounding;
  net_run(&mixed, false, MIDDLE_DROPOUT);
  net_run(&rounding, true, MIDDLE_DROPOUT);
  /* Dropout is not kernels-only (evaluation copies through a shared primitive): its input and output stay f32
   * (rounded in place). */
  assert_int_equal(mixed.hidden1->storage, BPT_DTYPE_BF16);
  assert_int_equal(mixed.act1->storage, BPT_DTYPE_F32);
  assert_int_equal(mixed.middle->storage, BPT_DTYPE_F32);
  assert_int_equal(mixed.x->storage, BPT_DTYPE_BF16);
  assert_int_equal(mixed.logits->storage, BPT_DTYPE_BF16);
  assert_true(all_bf16(mixed.logits_values, BATCH * CLASSES));
  compare(&mixed, &rounding);
  net_destroy(&mixed);
  net_destroy(&rounding);
}

/* Under 16-bit storage a same-shape add runs on the CPU's add kernels, widened: the relu's output (read twice by
 * it) and the sum are stored as bf16; both parts of the relu's gradient are written by one call, into one f32
 * copy, so it is rounded once, as on the rounding path. */
static void same_shape_add_takes_bf16_storage(void **state) {
  (void)state;
  net added, rounding;
  net_run(&added, false, MIDDLE_ADD);
  net_run(&rounding, true, MIDDLE_ADD);
  assert_int_equal(added.act1->storage, BPT_DTYPE_BF16);
  assert_int_equal(added.middle->storage, BPT_DTYPE_BF16);
  assert_int_equal(rounding.middle->storage, BPT_DTYPE_F32);
  compare(&added, &rounding);
  net_destroy(&added);
  net_destroy(&rounding);
}

/* A value with two readers whose kernels take bf16 natively (relu, linear): each backward adds its part into
 * the bf16 gradient and rounds (the accumulating paths of both kernels), where the rounding path sums in f32
 * and rounds once: forward agrees to f32 round-off, gradients to a few bf16 units. */
static void native_readers_share_a_bf16_value(void **state) {
  (void)state;
  net shared, rounding;
  net_run(&shared, false, MIDDLE_BRANCH);
  net_run(&rounding, true, MIDDLE_BRANCH);
  assert_int_equal(shared.hidden1->storage, BPT_DTYPE_BF16);
  assert_int_equal(rounding.hidden1->storage, BPT_DTYPE_F32);
  assert_true(fabsf(shared.loss_value - rounding.loss_value) <= 1e-6f * fabsf(rounding.loss_value));
  const double error = test_relative_error(shared.gradients, rounding.gradients, shared.parameter_count);
  print_message("gradients differ by %g (relative) from the rounding path\n", error);
  assert_true(error < 2e-2);
  net_destroy(&shared);
  net_destroy(&rounding);
}

/* A reshape is a view of the relu's output: its readers' storage (bf16: the next linear) is the relu's, it has
 * no buffer of its own, and the values match the rounding path, where it is the same view of an f32 buffer. */
static void view_takes_its_source_storage(void **state) {
  (void)state;
  net viewed, rounding;
  net_run(&viewed, false, MIDDLE_RESHAPE);
  net_run(&rounding, true, MIDDLE_RESHAPE);
  assert_int_equal(viewed.act1->storage, BPT_DTYPE_BF16);
  assert_int_equal(viewed.middle->storage, BPT_DTYPE_BF16);
  assert_ptr_equal(viewed.middle->value, viewed.act1->value);
  assert_ptr_equal(viewed.middle->grad, viewed.act1->grad);
  assert_int_equal(rounding.middle->storage, BPT_DTYPE_F32);
  assert_ptr_equal(rounding.middle->value, rounding.act1->value);
  compare(&viewed, &rounding);
  net_destroy(&viewed);
  net_destroy(&rounding);
}

static void planned_activation_bytes_are_about_half(void **state) {
  (void)state;
  net storage, rounding;
  net_run(&storage, false, MIDDLE_RELU);
  net_run(&rounding, true, MIDDLE_RELU);
  bpt_graph_memory_stats narrow = {.size = sizeof narrow}, wide = {.size = sizeof wide};
  assert_ok(storage.context, bpt_graph_memory(storage.graph, &narrow));
  assert_ok(rounding.context, bpt_graph_memory(rounding.graph, &wide));
  /* The f32 figure of the bf16 graph is the rounding graph's plan. */
  assert_int_equal(narrow.activation_bytes_f32, wide.activation_bytes);
  assert_int_equal(wide.activation_bytes_f32, wide.activation_bytes);
  assert_true(narrow.activation_bytes > 0);
  assert_true((double)narrow.activation_bytes <= 0.55 * (double)wide.activation_bytes);
  net_destroy(&storage);
  net_destroy(&rounding);
}

/* The default policy options store 16-bit on the CPU backend (store_activations_16bit -1); 0 keeps the rounding
 * path. A one-layer graph's linear output is its only activation besides the input. */
static void default_options_store_16bit_on_the_cpu(void **state) {
  (void)state;
  const int choices[2] = {-1, 0};
  for (int k = 0; k < 2; k++) {
    bpt_context *context = test_context(3);
    bpt_graph *graph;
    assert_ok(context, bpt_graph_create(context, &graph));
    bpt_precision_options options = bpt_precision_options_default();
    assert_int_equal(options.store_activations_16bit, -1);
    options.compute_dtype = BPT_DTYPE_BF16;
    options.store_activations_16bit = choices[k];
    assert_ok(context, bpt_graph_set_precision(graph, &options));
    const int64_t features = 8;
    bpt_node *x, *labels, *logits, *loss;
    assert_ok(context, bpt_graph_input(graph, "x", BPT_DTYPE_F32, 1, &features, &x));
    assert_ok(context, bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
    assert_ok(context, bpt_layer_linear(graph, "fc", x, 4, BPT_INIT_ZEROS, &logits));
    assert_ok(context, bpt_softmax_cross_entropy(graph, "loss", logits, labels, &loss));
    assert_ok(context, bpt_graph_compile(graph, loss, 16));
    assert_int_equal(logits->storage, k == 0 ? BPT_DTYPE_BF16 : BPT_DTYPE_F32);
    bpt_graph_destroy(graph);
    bpt_context_destroy(context);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_storage_matches_rounding_path),
      cmocka_unit_test(tanh_storage_matches_rounding_path),
      cmocka_unit_test(mixed_storage_matches_rounding_path),
      cmocka_unit_test(same_shape_add_takes_bf16_storage),
      cmocka_unit_test(native_readers_share_a_bf16_value),
      cmocka_unit_test(view_takes_its_source_storage),
      cmocka_unit_test(planned_activation_bytes_are_about_half),
      cmocka_unit_test(default_options_store_16bit_on_the_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
