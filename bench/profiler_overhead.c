/* Cost of the profiler hooks: trains the 784-512-256-10 MLP of examples/mnist_mlp.c on synthetic batches and
 * reports the fastest and the median step time with the profiler off and on, interleaved in rounds so that
 * machine noise hits both alike (one thread: the minimum is then a stable estimate on a shared machine). Built with
 * -DBPT_BENCH_NO_PROFILER it runs only "off", which lets bench/profiler_overhead.sh compare against a library without
 * the hooks at all. A small width (e.g. 16: a 16-16-8-10 MLP) makes ops so short that the on/off difference is the
 * profiler's own cost per recorded event. profiler_overhead [steps per round, 20] [rounds, 15] [batch, 128] [width,
 * 784] */
#define _POSIX_C_SOURCE 200809L
#include <bptrain.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(expression)                                                                                              \
  do {                                                                                                                 \
    if ((expression) != BPT_OK) {                                                                                      \
      fprintf(stderr, "%s failed: %s\n", #expression, bpt_context_last_error(context));                                \
      exit(1);                                                                                                         \
    }                                                                                                                  \
  } while (0)

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 20, rounds = argc > 2 ? atoi(argv[2]) : 15;
  int64_t batch = argc > 3 ? atoi(argv[3]) : 128, features = argc > 4 ? atoi(argv[4]) : 784;
  int64_t hidden1 = features == 784 ? 512 : features, hidden2 = features == 784 ? 256 : features / 2;
  bpt_context *context = NULL;
  bpt_context_options context_options = bpt_context_options_default();
  context_options.num_threads = 1;
  if (bpt_context_create(&context_options, &context) != BPT_OK) return 1;
  bpt_graph *graph;
  bpt_node *images, *labels, *hidden, *loss;
  CHECK(bpt_graph_create(context, &graph));
  CHECK(bpt_graph_input(graph, "images", BPT_DTYPE_F32, 1, &features, &images));
  CHECK(bpt_graph_input(graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels));
  CHECK(bpt_layer_linear(graph, "fc1", images, hidden1, BPT_INIT_HE_UNIFORM, &hidden));
  CHECK(bpt_relu(graph, "relu1", hidden, &hidden));
  CHECK(bpt_layer_linear(graph, "fc2", hidden, hidden2, BPT_INIT_HE_UNIFORM, &hidden));
  CHECK(bpt_relu(graph, "relu2", hidden, &hidden));
  CHECK(bpt_layer_linear(graph, "fc3", hidden, 10, BPT_INIT_HE_UNIFORM, &hidden));
  CHECK(bpt_softmax_cross_entropy(graph, "loss", hidden, labels, &loss));
  CHECK(bpt_graph_compile(graph, loss, batch));
  bpt_optimizer *optimizer;
  bpt_optimizer_options options = bpt_optimizer_options_default();
  options.momentum = 0.9f;
  CHECK(bpt_optimizer_create(graph, &options, &optimizer));
  int64_t dims[2] = {batch, features};
  bpt_tensor *x, *y;
  CHECK(bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x));
  CHECK(bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &y));
  float *values = bpt_tensor_data(x);
  int32_t *classes = bpt_tensor_data(y);
  for (int64_t i = 0; i < batch * features; i++)
    values[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  for (int64_t n = 0; n < batch; n++)
    classes[n] = (int32_t)(n % 10);
  CHECK(bpt_graph_set_input(graph, images, x));
  CHECK(bpt_graph_set_input(graph, labels, y));

#ifdef BPT_BENCH_NO_PROFILER
  const int modes = 1;
#else
  const int modes = 2;
#endif
  double *times[2] = {calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
  for (int round = -1; round < rounds; round++) { /* round -1 warms caches and thread pools up */
    for (int mode = 0; mode < modes; mode++) {
#ifndef BPT_BENCH_NO_PROFILER
      CHECK(bpt_profiler_enable(context, mode));
#endif
      double start = seconds();
      for (int s = 0; s < steps; s++) {
        CHECK(bpt_graph_forward(graph));
        CHECK(bpt_graph_backward(graph));
        CHECK(bpt_optimizer_step(optimizer));
      }
      if (round >= 0) times[mode][round] = (seconds() - start) / steps;
    }
  }
  for (int mode = 0; mode < modes; mode++)
    qsort(times[mode], (size_t)rounds, sizeof(double), compare);
  printf("step min/median: profiler off %.3f/%.3f ms", 1e3 * times[0][0], 1e3 * times[0][rounds / 2]);
  if (modes == 2)
    printf(", on %.3f/%.3f ms (min %+.2f%%)", 1e3 * times[1][0], 1e3 * times[1][rounds / 2],
           100.0 * (times[1][0] / times[0][0] - 1));
  printf("  [width %lld, batch %lld, %d steps x %d rounds]\n", (long long)features, (long long)batch, steps, rounds);
  free(times[0]);
  free(times[1]);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(y);
  bpt_optimizer_destroy(optimizer);
  bpt_graph_destroy(graph);
  bpt_context_destroy(context);
  return 0;
}
