/* The loops around the CPU's element-wise unary kernels (the gelus, silu, sigmoid, tanh, leaky_relu): x may be a
 * strided view whose rows are contiguous (a slice), found row by row through its strides, else the tensor is
 * cut into blocks of BPT_CPU_UNARY_BLOCK values; bf16-stored values and gradients are staged through f32
 * chunks of BPT_STORAGE_STAGE (bf16_storage.h). The op's own loop sees f32 chunks only. */
#ifndef BPT_BACKENDS_CPU_UNARY_ROWS_H
#define BPT_BACKENDS_CPU_UNARY_ROWS_H

#include "backends/backend.h"

#define BPT_CPU_UNARY_BLOCK 4096

/* y = f(x) over n values of one chunk. */
typedef void (*bpt_cpu_unary_forward)(const void *context, int64_t n, const float *x, float *y);
/* dx = beta dx + dy f'(.) over n values; x or y is NULL where the op's backward does not read it. */
typedef void (*bpt_cpu_unary_backward)(const void *context, int64_t n, const float *x, const float *y,
                                       const float *dy, float beta, float *dx);

/* node's forward (y from its input 0) and backward (input 0's gradient, beta from its description), chunk by
 * chunk, OpenMP-parallel over the blocks or rows above the usual threshold. */
void bpt_cpu_unary_rows_forward(const bpt_kernel_node *node, bpt_cpu_unary_forward run, const void *context);
void bpt_cpu_unary_rows_backward(const bpt_kernel_node *node, bool reads_x, bool reads_y, bpt_cpu_unary_backward run,
                                 const void *context);

#endif
