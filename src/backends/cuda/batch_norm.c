/* Batch norm on the GPU through cuDNN's spatial batch norm, which follows the vtable's conventions: running
 * statistics updated as (1 - momentum) running + momentum batch with the unbiased variance, mean and
 * 1/sqrt(var + eps) saved for backward. Gradients accumulate through cuDNN's beta = 1 blending. Missing
 * gamma/beta (no affine part) and gradients nobody asked for are served from scratch memory. */
#include "backends/cuda/cuda.h"

typedef struct descriptors {
  cudnnTensorDescriptor_t x, parameters;
} descriptors;

static void release(descriptors *d) {
  if (d->x) cudnnDestroyTensorDescriptor(d->x);
  if (d->parameters) cudnnDestroyTensorDescriptor(d->parameters);
}

/* x as (batch, channels, spatial, 1); the per-channel tensors as (1, channels, 1, 1). */
static bpt_status describe(bpt_backend *backend, const bpt_batch_norm_args *a, descriptors *d) {
  d->x = d->parameters = NULL;
  if (a->batch < 1 || a->channels < 1 || a->spatial < 1 || a->batch > INT32_MAX || a->channels > INT32_MAX ||
      a->spatial > INT32_MAX)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "batch_norm: shape (%lld, %lld, %lld) is out of range",
                            (long long)a->batch, (long long)a->channels, (long long)a->spatial);
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&d->x);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->parameters);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)a->batch, (int)a->channels,
                                   (int)a->spatial, 1);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d->parameters, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)a->channels, 1, 1);
  bpt_status status = bpt_cuda_check_cudnn(backend, s, "batch_norm descriptors");
  if (status != BPT_OK) release(d);
  return status;
}

/* cuDNN's forward, training or inference; NULL gamma and beta are served as 1 and 0 from scratch. */
static bpt_status normalise(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x, const float *gamma,
                            const float *beta, float *running_mean, float *running_variance, float *y,
                            float *saved_mean, float *saved_inverse_std) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (args->training && args->batch * args->spatial < 2)
    return bpt_backend_fail(backend, BPT_ERR_SHAPE, "batch_norm: training needs more than one value per channel");
  if (!args->training && (!running_mean || !running_variance))
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "batch_norm: evaluation needs the running statistics");
  float *defaults = NULL;
  if (!gamma || !beta) {
    BPT_CUDA_TRY(bpt_cuda_scratch(backend, 2 * (size_t)args->channels * sizeof(float), (void **)&defaults));
    BPT_CUDA_TRY(bpt_cuda_fill(backend, args->channels, 1.0f, defaults));
    BPT_CUDA_TRY(bpt_cuda_fill(backend, args->channels, 0.0f, defaults + args->channels));
    if (!gamma) gamma = defaults;
    if (!beta) beta = defaults + args->channels;
  }
  descriptors d;
  BPT_CUDA_TRY(describe(backend, args, &d));
  const float one = 1.0f, zero = 0.0f;
  cudnnStatus_t s;
  if (args->training)
    s = cudnnBatchNormalizationForwardTraining(state->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y,
                                               d.parameters, gamma, beta, (double)args->momentum, running_mean,
                                               running_variance, (double)args->epsilon, saved_mean, saved_inverse_std);
  else
    s = cudnnBatchNormalizationForwardInference(state->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y,
                                                d.parameters, gamma, beta, running_mean, running_variance,
                                                (double)args->epsilon);
  release(&d);
  return bpt_cuda_check_cudnn(backend, s, "batch_norm_forward");
}

/* cuDNN's backward, accumulating (beta 1) into every gradient; NULL ones go to scratch. */
static bpt_status normalise_backward(bpt_backend *backend, const bpt_batch_norm_args *args, const float *x,
                                     const float *dy, const float *gamma, const float *saved_mean,
                                     const float *saved_inverse_std, float *dx, float *dgamma, float *dbeta) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const int64_t channels = args->channels, count = args->batch * args->channels * args->spatial;
  if (!dx && !dgamma && !dbeta) return BPT_OK;
  /* Scratch layout: ones (gamma) | dgamma | dbeta | dx, each used only when the caller passed NULL. */
  size_t scratch_floats = 3 * (size_t)channels + (dx ? 0 : (size_t)count);
  float *scratch;
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, scratch_floats * sizeof(float), (void **)&scratch));
  if (!gamma) {
    BPT_CUDA_TRY(bpt_cuda_fill(backend, channels, 1.0f, scratch));
    gamma = scratch;
  }
  if (!dgamma) dgamma = scratch + channels;
  if (!dbeta) dbeta = scratch + 2 * channels;
  if (!dx) dx = scratch + 3 * channels;
  descriptors d;
  BPT_CUDA_TRY(describe(backend, args, &d));
  const float one = 1.0f;
  cudnnStatus_t s = cudnnBatchNormalizationBackward(state->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &one, &one, &one,
                                                    d.x, x, d.x, dy, d.x, dx, d.parameters, gamma, dgamma, dbeta,
                                                    (double)args->epsilon, saved_mean, saved_inverse_std);
  release(&d);
  return bpt_cuda_check_cudnn(backend, s, "batch_norm_backward");
}

/* batch_norm, and batch_norm_relu without a fused kernel: the ReLU runs in place on y with the flat 1-bit
 * mask after the statistics in saved, and in backward in place on dy (the node's own gradient, which nothing
 * reads after this node's backward). Both only accumulate into gradients. */
static uint8_t *relu_mask(const bpt_kernel_node *node) { return bpt_batch_norm_relu_mask(node); }

static bpt_status batch_norm_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *in = node->inputs, *y = &node->output;
  const bool relu = node->op == BPT_OP_BATCH_NORM_RELU;
  if (node->int_attributes[BPT_BATCH_NORM_FOLDED])
    return relu ? bpt_kernel_relu_in_place(backend, node, y, NULL, false) : BPT_OK;
  const bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  bpt_status status = normalise(backend, &args, in[0].value, in[1].value, in[2].value, in[3].value, in[4].value,
                                y->value, bpt_batch_norm_saved_mean(node), bpt_batch_norm_saved_inverse_std(node));
  if (status == BPT_OK && relu) status = bpt_kernel_relu_in_place(backend, node, y, relu_mask(node), false);
  return status;
}

static bpt_status batch_norm_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_kernel_tensor *in = node->inputs, *y = &node->output;
  const bpt_batch_norm_args args = bpt_batch_norm_args_of(node);
  if (node->op == BPT_OP_BATCH_NORM_RELU) {
    bpt_status status = bpt_kernel_relu_in_place(backend, node, y, relu_mask(node), true);
    if (status != BPT_OK) return status;
  }
  return normalise_backward(backend, &args, in[0].value, y->grad, in[1].value, bpt_batch_norm_saved_mean(node),
                            bpt_batch_norm_saved_inverse_std(node), in[0].grad, in[1].grad, in[2].grad);
}

static bool batch_norm_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  return bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS(cuda, BATCH_NORM, batch_norm_forward, batch_norm_backward, batch_norm_supports);
BPT_REGISTER_KERNELS(cuda, BATCH_NORM_RELU, batch_norm_forward, batch_norm_backward, batch_norm_supports);
