/* The CPU backend's table and memory functions. Device memory is host memory, 64-byte aligned. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backends/cpu/blas_guard.h"
#include "backends/cpu/cpu.h"

static bpt_status cpu_create(bpt_backend *backend, const bpt_backend_options *options) {
  int threads = options->num_threads > 0 ? options->num_threads : omp_get_num_procs();
  /* OpenBLAS's workspace must fit before it is asked for; an automatic thread count halves until it does. */
  bpt_status status = bpt_cpu_blas_reserve(backend, threads);
  while (status == BPT_ERR_OUT_OF_MEMORY && options->num_threads == 0 && threads > 1)
    status = bpt_cpu_blas_reserve(backend, threads /= 2);
  if (status != BPT_OK) return status;
  backend->num_threads = threads;
  backend->state = NULL;
  /* Both calls: the OpenMP build of OpenBLAS follows omp_set_num_threads, the pthread build does not. */
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
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

static const bpt_backend_vtable cpu_vtable = {
    .version = BPT_BACKEND_VTABLE_VERSION,
    .size = sizeof(bpt_backend_vtable),
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .synchronize = NULL,
    .gemm = bpt_cpu_gemm,
    .bias_add = bpt_cpu_bias_add,
    .bias_backward = bpt_cpu_bias_backward,
    .activation_forward = bpt_cpu_activation_forward,
    .activation_backward = bpt_cpu_activation_backward,
    .softmax_cross_entropy_forward = bpt_cpu_softmax_cross_entropy_forward,
    .softmax_cross_entropy_backward = bpt_cpu_softmax_cross_entropy_backward,
    .mse_forward = bpt_cpu_mse_forward,
    .mse_backward = bpt_cpu_mse_backward,
    .sgd_update = bpt_cpu_sgd_update,
    .adam_update = bpt_cpu_adam_update,
    /* Precision, binary stochastic neurons and activation memory (issue 4). */
    .cast = bpt_cpu_cast,
    .unscale_check_finite = bpt_cpu_unscale_check_finite,
    .cast_stochastic = bpt_cpu_cast_stochastic,
    .round_to_dtype = bpt_cpu_round_to_dtype,
    .binary_stochastic_forward = bpt_cpu_binary_stochastic_forward,
    .binary_stochastic_backward = bpt_cpu_binary_stochastic_backward,
    .relu_mask_forward = bpt_cpu_relu_mask_forward,
    .relu_mask_backward = bpt_cpu_relu_mask_backward,
    .absolute_max = bpt_cpu_absolute_max,
    /* cnn (issue 3) */
    .conv2d_forward = bpt_cpu_conv2d_forward,
    .conv2d_backward_data = bpt_cpu_conv2d_backward_data,
    .conv2d_backward_filter = bpt_cpu_conv2d_backward_filter,
    .batch_norm_forward = bpt_cpu_batch_norm_forward,
    .batch_norm_backward = bpt_cpu_batch_norm_backward,
    .pool2d_forward = bpt_cpu_pool2d_forward,
    .pool2d_backward = bpt_cpu_pool2d_backward,
    .add_scaled = bpt_cpu_add_scaled,
    .dropout_forward = bpt_cpu_dropout_forward,
    .dropout_backward = bpt_cpu_dropout_backward,
    .reduce_statistics = bpt_cpu_reduce_statistics,
    .scale_clamp = bpt_cpu_scale_clamp,
    .assigns_input_gradients = true,
    .fuses_batch_norm_relu = true,
    .add_relu_mask_forward = bpt_cpu_add_relu_mask_forward,
};

const bpt_backend_vtable *bpt_cpu_backend_register(void) { return &cpu_vtable; }
