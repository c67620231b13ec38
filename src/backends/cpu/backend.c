/* The CPU backend's table and memory functions. Device memory is host memory, 64-byte aligned. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/blas_guard.h"
#include "base/openmp_limits.h"
#include "backends/cpu/blas_library.h"
#include "backends/cpu/cpu.h"

/* The OpenMP runtime starts when libbptrain loads, as it did while OpenBLAS was linked (its constructor asked
 * OpenMP for the thread count): LLVM's libomp maps a shared-memory registration file as it starts and ends the
 * process when that fails, so it must not start for the first time under an address-space limit set later
 * (test_process_limits). libgomp only reads its environment here. */
__attribute__((constructor)) static void start_openmp(void) { (void)omp_get_max_threads(); }

static bpt_status cpu_create(bpt_backend *backend, const bpt_backend_options *options) {
  const bpt_cpu_blas *blas = bpt_cpu_blas_load();
  if (blas->short_of_space)
    return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "%s; set OPENBLAS_NUM_THREADS=1 or raise the limit",
                            strncmp(blas->library, "none: ", 6) == 0 ? blas->library + 6 : blas->library);
  /* Never more than OpenMP will give a region of the calling thread: OpenBLAS waits for every one. */
  int threads = bpt_openmp_usable_threads(options->num_threads > 0 ? options->num_threads : omp_get_num_procs());
  /* OpenBLAS's workspace must fit before it is asked for; an automatic thread count halves until it does. */
  bpt_status status = bpt_cpu_blas_reserve(backend, threads);
  while (status == BPT_ERR_OUT_OF_MEMORY && options->num_threads == 0 && threads > 1)
    status = bpt_cpu_blas_reserve(backend, threads /= 2);
  if (status != BPT_OK) return status;
  /* The workspace now holds a buffer for the check's product (blas_library.c). */
  bpt_cpu_blas_self_check();
  backend->num_threads = threads;
  backend->state = NULL;
  /* Both calls: the OpenMP build of OpenBLAS follows omp_set_num_threads, the pthread build does not. */
  bpt_openmp_fix_team();
  omp_set_num_threads(threads);
  if (blas->set_num_threads) blas->set_num_threads(threads);
  return bpt_cpu_state_create(backend);
}

static void cpu_destroy(bpt_backend *backend) { bpt_cpu_state_destroy(backend); }

static bpt_status cpu_alloc(bpt_backend *backend, size_t bytes, void **out) {
  size_t rounded = (bytes + 63) / 64 * 64;
  *out = aligned_alloc(64, rounded ? rounded : 64);
  if (!*out) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  return BPT_OK;
}

static void cpu_free(bpt_backend *backend, void *pointer) {
  (void)backend;
  free(pointer);
}

static bpt_status cpu_copy(bpt_backend *backend, void *dst, const void *src, size_t bytes) {
  (void)backend;
  if (bytes) memmove(dst, src, bytes);
  return BPT_OK;
}

static bpt_status cpu_memset_zero(bpt_backend *backend, void *dst, size_t bytes) {
  (void)backend;
  if (bytes) memset(dst, 0, bytes);
  return BPT_OK;
}

/* Generated from the BPT_REGISTER_KERNELS lines of this folder (cmake/kernel_table.cmake). */
extern const bpt_op_kernels *const bpt_cpu_kernel_table[BPT_OP_COUNT];

static const bpt_op_kernels *cpu_kernels(const bpt_backend *backend, bpt_op_id op) {
  (void)backend;
  return (unsigned)op < BPT_OP_COUNT ? bpt_cpu_kernel_table[op] : NULL;
}

static const bpt_backend_vtable cpu_vtable = {
    .version = BPT_BACKEND_VTABLE_VERSION,
    .size = sizeof(bpt_backend_vtable),
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .is_host = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .synchronize = NULL,
    .kernels = cpu_kernels,
    .gemm = bpt_cpu_gemm,
    .add_scaled = bpt_cpu_add_scaled,
    .sgd_update = bpt_cpu_sgd_update,
    .adam_update = bpt_cpu_adam_update,
    .cast = bpt_cpu_cast,
    .cast_stochastic = bpt_cpu_cast_stochastic,
    .round_to_dtype = bpt_cpu_round_to_dtype,
    .unscale_check_finite = bpt_cpu_unscale_check_finite,
    .absolute_max = bpt_cpu_absolute_max,
    .reduce_statistics = bpt_cpu_reduce_statistics,
    .scale_clamp = bpt_cpu_scale_clamp,
};

const bpt_backend_vtable *bpt_cpu_backend_register(void) { return &cpu_vtable; }
