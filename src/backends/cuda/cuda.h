/* The CUDA backend's private header, shared by its .c files (host API: memory, cuBLAS, cuDNN) and its .cu
 * files (own kernels). Only backend.c exports anything: the table. Every kernel runs on the context's one
 * stream, so work is ordered without host synchronisation; errors from a launch are checked right after it. */
#ifndef BPT_CUDA_H
#define BPT_CUDA_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bptrain/common.h"

#ifdef __cplusplus
/* backend.h is a C header without linkage markers; the .cu files must see its functions as C. */
extern "C" {
#endif
#include "backends/kernel_args.h"

/* Host-to-device uploads go through pinned staging slots so cudaMemcpyAsync is truly asynchronous and the
 * caller's buffer can be reused as soon as upload returns. Large uploads travel on a copy stream into a
 * device staging slot while the compute stream runs the current step, and only a device-to-device copy
 * (at device bandwidth) lands in the compute stream's order. Two slots: one fills while the other copies. */
#define BPT_CUDA_STAGING_SLOTS 2
#define BPT_CUDA_STAGING_BYTES (8u << 20)
/* Uploads smaller than this go straight into the compute stream: overlap would not pay for two copies. */
#define BPT_CUDA_OVERLAP_BYTES (64u << 10)
/* cuBLAS's workspace (32 MiB is what it asks for on Hopper). */
#define BPT_CUDA_CUBLAS_WORKSPACE (32u << 20)
/* Per-shape convolution plans kept (descriptors and the chosen algorithms). */
#define BPT_CUDA_CONV_CACHE 64

/* Returns from the calling function when a status is not BPT_OK. */
#define BPT_CUDA_TRY(expression)              \
  do {                                        \
    bpt_status bpt_cuda_try_ = (expression);  \
    if (bpt_cuda_try_ != BPT_OK) return bpt_cuda_try_; \
  } while (0)

typedef struct bpt_cuda_conv_plan bpt_cuda_conv_plan;

/* The cuBLAS entry points the backend uses, loaded at run time (cublas_library.c says why). */
typedef cublasStatus_t (*bpt_cuda_gemm_ex_fn)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                              int m, int n, int k, const void *alpha, const void *a,
                                              cudaDataType_t a_type, int lda, const void *b, cudaDataType_t b_type,
                                              int ldb, const void *beta, void *c, cudaDataType_t c_type, int ldc,
                                              cublasComputeType_t compute_type, cublasGemmAlgo_t algorithm);
typedef cublasStatus_t (*bpt_cuda_gemm_strided_batched_ex_fn)(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void *alpha,
    const void *a, cudaDataType_t a_type, int lda, long long stride_a, const void *b, cudaDataType_t b_type, int ldb,
    long long stride_b, const void *beta, void *c, cudaDataType_t c_type, int ldc, long long stride_c, int batch_count,
    cublasComputeType_t compute_type, cublasGemmAlgo_t algorithm);
typedef struct bpt_cuda_cublas_api {
  bool loaded;
  cublasStatus_t (*create)(cublasHandle_t *handle);
  cublasStatus_t (*destroy)(cublasHandle_t handle);
  cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
  cublasStatus_t (*set_pointer_mode)(cublasHandle_t handle, cublasPointerMode_t mode);
  cublasStatus_t (*set_workspace)(cublasHandle_t handle, void *workspace, size_t bytes);
  const char *(*status_string)(cublasStatus_t status);
  bpt_cuda_gemm_ex_fn gemm_ex;
  bpt_cuda_gemm_strided_batched_ex_fn gemm_strided_batched_ex;
} bpt_cuda_cublas_api;

/* Loads cuBLAS once per process; NULL (with the backend's message set) when it cannot be loaded. */
const bpt_cuda_cublas_api *bpt_cuda_cublas(bpt_backend *backend);

typedef struct bpt_cuda_state {
  int device;
  int multiprocessors;
  cudaStream_t stream;
  cudaMemPool_t pool; /* the context's own caching pool: stream-ordered, memory kept between steps */
  const bpt_cuda_cublas_api *blas;
  cublasHandle_t cublas;
  void *cublas_workspace;
  cudnnHandle_t cudnn;
  cudaStream_t copy_stream;
  void *staging[BPT_CUDA_STAGING_SLOTS];        /* pinned host */
  void *device_staging[BPT_CUDA_STAGING_SLOTS]; /* device, filled on copy_stream */
  cudaEvent_t staging_done[BPT_CUDA_STAGING_SLOTS]; /* the slot's last use has finished on the device */
  cudaEvent_t staging_copied[BPT_CUDA_STAGING_SLOTS]; /* the slot's host-to-device copy has finished */
  bool staging_overlapped[BPT_CUDA_STAGING_SLOTS];    /* the slot's last upload went through copy_stream */
  int staging_next;
  /* Scratch reused by kernels that need it (partial sums, cuDNN workspaces); grows, never shrinks. */
  void *scratch;
  size_t scratch_bytes;
  void *workspace;
  size_t workspace_bytes;
  bool benchmark; /* BPT_CUDA_BENCHMARK=1: time the convolution algorithms once per shape, keep the fastest */
  bool tf32;      /* BPT_CUDA_TF32=1: f32 products and convolutions may round operands to tf32 */
  int conv_plan_count;
  bpt_cuda_conv_plan *conv_plans[BPT_CUDA_CONV_CACHE];
} bpt_cuda_state;

/* Makes the context's device current on the calling thread. Every member reaches its state through
 * bpt_cuda(), so a context driven from a second host thread (speculative training's worker, which never
 * calls cudaSetDevice) or beside a context or communicator on another device still launches on its own
 * device. cudaGetDevice first: when the device is already current this costs a thread-local read. */
void bpt_cuda_use_device(const bpt_cuda_state *state);

static inline bpt_cuda_state *bpt_cuda(bpt_backend *backend) {
  bpt_cuda_state *state = (bpt_cuda_state *)backend->state;
  if (state) bpt_cuda_use_device(state);
  return state;
}

/* Threads per block for element-wise kernels, and a grid-stride grid that fills the device without
 * launching more blocks than there is work for. */
#define BPT_CUDA_THREADS 256
static inline unsigned bpt_cuda_blocks(const bpt_cuda_state *state, int64_t count) {
  int64_t blocks = (count + BPT_CUDA_THREADS - 1) / BPT_CUDA_THREADS;
  int64_t limit = (int64_t)state->multiprocessors * 16;
  if (blocks > limit) blocks = limit;
  return blocks > 0 ? (unsigned)blocks : 1u;
}

/* Error translation: each returns BPT_OK or a failed status with the backend's message filled in. */
bpt_status bpt_cuda_check(bpt_backend *backend, cudaError_t error, const char *where);
bpt_status bpt_cuda_check_launch(bpt_backend *backend, const char *where);
bpt_status bpt_cuda_check_cublas(bpt_backend *backend, cublasStatus_t status, const char *where);
bpt_status bpt_cuda_check_cudnn(bpt_backend *backend, cudnnStatus_t status, const char *where);

/* Memory (memory.c). scratch and workspace grow in stream order through the pool; their contents are not
 * kept across calls. */
bpt_status bpt_cuda_memory_create(bpt_backend *backend);
void bpt_cuda_memory_destroy(bpt_backend *backend);
bpt_status bpt_cuda_alloc(bpt_backend *backend, size_t bytes, void **out);
void bpt_cuda_free(bpt_backend *backend, void *pointer);
bpt_status bpt_cuda_upload(bpt_backend *backend, void *device_dst, const void *host_src, size_t bytes);
bpt_status bpt_cuda_download(bpt_backend *backend, void *host_dst, const void *device_src, size_t bytes);
bpt_status bpt_cuda_copy(bpt_backend *backend, void *device_dst, const void *device_src, size_t bytes);
bpt_status bpt_cuda_memset_zero(bpt_backend *backend, void *device_dst, size_t bytes);
bpt_status bpt_cuda_synchronize(bpt_backend *backend);
bpt_status bpt_cuda_scratch(bpt_backend *backend, size_t bytes, void **out);
bpt_status bpt_cuda_workspace(bpt_backend *backend, size_t bytes, void **out);

/* Kernels, one file per job. */
bpt_status bpt_cuda_gemm(bpt_backend *backend, const bpt_gemm_args *args);
bpt_status bpt_cuda_add_scaled(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y);
bpt_status bpt_cuda_sgd_update(bpt_backend *backend, const bpt_update_args *args);
bpt_status bpt_cuda_adam_update(bpt_backend *backend, const bpt_update_args *args);
void bpt_cuda_conv_plans_destroy(bpt_backend *backend);
bpt_status bpt_cuda_cast(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                         bpt_dtype destination_dtype, void *destination, float scale);
bpt_status bpt_cuda_unscale_check_finite(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                         int32_t *found_nonfinite);
/* Kernels of the shared vtable members (reduce_statistics, scale_clamp, round_to_dtype, absolute_max). */
bpt_status bpt_cuda_reduce_statistics(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                      double *sum_of_squares, int64_t *zeros);
bpt_status bpt_cuda_scale_clamp(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x);
bpt_status bpt_cuda_round_to_dtype(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values);
bpt_status bpt_cuda_absolute_max(bpt_backend *backend, int64_t count, const float *x, float *maximum);
/* Fills count floats with value: a memory helper like memset_zero (batch norm's default gamma and beta), not an
 * op's kernel. */
bpt_status bpt_cuda_fill(bpt_backend *backend, int64_t count, float value, float *y);

#ifdef __cplusplus
}
#endif

#endif
