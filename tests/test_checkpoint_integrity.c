/* Checkpoint integrity (issue 18, classes 2 and 7): every value the library accepts at creation round-trips
 * through save and load exactly, at its extreme accepted values, and what creation refuses the loader refuses
 * too; one flipped bit anywhere in a file (section headers included) is refused; a graph that differs only in
 * op attributes is refused, naming the node. */
#define _DEFAULT_SOURCE /* truncate under -std=c11 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include "core/checkpoint.h"
#include "core/checkpoint_format.h"
#include "core/graph.h"
#include "core/optimizer_state.h"
#include "core/precision.h"
#include "test_support.h"

enum { SIDE = 4, CLASSES = 3, BATCH = 2 };

/* Attribute values of the small convolutional graph; each test changes one. */
typedef struct spec {
  float leaky_slope, dropout, bn_momentum, bn_epsilon;
  int64_t conv_padding, conv_dilation, pool_kernel, pool_stride;
  bpt_optimizer_options optimizer;
  bool precision;
  bpt_precision_options precision_options;
} spec;

typedef struct net {
  bpt_context *context;
  bpt_graph *graph;
  bpt_optimizer *optimizer;
} net;

static spec default_spec(void) {
  spec s = {.leaky_slope = 0.1f, .dropout = 0.25f, .bn_momentum = 0.1f, .bn_epsilon = 1e-5f, .conv_padding = 1,
            .conv_dilation = 1, .pool_kernel = 2, .pool_stride = 2};
  s.optimizer = bpt_optimizer_options_default();
  s.precision_options = bpt_precision_options_default();
  return s;
}

/* x (1x4x4) -> conv 3x3 -> batch norm -> leaky ReLU -> max pool -> dropout -> flatten -> linear -> loss. */
static void net_create(net *n, const spec *s) {
  n->context = test_context(7);
  bpt_context *c = n->context;
  assert_ok(c, bpt_graph_create(c, &n->graph));
  bpt_graph *g = n->graph;
  if (s->precision) assert_ok(c, bpt_graph_set_precision(g, &s->precision_options));
  int64_t image[3] = {1, SIDE, SIDE}, weight_dims[4] = {2, 1, 3, 3}, channels = 2;
  bpt_node *x, *y, *weight, *h, *gamma, *beta, *mean, *variance, *logits, *loss;
  assert_ok(c, bpt_graph_input(g, "x", BPT_DTYPE_F32, 3, image, &x));
  assert_ok(c, bpt_graph_input(g, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(c, bpt_graph_parameter(g, "conv.weight", 4, weight_dims, BPT_INIT_HE_UNIFORM, &weight));
  bpt_conv2d_options conv = bpt_conv2d_options_default();
  conv.padding_height = conv.padding_width = s->conv_padding;
  conv.dilation_height = conv.dilation_width = s->conv_dilation;
  assert_ok(c, bpt_conv2d(g, "conv", x, weight, NULL, &conv, &h));
  assert_ok(c, bpt_graph_parameter(g, "bn.gamma", 1, &channels, BPT_INIT_ONES, &gamma));
  assert_ok(c, bpt_graph_parameter(g, "bn.beta", 1, &channels, BPT_INIT_ZEROS, &beta));
  assert_ok(c, bpt_graph_nontrainable_parameter(g, "bn.mean", 1, &channels, BPT_INIT_ZEROS, &mean));
  assert_ok(c, bpt_graph_nontrainable_parameter(g, "bn.variance", 1, &channels, BPT_INIT_ONES, &variance));
  assert_ok(c, bpt_batch_norm(g, "bn", h, gamma, beta, mean, variance, s->bn_momentum, s->bn_epsilon, &h));
  assert_ok(c, bpt_leaky_relu(g, "leaky", h, s->leaky_slope, &h));
  assert_ok(c, bpt_max_pool2d(g, "pool", h, s->pool_kernel, s->pool_stride, 0, &h));
  assert_ok(c, bpt_dropout(g, "dropout", h, s->dropout, &h));
  assert_ok(c, bpt_flatten(g, "flat", h, &h));
  assert_ok(c, bpt_layer_linear(g, "fc", h, CLASSES, BPT_INIT_XAVIER_UNIFORM, &logits));
  assert_ok(c, bpt_softmax_cross_entropy(g, "loss", logits, y, &loss));
  assert_ok(c, bpt_graph_compile(g, loss, BATCH));
  assert_ok(c, bpt_optimizer_create(g, &s->optimizer, &n->optimizer));
}

static void net_destroy(net *n) {
  bpt_optimizer_destroy(n->optimizer);
  bpt_graph_destroy(n->graph);
  bpt_context_destroy(n->context);
}

static bpt_checkpoint_contents contents_of(net *n) {
  bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
  contents.optimizer = n->optimizer;
  return contents;
}

static uint32_t load32(const unsigned char *at) {
  return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

static void store32(unsigned char *at, uint32_t value) {
  for (int i = 0; i < 4; i++)
    at[i] = (unsigned char)(value >> (8 * i));
}

/* Offset of the payload of the section with tag (its header starts 20 bytes before), or 0 when absent. */
static size_t find_section(const unsigned char *bytes, size_t size, uint32_t tag, size_t *length) {
  size_t offset = BPT_CHECKPOINT_HEADER_BYTES;
  for (uint32_t i = 0, count = load32(bytes + 16); i < count && offset + 20 <= size; i++) {
    uint64_t bytes_in = load32(bytes + offset + 8) | (uint64_t)load32(bytes + offset + 12) << 32;
    if (load32(bytes + offset) == tag) {
      *length = (size_t)bytes_in;
      return offset + 20;
    }
    offset += 20 + (size_t)bytes_in;
  }
  return 0;
}

static void fix_section_crc(unsigned char *bytes, size_t payload, size_t length) {
  unsigned char *header = bytes + payload - 20;
  store32(header + 16, bpt_checkpoint_section_crc(header, bytes + payload, length));
}

/* ---- class 2: round trips at the extremes, one rule for creation and load ---- */

typedef struct saved_state {
  float learning_rate, loss_scale;
  int64_t steps, forward_count, clean_steps, skipped_steps, epoch, step;
  uint64_t rng[4];
} saved_state;

/* One forward, backward and optimiser step on n from where its state stands. Counters loaded at INT64_MAX
 * stay there rather than wrap (signed overflow: UBSan in the sanitizer stage fails the test), and an optimiser
 * already at step INT64_MAX refuses its next step. */
static void train_on(net *n, const char *label) {
  const int64_t image_dims[4] = {BATCH, 1, SIDE, SIDE}, label_dims[1] = {BATCH};
  bpt_tensor *images, *labels;
  assert_ok(n->context, bpt_tensor_create(n->context, BPT_DTYPE_F32, 4, image_dims, &images));
  assert_ok(n->context, bpt_tensor_create(n->context, BPT_DTYPE_I32, 1, label_dims, &labels));
  float *pixels = bpt_tensor_data(images);
  for (int i = 0; i < BATCH * SIDE * SIDE; i++)
    pixels[i] = (float)(i % 5) * 0.25f - 0.5f;
  int32_t *classes = bpt_tensor_data(labels);
  for (int i = 0; i < BATCH; i++)
    classes[i] = i % CLASSES;
  bpt_node *x, *y;
  assert_ok(n->context, bpt_graph_find_node(n->graph, "x", &x));
  assert_ok(n->context, bpt_graph_find_node(n->graph, "y", &y));
  assert_ok(n->context, bpt_graph_set_input(n->graph, x, images));
  assert_ok(n->context, bpt_graph_set_input(n->graph, y, labels));
  const int64_t steps = bpt_optimizer_step_count(n->optimizer), forwards = n->graph->forward_count;
  assert_ok(n->context, bpt_graph_forward(n->graph));
  assert_int_equal(n->graph->forward_count, forwards < INT64_MAX ? forwards + 1 : INT64_MAX);
  assert_ok(n->context, bpt_graph_backward(n->graph));
  bpt_status status = bpt_optimizer_step(n->optimizer);
  if (steps == INT64_MAX) {
    if (status != BPT_ERR_STATE) fail_msg("%s: a step from step count INT64_MAX was not refused", label);
  } else if (status != BPT_OK) {
    fail_msg("%s: training on after the load failed: %s", label, bpt_context_last_error(n->context));
  }
  bpt_tensor_destroy(images);
  bpt_tensor_destroy(labels);
}

/* Puts extreme values into the state the library keeps (counters that only grow by training are set
 * directly: no test can run 2^63 steps), saves, loads into a fresh graph with the same options, checks
 * that every value came back bit for bit, then trains on from there. */
static void round_trip(const spec *s, const saved_state *values, const char *label) {
  net a, b;
  net_create(&a, s);
  net_create(&b, s);
  bpt_optimizer_state view;
  bpt_optimizer_state_view(a.optimizer, &view);
  assert_ok(a.context, bpt_optimizer_set_learning_rate(a.optimizer, values->learning_rate));
  *view.steps = values->steps;
  a.graph->forward_count = values->forward_count;
  memcpy(a.graph->rng.state, values->rng, sizeof values->rng);
  if (s->precision) {
    a.graph->precision->loss_scale = values->loss_scale;
    a.graph->precision->clean_steps = values->clean_steps;
    a.graph->precision->skipped_steps = values->skipped_steps;
  }
  bpt_checkpoint_contents contents = contents_of(&a);
  contents.epoch = values->epoch;
  contents.step = values->step;
  const char *path = test_write_file("integrity-round-trip.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  bpt_checkpoint_contents loaded = contents_of(&b);
  bpt_status status = bpt_checkpoint_load(b.graph, path, &loaded);
  if (status != BPT_OK) fail_msg("%s: save then load failed: %s", label, bpt_context_last_error(b.context));
  bpt_optimizer_state_view(b.optimizer, &view);
  float rate = bpt_optimizer_learning_rate(b.optimizer);
  assert_memory_equal(&rate, &values->learning_rate, sizeof rate);
  assert_int_equal(*view.steps, values->steps);
  assert_int_equal(b.graph->forward_count, values->forward_count);
  assert_memory_equal(b.graph->rng.state, values->rng, sizeof values->rng);
  assert_int_equal(loaded.epoch, values->epoch);
  assert_int_equal(loaded.step, values->step);
  if (s->precision) {
    float scale = bpt_graph_loss_scale(b.graph);
    assert_memory_equal(&scale, &values->loss_scale, sizeof scale);
    assert_int_equal(b.graph->precision->clean_steps, values->clean_steps);
    assert_int_equal(bpt_graph_skipped_steps(b.graph), values->skipped_steps);
  }
  train_on(&b, label);
  net_destroy(&a);
  net_destroy(&b);
}

static saved_state ordinary_state(void) {
  saved_state v = {.learning_rate = 0.01f, .loss_scale = 65536.0f, .rng = {1, 2, 3, 4}};
  return v;
}

static void extreme_values_round_trip(void **state) {
  (void)state;
  const float below_one = nextafterf(1.0f, 0.0f);
  /* SGD: the largest finite rate and decay, momentum just below 1 with Nesterov, then zero everything. */
  spec s = default_spec();
  s.optimizer.kind = BPT_OPTIMIZER_SGD;
  s.optimizer.momentum = below_one;
  s.optimizer.nesterov = 1;
  s.optimizer.weight_decay = FLT_MAX;
  saved_state v = ordinary_state();
  v.learning_rate = FLT_MAX;
  v.steps = INT64_MAX;
  v.forward_count = INT64_MAX;
  v.epoch = INT64_MAX;
  v.step = INT64_MAX;
  v.rng[0] = v.rng[1] = v.rng[2] = v.rng[3] = UINT64_MAX;
  round_trip(&s, &v, "SGD at the top of every range");
  s.optimizer.momentum = 0.0f;
  s.optimizer.nesterov = 0;
  s.optimizer.weight_decay = 0.0f;
  v = ordinary_state();
  v.learning_rate = 0.0f;
  v.epoch = INT64_MIN; /* the loop position is the caller's: any value saved comes back */
  v.step = -1;
  v.rng[0] = v.rng[1] = v.rng[2] = 0;
  v.rng[3] = 1; /* the smallest state that is not the fixed point */
  round_trip(&s, &v, "SGD at the bottom of every range");
  v.learning_rate = FLT_TRUE_MIN;
  round_trip(&s, &v, "the smallest positive rate");

  /* Adam and AdamW: betas just below 1 or 0, epsilon from the smallest subnormal to the largest float. */
  const bpt_optimizer_kind adams[2] = {BPT_OPTIMIZER_ADAM, BPT_OPTIMIZER_ADAMW};
  for (int k = 0; k < 2; k++) {
    s = default_spec();
    s.optimizer.kind = adams[k];
    s.optimizer.beta1 = s.optimizer.beta2 = below_one;
    s.optimizer.epsilon = FLT_TRUE_MIN;
    s.optimizer.weight_decay = FLT_MAX;
    v = ordinary_state();
    v.learning_rate = FLT_MAX;
    v.steps = INT64_MAX;
    round_trip(&s, &v, "Adam with betas just below 1");
    s.optimizer.beta1 = s.optimizer.beta2 = 0.0f;
    s.optimizer.epsilon = FLT_MAX;
    round_trip(&s, &v, "Adam with betas 0 and the largest epsilon");
  }

  /* The dynamic loss scaler: the largest initial scale creation takes (far above 2^64), the floor that
   * backing off reaches, and counters at their maxima. */
  s = default_spec();
  s.precision = true;
  s.precision_options.compute_dtype = BPT_DTYPE_F16;
  s.precision_options.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  s.precision_options.initial_loss_scale = FLT_MAX;
  s.precision_options.growth_interval = INT64_MAX;
  v = ordinary_state();
  v.loss_scale = FLT_MAX;
  round_trip(&s, &v, "loss scale FLT_MAX from creation");
  v.loss_scale = 0x1p70f;
  v.clean_steps = INT64_MAX;
  v.skipped_steps = INT64_MAX;
  round_trip(&s, &v, "loss scale 2^70, counters at INT64_MAX"); /* f16 overflows: the step is skipped */
  v.loss_scale = 1.0f;
  round_trip(&s, &v, "loss scale 1, counters at INT64_MAX"); /* a clean step, which grows the scale */
  v.loss_scale = 0x1p-24f;
  v.clean_steps = v.skipped_steps = 0;
  round_trip(&s, &v, "loss scale at the 2^-24 floor");
}

/* A saved value creation would refuse is refused at load: the file is patched (and its CRC fixed). */
static void expect_patched_refusal(const spec *s, uint32_t tag, size_t field, const void *value, size_t width,
                                   const char *fragment) {
  net a, b;
  net_create(&a, s);
  net_create(&b, s);
  bpt_checkpoint_contents contents = contents_of(&a);
  const char *path = test_write_file("integrity-patched.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  size_t size, length = 0;
  unsigned char *bytes = test_read_file(path, &size);
  size_t payload = find_section(bytes, size, tag, &length);
  assert_true(payload != 0 && field + width <= length);
  memcpy(bytes + payload + field, value, width); /* little-endian host: the file's byte order */
  fix_section_crc(bytes, payload, length);
  bpt_checkpoint_contents loaded = contents_of(&b);
  assert_fails(b.context, BPT_ERR_INVALID_ARGUMENT, fragment,
               bpt_checkpoint_load_memory(b.graph, bytes, size, "patched", &loaded));
  free(bytes);
  net_destroy(&a);
  net_destroy(&b);
}

static void values_refused_at_creation_are_refused_at_load(void **state) {
  (void)state;
  const float bad_rates[] = {-1.0f, INFINITY, NAN, -FLT_MIN};
  spec s = default_spec();
  for (size_t i = 0; i < sizeof bad_rates / sizeof *bad_rates; i++) {
    /* Creation and the setter refuse it... */
    spec refused = s;
    refused.optimizer.learning_rate = bad_rates[i];
    net n;
    net_create(&n, &s);
    bpt_optimizer *other;
    assert_fails(n.context, BPT_ERR_INVALID_ARGUMENT, "learning_rate",
                 bpt_optimizer_create(n.graph, &refused.optimizer, &other));
    assert_fails(n.context, BPT_ERR_INVALID_ARGUMENT, "finite",
                 bpt_optimizer_set_learning_rate(n.optimizer, bad_rates[i]));
    net_destroy(&n);
    /* ...and so does the loader (OPTM: u32 kind, then f32 learning rate). */
    expect_patched_refusal(&s, BPT_TAG('O', 'P', 'T', 'M'), 4, &bad_rates[i], 4, "learning_rate");
  }
  /* Loss scales below the 2^-24 floor, zero, negative, infinite, NaN (LSCL: f32 scale, i64 clean, i64 skipped). */
  s.precision = true;
  s.precision_options.compute_dtype = BPT_DTYPE_F16;
  s.precision_options.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  const float bad_scales[] = {0x1p-25f, 0.0f, -1.0f, INFINITY, NAN};
  for (size_t i = 0; i < sizeof bad_scales / sizeof *bad_scales; i++)
    expect_patched_refusal(&s, BPT_TAG('L', 'S', 'C', 'L'), 0, &bad_scales[i], 4, "loss scaler");
  const int64_t negative = -1;
  expect_patched_refusal(&s, BPT_TAG('L', 'S', 'C', 'L'), 4, &negative, 8, "loss scaler");
  expect_patched_refusal(&s, BPT_TAG('L', 'S', 'C', 'L'), 12, &negative, 8, "loss scaler");
  /* Creation refuses an initial scale that is not finite or below 1. */
  net n;
  net_create(&n, &s);
  bpt_graph *g;
  assert_ok(n.context, bpt_graph_create(n.context, &g));
  bpt_precision_options bad = s.precision_options;
  bad.initial_loss_scale = INFINITY;
  assert_fails(n.context, BPT_ERR_INVALID_ARGUMENT, "initial_loss_scale", bpt_graph_set_precision(g, &bad));
  bpt_graph_destroy(g);
  net_destroy(&n);
}

/* ---- class 7: bit flips, op attributes ---- */

/* Every single-bit flip anywhere in a small checkpoint (header, section headers, payloads) is refused, and a
 * refused load leaves the graph as it was (here: the loss scaler, which an unnoticed flipped tag used to reset). */
static void every_flipped_bit_is_refused(void **state) {
  (void)state;
  spec s = default_spec();
  s.precision = true;
  s.precision_options.compute_dtype = BPT_DTYPE_F16;
  s.precision_options.loss_scaling = BPT_LOSS_SCALING_DYNAMIC;
  net a, b;
  net_create(&a, &s);
  net_create(&b, &s);
  a.graph->precision->loss_scale = 1024.0f;
  a.graph->precision->skipped_steps = 3;
  bpt_checkpoint_contents contents = contents_of(&a);
  const char *path = test_write_file("integrity-flips.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  bpt_checkpoint_contents loaded = contents_of(&b);
  assert_ok(b.context, bpt_checkpoint_load_memory(b.graph, bytes, size, "intact", &loaded));
  assert_true(bpt_graph_loss_scale(b.graph) == 1024.0f);
  b.graph->precision->loss_scale = 8.0f; /* so that a load that slipped through would show */
  int64_t accepted = 0, flips = 0;
  for (size_t byte = 0; byte < size; byte++)
    for (int bit = 0; bit < 8; bit++) {
      bytes[byte] ^= (unsigned char)(1u << bit);
      loaded = contents_of(&b);
      if (bpt_checkpoint_load_memory(b.graph, bytes, size, "flipped", &loaded) == BPT_OK) {
        if (accepted++ < 5) print_message("flip of bit %d at byte %zu was accepted\n", bit, byte);
      }
      bytes[byte] ^= (unsigned char)(1u << bit);
      flips++;
    }
  print_message("%lld single-bit flips over %zu bytes, %lld accepted\n", (long long)flips, size, (long long)accepted);
  assert_int_equal(accepted, 0);
  assert_true(bpt_graph_loss_scale(b.graph) == 8.0f);
  free(bytes);
  net_destroy(&a);
  net_destroy(&b);
}

static void expect_attribute_refusal(const spec *saved, const spec *loading, const char *node) {
  net a, b;
  net_create(&a, saved);
  net_create(&b, loading);
  bpt_checkpoint_contents contents = contents_of(&a);
  const char *path = test_write_file("integrity-attributes.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  char fragment[128];
  snprintf(fragment, sizeof fragment, "'%s', has different op attributes", node);
  bpt_checkpoint_contents loaded = contents_of(&b);
  assert_fails(b.context, BPT_ERR_SHAPE, fragment, bpt_checkpoint_load(b.graph, path, &loaded));
  /* The same graph loads it. */
  loaded = contents_of(&a);
  assert_ok(a.context, bpt_checkpoint_load(a.graph, path, &loaded));
  net_destroy(&a);
  net_destroy(&b);
}

static void graphs_differing_only_in_op_attributes_are_refused(void **state) {
  (void)state;
  spec saved = default_spec(), other;
  other = saved;
  other.dropout = 0.5f;
  expect_attribute_refusal(&saved, &other, "dropout");
  other = saved;
  other.leaky_slope = 0.2f;
  expect_attribute_refusal(&saved, &other, "leaky");
  other = saved;
  other.leaky_slope = nextafterf(0.1f, 1.0f); /* one ulp */
  expect_attribute_refusal(&saved, &other, "leaky");
  other = saved;
  other.bn_epsilon = 1e-3f;
  expect_attribute_refusal(&saved, &other, "bn");
  other = saved;
  other.bn_momentum = 0.01f;
  expect_attribute_refusal(&saved, &other, "bn");
  /* Padding 2 with dilation 2 gives the same output shape (4x4) and weight shape as padding 1. */
  other = saved;
  other.conv_padding = 2;
  other.conv_dilation = 2;
  expect_attribute_refusal(&saved, &other, "conv");
  /* Pooling 4x4 with kernel 2, stride 2 and with kernel 3, stride 1 both give 2x2. */
  other = saved;
  other.pool_kernel = 3;
  other.pool_stride = 1;
  expect_attribute_refusal(&saved, &other, "pool");
}

/* The FP8 activation scale linear keeps in its attributes changes with every forward: it is not compared. */
static void runtime_attribute_state_does_not_block_loading(void **state) {
  (void)state;
  spec s = default_spec();
  net a, b;
  net_create(&a, &s);
  net_create(&b, &s);
  bpt_node *fc;
  assert_ok(a.context, bpt_graph_find_node(a.graph, "fc", &fc));
  fc->float_state[0] = 0.125f; /* linear's FP8 scale, run-time state since format 3 */
  bpt_checkpoint_contents contents = contents_of(&a);
  const char *path = test_write_file("integrity-state.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  bpt_checkpoint_contents loaded = contents_of(&b);
  assert_ok(b.context, bpt_checkpoint_load(b.graph, path, &loaded));
  bpt_node *loaded_fc;
  assert_ok(b.context, bpt_graph_find_node(b.graph, "fc", &loaded_fc));
  assert_true(loaded_fc->float_state[0] == 0.125f); /* restored by name */
  net_destroy(&a);
  net_destroy(&b);
}

/* A version-1 file (before header CRCs) is refused by name. */
static void old_format_is_refused_by_name(void **state) {
  (void)state;
  spec s = default_spec();
  net a;
  net_create(&a, &s);
  bpt_checkpoint_contents contents = contents_of(&a);
  const char *path = test_write_file("integrity-v1.ckpt", "", 0);
  assert_ok(a.context, bpt_checkpoint_save(a.graph, path, &contents));
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  store32(bytes + 8, 1);
  store32(bytes + 20, (uint32_t)crc32(0, bytes, 20));
  assert_fails(a.context, BPT_ERR_FORMAT, "format version 1",
               bpt_checkpoint_load_memory(a.graph, bytes, size, "old", &contents));
  free(bytes);
  net_destroy(&a);
}

/* Issue 30, class 9: a sparse file costs nothing on disk but was read whole (4.2 GB of memory for a 4 GiB one)
 * before its magic was checked. Now the header is read first, and only what the sections declare after. */
static long peak_rss_kib(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

static void sparse_files_are_refused_before_their_body(void **state) {
  (void)state;
  spec s = default_spec();
  net a;
  net_create(&a, &s);
  const char *path = test_write_file("integrity-sparse.ckpt", "", 0);
  const off_t sparse = (off_t)1 << 30;
  if (truncate(path, sparse) != 0) {
    print_message("cannot make a 1 GiB sparse file here: skipping\n");
    net_destroy(&a);
    skip();
  }
  const long before = peak_rss_kib();
  assert_fails(a.context, BPT_ERR_FORMAT, "not a libbptrain checkpoint", bpt_checkpoint_load(a.graph, path, NULL));
  const long grown_kib = peak_rss_kib() - before;
  if (grown_kib > 64 * 1024) fail_msg("refusing a sparse 1 GiB file took %ld KiB of memory", grown_kib);
  unlink(path);

  /* A valid header whose one section declares the whole sparse rest: read only after the size checks pass. */
  const unsigned char zero[BPT_CHECKPOINT_HEADER_BYTES + BPT_CHECKPOINT_SECTION_HEADER_BYTES] = {0};
  unsigned char header[sizeof zero];
  memcpy(header, zero, sizeof header);
  memcpy(header, BPT_CHECKPOINT_MAGIC, 8);
  store32(header + 8, BPT_CHECKPOINT_FORMAT_VERSION);
  store32(header + 16, 1);
  store32(header + 20, (uint32_t)crc32(0, header, 20));
  memcpy(header + 24, "PARM", 4);
  const uint64_t length = (uint64_t)sparse + 4096 - sizeof header;
  store32(header + 32, (uint32_t)length);
  store32(header + 36, (uint32_t)(length >> 32));
  path = test_write_file("integrity-sparse-body.ckpt", header, sizeof header);
  assert_int_equal(truncate(path, sparse), 0); /* 4096 bytes short of what the section declares */
  assert_fails(a.context, BPT_ERR_FORMAT, "section 'PARM' announces", bpt_checkpoint_load(a.graph, path, NULL));
  assert_int_equal(truncate(path, sparse + 4096 + 8), 0); /* 8 bytes more than declared */
  assert_fails(a.context, BPT_ERR_FORMAT, "8 bytes of unexpected data", bpt_checkpoint_load(a.graph, path, NULL));
  if (peak_rss_kib() - before > 64 * 1024) fail_msg("the size checks read the sparse body");
  unlink(path);
  net_destroy(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(extreme_values_round_trip),
      cmocka_unit_test(values_refused_at_creation_are_refused_at_load),
      cmocka_unit_test(every_flipped_bit_is_refused),
      cmocka_unit_test(graphs_differing_only_in_op_attributes_are_refused),
      cmocka_unit_test(runtime_attribute_state_does_not_block_loading),
      cmocka_unit_test(old_format_is_refused_by_name),
      cmocka_unit_test(sparse_files_are_refused_before_their_body),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
