/* cuBLAS, loaded when the first CUDA context is created rather than linked: libcublasLt's start-up work
 * costs every process that loads it about 0.2 s and 210 MB of resident memory, which programs using only
 * the CPU backend should not pay. The few entry points the backend calls are looked up once. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "backends/cuda/cuda.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
/* The soname of the major version the backend was compiled against. */
#define CUBLAS_LIBRARY "libcublas.so." STRINGIFY(CUBLAS_VER_MAJOR)

static bpt_cuda_cublas_api api;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void *lookup(void *library, const char *name, bool *ok) {
  void *symbol = dlsym(library, name);
  if (!symbol && *ok) {
    snprintf(load_error, sizeof load_error, "%s has no %s", CUBLAS_LIBRARY, name);
    *ok = false;
  }
  return symbol;
}

static void load(void) {
  void *library = dlopen(CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
#ifdef BPT_CUDA_LIBRARY_DIR
  if (!library) library = dlopen(BPT_CUDA_LIBRARY_DIR "/" CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
#endif
  if (!library) {
    snprintf(load_error, sizeof load_error, "cannot load %s: %s", CUBLAS_LIBRARY, dlerror());
    return;
  }
  bool ok = true;
  /* Object-to-function pointer conversion through a union: ISO C leaves the direct cast undefined. */
  union {
    void *object;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_pointer_mode)(cublasHandle_t, cublasPointerMode_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    const char *(*status_string)(cublasStatus_t);
    bpt_cuda_gemm_ex_fn gemm_ex;
    bpt_cuda_gemm_strided_batched_ex_fn gemm_strided_batched_ex;
  } symbol;
  symbol.object = lookup(library, "cublasCreate_v2", &ok);
  api.create = symbol.create;
  symbol.object = lookup(library, "cublasDestroy_v2", &ok);
  api.destroy = symbol.destroy;
  symbol.object = lookup(library, "cublasSetStream_v2", &ok);
  api.set_stream = symbol.set_stream;
  symbol.object = lookup(library, "cublasSetPointerMode_v2", &ok);
  api.set_pointer_mode = symbol.set_pointer_mode;
  symbol.object = lookup(library, "cublasSetWorkspace_v2", &ok);
  api.set_workspace = symbol.set_workspace;
  symbol.object = lookup(library, "cublasGetStatusString", &ok);
  api.status_string = symbol.status_string;
  symbol.object = lookup(library, "cublasGemmEx", &ok);
  api.gemm_ex = symbol.gemm_ex;
  symbol.object = lookup(library, "cublasGemmStridedBatchedEx", &ok);
  api.gemm_strided_batched_ex = symbol.gemm_strided_batched_ex;
  /* The library stays loaded for the life of the process: unloading cuBLAS is not supported. */
  api.loaded = ok;
}

const bpt_cuda_cublas_api *bpt_cuda_cublas(bpt_backend *backend) {
  pthread_once(&load_once, load);
  if (!api.loaded) {
    bpt_backend_fail(backend, BPT_ERR_DEVICE, "%s", load_error);
    return NULL;
  }
  return &api;
}
