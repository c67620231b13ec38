/* The CUDA backend's table, its lifetime (device, stream, cuBLAS and cuDNN handles) and error translation.
 * A context owns one stream; every member enqueues on it, so only download and synchronize wait for the
 * device. Options come from the environment because they concern the device, not the model:
 * BPT_CUDA_DEVICE (index, default 0), BPT_CUDA_BENCHMARK=1 (time convolution algorithms per shape, like
 * cudnn.benchmark), BPT_CUDA_TF32=1 (allow tf32 rounding in f32 products and convolutions). */
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda.h"
#include "base/parse_index.h"

bpt_status bpt_cuda_check(bpt_backend *backend, cudaError_t error, const char *where) {
  if (error == cudaSuccess) return BPT_OK;
  bpt_status status = error == cudaErrorMemoryAllocation ? BPT_ERR_OUT_OF_MEMORY : BPT_ERR_DEVICE;
  return bpt_backend_fail(backend, status, "%s: CUDA error %d (%s)", where, (int)error, cudaGetErrorString(error));
}

bpt_status bpt_cuda_check_launch(bpt_backend *backend, const char *where) {
  return bpt_cuda_check(backend, cudaGetLastError(), where);
}

bpt_status bpt_cuda_check_cublas(bpt_backend *backend, cublasStatus_t status, const char *where) {
  if (status == CUBLAS_STATUS_SUCCESS) return BPT_OK;
  const bpt_cuda_cublas_api *blas = bpt_cuda(backend)->blas;
  return bpt_backend_fail(backend, status == CUBLAS_STATUS_ALLOC_FAILED ? BPT_ERR_OUT_OF_MEMORY : BPT_ERR_DEVICE,
                          "%s: cuBLAS error %d (%s)", where, (int)status, blas ? blas->status_string(status) : "?");
}

bpt_status bpt_cuda_check_cudnn(bpt_backend *backend, cudnnStatus_t status, const char *where) {
  if (status == CUDNN_STATUS_SUCCESS) return BPT_OK;
  bpt_status code = status == CUDNN_STATUS_NOT_SUPPORTED ? BPT_ERR_UNSUPPORTED : BPT_ERR_DEVICE;
  if (status == CUDNN_STATUS_ALLOC_FAILED) code = BPT_ERR_OUT_OF_MEMORY;
  return bpt_backend_fail(backend, code, "%s: cuDNN error %d (%s)", where, (int)status, cudnnGetErrorString(status));
}

void bpt_cuda_use_device(const bpt_cuda_state *state) {
  int current = -1;
  /* A failure here resurfaces at the member's own CUDA call, which names where. */
  if (cudaGetDevice(&current) != cudaSuccess || current != state->device) cudaSetDevice(state->device);
}

static bool environment_flag(const char *name) {
  const char *value = getenv(name);
  return value && value[0] && strcmp(value, "0") != 0;
}

static void cuda_destroy(bpt_backend *backend) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (!state) return;
  cudaSetDevice(state->device);
  if (state->stream) cudaStreamSynchronize(state->stream);
  bpt_cuda_conv_plans_destroy(backend);
  if (state->cublas_workspace) cudaFreeAsync(state->cublas_workspace, state->stream);
  bpt_cuda_memory_destroy(backend);
  if (state->cudnn) cudnnDestroy(state->cudnn);
  if (state->cublas) state->blas->destroy(state->cublas);
  if (state->stream) cudaStreamDestroy(state->stream);
  free(state);
  backend->state = NULL;
}

static bpt_status cuda_create(bpt_backend *backend, const bpt_backend_options *options) {
  backend->state = NULL;
  backend->num_threads = options->num_threads > 0 ? options->num_threads : 1;
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0)
    return bpt_backend_fail(backend, BPT_ERR_DEVICE, "no CUDA device available (%s)",
                            error != cudaSuccess ? cudaGetErrorString(error) : "the driver reports 0 devices");
  const char *requested = getenv("BPT_CUDA_DEVICE");
  int device = 0;
  if (requested && !bpt_parse_index(requested, &device))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                            "BPT_CUDA_DEVICE='%s' is not a device number (0 to %d here)", requested, count - 1);
  if (device >= count)
    return bpt_backend_fail(backend, BPT_ERR_DEVICE, "BPT_CUDA_DEVICE=%s but %d CUDA device(s) are present",
                            requested, count);
  bpt_cuda_state *state = calloc(1, sizeof *state);
  if (!state) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate the CUDA backend state");
  backend->state = state;
  state->device = device;
  state->benchmark = environment_flag("BPT_CUDA_BENCHMARK");
  state->tf32 = environment_flag("BPT_CUDA_TF32");
  bpt_status status = bpt_cuda_check(backend, cudaSetDevice(state->device), "cudaSetDevice");
  if (status == BPT_OK)
    status = bpt_cuda_check(backend, cudaDeviceGetAttribute(&state->multiprocessors, cudaDevAttrMultiProcessorCount,
                                                            state->device),
                            "cudaDeviceGetAttribute");
  if (status == BPT_OK)
    status = bpt_cuda_check(backend, cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking),
                            "cudaStreamCreate");
  if (status == BPT_OK && !(state->blas = bpt_cuda_cublas(backend))) status = BPT_ERR_DEVICE;
  if (status == BPT_OK) status = bpt_cuda_check_cublas(backend, state->blas->create(&state->cublas), "cublasCreate");
  if (status == BPT_OK)
    status = bpt_cuda_check_cublas(backend, state->blas->set_stream(state->cublas, state->stream), "cublasSetStream");
  if (status == BPT_OK)
    /* alpha and beta come from bpt_gemm_args, on the host. */
    status = bpt_cuda_check_cublas(backend, state->blas->set_pointer_mode(state->cublas, CUBLAS_POINTER_MODE_HOST),
                                   "cublasSetPointerMode");
  if (status == BPT_OK) status = bpt_cuda_check_cudnn(backend, cudnnCreate(&state->cudnn), "cudnnCreate");
  if (status == BPT_OK)
    status = bpt_cuda_check_cudnn(backend, cudnnSetStream(state->cudnn, state->stream), "cudnnSetStream");
  if (status == BPT_OK) status = bpt_cuda_memory_create(backend);
  if (status == BPT_OK)
    /* cuBLAS would otherwise cudaMalloc its workspace inside the first step; give it one from the pool. */
    status = bpt_cuda_alloc(backend, BPT_CUDA_CUBLAS_WORKSPACE, &state->cublas_workspace);
  if (status == BPT_OK)
    status = bpt_cuda_check_cublas(
        backend, state->blas->set_workspace(state->cublas, state->cublas_workspace, BPT_CUDA_CUBLAS_WORKSPACE),
        "cublasSetWorkspace");
  if (status != BPT_OK) cuda_destroy(backend);
  return status;
}

/* Lets the comm layer order NCCL buckets after our compute stream with events instead of a host sync. */
static bpt_status cuda_native_stream(bpt_backend *backend, void **stream) {
  *stream = bpt_cuda(backend)->stream;
  return BPT_OK;
}

/* Generated from the BPT_REGISTER_KERNELS lines of this folder (cmake/kernel_table.cmake): the backend's own
 * table, so it travels with the backend wherever the backend is linked or loaded. */
extern const bpt_op_kernels *const bpt_cuda_kernel_table[BPT_OP_COUNT];

static const bpt_op_kernels *cuda_kernels(const bpt_backend *backend, bpt_op_id op) {
  (void)backend;
  return (unsigned)op < BPT_OP_COUNT ? bpt_cuda_kernel_table[op] : NULL;
}

static const bpt_backend_vtable cuda_vtable = {
    .version = BPT_BACKEND_VTABLE_VERSION,
    .size = sizeof(bpt_backend_vtable),
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .is_host = false,
    .alloc = bpt_cuda_alloc,
    .free = bpt_cuda_free,
    .upload = bpt_cuda_upload,
    .download = bpt_cuda_download,
    .copy = bpt_cuda_copy,
    .memset_zero = bpt_cuda_memset_zero,
    .synchronize = bpt_cuda_synchronize,
    .native_stream = cuda_native_stream,
    .kernels = cuda_kernels,
    .gemm = bpt_cuda_gemm,
    .add_scaled = bpt_cuda_add_scaled,
    .sgd_update = bpt_cuda_sgd_update,
    .adam_update = bpt_cuda_adam_update,
    /* cast_stochastic (and the binary stochastic neuron's kernels) are not written for CUDA yet. */
    .cast = bpt_cuda_cast,
    .round_to_dtype = bpt_cuda_round_to_dtype,
    .unscale_check_finite = bpt_cuda_unscale_check_finite,
    .absolute_max = bpt_cuda_absolute_max,
    .reduce_statistics = bpt_cuda_reduce_statistics,
    .scale_clamp = bpt_cuda_scale_clamp,
};

const bpt_backend_vtable *bpt_cuda_backend_register(void) { return &cuda_vtable; }
