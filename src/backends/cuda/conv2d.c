/* Convolutions on the GPU through cuDNN 9's convolution API. A plan per shape (descriptors plus the chosen
 * algorithm of each direction) is cached, so descriptors are built and algorithms chosen once per shape.
 * Algorithm choice: by default cuDNN's heuristics, keeping the first deterministic algorithm that fits the
 * workspace limit, so runs repeat bit for bit; with BPT_CUDA_BENCHMARK=1 every candidate is timed once per
 * shape on the real tensors (as cudnn.benchmark does) and the fastest kept. Gradients accumulate through
 * cuDNN's beta = 1 blending. f32 convolutions use FMA math (exact f32) unless BPT_CUDA_TF32 allows tf32. */
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda.h"

/* Workspace an algorithm may use; larger ones are skipped. */
#define WORKSPACE_LIMIT ((size_t)1 << 30)
#define CANDIDATES 16

typedef enum direction { FORWARD, BACKWARD_DATA, BACKWARD_FILTER, DIRECTIONS } direction;

struct bpt_cuda_conv_plan {
  bpt_conv2d_args key;
  cudnnTensorDescriptor_t x, y, bias;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t convolution;
  bool chosen[DIRECTIONS];
  int algorithm[DIRECTIONS];
  cudnnMathType_t math[DIRECTIONS];
  size_t workspace_bytes[DIRECTIONS];
};

static void plan_destroy(bpt_cuda_conv_plan *plan) {
  if (!plan) return;
  if (plan->x) cudnnDestroyTensorDescriptor(plan->x);
  if (plan->y) cudnnDestroyTensorDescriptor(plan->y);
  if (plan->bias) cudnnDestroyTensorDescriptor(plan->bias);
  if (plan->w) cudnnDestroyFilterDescriptor(plan->w);
  if (plan->convolution) cudnnDestroyConvolutionDescriptor(plan->convolution);
  free(plan);
}

void bpt_cuda_conv_plans_destroy(bpt_backend *backend) {
  bpt_cuda_state *state = bpt_cuda(backend);
  for (int i = 0; i < BPT_CUDA_CONV_CACHE; i++) {
    plan_destroy(state->conv_plans[i]);
    state->conv_plans[i] = NULL;
  }
  state->conv_plan_count = 0;
}

static bpt_status describe(bpt_backend *backend, bpt_cuda_conv_plan *plan, const bpt_conv2d_args *a) {
  const int64_t values[] = {a->batch,         a->in_channels,     a->in_height,      a->in_width,
                            a->out_channels,  a->out_height,      a->out_width,      a->kernel_height,
                            a->kernel_width,  a->stride_height,   a->stride_width,   a->padding_height,
                            a->padding_width, a->dilation_height, a->dilation_width, a->groups};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
    if (values[i] < 0 || values[i] > INT32_MAX)
      return bpt_backend_fail(backend, BPT_ERR_SHAPE, "conv2d: a dimension (%lld) is out of range",
                              (long long)values[i]);
  if (a->groups < 1 || a->in_channels % a->groups || a->out_channels % a->groups || a->stride_height < 1 ||
      a->stride_width < 1 || a->dilation_height < 1 || a->dilation_width < 1)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT,
                            "conv2d: groups %lld, channels %lld -> %lld, stride %lldx%lld, dilation %lldx%lld",
                            (long long)a->groups, (long long)a->in_channels, (long long)a->out_channels,
                            (long long)a->stride_height, (long long)a->stride_width, (long long)a->dilation_height,
                            (long long)a->dilation_width);
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&plan->x);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&plan->y);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&plan->bias);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&plan->w);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&plan->convolution);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)a->batch, (int)a->in_channels,
                                   (int)a->in_height, (int)a->in_width);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)a->batch, (int)a->out_channels,
                                   (int)a->out_height, (int)a->out_width);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(plan->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, (int)a->out_channels, 1, 1);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)a->out_channels,
                                   (int)(a->in_channels / a->groups), (int)a->kernel_height, (int)a->kernel_width);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolution2dDescriptor(plan->convolution, (int)a->padding_height, (int)a->padding_width,
                                        (int)a->stride_height, (int)a->stride_width, (int)a->dilation_height,
                                        (int)a->dilation_width, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(plan->convolution, (int)a->groups);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetConvolutionMathType(plan->convolution, bpt_cuda(backend)->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  BPT_CUDA_TRY(bpt_cuda_check_cudnn(backend, s, "conv2d descriptors"));
  int n, c, h, w;
  BPT_CUDA_TRY(bpt_cuda_check_cudnn(
      backend, cudnnGetConvolution2dForwardOutputDim(plan->convolution, plan->x, plan->w, &n, &c, &h, &w),
      "conv2d output size"));
  if (n != a->batch || c != a->out_channels || h != a->out_height || w != a->out_width)
    return bpt_backend_fail(
        backend, BPT_ERR_SHAPE, "conv2d: output is (%d, %d, %d, %d), arguments say (%lld, %lld, %lld, %lld)", n, c, h,
        w, (long long)a->batch, (long long)a->out_channels, (long long)a->out_height, (long long)a->out_width);
  return BPT_OK;
}

/* Whether two convolutions have the same shapes, which is all a plan depends on (field by field: the struct's
 * padding bytes are not comparable). */
static bool same_shapes(const bpt_conv2d_args *x, const bpt_conv2d_args *y) {
  return x->batch == y->batch && x->in_channels == y->in_channels && x->in_height == y->in_height &&
         x->in_width == y->in_width && x->out_channels == y->out_channels && x->out_height == y->out_height &&
         x->out_width == y->out_width && x->kernel_height == y->kernel_height && x->kernel_width == y->kernel_width &&
         x->stride_height == y->stride_height && x->stride_width == y->stride_width &&
         x->padding_height == y->padding_height && x->padding_width == y->padding_width &&
         x->dilation_height == y->dilation_height && x->dilation_width == y->dilation_width && x->groups == y->groups;
}

static bpt_status find_plan(bpt_backend *backend, const bpt_conv2d_args *args, bpt_cuda_conv_plan **out) {
  bpt_cuda_state *state = bpt_cuda(backend);
  int used = state->conv_plan_count < BPT_CUDA_CONV_CACHE ? state->conv_plan_count : BPT_CUDA_CONV_CACHE;
  for (int i = 0; i < used; i++)
    if (same_shapes(&state->conv_plans[i]->key, args)) {
      *out = state->conv_plans[i];
      return BPT_OK;
    }
  bpt_cuda_conv_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "conv2d: cannot allocate a plan");
  plan->key = *args;
  bpt_status status = describe(backend, plan, args);
  if (status != BPT_OK) {
    plan_destroy(plan);
    return status;
  }
  /* A full cache recycles its slots in turn: networks with more shapes than slots are rare. */
  int slot = state->conv_plan_count % BPT_CUDA_CONV_CACHE;
  plan_destroy(state->conv_plans[slot]);
  state->conv_plans[slot] = plan;
  state->conv_plan_count++;
  *out = plan;
  return BPT_OK;
}

/* The three directions' perf records share their leading fields; copy out what choose() reads. */
typedef struct candidate {
  int algorithm;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
} candidate;

#define COPY_CANDIDATES(perf, count, list)                                                                             \
  for (int i_ = 0; i_ < (count); i_++)                                                                                 \
    (list)[i_] = (candidate){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].memory, (perf)[i_].determinism,       \
                             (perf)[i_].mathType};

/* Heuristic candidates, best first. */
static bpt_status heuristic_candidates(bpt_backend *backend, bpt_cuda_conv_plan *p, direction d, candidate *list,
                                       int *count) {
  cudnnHandle_t h = bpt_cuda(backend)->cudnn;
  cudnnStatus_t s;
  if (d == FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t perf[CANDIDATES];
    s = cudnnGetConvolutionForwardAlgorithm_v7(h, p->x, p->w, p->convolution, p->y, CANDIDATES, count, perf);
    COPY_CANDIDATES(perf, *count, list);
  } else if (d == BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CANDIDATES];
    s = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w, p->y, p->convolution, p->x, CANDIDATES, count, perf);
    COPY_CANDIDATES(perf, *count, list);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CANDIDATES];
    s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x, p->y, p->convolution, p->w, CANDIDATES, count, perf);
    COPY_CANDIDATES(perf, *count, list);
  }
  return bpt_cuda_check_cudnn(backend, s, "conv2d algorithm heuristics");
}

/* Times the candidates on the real operands, writing into a scratch output so accumulated gradients are
 * untouched. Candidates come back fastest first. */
static bpt_status timed_candidates(bpt_backend *backend, bpt_cuda_conv_plan *p, direction d, const void *in0,
                                   const void *in1, size_t output_bytes, candidate *list, int *count) {
  bpt_cuda_state *state = bpt_cuda(backend);
  candidate heuristic[CANDIDATES];
  int heuristic_count = 0;
  BPT_CUDA_TRY(heuristic_candidates(backend, p, d, heuristic, &heuristic_count));
  size_t workspace_bytes = 0;
  for (int i = 0; i < heuristic_count; i++)
    if (heuristic[i].status == CUDNN_STATUS_SUCCESS && heuristic[i].memory <= WORKSPACE_LIMIT &&
        heuristic[i].memory > workspace_bytes)
      workspace_bytes = heuristic[i].memory;
  void *workspace, *output;
  BPT_CUDA_TRY(bpt_cuda_workspace(backend, workspace_bytes, &workspace));
  BPT_CUDA_TRY(bpt_cuda_scratch(backend, output_bytes, &output));
  cudnnHandle_t h = state->cudnn;
  cudnnStatus_t s;
  if (d == FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t perf[CANDIDATES];
    s = cudnnFindConvolutionForwardAlgorithmEx(h, p->x, in0, p->w, in1, p->convolution, p->y, output, CANDIDATES, count,
                                               perf, workspace, workspace_bytes);
    COPY_CANDIDATES(perf, *count, list);
  } else if (d == BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CANDIDATES];
    s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, p->w, in1, p->y, in0, p->convolution, p->x, output, CANDIDATES,
                                                    count, perf, workspace, workspace_bytes);
    COPY_CANDIDATES(perf, *count, list);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CANDIDATES];
    s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p->x, in0, p->y, in1, p->convolution, p->w, output, CANDIDATES,
                                                      count, perf, workspace, workspace_bytes);
    COPY_CANDIDATES(perf, *count, list);
  }
  return bpt_cuda_check_cudnn(backend, s, "conv2d algorithm search");
}

/* Needs no workspace, deterministic, supported for every shape and math type. */
static int fallback_algorithm(direction d) {
  return d == FORWARD         ? (int)CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
         : d == BACKWARD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
                              : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
}

static bpt_status workspace_size(bpt_backend *backend, bpt_cuda_conv_plan *p, direction d) {
  cudnnHandle_t h = bpt_cuda(backend)->cudnn;
  size_t *bytes = &p->workspace_bytes[d];
  BPT_CUDA_TRY(bpt_cuda_check_cudnn(backend, cudnnSetConvolutionMathType(p->convolution, p->math[d]), "conv2d math"));
  cudnnStatus_t s =
      d == FORWARD ? cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->convolution, p->y,
                                                             (cudnnConvolutionFwdAlgo_t)p->algorithm[d], bytes)
      : d == BACKWARD_DATA
          ? cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->convolution, p->x,
                                                         (cudnnConvolutionBwdDataAlgo_t)p->algorithm[d], bytes)
          : cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->x, p->y, p->convolution, p->w,
                                                           (cudnnConvolutionBwdFilterAlgo_t)p->algorithm[d], bytes);
  return bpt_cuda_check_cudnn(backend, s, "conv2d workspace size");
}

/* Picks (once per plan and direction) the algorithm and its math type. in0/in1 are the direction's inputs
 * (forward: x, w; backward data: dy, w; backward filter: x, dy). Without tf32, tensor-op candidates are
 * passed over and the others run with FMA math, so f32 results stay f32-exact. */
static bpt_status choose(bpt_backend *backend, bpt_cuda_conv_plan *p, direction d, const void *in0, const void *in1,
                         size_t output_bytes) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (p->chosen[d]) return BPT_OK;
  cudnnMathType_t exact = state->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  candidate list[CANDIDATES];
  int count = 0;
  BPT_CUDA_TRY(bpt_cuda_check_cudnn(backend, cudnnSetConvolutionMathType(p->convolution, exact), "conv2d math"));
  if (state->benchmark)
    BPT_CUDA_TRY(timed_candidates(backend, p, d, in0, in1, output_bytes, list, &count));
  else
    BPT_CUDA_TRY(heuristic_candidates(backend, p, d, list, &count));
  p->algorithm[d] = fallback_algorithm(d);
  p->math[d] = exact;
  for (int i = 0; i < count; i++)
    if (list[i].status == CUDNN_STATUS_SUCCESS && list[i].memory <= WORKSPACE_LIMIT &&
        (state->benchmark || list[i].determinism == CUDNN_DETERMINISTIC) &&
        (state->tf32 || list[i].math == CUDNN_FMA_MATH || list[i].math == CUDNN_DEFAULT_MATH)) {
      p->algorithm[d] = list[i].algorithm;
      /* Without tf32 the descriptor stays on FMA math whatever the record says, so no tf32 slips in. */
      p->math[d] = state->tf32 ? list[i].math : exact;
      break;
    }
  bpt_status status = workspace_size(backend, p, d);
  if (status == BPT_ERR_UNSUPPORTED && p->algorithm[d] != fallback_algorithm(d)) {
    /* The chosen algorithm can turn down its own workspace query (seen with some engines under FMA math):
     * take the always-supported one now rather than failing the step. */
    p->algorithm[d] = fallback_algorithm(d);
    p->math[d] = exact;
    status = workspace_size(backend, p, d);
  }
  BPT_CUDA_TRY(status);
  p->chosen[d] = true;
  return BPT_OK;
}

/* Runs one direction with the chosen algorithm. If cuDNN turns the choice down at run time (a heuristic
 * can promise more than an engine delivers), the plan falls back once to the always-supported algorithm. */
static bpt_status execute(bpt_backend *backend, bpt_cuda_conv_plan *p, direction d, const void *in0, const void *in1,
                          void *out, float beta, const char *where) {
  cudnnHandle_t h = bpt_cuda(backend)->cudnn;
  const float one = 1.0f;
  for (int attempt = 0;; attempt++) {
    void *workspace;
    BPT_CUDA_TRY(bpt_cuda_workspace(backend, p->workspace_bytes[d], &workspace));
    BPT_CUDA_TRY(bpt_cuda_check_cudnn(backend, cudnnSetConvolutionMathType(p->convolution, p->math[d]), where));
    size_t bytes = p->workspace_bytes[d];
    cudnnStatus_t s =
        d == FORWARD
            ? cudnnConvolutionForward(h, &one, p->x, in0, p->w, in1, p->convolution,
                                      (cudnnConvolutionFwdAlgo_t)p->algorithm[d], workspace, bytes, &beta, p->y, out)
        : d == BACKWARD_DATA ? cudnnConvolutionBackwardData(h, &one, p->w, in1, p->y, in0, p->convolution,
                                                            (cudnnConvolutionBwdDataAlgo_t)p->algorithm[d], workspace,
                                                            bytes, &beta, p->x, out)
                             : cudnnConvolutionBackwardFilter(h, &one, p->x, in0, p->y, in1, p->convolution,
                                                              (cudnnConvolutionBwdFilterAlgo_t)p->algorithm[d],
                                                              workspace, bytes, &beta, p->w, out);
    if (s != CUDNN_STATUS_NOT_SUPPORTED || attempt > 0 || p->algorithm[d] == fallback_algorithm(d))
      return bpt_cuda_check_cudnn(backend, s, where);
    p->algorithm[d] = fallback_algorithm(d);
    p->math[d] = bpt_cuda(backend)->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    BPT_CUDA_TRY(workspace_size(backend, p, d));
  }
}

static size_t bytes_of(int64_t a, int64_t b, int64_t c, int64_t d) { return (size_t)(a * b * c * d) * sizeof(float); }

// conv2d through cuDNN: inputs x (N, C, H, W), weight (O, C / groups, kh, kw) and an optional bias (O).
static bpt_status conv2d_forward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node);
  const float *x = node->inputs[0].value, *weight = node->inputs[1].value;
  const float *bias = node->input_count > 2 ? node->inputs[2].value : NULL;
  float *y = node->output.value;
  bpt_cuda_conv_plan *p;
  BPT_CUDA_TRY(find_plan(backend, &args, &p));
  BPT_CUDA_TRY(
      choose(backend, p, FORWARD, x, weight, bytes_of(args.batch, args.out_channels, args.out_height, args.out_width)));
  BPT_CUDA_TRY(execute(backend, p, FORWARD, x, weight, y, 0.0f, "conv2d_forward"));
  if (!bias) return BPT_OK;
  const float one = 1.0f;
  return bpt_cuda_check_cudnn(backend, cudnnAddTensor(bpt_cuda(backend)->cudnn, &one, p->bias, bias, &one, p->y, y),
                              "conv2d_forward (bias)");
}

// The weight gradient (and with it the bias gradient), then the input gradient, all accumulated (beta 1, which
// conv2d_supports requires).
static bpt_status conv2d_backward(bpt_backend *backend, const bpt_kernel_node *node) {
  const bpt_conv2d_args args = bpt_conv2d_args_of(node);
  const float *x = node->inputs[0].value, *weight = node->inputs[1].value, *dy = node->output.grad;
  float *dx = node->inputs[0].grad, *dweight = node->inputs[1].grad;
  float *dbias = node->input_count > 2 ? node->inputs[2].grad : NULL;
  bpt_cuda_conv_plan *p;
  BPT_CUDA_TRY(find_plan(backend, &args, &p));
  if (dweight) {
    BPT_CUDA_TRY(
        choose(backend, p, BACKWARD_FILTER, x, dy,
               bytes_of(args.out_channels, args.in_channels / args.groups, args.kernel_height, args.kernel_width)));
    BPT_CUDA_TRY(execute(backend, p, BACKWARD_FILTER, x, dy, dweight, 1.0f, "conv2d_backward_filter"));
    const float one = 1.0f;
    if (dbias)
      BPT_CUDA_TRY(bpt_cuda_check_cudnn(
          backend, cudnnConvolutionBackwardBias(bpt_cuda(backend)->cudnn, &one, p->y, dy, &one, p->bias, dbias),
          "conv2d_backward_filter (bias)"));
  }
  if (!dx) return BPT_OK;
  BPT_CUDA_TRY(choose(backend, p, BACKWARD_DATA, dy, weight,
                      bytes_of(args.batch, args.in_channels, args.in_height, args.in_width)));
  return execute(backend, p, BACKWARD_DATA, dy, weight, dx, 1.0f, "conv2d_backward_data");
}

static bool conv2d_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  (void)backend;
  return bpt_kernel_node_accumulates(node, reason);
}

BPT_REGISTER_KERNELS(cuda, CONV2D, conv2d_forward, conv2d_backward, conv2d_supports);
