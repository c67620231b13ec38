/* Channel planes transposed to pixel-major (conv2d_direct.h), with AVX-512 or AVX2 registers: the kernels are
 * conv2d_transpose.h's, compiled once per target. */
#include "backends/cpu/conv2d_direct.h"

#if DIRECT_KERNELS

#define CONV_VEC_AVX512
#include "backends/cpu/conv2d_transpose.h"

#define CONV_VEC_AVX2
#include "backends/cpu/conv2d_transpose.h"

void bpt_cpu_direct_transpose_planes(bpt_cpu_loops loops, int64_t channels, int64_t pixels, const float *planes,
                                     float *transposed) {
  (loops == BPT_CPU_LOOPS_AVX512 ? transpose_planes_avx512 : transpose_planes_avx2)(channels, pixels, planes,
                                                                                    transposed);
}

void bpt_cpu_direct_pad_transposed(bpt_cpu_loops loops, const direct_geometry *g, int64_t channels, const float *x,
                                   float *transposed) {
  (loops == BPT_CPU_LOOPS_AVX512 ? pad_transposed_avx512 : pad_transposed_avx2)(g, channels, x, transposed);
}

#endif
