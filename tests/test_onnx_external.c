/* ONNX external data (issue 30, class 6): a model over protobuf's 2 GiB limit keeps its large initialisers in
 * "<model>.onnx.data", or is refused before anything is written. Building a 2 GiB model here would take more
 * memory than a test may, so the limit (onnx_protobuf_limit, 2^31 - 1) is lowered to the size of a small MLP's
 * model; the code path is the one a real 2 GiB model takes. The model is also written to
 * $BPT_BINARY_DIR/onnx-external with its inputs and outputs for check_onnx_runtime.py, which runs the ONNX
 * checker and ONNX Runtime on it (CTest's check_onnx_external). */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bptrain.h"
#include "core/graph.h"
#include "test_support.h"
#if defined(__has_include)
#if __has_include("onnx.pb-c.h")
#include "export/onnx_external.h"
#include "onnx.pb-c.h"
#define TEST_HAVE_ONNX_PROTO 1
#endif
#endif

#ifdef TEST_HAVE_ONNX_PROTO
enum { BATCH = 5, FEATURES = 16, HIDDEN = 48, CLASSES = 10 };

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
  bpt_node *input, *labels, *output;
} model;

/* 16 -> 48 (ReLU) -> 10 with its input normalised inside the model: two weights of 3072 and 1920 bytes (over
 * the 1 KiB threshold, neither a whole page), two biases and two scalar constants under it; a few SGD steps move every
 * parameter. */
static model build(float *pixels) {
  model m = {.context = test_context(51)};
  bpt_node *x, *loss;
  assert_ok(m.context, bpt_graph_create(m.context, &m.graph));
  assert_ok(m.context, bpt_graph_input(m.graph, "features", BPT_DTYPE_F32, 1, (const int64_t[]){FEATURES}, &m.input));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc1", m.input, HIDDEN, BPT_INIT_HE_UNIFORM, &x));
  assert_ok(m.context, bpt_relu(m.graph, "relu1", x, &x));
  assert_ok(m.context, bpt_layer_linear(m.graph, "fc2", x, CLASSES, BPT_INIT_HE_UNIFORM, &m.output));
  assert_ok(m.context, bpt_graph_input(m.graph, "labels", BPT_DTYPE_I32, 0, NULL, &m.labels));
  assert_ok(m.context, bpt_softmax_cross_entropy(m.graph, "loss", m.output, m.labels, &loss));
  assert_ok(m.context, bpt_graph_compile(m.graph, loss, BATCH));
  test_random random;
  test_random_seed(&random, 52);
  test_random_fill(&random, pixels, BATCH * FEATURES, 0.0f, 1.0f);
  bpt_tensor *features = NULL, *labels = NULL;
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_F32, 2, (const int64_t[]){BATCH, FEATURES}, &features));
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_I32, 1, (const int64_t[]){BATCH}, &labels));
  for (int i = 0; i < BATCH * FEATURES; i++)
    ((float *)bpt_tensor_data(features))[i] = (pixels[i] - 0.5f) / 2.0f;
  for (int i = 0; i < BATCH; i++)
    ((int32_t *)bpt_tensor_data(labels))[i] = i % CLASSES;
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.input, features));
  assert_ok(m.context, bpt_graph_set_input(m.graph, m.labels, labels));
  bpt_tensor_destroy(features);
  bpt_tensor_destroy(labels);
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.kind = BPT_OPTIMIZER_SGD;
  options.learning_rate = 0.05f;
  bpt_optimizer *optimizer = NULL;
  assert_ok(m.context, bpt_optimizer_create(m.graph, &options, &optimizer));
  for (int step = 0; step < 3; step++) {
    assert_ok(m.context, bpt_graph_forward(m.graph));
    assert_ok(m.context, bpt_graph_backward(m.graph));
    assert_ok(m.context, bpt_optimizer_step(optimizer));
  }
  bpt_optimizer_destroy(optimizer);
  assert_ok(m.context, bpt_graph_set_training(m.graph, 0));
  return m;
}

static bpt_onnx_export_options options(void) {
  bpt_onnx_export_options o = bpt_onnx_export_options_default();
  o.input_mean = 0.5f;
  o.input_std = 2.0f;
  return o;
}

/* The test's own folder, emptied on first use so that what a check finds there is from this run. */
static const char *directory(void) {
  static char path[4096];
  if (path[0]) return path;
  const char *base = getenv("BPT_BINARY_DIR");
  snprintf(path, sizeof path, "%s/onnx-external", base ? base : "/tmp");
  mkdir(path, 0755);
  DIR *folder = opendir(path);
  assert_non_null(folder);
  for (struct dirent *item; (item = readdir(folder)) != NULL;) {
    char file[4400];
    snprintf(file, sizeof file, "%s/%s", path, item->d_name);
    if (item->d_name[0] != '.' && unlink(file) != 0) rmdir(file); /* a failed run's directory at a data path */
  }
  closedir(folder);
  return path;
}

static const char *in_directory(const char *name) {
  static char paths[4][4200];
  static int next;
  char *path = paths[next++ % 4];
  snprintf(path, sizeof paths[0], "%s/%s", directory(), name);
  return path;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static size_t file_size(const char *path) {
  struct stat info;
  if (stat(path, &info) != 0) fail_msg("%s is missing", path);
  return (size_t)info.st_size;
}

static void write_bytes(const char *path, const void *bytes, size_t size) {
  FILE *file = fopen(path, "wb");
  if (!file || fwrite(bytes, 1, size, file) != size) fail_msg("cannot write %s", path);
  fclose(file);
}

static const char *entry(const Onnx__TensorProto *tensor, const char *key) {
  for (size_t i = 0; i < tensor->n_external_data; i++)
    if (strcmp(tensor->external_data[i]->key, key) == 0) return tensor->external_data[i]->value;
  return NULL;
}

/* Every parameter's values in the model at path (inline or in its side file) are its f32 master, bit for bit;
 * returns how many parameters lie in the side file. */
static int check_initialisers(const model *m, const char *path, const char *location) {
  size_t size, data_size = 0;
  unsigned char *bytes = test_read_file(path, &size);
  Onnx__ModelProto *proto = onnx__model_proto__unpack(NULL, size, bytes);
  assert_non_null(proto);
  char data_path[4300];
  snprintf(data_path, sizeof data_path, "%s.data", path);
  unsigned char *data = exists(data_path) ? test_read_file(data_path, &data_size) : NULL;
  int external = 0, compared = 0;
  for (int p = 0; p < m->graph->parameter_count; p++) {
    const bpt_node *parameter = m->graph->parameters[p];
    const float *master = m->graph->parameter_block + parameter->param_offset;
    const size_t bytes_wanted = (size_t)bpt_node_inner_count(parameter) * sizeof(float);
    for (size_t i = 0; i < proto->graph->n_initializer; i++) {
      const Onnx__TensorProto *tensor = proto->graph->initializer[i];
      if (strcmp(tensor->name, parameter->name) != 0) continue;
      compared++;
      if (bytes_wanted < ONNX_EXTERNAL_THRESHOLD || !location) {
        /* Small ones stay inline: only what must move does. */
        assert_false(tensor->has_data_location && tensor->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
        assert_int_equal(tensor->n_float_data * sizeof(float), bytes_wanted);
        assert_memory_equal(tensor->float_data, master, bytes_wanted);
        continue;
      }
      assert_true(tensor->has_data_location);
      assert_int_equal(tensor->data_location, ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL);
      assert_int_equal(tensor->n_float_data, 0);
      assert_string_equal(entry(tensor, "location"), location);
      const size_t offset = strtoull(entry(tensor, "offset"), NULL, 10);
      const size_t length = strtoull(entry(tensor, "length"), NULL, 10);
      assert_int_equal(offset % ONNX_EXTERNAL_ALIGNMENT, 0);
      assert_int_equal(length, bytes_wanted);
      assert_non_null(data);
      assert_true(offset + length <= data_size);
      for (size_t k = 0; k < length / sizeof(float); k++) {
        /* The spec's byte order, little-endian, whatever the host's. */
        uint32_t expected, actual = 0;
        memcpy(&expected, master + k, sizeof expected);
        for (int byte = 0; byte < 4; byte++)
          actual |= (uint32_t)data[offset + 4 * k + (size_t)byte] << (8 * byte);
        if (actual != expected) fail_msg("'%s' value %zu in the side file is not the f32 master", tensor->name, k);
      }
      external++;
    }
  }
  assert_int_equal(compared, m->graph->parameter_count);
  onnx__model_proto__free_unpacked(proto, NULL);
  free(data);
  free(bytes);
  return external;
}

/* No temporary file ("<name>.tmp-...") is left in the export directory. */
static void assert_no_temporaries(void) {
  DIR *folder = opendir(directory());
  assert_non_null(folder);
  for (struct dirent *item; (item = readdir(folder)) != NULL;)
    if (strstr(item->d_name, ".tmp-")) fail_msg("temporary file %s was left behind", item->d_name);
  closedir(folder);
}
#endif

/* The limit is protobuf's own: its parsers count a message's size in an int. */
static void limit_is_protobufs(void **state) {
  (void)state;
#ifndef TEST_HAVE_ONNX_PROTO
  skip();
#else
  assert_int_equal(onnx_protobuf_limit, (size_t)INT32_MAX);
#endif
}

/* Up to the limit one file, inline; one byte over it, the large initialisers move to "<model>.data", page
 * aligned, and the model then fits; ONNX Runtime runs it (check_onnx_external). */
static void over_the_limit_writes_external_data(void **state) {
  (void)state;
#ifndef TEST_HAVE_ONNX_PROTO
  skip();
#else
  float pixels[BATCH * FEATURES];
  model m = build(pixels);
  const bpt_onnx_export_options o = options();
  const char *inline_path = in_directory("inline.onnx"), *inline_data = in_directory("inline.onnx.data");
  unlink(inline_data);
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, inline_path, &o));
  assert_false(exists(inline_data));
  const size_t whole = file_size(inline_path);
  assert_true(whole > 3072 + 1920);
  assert_int_equal(check_initialisers(&m, inline_path, NULL), 0);

  /* Exactly at the limit still fits. */
  onnx_protobuf_limit = whole;
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, inline_path, &o));
  assert_false(exists(inline_data));
  assert_int_equal(file_size(inline_path), whole);

  onnx_protobuf_limit = whole - 1;
  const char *path = in_directory("external.onnx"), *data_path = in_directory("external.onnx.data");
  unlink(data_path);
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, &o));
  assert_true(file_size(path) <= whole - 1);
  assert_true(file_size(path) < 1024); /* both weights moved out */
  /* fc2.weight follows fc1.weight's 3072 bytes at the next page: 4096 + 1920. */
  assert_int_equal(file_size(data_path), 4096 + 1920);
  assert_int_equal(check_initialisers(&m, path, "external.onnx.data"), 2);
  /* Exporting over it again replaces both. */
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, &o));
  assert_int_equal(check_initialisers(&m, path, "external.onnx.data"), 2);
  assert_no_temporaries();
  /* A private model's new data file is as private as the model (issue 30, class 11). */
  const char *private_path = in_directory("private.onnx"), *private_data = in_directory("private.onnx.data");
  write_bytes(private_path, "old", 3);
  assert_int_equal(chmod(private_path, 0600), 0);
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, private_path, &o));
  struct stat info;
  assert_int_equal(stat(private_data, &info), 0);
  assert_int_equal(info.st_mode & 0777, 0600);
  assert_int_equal(stat(private_path, &info), 0);
  assert_int_equal(info.st_mode & 0777, 0600);
  onnx_protobuf_limit = INT32_MAX;

  /* The inputs and libbptrain's outputs for ONNX Runtime. */
  assert_ok(m.context, bpt_graph_forward(m.graph));
  bpt_tensor *out = NULL;
  assert_ok(m.context, bpt_tensor_create(m.context, BPT_DTYPE_F32, 2, (const int64_t[]){BATCH, CLASSES}, &out));
  assert_ok(m.context, bpt_graph_read(m.graph, m.output, out));
  write_bytes(in_directory("external.input"), pixels, sizeof pixels);
  write_bytes(in_directory("external.output"), bpt_tensor_data(out), BATCH * CLASSES * sizeof(float));
  bpt_tensor_destroy(out);
  bpt_graph_destroy(m.graph);
  bpt_context_destroy(m.context);
#endif
}

/* A model that would not fit even with its data moved out is refused by size and limit, and neither the old
 * model nor the old data file beside it changes. */
static void still_too_large_is_refused_before_writing(void **state) {
  (void)state;
#ifndef TEST_HAVE_ONNX_PROTO
  skip();
#else
  float pixels[BATCH * FEATURES];
  model m = build(pixels);
  const bpt_onnx_export_options o = options();
  const char *path = in_directory("refused.onnx"), *data_path = in_directory("refused.onnx.data");
  /* The smallest this model packs to, its weights moved out (under this name: the location is in the model). */
  onnx_protobuf_limit = 4096;
  assert_ok(m.context, bpt_graph_export_onnx(m.graph, path, &o));
  const size_t smallest = file_size(path);
  onnx_protobuf_limit = smallest - 1;
  write_bytes(path, "keep", 4);
  write_bytes(data_path, "kept", 4);
  char limit[64];
  snprintf(limit, sizeof limit, "still to %zu", smallest);
  assert_fails(m.context, BPT_ERR_UNSUPPORTED, limit, bpt_graph_export_onnx(m.graph, path, &o));
  snprintf(limit, sizeof limit, "over protobuf's limit of %zu bytes; nothing was written", smallest - 1);
  assert_fails(m.context, BPT_ERR_UNSUPPORTED, limit, bpt_graph_export_onnx(m.graph, path, &o));
  onnx_protobuf_limit = INT32_MAX;
  size_t size;
  unsigned char *kept = test_read_file(path, &size);
  assert_int_equal(size, 4);
  assert_memory_equal(kept, "keep", 4);
  free(kept);
  kept = test_read_file(data_path, &size);
  assert_int_equal(size, 4);
  assert_memory_equal(kept, "kept", 4);
  free(kept);
  /* A side file that cannot be written (a directory in its place) fails the export and leaves the model. */
  onnx_protobuf_limit = smallest;
  unlink(data_path);
  assert_int_equal(mkdir(data_path, 0755), 0);
  assert_fails(m.context, BPT_ERR_IO, "refused.onnx.data", bpt_graph_export_onnx(m.graph, path, &o));
  onnx_protobuf_limit = INT32_MAX;
  rmdir(data_path);
  kept = test_read_file(path, &size);
  assert_int_equal(size, 4);
  free(kept);
  assert_no_temporaries();
  bpt_graph_destroy(m.graph);
  bpt_context_destroy(m.context);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(limit_is_protobufs),
      cmocka_unit_test(over_the_limit_writes_external_data),
      cmocka_unit_test(still_too_large_is_refused_before_writing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
