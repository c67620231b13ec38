/* Direct AVX-512 kernels for 3x3 "same" convolutions (conv2d_direct.c); conv2d.c hands them the convolutions
 * they take. Private to the CPU backend. */
#ifndef BPT_CPU_CONV2D_DIRECT_H
#define BPT_CPU_CONV2D_DIRECT_H

#include <stdbool.h>

#include "backends/backend.h"

/* Whether the direct kernels run a: 3x3, stride 1 or 2, padding 1, no dilation, one group, input channels a
 * multiple of 8, output channels of 16, a CPU with AVX-512F, and the backend's gemm_convolutions_only unset. */
bool bpt_cpu_conv_direct_applies(bpt_backend *backend, const bpt_conv2d_args *a);

/* y = conv(x, weight) + bias (bias may be NULL). */
bpt_status bpt_cpu_conv_direct_forward(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                       const float *weight, const float *bias, float *y);

/* dx += the input gradient for dy. */
bpt_status bpt_cpu_conv_direct_backward_data(bpt_backend *backend, const bpt_conv2d_args *a, const float *dy,
                                             const float *weight, float *dx);

/* dweight += the weight gradient for x and dy (the bias gradient is conv2d.c's). */
bpt_status bpt_cpu_conv_direct_backward_filter(bpt_backend *backend, const bpt_conv2d_args *a, const float *x,
                                               const float *dy, float *dweight);

#endif
