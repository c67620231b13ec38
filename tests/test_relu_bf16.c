/* ReLU on bf16 storage (relu_mask.c): the AVX-512 loops that work on the bit patterns (forward, and backward
 * through the mask, overwriting or accumulating) against the scalar loops that widen every value, bit for bit,
 * on bit patterns that include +-0, subnormals, +-inf and NaNs, at lengths that end inside a vector and inside a
 * mask byte. The scalar loops are what the backend runs with its loops limited below AVX-512. Without
 * AVX512_BF16 the two are the same loops, and the test says so and exits 77 (CTest: skipped). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/gemm_bf16.h"
#include "core/context.h"
#include "test_support.h"

extern const bpt_op_kernels bpt_cpu_kernels_RELU;

/* Bit patterns: random values of every magnitude, with the special ones sprinkled in. */
static void fill_bits(test_random *random, uint16_t *bits, int64_t count) {
  static const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x7f80, 0xff80,
                                     0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7f7f, 0x3f80, 0xbf80};
  for (int64_t i = 0; i < count; i++) {
    float u;
    test_random_fill(random, &u, 1, 0.0f, 1.0f);
    bits[i] = i % 7 == 3 ? special[(size_t)(u * 14.0f) % 14] : (uint16_t)(u * 65535.0f);
  }
}

typedef struct run {
  uint16_t *y, *dx;
  uint8_t *mask;
} run;

static run relu_run(bpt_backend *backend, bpt_cpu_loops loops, const uint16_t *x, const uint16_t *dy,
                    const uint16_t *dx_before, int64_t count, bool accumulate) {
  bpt_cpu_state *cpu = backend->state;
  cpu->loop_limit = loops;
  run r = {malloc((size_t)count * 2), malloc((size_t)count * 2), calloc((size_t)(count + 7) / 8, 1)};
  assert_true(r.y && r.dx && r.mask);
  memcpy(r.dx, dx_before, (size_t)count * 2);
  bpt_kernel_node node = {.op = BPT_OP_RELU, .name = "relu", .input_count = 1, .saved = r.mask};
  node.int_attributes[BPT_RELU_USES_MASK] = 1;
  const bpt_kernel_tensor x_tensor = {.dtype = BPT_DTYPE_BF16, .rank = 1, .dims = {count}, .count = count,
                                      .value = (void *)x, .grad = (float *)(void *)r.dx, .beta = accumulate ? 1.0f : 0.0f};
  const bpt_kernel_tensor y_tensor = {.dtype = BPT_DTYPE_BF16, .rank = 1, .dims = {count}, .count = count,
                                      .value = r.y, .grad = (float *)(void *)dy};
  node.inputs[0] = x_tensor;
  node.output = y_tensor;
  assert_int_equal(bpt_cpu_kernels_RELU.forward(backend, &node), BPT_OK);
  assert_int_equal(bpt_cpu_kernels_RELU.backward(backend, &node), BPT_OK);
  cpu->loop_limit = BPT_CPU_LOOPS_AVX512;
  return r;
}

static void vector_loops_match_scalar(void **state) {
  (void)state;
  bpt_context *context = test_context(2);
  bpt_backend *backend = &context->backend;
  test_random random;
  test_random_seed(&random, 301);
  static const int64_t counts[] = {1, 31, 32, 33, 100, 8192 + 45, 3 * 8192 + 31};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
    for (int accumulate = 0; accumulate < 2; accumulate++) {
      const int64_t count = counts[c];
      uint16_t *x = malloc((size_t)count * 2), *dy = malloc((size_t)count * 2), *dx = malloc((size_t)count * 2);
      assert_true(x && dy && dx);
      fill_bits(&random, x, count);
      fill_bits(&random, dy, count);
      fill_bits(&random, dx, count);
      run vector = relu_run(backend, BPT_CPU_LOOPS_AVX512, x, dy, dx, count, accumulate);
      run scalar = relu_run(backend, BPT_CPU_LOOPS_AVX2, x, dy, dx, count, accumulate);
      for (int64_t i = 0; i < count; i++) {
        if (vector.y[i] != scalar.y[i])
          fail_msg("count %lld: y[%lld] of x 0x%04x: vector 0x%04x, scalar 0x%04x", (long long)count, (long long)i,
                   x[i], vector.y[i], scalar.y[i]);
        if (vector.dx[i] != scalar.dx[i])
          fail_msg("count %lld %s: dx[%lld] (dy 0x%04x, dx 0x%04x): vector 0x%04x, scalar 0x%04x", (long long)count,
                   accumulate ? "accumulating" : "overwriting", (long long)i, dy[i], dx[i], vector.dx[i],
                   scalar.dx[i]);
      }
      assert_memory_equal(vector.mask, scalar.mask, (size_t)(count + 7) / 8);
      free(vector.y), free(vector.dx), free(vector.mask), free(scalar.y), free(scalar.dx), free(scalar.mask);
      free(x), free(dy), free(dx);
    }
  bpt_context_destroy(context);
}

int main(void) {
  if (!bpt_cpu_has_avx512_bf16()) {
    printf("skipped: this CPU has no AVX512_BF16, so relu's bf16 vector loops do not run here\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(vector_loops_match_scalar)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
