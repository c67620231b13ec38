/* See test_support.h. */
#define _POSIX_C_SOURCE 200809L
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void test_assert_fails(const bpt_context *context, bpt_status expected, const char *fragment, bpt_status actual,
                       const char *expression, const char *file, int line) {
  const char *message = bpt_context_last_error(context);
  if (actual != expected)
    fail_msg("%s:%d: %s returned %s, expected %s (message: %s)", file, line, expression, bpt_status_string(actual),
             bpt_status_string(expected), message);
  if (fragment && !strstr(message, fragment))
    fail_msg("%s:%d: %s: message '%s' does not mention '%s'", file, line, expression, message, fragment);
}

bpt_context *test_context(uint64_t seed) {
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 2;
  options.seed = seed;
  bpt_context *context = NULL;
  bpt_status status = bpt_context_create(&options, &context);
  if (status != BPT_OK) fail_msg("bpt_context_create: %s", bpt_context_last_error(NULL));
  return context;
}

void test_random_seed(test_random *random, uint64_t seed) { random->state = seed * 2862933555777941757ULL + 1; }

float test_random_uniform(test_random *random, float low, float high) {
  random->state = random->state * 6364136223846793005ULL + 1442695040888963407ULL;
  double unit = (double)(random->state >> 11) * (1.0 / 9007199254740992.0);
  return (float)(low + (high - low) * unit);
}

void test_random_fill(test_random *random, float *values, int64_t count, float low, float high) {
  for (int64_t i = 0; i < count; i++) {
    float value;
    do
      value = test_random_uniform(random, low, high);
    while (value == 0.0f);
    values[i] = value;
  }
}

double test_relative_error(const float *a, const float *b, int64_t count) {
  double difference = 0.0, reference = 0.0;
  for (int64_t i = 0; i < count; i++) {
    double d = (double)a[i] - (double)b[i];
    if (isnan(a[i]) || isnan(b[i])) return INFINITY;
    difference += d * d;
    reference += (double)b[i] * (double)b[i];
  }
  return sqrt(difference) / fmax(sqrt(reference), 1e-30);
}

static double loss_at(bpt_context *context, bpt_graph *graph) {
  float loss = 0.0f;
  bpt_status status = bpt_graph_forward(graph);
  if (status == BPT_OK) status = bpt_graph_loss(graph, &loss);
  if (status != BPT_OK) fail_msg("forward during gradient check: %s", bpt_context_last_error(context));
  return loss;
}

void test_check_gradients(bpt_context *context, bpt_graph *graph, double step, double absolute_tolerance,
                          double relative_tolerance, int max_checks) {
  int64_t count = bpt_graph_parameter_count(graph);
  assert_true(count > 0);
  float *parameters = malloc((size_t)count * sizeof *parameters);
  float *gradients = malloc((size_t)count * sizeof *gradients);
  assert_non_null(parameters);
  assert_non_null(gradients);
  assert_ok(context, bpt_graph_forward(graph));
  assert_ok(context, bpt_graph_backward(graph));
  assert_ok(context, bpt_graph_read_gradients(graph, gradients, count));
  assert_ok(context, bpt_graph_read_parameters(graph, parameters, count));
  int64_t stride = max_checks > 0 && count > max_checks ? count / max_checks : 1;
  int failures = 0;
  for (int64_t i = 0; i < count; i += stride) {
    float original = parameters[i];
    parameters[i] = (float)(original + step);
    assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
    double plus = loss_at(context, graph);
    parameters[i] = (float)(original - step);
    assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
    double minus = loss_at(context, graph);
    parameters[i] = original;
    double numeric = (plus - minus) / (2.0 * step);
    double analytic = gradients[i];
    double error = fabs(analytic - numeric);
    double allowed = absolute_tolerance + relative_tolerance * fmax(fabs(analytic), fabs(numeric));
    if (error > allowed) {
      if (failures < 5)
        print_error("parameter element %lld: analytic %.6g, numeric %.6g\n", (long long)i, analytic, numeric);
      failures++;
    }
  }
  assert_ok(context, bpt_graph_write_parameters(graph, parameters, count));
  free(parameters);
  free(gradients);
  if (failures) fail_msg("%d gradient elements disagree with finite differences", failures);
}

void test_reference_gemm(int transpose_a, int transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; p++) {
        double x = transpose_a ? a[p * lda + i] : a[i * lda + p];
        double y = transpose_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += x * y;
      }
      c[i * ldc + j] = (float)(alpha * sum + (beta == 0.0f ? 0.0 : beta * (double)c[i * ldc + j]));
    }
}

static char *temporary_path(const char *name) {
  static char paths[8][4096];
  static int slot;
  char *path = paths[slot++ % 8];
  const char *base = getenv("BPT_BINARY_DIR");
  char folder[3000];
  snprintf(folder, sizeof folder, "%s/test-files", base ? base : "/tmp");
  mkdir(folder, 0755);
  snprintf(path, 4096, "%s/%d-%s", folder, (int)getpid(), name);
  return path;
}

const char *test_write_file(const char *name, const void *bytes, size_t size) {
  char *path = temporary_path(name);
  FILE *file = fopen(path, "wb");
  if (!file) fail_msg("cannot create %s", path);
  if (size && fwrite(bytes, 1, size, file) != size) fail_msg("cannot write %s", path);
  fclose(file);
  return path;
}

const char *test_write_gzip_file(const char *name, const void *bytes, size_t size) {
  char *path = temporary_path(name);
  gzFile file = gzopen(path, "wb");
  if (!file) fail_msg("cannot create %s", path);
  if (size && gzwrite(file, bytes, (unsigned)size) != (int)size) fail_msg("cannot write %s", path);
  gzclose(file);
  return path;
}

const char *test_fashion_mnist_directory(void) {
  static const char *directory = "/usr/share/datasets/fashion-mnist";
  char path[256];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", directory);
  return access(path, R_OK) == 0 ? directory : NULL;
}

unsigned char *test_read_file(const char *path, size_t *size) {
  FILE *file = fopen(path, "rb");
  if (!file) fail_msg("cannot open %s", path);
  long length = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
  if (length < 0 || fseek(file, 0, SEEK_SET) != 0) fail_msg("cannot find the size of %s", path);
  unsigned char *bytes = calloc((size_t)length + 1, 1);
  if (!bytes) fail_msg("out of memory reading %s", path);
  if (fread(bytes, 1, (size_t)length, file) != (size_t)length) fail_msg("cannot read %s", path);
  fclose(file);
  if (size) *size = (size_t)length;
  return bytes;
}

const char *test_self_executable(void) {
  static char path[4096];
  if (!path[0]) {
    const ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
    if (length <= 0) return NULL;
    path[length] = '\0';
  }
  return path;
}

void test_forget_killed_process(int pid) {
  char path[96];
  snprintf(path, sizeof path, "/dev/shm/__KMP_REGISTERED_LIB_%d_%d", pid, (int)getuid());
  (void)unlink(path);
}
