/* The backend vtable: the only door through which the core reaches memory and kernels on a device.
 * The core never includes a backend's private header; a backend knows nothing of graphs beyond the
 * kernel arguments below. The table holds what every backend has (memory, stream, a few primitives many ops
 * share); an op's own kernels are registered per op id by each backend that has them (bpt_op_kernels). */
#ifndef BPT_BACKEND_H
#define BPT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bptrain/common.h"

#define BPT_BACKEND_VTABLE_VERSION 4

typedef struct bpt_backend bpt_backend;

typedef struct bpt_backend_options {
  int num_threads;
} bpt_backend_options;

/* Row-major matrix product C = alpha * op(A) op(B) + beta * C, op(A) (m, k), op(B) (k, n), accumulated in
 * f32. The dtypes default to f32 (value 0) so zero-initialised arguments describe a plain SGEMM; a backend
 * that cannot take 16-bit operands returns BPT_ERR_UNSUPPORTED.
 *
 * Strided-batched (cublasGemmStridedBatched's model): batch_count products, product i on a + i stride_a,
 * b + i stride_b and c + i stride_c (strides in elements of each operand's dtype). batch_count 0 means 1, so
 * zero-initialised arguments describe one product; a stride of 0 for A or B repeats that operand (a shared
 * weight); stride_c must leave the products' C disjoint (|stride_c| >= the span of one C), or the batches
 * would race. Every backend takes batched arguments. */
typedef struct bpt_gemm_args {
  bool transpose_a, transpose_b;
  bpt_dtype a_dtype, b_dtype, c_dtype;
  int64_t m, n, k;
  float alpha;
  const float *a;
  int64_t lda;
  const float *b;
  int64_t ldb;
  float beta;
  float *c;
  int64_t ldc;
  /* The bf16 policy's products: the operands hold bf16 values (or are rounded to bf16 like autocast), so a
   * backend may multiply them as bf16 with f32 accumulation; false asks for f32 arithmetic. */
  bool bf16_products;
  int64_t batch_count;
  int64_t stride_a, stride_b, stride_c;
} bpt_gemm_args;

/* The products a gemm call describes: batch_count, where 0 stands for 1. */
static inline int64_t bpt_gemm_batch_count(const bpt_gemm_args *args) {
  return args->batch_count > 0 ? args->batch_count : 1;
}

/* Whether the batch fields are usable: batch_count >= 0, strides >= 0, and with more than one product a C
 * stride no smaller than one C's span (rows - 1) ldc + cols, so no two products write one element. */
static inline bool bpt_gemm_batch_valid(const bpt_gemm_args *args) {
  if (args->batch_count < 0 || args->stride_a < 0 || args->stride_b < 0 || args->stride_c < 0) return false;
  if (bpt_gemm_batch_count(args) == 1 || args->m == 0 || args->n == 0) return true;
  return args->stride_c >= (args->m - 1) * args->ldc + args->n;
}

/* Product i of a batched call as a single product (batch_count 1), for backends that loop over the batch. */
static inline bpt_gemm_args bpt_gemm_batch_item(const bpt_gemm_args *args, int64_t i, size_t a_size, size_t b_size,
                                                size_t c_size) {
  bpt_gemm_args one = *args;
  one.batch_count = 1;
  one.a = (const float *)((const char *)args->a + (size_t)(i * args->stride_a) * a_size);
  one.b = (const float *)((const char *)args->b + (size_t)(i * args->stride_b) * b_size);
  one.c = (float *)((char *)args->c + (size_t)(i * args->stride_c) * c_size);
  return one;
}

/* One SGD or Adam step over a contiguous range of parameters. */
typedef struct bpt_update_args {
  int64_t count;
  float *parameters;
  const float *gradients;
  float *state0; /* SGD: velocity; Adam: first moment */
  float *state1; /* Adam: second moment */
  float learning_rate, weight_decay;
  float momentum;
  bool nesterov;
  float beta1, beta2, epsilon;
  bool decoupled_weight_decay;
  int64_t step; /* 1-based step number, for Adam's bias correction */
  /* Optional (NULL: none), device int32: set to 1 when a parameter this update writes is inf or NaN, never
   * cleared here. Every update kernel honours it, so the per-step parameter check costs no pass of its own. */
  int32_t *found_nonfinite;
} bpt_update_args;

/* Op ids, from src/core/ops.def: the keys under which a backend registers an op's kernels. */
typedef enum bpt_op_id {
#define BPT_OP(id, name, inputs) BPT_OP_##id,
#include "core/ops.def"
#undef BPT_OP
  BPT_OP_COUNT
} bpt_op_id;

#define BPT_KERNEL_MAX_INPUTS 5
#define BPT_KERNEL_MAX_INT_ATTRIBUTES 16
#define BPT_KERNEL_MAX_FLOAT_ATTRIBUTES 4

/* One tensor of a kernel call, with the current batch in dims[0] when the tensor is batched. dtype is how value
 * and grad are stored: the node's own dtype, or, under a 16-bit precision policy, BPT_DTYPE_BF16 for an
 * activation whose producer and consumers all registered with BPT_REGISTER_KERNELS_16BIT (value and gradient
 * share it); such kernels read and write that storage, with f32 arithmetic inside. */
typedef struct bpt_kernel_tensor {
  bpt_dtype dtype;
  int rank;
  int64_t dims[BPT_MAX_RANK];
  int64_t count; /* elements: the product of dims */
  void *value;   /* device; NULL for an absent optional input (a bias) */
  float *grad;   /* device; NULL when no gradient is wanted (inputs) or before backward */
  /* Elements (of dtype) between neighbours along each axis; value and grad share them. Contiguous (row-major)
   * unless the tensor is an input that a strided view feeds (issue 24.2): only kernels registered with
   * BPT_REGISTER_KERNELS_STRIDED are handed other strides, and their supports says which ones they take. */
  int64_t strides[BPT_MAX_RANK];
  /* Backward, for an input gradient: grad = beta * grad + this node's contribution, BLAS-style. 0: overwrite
   * (the kernel writes every element, the gradient may hold garbage), 1: accumulate. */
  float beta;
} bpt_kernel_tensor;

/* A graph-free description of one node for its kernels and for the capability query: what an op's kernels
 * are told (the op file in src/core/ops/ says what its attributes and saved buffer hold). */
typedef struct bpt_kernel_node {
  bpt_op_id op;
  const char *name; /* for messages */
  int input_count;
  bpt_kernel_tensor inputs[BPT_KERNEL_MAX_INPUTS];
  bpt_kernel_tensor output; /* output.grad is dy in backward */
  void *saved;              /* device: op-private memory kept from forward to backward, or NULL */
  int64_t int_attributes[BPT_KERNEL_MAX_INT_ATTRIBUTES];
  float float_attributes[BPT_KERNEL_MAX_FLOAT_ATTRIBUTES];
  uint64_t seed;      /* stochastic ops: this call's random stream */
  bool evaluation;    /* inference mode (batch norm: running statistics) */
  bool deterministic; /* stochastic ops use their evaluation form */
  bool bf16_products; /* bf16 policy: products may run on bf16 operands (bpt_gemm_args.bf16_products) */
} bpt_kernel_node;

/* An op's kernels on one backend, registered under its op id with BPT_REGISTER_KERNELS in that backend's file
 * for the op. forward and backward do what the op file in src/core/ops/ leaves to kernels (an op may run
 * shared primitives such as gemm around them); supports (optional) narrows which nodes they take and, when
 * it answers false, points *reason at a short static explanation. A kernel that cannot overwrite (beta 0)
 * must refuse such nodes in supports. */
typedef struct bpt_op_kernels {
  bpt_op_id op;
  bpt_status (*forward)(bpt_backend *backend, const bpt_kernel_node *node);
  bpt_status (*backward)(bpt_backend *backend, const bpt_kernel_node *node);
  bool (*supports)(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason);
  /* The kernels (and the shared primitives the op's file calls with them) take any of the node's batched f32
   * tensors stored as bf16 (bpt_kernel_tensor.dtype), each independently; false (the default): f32 only. */
  bool bf16_storage;
  /* The kernels read their inputs, and write the inputs' gradients, through bpt_kernel_tensor.strides, for the
   * layouts their supports accepts; false (the default): inputs are contiguous. The compile then lets a permute
   * or slice feeding them be a view instead of a copy (strided_views.c). */
  bool strided_inputs;
} bpt_op_kernels;

/* Registers kernels of op OP (the ops.def id, e.g. CONV2D) for backend BACKEND (cpu, cuda, fpga). At build
 * time cmake/kernel_table.cmake scans each backend's sources for this macro and generates the backend's
 * table (bpt_<backend>_kernel_table, indexed by op id); the backend's vtable reaches it through its kernels
 * member, so a static link keeps every registered kernel. Positional, so .cu files can use it too. */
#ifdef __cplusplus
#define BPT_KERNELS_LINKAGE extern "C"
#else
#define BPT_KERNELS_LINKAGE
#endif
#define BPT_REGISTER_KERNELS(BACKEND, OP, forward, backward, supports)                                                 \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP;                                               \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP = {BPT_OP_##OP, forward, backward, supports, false, \
                                                                           false}
/* The same for kernels that also take bf16 storage (bpt_op_kernels.bf16_storage). */
#define BPT_REGISTER_KERNELS_16BIT(BACKEND, OP, forward, backward, supports)                                           \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP;                                               \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP = {BPT_OP_##OP, forward, backward, supports, true,  \
                                                                           false}
/* The same for kernels that take strided inputs (bpt_op_kernels.strided_inputs). */
#define BPT_REGISTER_KERNELS_STRIDED(BACKEND, OP, forward, backward, supports)                                         \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP;                                               \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP = {BPT_OP_##OP, forward, backward, supports,   \
                                                                           false, true}

/* The same for kernels that take both strided inputs and bf16 storage. */
#define BPT_REGISTER_KERNELS_STRIDED_16BIT(BACKEND, OP, forward, backward, supports)                                   \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP;                                               \
  BPT_KERNELS_LINKAGE const bpt_op_kernels bpt_##BACKEND##_kernels_##OP = {BPT_OP_##OP, forward, backward, supports,   \
                                                                           true, true}

/* For supports functions of kernels that only accumulate into gradients: whether every input has beta 1. */
static inline bool bpt_kernel_node_accumulates(const bpt_kernel_node *node, const char **reason) {
  for (int i = 0; i < node->input_count; i++)
    if (node->inputs[i].beta != 1.0f) {
      *reason = "its backward only accumulates into gradients (beta = 1)";
      return false;
    }
  return true;
}
typedef struct bpt_backend_vtable {
  uint32_t version; /* BPT_BACKEND_VTABLE_VERSION the table was written against */
  uint32_t size;    /* sizeof(bpt_backend_vtable) the backend was compiled with */
  const char *name;

  /* Lifetime. create fills backend->state; a device backend fails with BPT_ERR_DEVICE when absent. */
  bpt_status (*create)(bpt_backend *backend, const bpt_backend_options *options);
  void (*destroy)(bpt_backend *backend);

  /* Memory. Pointers returned by alloc are device pointers, only passed back to this backend; with is_host
   * they are also plain host pointers the core may read and write directly. */
  bool is_host;
  bpt_status (*alloc)(bpt_backend *backend, size_t bytes, void **out);
  void (*free)(bpt_backend *backend, void *pointer);
  bpt_status (*upload)(bpt_backend *backend, void *device_dst, const void *host_src, size_t bytes);
  bpt_status (*download)(bpt_backend *backend, void *host_dst, const void *device_src, size_t bytes);
  bpt_status (*copy)(bpt_backend *backend, void *device_dst, const void *device_src, size_t bytes);
  bpt_status (*memset_zero)(bpt_backend *backend, void *device_dst, size_t bytes);

  /* Stream. synchronize is optional: NULL for synchronous backends. native_stream is optional: *stream = the
   * backend's native stream (a cudaStream_t for "cuda"), on which every member enqueues its work. The NCCL
   * engine records an event there and makes its own stream wait for it, so a gradient bucket's all-reduce
   * follows the kernels that wrote it without the host waiting; NULL makes the comm layer call synchronize. */
  bpt_status (*synchronize)(bpt_backend *backend);
  bpt_status (*native_stream)(bpt_backend *backend, void **stream);

  /* Op kernels: the kernels this backend registered for op (BPT_REGISTER_KERNELS), NULL when it has none. */
  const bpt_op_kernels *(*kernels)(const bpt_backend *backend, bpt_op_id op);

  /* Shared primitives, used by many ops and by the optimiser and precision code. gemm, the updates, copy and
   * add_scaled are required; the others are optional (NULL: the feature that needs them reports
   * BPT_ERR_UNSUPPORTED naming the backend). */
  bpt_status (*gemm)(bpt_backend *backend, const bpt_gemm_args *args);
  /* y += alpha * x: residual additions and identity gradients. */
  bpt_status (*add_scaled)(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y);
  /* Weight updates over the flat parameter block. */
  bpt_status (*sgd_update)(bpt_backend *backend, const bpt_update_args *args);
  bpt_status (*adam_update)(bpt_backend *backend, const bpt_update_args *args);
  /* Number formats. cast: dst = round_to_nearest_even(src * scale) in dst_dtype, saturating for FP8. Random bits
   * for element i of a call come from bpt_number_format_random_bits(seed, i) (src/base/number_format.h), so
   * every backend draws the same numbers for the same seed. */
  bpt_status (*cast)(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                     bpt_dtype destination_dtype, void *destination, float scale);
  /* Like cast from f32, but rounding stochastically (unbiased); FP8 saturates, f16 and bf16 overflow to inf. */
  bpt_status (*cast_stochastic)(bpt_backend *backend, int64_t count, const float *source, bpt_dtype destination_dtype,
                                void *destination, float scale, uint64_t seed);
  /* values = f32(dtype(values)) in place, nearest even, f16/bf16 overflowing to inf: an f32 buffer then holds
   * exactly what a dtype buffer would (the CPU's storage-precision emulation of mixed precision). */
  bpt_status (*round_to_dtype)(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values);
  /* Reductions. unscale_check_finite: gradients *= inverse_scale, and *found_nonfinite (device int32) is set to 1
   * when any value is inf or NaN, in one pass. absolute_max: *maximum (device float) = max |x_i| over finite
   * values, for per-tensor FP8 scales of saved activations. reduce_statistics: sum, sum of squares (in double)
   * and the number of exact zeros, returned to the host. scale_clamp: x = min(max(x * scale, low), high),
   * gradient clipping by norm (scale) and by value (low, high). */
  bpt_status (*unscale_check_finite)(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                     int32_t *found_nonfinite);
  bpt_status (*absolute_max)(bpt_backend *backend, int64_t count, const float *x, float *maximum);
  bpt_status (*reduce_statistics)(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                  double *sum_of_squares, int64_t *zeros);
  bpt_status (*scale_clamp)(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x);

  /* Speculative backprop. Optional, NULL on backends without a time model: a backend that simulates time
   * (fpga-sim) runs kernels issued after engine_select(1) on its second engine, concurrently with engine 0,
   * until engine_join, the ping-pong buffer swap, which charges the longer of the two. */
  bpt_status (*engine_select)(bpt_backend *backend, int engine);
  bpt_status (*engine_join)(bpt_backend *backend);
} bpt_backend_vtable;

/* A backend instance. The core owns it; error_message is filled by a failing member. */
struct bpt_backend {
  const bpt_backend_vtable *vtable;
  void *state;
  int num_threads;
  char error_message[256];
};

/* Registration: each backend exports one function returning its table, listed once in registry.c. */
typedef const bpt_backend_vtable *(*bpt_backend_register_fn)(void);

int bpt_backend_registry_count(void);
const bpt_backend_vtable *bpt_backend_registry_get(int index);
const bpt_backend_vtable *bpt_backend_registry_find(const char *name);
/* The name of entry index without loading it, and the table of backend name, loading its module on first
 * use: BPT_ERR_INVALID_ARGUMENT for an unknown name, BPT_ERR_UNSUPPORTED for a module that cannot load, with
 * message saying why (registry.c). */
const char *bpt_backend_registry_name(int index);
bpt_status bpt_backend_registry_load(const char *name, const bpt_backend_vtable **out, char *message,
                                     size_t message_size);

/* The capability query: whether backend runs node (its op's kernels exist and their supports agrees). When it
 * does not, *reason (if not NULL) says why. An op that needs no kernels is the caller's business. */
bool bpt_backend_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason);

/* Writes a printf-style message into backend->error_message and returns status. */
bpt_status bpt_backend_fail(bpt_backend *backend, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

#endif
