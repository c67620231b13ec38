/* The backend vtable: the only door through which the core reaches memory and kernels on a device.
 * The core never includes a backend's private header; a backend knows nothing of graphs beyond the
 * kernel arguments below. A NULL kernel member means "not supported on this backend". */
#ifndef BPT_BACKEND_H
#define BPT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bptrain/common.h"

#define BPT_BACKEND_VTABLE_VERSION 1

typedef struct bpt_backend bpt_backend;

/* Element-wise activations share one kernel pair. Values are internal and may change. */
typedef enum bpt_activation {
  BPT_ACTIVATION_RELU,
  BPT_ACTIVATION_LEAKY_RELU,
  BPT_ACTIVATION_SIGMOID,
  BPT_ACTIVATION_TANH
} bpt_activation;

typedef struct bpt_backend_options {
  int num_threads;
} bpt_backend_options;

/* Row-major matrix product C = alpha * op(A) op(B) + beta * C, op(A) (m, k), op(B) (k, n), accumulated in
 * f32. The dtypes default to f32 (value 0) so zero-initialised arguments describe a plain SGEMM; a backend
 * that cannot take 16-bit operands returns BPT_ERR_UNSUPPORTED. */
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
} bpt_gemm_args;

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
} bpt_update_args;

/* 2-D convolution over NCHW tensors with an OIHW weight, (out_channels, in_channels / groups, kh, kw). */
typedef struct bpt_conv2d_args {
  int64_t batch, in_channels, in_height, in_width;
  int64_t out_channels, out_height, out_width;
  int64_t kernel_height, kernel_width;
  int64_t stride_height, stride_width, padding_height, padding_width, dilation_height, dilation_width;
  int64_t groups;
  bool assign_input_gradient; /* conv2d_backward_data: dx = rather than +=; only for vtables with
                                 assigns_input_gradients */
} bpt_conv2d_args;

/* Batch norm over (batch, channels, spatial): statistics per channel over batch * spatial values. */
typedef struct bpt_batch_norm_args {
  int64_t batch, channels, spatial;
  float epsilon;
  float momentum; /* running = (1 - momentum) * running + momentum * batch statistic (PyTorch's convention) */
  bool training;  /* false: normalise with the running statistics */
  bool assign_input_gradient; /* backward: dx = rather than +=; only for vtables with assigns_input_gradients */
  /* Only for vtables with fuses_batch_norm_relu, NULL otherwise. Forward: y = max(bn(x), 0) and one bit per
   * element, set where y > 0; backward: dy is taken as zero where the bit is clear. Row (n, c) of spatial
   * values has its own (spatial + 7) / 8 bytes, at byte (n channels + c) ((spatial + 7) / 8), bit i % 8 of
   * byte i / 8 for its value i, so a row's bits never share a byte with another row's. */
  uint8_t *relu_mask;
} bpt_batch_norm_args;

typedef enum bpt_pool_kind { BPT_POOL_MAX, BPT_POOL_AVERAGE } bpt_pool_kind;

/* 2-D pooling over NCHW; average pooling divides by the full window (padding counted, as PyTorch's default). */
typedef struct bpt_pool2d_args {
  bpt_pool_kind kind;
  int64_t batch, channels, in_height, in_width, out_height, out_width;
  int64_t kernel_height, kernel_width, stride_height, stride_width, padding_height, padding_width;
} bpt_pool2d_args;

typedef struct bpt_backend_vtable {
  uint32_t version; /* BPT_BACKEND_VTABLE_VERSION the table was written against */
  uint32_t size;    /* sizeof(bpt_backend_vtable) the backend was compiled with */
  const char *name;

  /* Lifetime. create fills backend->state; a device backend fails with BPT_ERR_DEVICE when absent. */
  bpt_status (*create)(bpt_backend *backend, const bpt_backend_options *options);
  void (*destroy)(bpt_backend *backend);

  /* Memory. Pointers returned by alloc are device pointers, only passed back to this backend. */
  bpt_status (*alloc)(bpt_backend *backend, size_t bytes, void **out);
  void (*free)(bpt_backend *backend, void *pointer);
  bpt_status (*upload)(bpt_backend *backend, void *device_dst, const void *host_src, size_t bytes);
  bpt_status (*download)(bpt_backend *backend, void *host_dst, const void *device_src, size_t bytes);
  bpt_status (*copy)(bpt_backend *backend, void *device_dst, const void *device_src, size_t bytes);
  bpt_status (*memset_zero)(bpt_backend *backend, void *device_dst, size_t bytes);
  bpt_status (*synchronize)(bpt_backend *backend); /* optional: NULL for synchronous backends */

  /* Dense algebra. */
  bpt_status (*gemm)(bpt_backend *backend, const bpt_gemm_args *args);
  /* y (rows, cols) += bias (cols) broadcast over rows */
  bpt_status (*bias_add)(bpt_backend *backend, int64_t rows, int64_t cols, const float *bias, float *y);
  /* bias_gradient (cols) += sum over rows of dy (rows, cols) */
  bpt_status (*bias_backward)(bpt_backend *backend, int64_t rows, int64_t cols, const float *dy, float *bias_gradient);

  /* Activations: y = f(x); dx += f'(x) * dy, given x and y (each kernel reads what it needs). */
  bpt_status (*activation_forward)(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                   const float *x, float *y);
  bpt_status (*activation_backward)(bpt_backend *backend, bpt_activation kind, float parameter, int64_t count,
                                    const float *x, const float *y, const float *dy, float *dx);

  /* Losses. Softmax cross-entropy keeps the probabilities (batch, classes) for its backward; loss is one
   * float, the mean over the batch. Backward: dlogits += (probabilities - onehot) * loss_gradient / batch. */
  bpt_status (*softmax_cross_entropy_forward)(bpt_backend *backend, int64_t batch, int64_t classes, const float *logits,
                                              const int32_t *labels, float *probabilities, float *loss);
  bpt_status (*softmax_cross_entropy_backward)(bpt_backend *backend, int64_t batch, int64_t classes,
                                               const float *probabilities, const int32_t *labels,
                                               const float *loss_gradient, float *dlogits);
  /* loss = mean (p - t)^2; backward: dp += 2 (p - t) / count * loss_gradient, dt likewise negated (dt may be NULL) */
  bpt_status (*mse_forward)(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                            float *loss);
  bpt_status (*mse_backward)(bpt_backend *backend, int64_t count, const float *prediction, const float *target,
                             const float *loss_gradient, float *dprediction, float *dtarget);

  /* Weight updates over the flat parameter block. */
  bpt_status (*sgd_update)(bpt_backend *backend, const bpt_update_args *args);
  bpt_status (*adam_update)(bpt_backend *backend, const bpt_update_args *args);

  /* Convolutional networks. Gradients are accumulated (+=); bias and bias_gradient may be NULL. A backend
   * keeps whatever scratch memory (im2col buffers, cuDNN workspaces) it needs in its own state. */
  bpt_status (*conv2d_forward)(bpt_backend *backend, const bpt_conv2d_args *args, const float *x, const float *weight,
                               const float *bias, float *y);
  bpt_status (*conv2d_backward_data)(bpt_backend *backend, const bpt_conv2d_args *args, const float *dy,
                                     const float *weight, float *dx);
  bpt_status (*conv2d_backward_filter)(bpt_backend *backend, const bpt_conv2d_args *args, const float *x,
                                       const float *dy, float *dweight, float *dbias);
  /* Training: normalises with batch statistics, saves mean and 1/sqrt(var + eps) per channel, updates the
   * running statistics (unbiased variance). Evaluation: uses the running statistics, saves nothing. */
  bpt_status (*batch_norm_forward)(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x,
                                   const float *gamma, const float *beta, float *running_mean, float *running_variance,
                                   float *y, float *saved_mean, float *saved_inverse_std);
  bpt_status (*batch_norm_backward)(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x,
                                    const float *dy, const float *gamma, const float *saved_mean,
                                    const float *saved_inverse_std, float *dx, float *dgamma, float *dbeta);
  /* argmax (max pooling only): flat input index per output element, kept for backward. */
  bpt_status (*pool2d_forward)(bpt_backend *backend, const bpt_pool2d_args *args, const float *x, float *y,
                               int32_t *argmax);
  bpt_status (*pool2d_backward)(bpt_backend *backend, const bpt_pool2d_args *args, const float *dy,
                                const int32_t *argmax, float *dx);
  /* y += alpha * x: residual additions and their (identity) gradients. */
  bpt_status (*add_scaled)(bpt_backend *backend, int64_t count, float alpha, const float *x, float *y);

  /* Number formats and mixed precision. cast: dst = round_to_nearest_even(src * scale) in dst_dtype, saturating
   * for FP8. unscale_check_finite: gradients *= inverse_scale, and *found_nonfinite (device int32) is set to 1
   * when any value is inf or NaN, in one pass. */
  bpt_status (*cast)(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                     bpt_dtype destination_dtype, void *destination, float scale);
  bpt_status (*unscale_check_finite)(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                     int32_t *found_nonfinite);

  /* Later kernels are appended below, one block per feature, never inserted above. */

  /* Speculative backprop (issue 6). Optional, NULL on backends without a time model: a backend that simulates
   * time (fpga-sim) runs kernels issued after engine_select(1) on its second engine, concurrently with engine
   * 0, until engine_join, the ping-pong buffer swap, which charges the longer of the two. */
  bpt_status (*engine_select)(bpt_backend *backend, int engine);
  bpt_status (*engine_join)(bpt_backend *backend);

  /* Comm layer (issue 7). Optional: *stream = the backend's native stream (a cudaStream_t for "cuda"), on
   * which every member enqueues its work. The NCCL engine records an event there and makes its own stream
   * wait for it, so a gradient bucket's all-reduce follows the kernels that wrote it without the host
   * waiting; NULL makes the comm layer call synchronize instead. */
  bpt_status (*native_stream)(bpt_backend *backend, void **stream);

  /* Precision, binary stochastic neurons and activation memory (issue 4). Random bits for element i of a
   * call come from bpt_number_format_random_bits(seed, i) (src/core/number_format.h), so every backend draws
   * the same numbers for the same seed. */
  /* Like cast from f32, but rounding stochastically (unbiased); FP8 saturates, f16 and bf16 overflow to inf. */
  bpt_status (*cast_stochastic)(bpt_backend *backend, int64_t count, const float *source, bpt_dtype destination_dtype,
                                void *destination, float scale, uint64_t seed);
  /* values = f32(dtype(values)) in place, nearest even, f16/bf16 overflowing to inf: an f32 buffer then holds
   * exactly what a dtype buffer would (the CPU's storage-precision emulation of mixed precision). */
  bpt_status (*round_to_dtype)(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values);
  /* Binary stochastic neuron: a = 1[u < sigmoid(z)] with u = (bits >> 8) * 2^-24; deterministic: a = 1[z > 0]. */
  bpt_status (*binary_stochastic_forward)(bpt_backend *backend, int64_t count, const float *z, float *a, uint64_t seed,
                                          bool deterministic);
  /* Straight-through backward: dz += da, or dz += da * s (1 - s) with s = sigmoid(z) when sigmoid_adjusted
   * (z is only read then and may be NULL otherwise). */
  bpt_status (*binary_stochastic_backward)(bpt_backend *backend, int64_t count, bool sigmoid_adjusted, const float *z,
                                           const float *da, float *dz);
  /* ReLU keeping a 1-bit mask for backward: y = max(x, 0), bit i % 8 of mask[i / 8] = x_i > 0 ((count + 7) / 8
   * bytes); backward: dx += dy where the bit is set, masked-out elements untouched, or with assign dx = dy there
   * and 0 elsewhere. Every backend with these kernels honours assign, also in place (dx == dy): fused ReLU ops
   * mask a gradient that way on backends that do not fuse them. */
  bpt_status (*relu_mask_forward)(bpt_backend *backend, int64_t count, const float *x, float *y, uint8_t *mask);
  bpt_status (*relu_mask_backward)(bpt_backend *backend, int64_t count, const uint8_t *mask, const float *dy, float *dx,
                                   bool assign);
  /* *maximum (device float) = max |x_i| over finite values, for per-tensor FP8 scales of saved activations. */
  bpt_status (*absolute_max)(bpt_backend *backend, int64_t count, const float *x, float *maximum);
  /* cnn: dropout and the training toolkit (issue 3). */
  /* Dropout: mask[i] is 0 with probability p and 1 / (1 - p) otherwise, drawn from a counter-based hash of
   * (seed, i) (splitmix64 of seed + i * golden ratio, top 24 bits compared with p), so that every backend
   * draws the same mask for the same seed; y = x * mask. Backward: dx += dy * mask. */
  bpt_status (*dropout_forward)(bpt_backend *backend, int64_t count, float probability, uint64_t seed, const float *x,
                                float *y, float *mask);
  bpt_status (*dropout_backward)(bpt_backend *backend, int64_t count, const float *mask, const float *dy, float *dx);
  /* Statistics of x returned to the host: sum, sum of squares (in double) and the number of exact zeros. */
  bpt_status (*reduce_statistics)(bpt_backend *backend, int64_t count, const float *x, double *sum,
                                  double *sum_of_squares, int64_t *zeros);
  /* x = min(max(x * scale, low), high): gradient clipping by norm (scale) and by value (low, high). */
  bpt_status (*scale_clamp)(bpt_backend *backend, int64_t count, float scale, float low, float high, float *x);
  /* Whether conv2d_backward_data, batch_norm_backward and relu_mask_backward honour their assign flags: the
   * core then lets an input gradient's first writer overwrite it instead of clearing it first (run.c). */
  bool assigns_input_gradients;
  /* Fused ReLU (issue 3): batch_norm_forward and _backward honour bpt_batch_norm_args.relu_mask. Without it
   * the core runs batch norm and then relu_mask_forward in place (and the reverse in backward). */
  bool fuses_batch_norm_relu;
  /* y = max(a + b, 0) with relu_mask_forward's bits, in one pass; optional (the core falls back to copy,
   * add_scaled and relu_mask_forward in place). */
  bpt_status (*add_relu_mask_forward)(bpt_backend *backend, int64_t count, const float *a, const float *b, float *y,
                                      uint8_t *mask);
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

/* Writes a printf-style message into backend->error_message and returns status. */
bpt_status bpt_backend_fail(bpt_backend *backend, bpt_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

#endif
