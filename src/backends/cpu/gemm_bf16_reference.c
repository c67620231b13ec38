/* The plain definition of a bf16 product (issue 16.2), which the tests hold the bf16 kernels to: operands
 * rounded to bf16 (nearest even), products exact in f32 (8-bit by 8-bit significands), summed in f32 in
 * reduction order. It is slow on purpose: one loop nest, nothing shared with the kernels but the rounding. */
#include <string.h>

#include "backends/cpu/gemm_bf16.h"

static float as_bf16(const void *base, bpt_dtype dtype, int64_t index) {
  uint32_t bits;
  if (dtype == BPT_DTYPE_BF16) {
    bits = (uint32_t)((const uint16_t *)base)[index] << 16;
  } else {
    memcpy(&bits, (const float *)base + index, sizeof bits);
    bits = (uint32_t)bpt_bf16_from_f32_bits(bits) << 16;
  }
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

void bpt_bf16_gemm_reference(const bpt_gemm_args *args) {
  for (int64_t i = 0; i < args->m; i++)
    for (int64_t j = 0; j < args->n; j++) {
      float sum = 0.0f;
      for (int64_t l = 0; l < args->k; l++) {
        const int64_t a_index = args->transpose_a ? l * args->lda + i : i * args->lda + l;
        const int64_t b_index = args->transpose_b ? j * args->ldb + l : l * args->ldb + j;
        sum += as_bf16(args->a, args->a_dtype, a_index) * as_bf16(args->b, args->b_dtype, b_index);
      }
      float *c = args->c + i * args->ldc + j;
      *c = args->beta == 0.0f ? args->alpha * sum : args->alpha * sum + args->beta * *c;
    }
}
