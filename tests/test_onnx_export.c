/* ONNX export (bpt_graph_export_onnx). The refusals are checked here; the numerics by ONNX Runtime: this test
 * builds small trained models covering every exported op (an MLP, LeNet, ResNet-8 with and without its batch
 * norms folded, and a convolution / activation zoo), runs them in evaluation mode and writes, per model,
 * "<name>.onnx", "<name>.input" (raw f32 pixels in [0, 1], what the ONNX model takes) and "<name>.output"
 * (libbptrain's outputs, f32) into $BPT_BINARY_DIR/onnx-export, which tests/onnx/check_onnx_runtime.py
 * compares (CTest runs it after this test). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bptrain.h"
#include "core/graph.h"
#include "test_support.h"
#if defined(__has_include)
#if __has_include("onnx.pb-c.h")
#include "onnx.pb-c.h"
#define TEST_HAVE_ONNX_PROTO 1
#endif
#endif

enum { BATCH = 5, CLASSES = 10 };
/* The examples' Fashion-MNIST normalisation, which image models carry inside the ONNX file. */
#define MEAN 0.2860f
#define STD 0.3530f

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *input, *labels, *output, *loss;
  int64_t sample[3];
  int sample_rank;
} model;

static int64_t sample_size(const model *m) {
  int64_t size = 1;
  for (int i = 0; i < m->sample_rank; i++)
    size *= m->sample[i];
  return size;
}

static model model_begin(uint64_t seed, int rank, const int64_t *sample) {
  model m = {.context = test_context(seed), .sample_rank = rank};
  memcpy(m.sample, sample, (size_t)rank * sizeof *sample);
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input(m.graph, "images", BPT_DTYPE_F32, rank, sample, &m.input));
  return m;
}

static void model_end(model *m, bool mse) {
  if (mse) {
    bpt_node *target;
    assert_ok(m->context, bpt_graph_input(m->graph, "target", BPT_DTYPE_F32, 1, (const int64_t[]){CLASSES}, &target));
    m->labels = target;
    assert_ok(m->context, bpt_mse_loss(m->graph, "loss", m->output, target, &m->loss));
  } else {
    assert_ok(m->context, bpt_graph_input(m->graph, "labels", BPT_DTYPE_I32, 0, NULL, &m->labels));
    assert_ok(m->context, bpt_softmax_cross_entropy(m->graph, "loss", m->output, m->labels, &m->loss));
  }
  assert_ok(m->context, bpt_graph_compile(m->graph, m->loss, BATCH));
}

static void model_destroy(model *m) {
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

static bpt_tensor *new_tensor(bpt_context *context, bpt_dtype dtype, int rank, const int64_t *sample) {
  int64_t dims[4] = {BATCH};
  if (rank > 0) memcpy(dims + 1, sample, (size_t)rank * sizeof *sample); /* rank 0: sample may be NULL */
  bpt_tensor *tensor = NULL;
  assert_ok(context, bpt_tensor_create(context, dtype, rank + 1, dims, &tensor));
  return tensor;
}

/* Sets the model's input to (pixels - mean) / std and its labels or targets to something to learn. */
static void set_inputs(model *m, const float *pixels, float mean, float std, uint64_t seed) {
  bpt_tensor *x = new_tensor(m->context, BPT_DTYPE_F32, m->sample_rank, m->sample);
  float *data = bpt_tensor_data(x);
  for (int64_t i = 0; i < BATCH * sample_size(m); i++)
    data[i] = (pixels[i] - mean) / std;
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->input, x));
  bpt_tensor_destroy(x);
  const bool targets = bpt_node_rank(m->labels) == 2;
  bpt_tensor *y =
      new_tensor(m->context, targets ? BPT_DTYPE_F32 : BPT_DTYPE_I32, targets ? 1 : 0, (const int64_t[]){CLASSES});
  test_random random;
  test_random_seed(&random, seed);
  for (int64_t i = 0; i < bpt_tensor_element_count(y); i++) {
    if (targets) {
      ((float *)bpt_tensor_data(y))[i] = test_random_uniform(&random, -1.0f, 1.0f);
    } else {
      ((int32_t *)bpt_tensor_data(y))[i] = (int32_t)(i % CLASSES);
    }
  }
  assert_ok(m->context, bpt_graph_set_input(m->graph, m->labels, y));
  bpt_tensor_destroy(y);
}

/* A few SGD steps in training mode, so that weights, biases and batch-norm running statistics all move off
 * their initial values (a transposed or misplaced one then shows in the outputs). */
static void train(model *m, const float *pixels, float mean, float std) {
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = 0.05f;
  bpt_optimizer *optimizer = NULL;
  assert_ok(m->context, bpt_optimizer_create(m->graph, &options, &optimizer));
  set_inputs(m, pixels, mean, std, 3);
  for (int step = 0; step < 3; step++) {
    assert_ok(m->context, bpt_graph_forward(m->graph));
    assert_ok(m->context, bpt_graph_backward(m->graph));
    assert_ok(m->context, bpt_optimizer_step(optimizer));
  }
  bpt_optimizer_destroy(optimizer);
}

static const char *export_directory(void) {
  static char path[4096];
  const char *base = getenv("BPT_BINARY_DIR");
  snprintf(path, sizeof path, "%s/onnx-export", base ? base : "/tmp");
  mkdir(path, 0755);
  return path;
}

static void write_floats(const char *name, const char *suffix, const float *values, int64_t count) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.%s", export_directory(), name, suffix);
  FILE *file = fopen(path, "wb");
  if (!file) fail_msg("cannot create %s", path);
  if (fwrite(values, sizeof *values, (size_t)count, file) != (size_t)count) fail_msg("cannot write %s", path);
  fclose(file);
}

/* Evaluation-mode outputs for pixels, the ONNX file and the reference files; softmax as options->softmax. */
static void export_model(model *m, const char *name, const float *pixels, bpt_onnx_export_options options) {
  assert_ok(m->context, bpt_graph_set_training(m->graph, 0));
  set_inputs(m, pixels, options.input_mean, options.input_std, 5);
  assert_ok(m->context, bpt_graph_forward(m->graph));
  const int64_t classes = bpt_node_dim(m->output, 1);
  bpt_tensor *out = new_tensor(m->context, BPT_DTYPE_F32, 1, &classes);
  assert_ok(m->context, bpt_graph_read(m->graph, m->output, out));
  float *y = bpt_tensor_data(out);
  if (options.softmax)
    for (int64_t n = 0; n < BATCH; n++) {
      double sum = 0.0, top = y[n * classes];
      for (int64_t c = 1; c < classes; c++)
        top = fmax(top, y[n * classes + c]);
      for (int64_t c = 0; c < classes; c++)
        sum += exp(y[n * classes + c] - top);
      for (int64_t c = 0; c < classes; c++)
        y[n * classes + c] = (float)(exp(y[n * classes + c] - top) / sum);
    }
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.onnx", export_directory(), name);
  assert_ok(m->context, bpt_graph_export_onnx(m->graph, path, &options));
  write_floats(name, "input", pixels, BATCH * sample_size(m));
  write_floats(name, "output", y, BATCH * classes);
  bpt_tensor_destroy(out);
}

static float *random_pixels(const model *m, uint64_t seed) {
  float *pixels = malloc((size_t)(BATCH * sample_size(m)) * sizeof *pixels);
  assert_non_null(pixels);
  test_random random;
  test_random_seed(&random, seed);
  test_random_fill(&random, pixels, BATCH * sample_size(m), 0.0f, 1.0f);
  return pixels;
}

static bpt_onnx_export_options image_options(void) {
  bpt_onnx_export_options options = bpt_onnx_export_options_default();
  options.input_mean = MEAN;
  options.input_std = STD;
  return options;
}

/* Without protobuf-c the call exists and says so; the model tests then skip. */
static bool onnx_available(void) {
  model m = model_begin(1, 1, (const int64_t[]){4});
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc", m.input, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  const char *path = test_write_file("probe.onnx", "", 0);
  const bpt_status status = bpt_graph_export_onnx(m.graph, path, NULL);
  if (status == BPT_ERR_UNSUPPORTED)
    print_message("skipped: %s\n", bpt_context_last_error(m.context));
  else
    assert_ok(m.context, status);
  model_destroy(&m);
  return status == BPT_OK;
}

/* 784 -> 64 (ReLU) -> 10, exported with its softmax, no normalisation (the MLP example feeds raw pixels). */
static void test_mlp(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  model m = model_begin(11, 1, (const int64_t[]){784});
  bpt_node *x;
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", m.input, 64, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m.context, bpt_relu(m.graph, "relu1", x, &x));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", x, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  float *pixels = random_pixels(&m, 21);
  train(&m, pixels, 0.0f, 1.0f);
  bpt_onnx_export_options options = bpt_onnx_export_options_default();
  options.softmax = 1;
  export_model(&m, "mlp", pixels, options);
  free(pixels);
  model_destroy(&m);
}

/* The mnist_cnn example's LeNet-5 on (N, 1, 28, 28) with the normalisation inside the model. */
static void test_lenet(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  model m = model_begin(12, 3, (const int64_t[]){1, 28, 28});
  const bpt_layer_spec lenet[] = {
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 6, .kernel = 5, .padding = 2},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_MAX_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 5},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_MAX_POOL), .kernel = 2},
      {BPT_LAYER(BPT_LAYER_FLATTEN)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = 120},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = 84},
      {BPT_LAYER(BPT_LAYER_RELU)},
      {BPT_LAYER(BPT_LAYER_LINEAR), .units = CLASSES},
  };
  assert_ok(m.context, bpt_layer_sequential(m.graph, "lenet", m.input, lenet, 12, &m.output));
  model_end(&m, false);
  float *pixels = random_pixels(&m, 22);
  train(&m, pixels, MEAN, STD);
  export_model(&m, "lenet", pixels, image_options());
  free(pixels);
  model_destroy(&m);
}

/* The resnet example's ResNet-8 (one basic block per stage), exported as trained and again with its batch
 * norms folded into the convolutions. */
static void test_resnet8(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  model m = model_begin(13, 3, (const int64_t[]){1, 28, 28});
  const bpt_layer_spec stem[] = {
      {BPT_LAYER(BPT_LAYER_CONV2D), .units = 16, .kernel = 3, .padding = 1},
      {BPT_LAYER(BPT_LAYER_BATCH_NORM)},
      {BPT_LAYER(BPT_LAYER_RELU)},
  };
  bpt_node *x;
  assert_ok(m.context, bpt_layer_sequential(m.graph, "stem", m.input, stem, 3, &x));
  assert_ok(m.context, bpt_layer_resnet_basic_block(m.graph, "stage1", x, 16, 1, &x));
  assert_ok(m.context, bpt_layer_resnet_basic_block(m.graph, "stage2", x, 32, 2, &x));
  assert_ok(m.context, bpt_layer_resnet_basic_block(m.graph, "stage3", x, 64, 2, &x));
  const bpt_layer_spec head[] = {{BPT_LAYER(BPT_LAYER_GLOBAL_AVG_POOL)},
                                 {BPT_LAYER(BPT_LAYER_LINEAR), .units = CLASSES}};
  assert_ok(m.context, bpt_layer_sequential(m.graph, "head", x, head, 2, &m.output));
  model_end(&m, false);
  float *pixels = random_pixels(&m, 23);
  train(&m, pixels, MEAN, STD);
  export_model(&m, "resnet8", pixels, image_options());
  int folded = 0;
  assert_ok(m.context, bpt_graph_fold_batch_norm(m.graph, &folded));
  assert_true(folded > 0);
  export_model(&m, "resnet8_folded", pixels, image_options());
  free(pixels);
  model_destroy(&m);
}

/* Every other op and attribute: strided, dilated, grouped convolution with bias, padded average and max
 * pooling, a 4-D batch norm, reshape, leaky ReLU, sigmoid, tanh, GELU, RMS norm and dropout, into an MSE loss. */
static void build_zoo(model *m) {
  bpt_node *x, *w, *b;
  bpt_conv2d_options conv = bpt_conv2d_options_default();
  conv.stride_height = 2;
  conv.stride_width = 1;
  conv.padding_height = 1;
  conv.padding_width = 2;
  conv.dilation_height = 1;
  conv.dilation_width = 2;
  conv.groups = 2;
  assert_ok(m->context,
            bpt_graph_parameter(m->graph, "conv.weight", 4, (const int64_t[]){6, 2, 3, 3}, BPT_INIT_HE_NORMAL, &w));
  assert_ok(m->context, bpt_graph_parameter(m->graph, "conv.bias", 1, (const int64_t[]){6}, BPT_INIT_HE_UNIFORM, &b));
  assert_ok(m->context, bpt_conv2d(m->graph, "conv", m->input, w, b, &conv, &x));
  assert_ok(m->context, bpt_avg_pool2d(m->graph, "avg", x, 3, 2, 1, &x));
  assert_ok(m->context, bpt_layer_batch_norm(m->graph, "bn", x, &x));
  assert_ok(m->context, bpt_leaky_relu(m->graph, "leaky", x, 0.1f, &x));
  assert_ok(m->context, bpt_max_pool2d(m->graph, "max", x, 3, 1, 1, &x));
  assert_ok(m->context, bpt_flatten(m->graph, "flat", x, &x));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc1", x, 24, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m->context, bpt_sigmoid(m->graph, "sigmoid", x, &x));
  assert_ok(m->context, bpt_reshape(m->graph, "reshape", x, 3, (const int64_t[]){2, 3, 4}, &x));
  assert_ok(m->context, bpt_tanh(m->graph, "tanh", x, &x));
  assert_ok(m->context, bpt_dropout(m->graph, "dropout", x, 0.5f, &x));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc2", x, 16, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m->context, bpt_gelu(m->graph, "gelu", x, &x));
  assert_ok(m->context, bpt_layer_rms_norm(m->graph, "rms", x, 1e-5f, &x));
  assert_ok(m->context, bpt_layer_linear(m->graph, "fc3", x, CLASSES, BPT_INIT_HE_UNIFORM, &m->output));
  model_end(m, true);
}

static void test_op_zoo(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  for (int opset = 17; opset <= 20; opset += 3) {
    model m = model_begin(14, 3, (const int64_t[]){4, 11, 9});
    build_zoo(&m);
    float *pixels = random_pixels(&m, 24);
    train(&m, pixels, 0.5f, 2.0f);
    bpt_onnx_export_options options = bpt_onnx_export_options_default();
    options.opset = opset;
    options.input_mean = 0.5f;
    options.input_std = 2.0f;
    export_model(&m, opset >= 20 ? "zoo_opset20" : "zoo_opset17", pixels, options);
    free(pixels);
    model_destroy(&m);
  }
}

/* The tensor model's ops: a sequence input, per-token linear, a broadcast gain and position table, a permute
 * and batched products (h h^T twice, through the permute and through matmul's transpose, then the scores'
 * product with h), flattened into an MSE loss. */
static void test_sequence_ops(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  model m = {.context = test_context(16), .sample_rank = 2, .sample = {4, 6}};
  bpt_node *h, *gain, *position, *scores;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input_sequence(m.graph, "tokens", BPT_DTYPE_F32, 4, 1, (const int64_t[]){6}, &m.input));
  assert_ok(m.context, bpt_layer_linear(m.graph, "token", m.input, 8, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(m.context, bpt_graph_parameter(m.graph, "gain", 1, (const int64_t[]){8}, BPT_INIT_ONES, &gain));
  assert_ok(m.context, bpt_mul(m.graph, "gained", h, gain, &h));
  bpt_node *h_t, *direct;
  assert_ok(m.context, bpt_permute(m.graph, "h_t", h, 3, (const int64_t[]){0, 2, 1}, &h_t));
  assert_ok(m.context, bpt_matmul(m.graph, "scores_t", h, h_t, 0, 0, &scores));
  assert_ok(m.context, bpt_matmul(m.graph, "scores_direct", h, h, 0, 1, &direct));
  assert_ok(m.context, bpt_add(m.graph, "scores", scores, direct, &scores));
  assert_ok(m.context, bpt_graph_parameter(m.graph, "position", 2, (const int64_t[]){4, 4}, BPT_INIT_HE_UNIFORM,
                                           &position));
  assert_ok(m.context, bpt_add(m.graph, "positioned", scores, position, &scores));
  assert_ok(m.context, bpt_matmul(m.graph, "mixed", scores, h, 0, 0, &h));
  assert_ok(m.context, bpt_flatten(m.graph, "flat", h, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "head", h, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, true);
  float *pixels = random_pixels(&m, 25);
  train(&m, pixels, 0.5f, 2.0f);
  export_model(&m, "sequence", pixels, bpt_onnx_export_options_default());
  free(pixels);
  model_destroy(&m);
}

/* The transformer's per-token ops on a sequence: layer norm as the layer helper makes it (weight and bias,
 * moved by training) and as an op with a random gain and no shift, the tanh GELU, RMS norm with a random gain
 * and SiLU, into a flattened head. Exported at opset 17 (LayerNormalization) and 13 (its arithmetic in plain
 * nodes); RMS norm is plain nodes at both (ReduceMean's axes an attribute), and at 20 in the zoo (axes an
 * input); the tanh GELU and SiLU are Sigmoid products at every opset. */
static void build_transformer_ops(model *m) {
  bpt_node *h, *gain;
  assert_ok(m->context, bpt_graph_create(m->context, &m->graph));
  assert_ok(m->context,
            bpt_graph_input_sequence(m->graph, "tokens", BPT_DTYPE_F32, 4, 1, (const int64_t[]){6}, &m->input));
  assert_ok(m->context, bpt_layer_linear(m->graph, "token", m->input, 8, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(m->context, bpt_layer_layer_norm(m->graph, "ln1", h, 1e-5f, &h));
  assert_ok(m->context, bpt_graph_parameter(m->graph, "gain", 1, (const int64_t[]){8}, BPT_INIT_HE_UNIFORM, &gain));
  assert_ok(m->context, bpt_layer_norm(m->graph, "ln2", h, gain, NULL, 1e-3f, &h));
  assert_ok(m->context, bpt_layer_linear(m->graph, "up", h, 12, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(m->context, bpt_gelu_tanh(m->graph, "gelu_tanh", h, &h));
  assert_ok(m->context,
            bpt_graph_parameter(m->graph, "rms_gain", 1, (const int64_t[]){12}, BPT_INIT_HE_UNIFORM, &gain));
  assert_ok(m->context, bpt_rms_norm(m->graph, "rms", h, gain, 1e-2f, &h));
  assert_ok(m->context, bpt_silu(m->graph, "silu", h, &h));
  assert_ok(m->context, bpt_flatten(m->graph, "flat", h, &h));
  assert_ok(m->context, bpt_layer_linear(m->graph, "head", h, CLASSES, BPT_INIT_HE_UNIFORM, &m->output));
  model_end(m, true);
}

static void test_transformer_ops(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  for (int opset = 13; opset <= 17; opset += 4) {
    model m = {.context = test_context(17), .sample_rank = 2, .sample = {4, 6}};
    build_transformer_ops(&m);
    float *pixels = random_pixels(&m, 26);
    train(&m, pixels, 0.5f, 2.0f);
    bpt_onnx_export_options options = bpt_onnx_export_options_default();
    options.opset = opset;
    export_model(&m, opset == 13 ? "transformer_opset13" : "transformer_opset17", pixels, options);
    free(pixels);
    model_destroy(&m);
  }
}

/* The transformer ops (issue 25): softmax over the last axis, plain and causal over attention-like scores (a
 * query longer than the keys, so whole rows are masked), fused attention (self and cross, causal; trained with
 * dropout, exported without), flattened into an MSE loss. */
static void test_attention_ops(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  model m = {.context = test_context(17), .sample_rank = 2, .sample = {5, 6}};
  bpt_node *h, *keys, *scores, *weights;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context,
            bpt_graph_input_sequence(m.graph, "tokens", BPT_DTYPE_F32, 5, 1, (const int64_t[]){6}, &m.input));
  assert_ok(m.context, bpt_layer_linear(m.graph, "token", m.input, 8, BPT_INIT_HE_UNIFORM, &h));
  assert_ok(m.context, bpt_softmax(m.graph, "gate", h, 0, &weights));
  assert_ok(m.context, bpt_mul(m.graph, "gated", h, weights, &h));
  assert_ok(m.context, bpt_graph_parameter(m.graph, "keys", 2, (const int64_t[]){3, 8}, BPT_INIT_HE_UNIFORM, &keys));
  assert_ok(m.context, bpt_matmul(m.graph, "scores", h, keys, 0, 1, &scores));
  assert_ok(m.context, bpt_softmax(m.graph, "causal", scores, 1, &scores));
  assert_ok(m.context, bpt_matmul(m.graph, "mixed", scores, keys, 0, 0, &h));
  /* Self-attention, causal, 2 heads of 4, then cross-attention of 5 queries over 3 keys (two queries see no key). */
  bpt_node *q, *k, *v, *memory;
  assert_ok(m.context, bpt_layer_linear(m.graph, "q", h, 8, BPT_INIT_HE_UNIFORM, &q));
  assert_ok(m.context, bpt_layer_linear(m.graph, "k", h, 8, BPT_INIT_HE_UNIFORM, &k));
  assert_ok(m.context, bpt_layer_linear(m.graph, "v", h, 8, BPT_INIT_HE_UNIFORM, &v));
  assert_ok(m.context, bpt_scaled_dot_product_attention(m.graph, "self", q, k, v, 2, 1, 0.1f, &h));
  assert_ok(m.context, bpt_matmul(m.graph, "memory", scores, h, 1, 0, &memory)); /* (N, 3, 8) */
  assert_ok(m.context, bpt_scaled_dot_product_attention(m.graph, "cross", h, memory, memory, 4, 1, 0.0f, &h));
  assert_ok(m.context, bpt_flatten(m.graph, "flat", h, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "head", h, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, true);
  float *pixels = random_pixels(&m, 26);
  train(&m, pixels, 0.5f, 2.0f);
  export_model(&m, "attention", pixels, bpt_onnx_export_options_default());
  free(pixels);
  model_destroy(&m);
}

/* Token ids (i32, a sequence) through a learned embedding and a fused per-token linear split by slices (q, k as
 * attention splits qkv; their product), q, part of the scores and k joined again, the later tokens sliced off
 * and flattened into the head: the ids are the model's input, written as raw
 * int32 for ONNX Runtime. */
static void test_embedding(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  enum { LENGTH = 4, VOCABULARY = 11 };
  model m = {.context = test_context(17), .sample_rank = 1, .sample = {LENGTH}};
  bpt_node *h;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input_sequence(m.graph, "ids", BPT_DTYPE_I32, LENGTH, 0, NULL, &m.input));
  assert_ok(m.context, bpt_layer_embedding(m.graph, "tok", m.input, VOCABULARY, 6, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "qk", h, 10, BPT_INIT_HE_UNIFORM, &h));
  bpt_node *q, *k;
  assert_ok(m.context, bpt_slice(m.graph, "q", h, 2, 0, 5, &q));
  assert_ok(m.context, bpt_slice(m.graph, "k", h, 2, 5, 5, &k));
  assert_ok(m.context, bpt_matmul(m.graph, "scores", q, k, 0, 1, &h));
  assert_ok(m.context, bpt_slice(m.graph, "first", h, 2, 0, LENGTH - 1, &h));
  assert_ok(m.context, bpt_concat(m.graph, "joined", 3, (bpt_node *[]){q, h, k}, 2, &h)); /* (N, T, 5 + 3 + 5) */
  assert_ok(m.context, bpt_slice(m.graph, "recent", h, 1, 1, LENGTH - 1, &h));            /* (N, T - 1, 13) */
  assert_ok(m.context, bpt_flatten(m.graph, "flat", h, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "head", h, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  assert_ok(m.context, bpt_graph_set_training(m.graph, 0));
  bpt_tensor *ids = new_tensor(m.context, BPT_DTYPE_I32, 1, (const int64_t[]){LENGTH});
  int32_t *values = bpt_tensor_data(ids);
  for (int64_t i = 0; i < BATCH * LENGTH; i++)
    values[i] = (int32_t)((i * 7 + 3) % VOCABULARY); /* every row of the table, some twice */
  bpt_tensor *labels = new_tensor(m.context, BPT_DTYPE_I32, 0, (const int64_t[]){CLASSES}); /* rank 0: unread */
  for (int64_t i = 0; i < BATCH; i++)
    ((int32_t *)bpt_tensor_data(labels))[i] = (int32_t)(i % CLASSES);
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.input, ids));
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.labels, labels));
  assert_ok(m.context, bpt_graph_forward(m.graph));
  bpt_tensor *out = new_tensor(m.context, BPT_DTYPE_F32, 1, (const int64_t[]){CLASSES});
  assert_ok(m.context, bpt_graph_read(m.graph, m.output, out));
  char path[4200];
  snprintf(path, sizeof path, "%s/embedding.onnx", export_directory());
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, NULL));
  write_floats("embedding", "input", (const float *)values, BATCH * LENGTH); /* int32 bytes, 4 each like f32 */
  write_floats("embedding", "output", bpt_tensor_data(out), BATCH * CLASSES);
  bpt_tensor_destroy(out);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(ids);
  model_destroy(&m);
}

/* Two transformer blocks as bpt_layer_transformer_block builds them (fused qkv split by slices, causal fused
 * attention, GELU-tanh MLP, residual adds; trained with dropout, exported without) over token ids and a learned
 * position table added by broadcasting: the whole block through ONNX Runtime. */
static void test_gpt_block(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  enum { LENGTH = 5, VOCABULARY = 13, WIDTH = 8 };
  model m = {.context = test_context(17), .sample_rank = 1, .sample = {LENGTH}};
  bpt_node *h, *positions;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input_sequence(m.graph, "ids", BPT_DTYPE_I32, LENGTH, 0, NULL, &m.input));
  assert_ok(m.context, bpt_layer_embedding(m.graph, "tok", m.input, VOCABULARY, WIDTH, &h));
  assert_ok(m.context, bpt_graph_parameter(m.graph, "pos.weight", 2, (const int64_t[]){LENGTH, WIDTH},
                                           BPT_INIT_NORMAL_SMALL, &positions));
  assert_ok(m.context, bpt_add(m.graph, "embed", h, positions, &h));
  bpt_transformer_block_options block = bpt_transformer_block_options_default();
  block.heads = 2;
  block.dropout = 0.1f;
  assert_ok(m.context, bpt_layer_transformer_block(m.graph, "block0", h, &block, &h));
  assert_ok(m.context, bpt_layer_transformer_block(m.graph, "block1", h, &block, &h));
  assert_ok(m.context, bpt_layer_layer_norm(m.graph, "ln_f", h, 1e-5f, &h));
  assert_ok(m.context, bpt_flatten(m.graph, "flat", h, &h));
  assert_ok(m.context, bpt_layer_linear(m.graph, "head", h, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  bpt_tensor *ids = new_tensor(m.context, BPT_DTYPE_I32, 1, (const int64_t[]){LENGTH});
  int32_t *values = bpt_tensor_data(ids);
  for (int64_t i = 0; i < BATCH * LENGTH; i++)
    values[i] = (int32_t)((i * 5 + 2) % VOCABULARY);
  bpt_tensor *labels = new_tensor(m.context, BPT_DTYPE_I32, 0, NULL);
  for (int64_t i = 0; i < BATCH; i++)
    ((int32_t *)bpt_tensor_data(labels))[i] = (int32_t)(i % CLASSES);
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.input, ids));
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.labels, labels));
  bpt_optimizer_options o = bpt_optimizer_options_default();
  o.kind = BPT_OPTIMIZER_ADAMW;
  o.learning_rate = 0.05f;
  bpt_optimizer *optimizer;
  assert_ok(m.context, bpt_optimizer_create(m.graph, &o, &optimizer));
  for (int step = 0; step < 3; step++) { /* move every weight off its initial value, dropout on */
    assert_ok(m.context, bpt_graph_forward(m.graph));
    assert_ok(m.context, bpt_graph_backward(m.graph));
    assert_ok(m.context, bpt_optimizer_step(optimizer));
  }
  bpt_optimizer_destroy(optimizer);
  assert_ok(m.context, bpt_graph_set_training(m.graph, 0));
  assert_ok(m.context, bpt_graph_forward(m.graph));
  bpt_tensor *out = new_tensor(m.context, BPT_DTYPE_F32, 1, (const int64_t[]){CLASSES});
  assert_ok(m.context, bpt_graph_read(m.graph, m.output, out));
  char path[4200];
  snprintf(path, sizeof path, "%s/gpt_block.onnx", export_directory());
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, NULL));
  write_floats("gpt_block", "input", (const float *)values, BATCH * LENGTH); /* int32 bytes, 4 each like f32 */
  write_floats("gpt_block", "output", bpt_tensor_data(out), BATCH * CLASSES);
  bpt_tensor_destroy(out);
  bpt_tensor_destroy(labels);
  bpt_tensor_destroy(ids);
  model_destroy(&m);
}

/* A sequence loss exported with options.softmax: the probabilities are over the classes, the last axis of the
 * (N, T, classes) logits (axis 1 would normalise over the tokens). The loss's ignore index and smoothing are
 * training options and change nothing in the file. */
static void test_sequence_softmax(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  enum { LENGTH = 3, VOCABULARY = 7, WIDTH = 5 };
  bpt_context *context = test_context(19);
  bpt_graph *graph;
  bpt_node *ids, *labels, *h, *logits, *loss;
  assert_ok(context, bpt_graph_create(context, &graph));
  assert_ok(context, bpt_graph_input_sequence(graph, "ids", BPT_DTYPE_I32, LENGTH, 0, NULL, &ids));
  assert_ok(context, bpt_graph_input_sequence(graph, "next", BPT_DTYPE_I32, LENGTH, 0, NULL, &labels));
  assert_ok(context, bpt_layer_embedding(graph, "tok", ids, VOCABULARY, 4, &h));
  assert_ok(context, bpt_layer_linear(graph, "logits", h, WIDTH, BPT_INIT_HE_UNIFORM, &logits));
  assert_ok(context, bpt_softmax_cross_entropy_options(graph, "loss", logits, labels, -1, 0.1f, &loss));
  assert_ok(context, bpt_graph_compile(graph, loss, BATCH));
  bpt_tensor *x, *y, *out;
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, (const int64_t[]){BATCH, LENGTH}, &x));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_I32, 2, (const int64_t[]){BATCH, LENGTH}, &y));
  assert_ok(context, bpt_tensor_create(context, BPT_DTYPE_F32, 3, (const int64_t[]){BATCH, LENGTH, WIDTH}, &out));
  int32_t *values = bpt_tensor_data(x);
  for (int i = 0; i < BATCH * LENGTH; i++) {
    values[i] = (int32_t)((i * 5 + 1) % VOCABULARY);
    ((int32_t *)bpt_tensor_data(y))[i] = i % 4 == 0 ? -1 : i % WIDTH;
  }
  assert_ok(context, bpt_graph_set_input(graph, ids, x));
  assert_ok(context, bpt_graph_set_input(graph, labels, y));
  assert_ok(context, bpt_graph_set_training(graph, 0));
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_read(graph, logits, out));
  float *p = bpt_tensor_data(out);
  for (int r = 0; r < BATCH * LENGTH; r++) {
    double top = p[r * WIDTH], sum = 0.0;
    for (int c = 1; c < WIDTH; c++)
      top = fmax(top, p[r * WIDTH + c]);
    for (int c = 0; c < WIDTH; c++)
      sum += exp(p[r * WIDTH + c] - top);
    for (int c = 0; c < WIDTH; c++)
      p[r * WIDTH + c] = (float)(exp(p[r * WIDTH + c] - top) / sum);
  }
  bpt_onnx_export_options options = bpt_onnx_export_options_default();
  options.softmax = 1;
  char path[4200];
  snprintf(path, sizeof path, "%s/sequence_softmax.onnx", export_directory());
  assert_ok(context, bpt_graph_export_onnx(graph, path, &options));
  write_floats("sequence_softmax", "input", (const float *)values, BATCH * LENGTH); /* int32 bytes */
  write_floats("sequence_softmax", "output", p, BATCH * LENGTH * WIDTH);
  bpt_tensor_destroy(out);
  bpt_tensor_destroy(y);
  bpt_tensor_destroy(x);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
}

static void test_refusals(void **state) {
  (void)state;
  if (!onnx_available()) skip();
  const char *path = test_write_file("refused.onnx", "keep", 4);
  /* A binary stochastic neuron has no ONNX equivalent: the message names the node and the op. */
  model m = model_begin(15, 1, (const int64_t[]){4});
  bpt_node *x;
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", m.input, 8, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m.context, bpt_binary_stochastic(m.graph, "neurons", x, BPT_STRAIGHT_THROUGH_SIGMOID, &x));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", x, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  assert_fails(m.context, BPT_ERR_STATE, "compile the graph first", bpt_graph_export_onnx(m.graph, path, NULL));
  model_end(&m, false);
  assert_fails(m.context, BPT_ERR_UNSUPPORTED, "node 'neurons' (op binary_stochastic) has no ONNX equivalent",
               bpt_graph_export_onnx(m.graph, path, NULL));
  size_t size = 0;
  unsigned char *kept = test_read_file(path, &size);
  assert_int_equal(size, 4); /* a refused export leaves the file alone */
  free(kept);
  model_destroy(&m);

  m = model_begin(16, 1, (const int64_t[]){4});
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc", m.input, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  assert_fails(m.context, BPT_ERR_IO, "/no/such/directory/model.onnx",
               bpt_graph_export_onnx(m.graph, "/no/such/directory/model.onnx", NULL));
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "path is NULL", bpt_graph_export_onnx(m.graph, NULL, NULL));
  /* Like bpt_checkpoint_save: an empty path was "ONNX model '': rename failed: No such file or directory". */
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "path is NULL or empty", bpt_graph_export_onnx(m.graph, "", NULL));
  assert_fails(NULL, BPT_ERR_INVALID_ARGUMENT, "graph is NULL", bpt_graph_export_onnx(NULL, path, NULL));
  bpt_onnx_export_options options = bpt_onnx_export_options_default();
  options.opset = 12;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "opset 12", bpt_graph_export_onnx(m.graph, path, &options));
  options = bpt_onnx_export_options_default();
  options.input_std = 0.0f;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, "input_std", bpt_graph_export_onnx(m.graph, path, &options));
  options = bpt_onnx_export_options_default();
  options.size = 4;
  assert_fails(m.context, BPT_ERR_INVALID_ARGUMENT, NULL, bpt_graph_export_onnx(m.graph, path, &options));
  model_destroy(&m);
}

/* Issue 30, class 4: under an f16/bf16 policy a parameter's value is the rounded copy that the next forward
 * refreshes, so after a step it is a step old; the file must hold the f32 masters. The initialisers are read
 * back here, so this holds without ONNX Runtime too. */
static void exported_weights_are_the_f32_masters(void **state) {
  (void)state;
#ifndef TEST_HAVE_ONNX_PROTO
  skip();
#else
  if (!onnx_available()) skip();
  const bpt_dtype dtypes[2] = {BPT_DTYPE_BF16, BPT_DTYPE_F16};
  for (int d = 0; d < 2; d++) {
    model m = model_begin(31, 1, (const int64_t[]){16});
    bpt_node *x;
    assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", m.input, 8, BPT_INIT_HE_UNIFORM, &x));
    assert_ok(m.context, bpt_relu(m.graph, "relu1", x, &x));
    assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", x, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
    bpt_precision_options precision = bpt_precision_options_default();
    precision.compute_dtype = dtypes[d];
    assert_ok(m.context, bpt_graph_set_precision(m.graph, &precision));
    model_end(&m, false);
    float *pixels = random_pixels(&m, 41);
    train(&m, pixels, 0.0f, 1.0f); /* ends on a step: the copies are one step old */
    const char *path = test_write_file("masters.onnx", "", 0);
    assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, NULL));
    size_t size;
    unsigned char *bytes = test_read_file(path, &size);
    Onnx__ModelProto *proto = onnx__model_proto__unpack(NULL, size, bytes);
    assert_non_null(proto);
    int compared = 0;
    for (int p = 0; p < m.graph->parameter_count; p++) {
      const bpt_node *parameter = m.graph->parameters[p];
      const float *master = m.graph->parameter_block + parameter->param_offset;
      for (size_t i = 0; i < proto->graph->n_initializer; i++) {
        const Onnx__TensorProto *tensor = proto->graph->initializer[i];
        if (strcmp(tensor->name, parameter->name) != 0) continue;
        assert_int_equal(tensor->n_float_data, (size_t)bpt_node_inner_count(parameter));
        if (memcmp(tensor->float_data, master, tensor->n_float_data * sizeof(float)) != 0)
          fail_msg("%s policy: initialiser '%s' is not the f32 master", bpt_dtype_name(dtypes[d]), tensor->name);
        compared++;
      }
    }
    assert_int_equal(compared, 4);
    onnx__model_proto__free_unpacked(proto, NULL);
    free(bytes);
    free(pixels);
    model_destroy(&m);
  }
#endif
}

/* Issue 30, class 6: nodes named like what the exporter generates ("images/normalized", "images/mean",
 * "fc/softmax") made the graph non-SSA or its initialisers non-unique. Every value must be defined once:
 * by one node output, one initialiser or one graph input. */
static void user_names_never_collide_with_generated_ones(void **state) {
  (void)state;
#ifndef TEST_HAVE_ONNX_PROTO
  skip();
#else
  if (!onnx_available()) skip();
  model m = model_begin(32, 1, (const int64_t[]){16});
  bpt_node *x;
  assert_ok(m.context, bpt_layer_linear(m.graph, "images/normalized", m.input, 8, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m.context, bpt_relu(m.graph, "images/mean", x, &x));
  assert_ok(m.context, bpt_relu(m.graph, "fc/softmax", x, &x));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc", x, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  model_end(&m, false);
  bpt_onnx_export_options options = image_options();
  options.softmax = 1;
  const char *path = test_write_file("collisions.onnx", "", 0);
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, &options));
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  Onnx__ModelProto *proto = onnx__model_proto__unpack(NULL, size, bytes);
  assert_non_null(proto);
  const Onnx__GraphProto *g = proto->graph;
  const char *defined[512];
  size_t count = 0;
  for (size_t i = 0; i < g->n_input; i++)
    defined[count++] = g->input[i]->name;
  for (size_t i = 0; i < g->n_initializer; i++)
    defined[count++] = g->initializer[i]->name;
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_output; k++) {
      assert_true(count < sizeof defined / sizeof *defined);
      defined[count++] = g->node[i]->output[k];
    }
  for (size_t i = 0; i < count; i++)
    for (size_t j = i + 1; j < count; j++)
      if (strcmp(defined[i], defined[j]) == 0) fail_msg("value '%s' is defined twice", defined[i]);
  /* The user's names are kept as they are; the generated ones moved aside. */
  bool kept = false;
  for (size_t i = 0; i < count; i++)
    kept |= strcmp(defined[i], "images/normalized") == 0;
  assert_true(kept);
  onnx__model_proto__free_unpacked(proto, NULL);
  free(bytes);
  /* ONNX Runtime and the checker run it too (check_onnx_runtime.py, "collisions"). */
  float *pixels = random_pixels(&m, 42);
  train(&m, pixels, MEAN, STD);
  export_model(&m, "collisions", pixels, options);
  free(pixels);
  model_destroy(&m);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refusals), cmocka_unit_test(test_mlp),    cmocka_unit_test(test_lenet),
      cmocka_unit_test(test_resnet8),  cmocka_unit_test(test_op_zoo), cmocka_unit_test(test_sequence_ops),
      cmocka_unit_test(test_transformer_ops),
      cmocka_unit_test(test_attention_ops),
      cmocka_unit_test(test_embedding), cmocka_unit_test(test_sequence_softmax), cmocka_unit_test(test_gpt_block),
      cmocka_unit_test(exported_weights_are_the_f32_masters),
      cmocka_unit_test(user_names_never_collide_with_generated_ones),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
