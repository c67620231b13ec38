/* NCCL engine smoke test on one GPU (world size 1): communicator from a fresh unique id, all-reduce sum and
 * average in f32, f16 and bf16 on device buffers, broadcast, barrier, destroy. With the "cuda" backend
 * built in, also two data-parallel steps with 2 accumulated micro-batches against one plain step on the
 * whole batch (this exercises the pre-multiplied sum). Exits 77 (skipped) without a CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bptrain.h"
#include "comm/compress.h"

static int failures;

#define EXPECT(condition, ...)                                                                                         \
  do {                                                                                                                 \
    if (!(condition)) {                                                                                                \
      failures++;                                                                                                      \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #condition);                                                  \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fprintf(stderr, "\n");                                                                                           \
    }                                                                                                                  \
  } while (0)

#define EXPECT_OK(context, expression)                                                                                 \
  do {                                                                                                                 \
    bpt_status expect_status_ = (expression);                                                                          \
    EXPECT(expect_status_ == BPT_OK, "%s: %s", bpt_status_string(expect_status_), bpt_context_last_error(context));    \
    if (expect_status_ != BPT_OK) return;                                                                              \
  } while (0)

static void collectives(bpt_context *context, bpt_comm *comm) {
  enum { n = 1001 };
  const bpt_dtype dtypes[] = {BPT_DTYPE_F32, BPT_DTYPE_F16, BPT_DTYPE_BF16};
  unsigned char host[n * 4], back[n * 4];
  void *device = NULL;
  EXPECT(cudaMalloc(&device, sizeof host) == cudaSuccess, "cudaMalloc");
  for (int d = 0; d < 3; d++)
    for (int average = 0; average <= 1; average++) {
      for (int i = 0; i < n; i++) {
        float value = (float)(i % 9) - 4.0f;
        if (dtypes[d] == BPT_DTYPE_F32)
          memcpy(host + 4 * i, &value, 4);
        else {
          uint16_t bits = dtypes[d] == BPT_DTYPE_F16 ? bpt_float_to_f16(value) : bpt_float_to_bf16(value);
          memcpy(host + 2 * i, &bits, 2);
        }
      }
      size_t bytes = (size_t)n * bpt_dtype_size(dtypes[d]);
      /* A pageable copy may return before its DMA lands, and the engine's stream is non-blocking (not ordered
       * after the legacy stream): wait for the copy before the collective reads the buffer. */
      EXPECT(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
      EXPECT(cudaDeviceSynchronize() == cudaSuccess, "upload wait");
      EXPECT_OK(context, bpt_comm_allreduce(comm, device, n, dtypes[d], average ? BPT_REDUCE_AVERAGE : BPT_REDUCE_SUM));
      EXPECT(cudaMemcpy(back, device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
      EXPECT(memcmp(host, back, bytes) == 0, "%s all-reduce over one rank changed the values",
             bpt_dtype_name(dtypes[d]));
    }
  EXPECT_OK(context, bpt_comm_broadcast(comm, device, 100, 0));
  EXPECT_OK(context, bpt_comm_barrier(comm));
  EXPECT(bpt_comm_allreduce(comm, device, 1, BPT_DTYPE_I32, BPT_REDUCE_SUM) == BPT_ERR_DTYPE, "i32 accepted");
  cudaFree(device);
}

/* Builds x(8) -> linear(4) -> softmax cross-entropy on the cuda backend with one batch of data set. */
static bpt_status build(bpt_context *context, int64_t batch, bpt_graph **graph, bpt_optimizer **optimizer) {
  const int64_t features = 8;
  bpt_node *x, *labels, *logits, *loss;
  bpt_status status = bpt_graph_create(context, graph);
  if (status == BPT_OK) status = bpt_graph_input(*graph, "x", BPT_DTYPE_F32, 1, &features, &x);
  if (status == BPT_OK) status = bpt_graph_input(*graph, "labels", BPT_DTYPE_I32, 0, NULL, &labels);
  if (status == BPT_OK) status = bpt_layer_linear(*graph, "fc", x, 4, BPT_INIT_HE_UNIFORM, &logits);
  if (status == BPT_OK) status = bpt_softmax_cross_entropy(*graph, "loss", logits, labels, &loss);
  if (status == BPT_OK) status = bpt_graph_compile(*graph, loss, batch);
  if (status == BPT_OK) status = bpt_optimizer_create(*graph, NULL, optimizer);
  return status;
}

static bpt_status feed(bpt_context *context, bpt_graph *graph, int first, int count) {
  int64_t dims[2] = {count, 8};
  bpt_tensor *x = NULL, *labels = NULL;
  bpt_node *x_node, *labels_node;
  bpt_status status = bpt_tensor_create(context, BPT_DTYPE_F32, 2, dims, &x);
  if (status == BPT_OK) status = bpt_tensor_create(context, BPT_DTYPE_I32, 1, dims, &labels);
  if (status == BPT_OK) {
    for (int i = 0; i < count * 8; i++)
      ((float *)bpt_tensor_data(x))[i] = (float)(((first * 8 + i) * 37) % 19) / 9.0f - 1.0f;
    for (int i = 0; i < count; i++)
      ((int32_t *)bpt_tensor_data(labels))[i] = (first + i) % 4;
    status = bpt_graph_find_node(graph, "x", &x_node);
  }
  if (status == BPT_OK) status = bpt_graph_find_node(graph, "labels", &labels_node);
  if (status == BPT_OK) status = bpt_graph_set_input(graph, x_node, x);
  if (status == BPT_OK) status = bpt_graph_set_input(graph, labels_node, labels);
  bpt_tensor_destroy(x);
  bpt_tensor_destroy(labels);
  return status;
}

static void data_parallel(bpt_comm *comm) {
  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = NULL;
  if (bpt_context_create(&options, &context) != BPT_OK) {
    printf("data-parallel part skipped: %s\n", bpt_context_last_error(NULL));
    return;
  }
  bpt_graph *reference = NULL, *parallel = NULL;
  bpt_optimizer *reference_optimizer = NULL, *parallel_optimizer = NULL;
  bpt_data_parallel *dp = NULL;
  EXPECT_OK(context, build(context, 8, &reference, &reference_optimizer));
  EXPECT_OK(context, build(context, 4, &parallel, &parallel_optimizer));
  bpt_data_parallel_options dp_options = bpt_data_parallel_options_default();
  dp_options.accumulation_steps = 2;
  EXPECT_OK(context, bpt_data_parallel_create(parallel, comm, &dp_options, &dp));
  for (int step = 0; step < 2; step++) {
    EXPECT_OK(context, feed(context, reference, 0, 8));
    EXPECT_OK(context, bpt_graph_forward(reference));
    EXPECT_OK(context, bpt_graph_backward(reference));
    EXPECT_OK(context, bpt_optimizer_step(reference_optimizer));
    for (int micro = 0; micro < 2; micro++) {
      EXPECT_OK(context, feed(context, parallel, 4 * micro, 4));
      EXPECT_OK(context, bpt_graph_forward(parallel));
      EXPECT_OK(context, micro ? bpt_graph_backward_accumulate(parallel) : bpt_graph_backward(parallel));
    }
    EXPECT_OK(context, bpt_optimizer_step(parallel_optimizer));
  }
  float a[36], b[36];
  EXPECT(bpt_graph_parameter_count(parallel) == 36, "parameter count %lld",
         (long long)bpt_graph_parameter_count(parallel));
  EXPECT_OK(context, bpt_graph_read_parameters(reference, a, 36));
  EXPECT_OK(context, bpt_graph_read_parameters(parallel, b, 36));
  for (int i = 0; i < 36; i++)
    EXPECT(fabsf(a[i] - b[i]) <= 1e-5f, "parameter %d: %g vs %g", i, a[i], b[i]);
  bpt_data_parallel_destroy(dp);
  bpt_optimizer_destroy(reference_optimizer);
  bpt_optimizer_destroy(parallel_optimizer);
  bpt_graph_destroy(reference);
  bpt_graph_destroy(parallel);
  bpt_context_destroy(context);
  printf("data parallel over NCCL (2 accumulated micro-batches): %s\n", failures ? "FAILED" : "ok");
}

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("test_nccl_smoke: skipped, no CUDA device\n");
    return 77;
  }
  bpt_context *context = NULL;
  if (bpt_context_create(NULL, &context) != BPT_OK) return 1;
  bpt_comm_unique_id id;
  bpt_comm *comm = NULL;
  bpt_comm_options options = bpt_comm_options_default();
  options.timeout_seconds = 60.0;
  if (bpt_comm_nccl_unique_id(context, &id) != BPT_OK ||
      bpt_comm_create_nccl(context, &id, 0, 1, 0, &options, &comm) != BPT_OK) {
    fprintf(stderr, "test_nccl_smoke: %s\n", bpt_context_last_error(context));
    bpt_context_destroy(context);
    return 1;
  }
  EXPECT(strcmp(bpt_comm_engine(comm), "nccl") == 0 && bpt_comm_size(comm) == 1, "engine %s", bpt_comm_engine(comm));
  collectives(context, comm);
  data_parallel(comm);
  bpt_comm_destroy(comm);
  if (devices >= 2) { /* a communicator on device 1 leaves the thread's current device (0) as it found it */
    int current = -1;
    EXPECT(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
    bpt_comm *other = NULL;
    if (bpt_comm_nccl_unique_id(context, &id) == BPT_OK &&
        bpt_comm_create_nccl(context, &id, 0, 1, 1, &options, &other) == BPT_OK) {
      EXPECT(cudaGetDevice(&current) == cudaSuccess && current == 0, "creation left device %d current", current);
      EXPECT(bpt_comm_barrier(other) == BPT_OK, "barrier on device 1: %s", bpt_context_last_error(context));
      EXPECT(cudaGetDevice(&current) == cudaSuccess && current == 0, "a barrier left device %d current", current);
      bpt_comm_destroy(other);
      EXPECT(cudaGetDevice(&current) == cudaSuccess && current == 0, "destroy left device %d current", current);
    } else {
      EXPECT(0, "communicator on device 1: %s", bpt_context_last_error(context));
    }
  }
  bpt_context_destroy(context);
  printf("test_nccl_smoke: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
