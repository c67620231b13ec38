/* The C side of the co-simulation (see cosim_ref.h): raw fixed-point integers to the float containers the
 * kernel reads, the launcher call, and the results back to raw integers (exact: every value is on the grid). */
#include "cosim_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/fpga/fpga.h"
#include "core/context.h"

int bpt_cosim_reference_gemm(int64_t m, int64_t n, int64_t k, int beta, int transpose_a, int transpose_b,
                             const int32_t *a_raw, const int32_t *b_raw, int32_t *c_raw, uint64_t *model_cycles,
                             char *message, size_t size) {
  const int fraction = BPT_COSIM_WORD_BITS - BPT_COSIM_INTEGER_BITS;
  bpt_context_options options = bpt_context_options_default();
  options.backend = "fpga-sim";
  bpt_context *context = NULL;
  float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b),
        *c = malloc((size_t)(m * n) * sizeof *c);
  int failed = 1;
  if (!a || !b || !c) {
    snprintf(message, size, "reference gemm %lld x %lld x %lld: out of memory", (long long)m, (long long)n,
             (long long)k);
    goto done;
  }
  if (bpt_context_create(&options, &context) != BPT_OK) {
    snprintf(message, size, "reference gemm: fpga-sim context: %s", bpt_context_last_error(context));
    goto done;
  }
  bpt_fpga_options fpga = bpt_fpga_options_default();
  fpga.format = BPT_FPGA_FORMAT_FIXED;
  fpga.word_bits = BPT_COSIM_WORD_BITS;
  fpga.integer_bits = BPT_COSIM_INTEGER_BITS;
  if (bpt_fpga_configure(context, &fpga) != BPT_OK) {
    snprintf(message, size, "reference gemm: configure: %s", bpt_context_last_error(context));
    goto done;
  }
  /* The operands live in host memory, not in a device allocation, so the model charges no transfer: its
   * report is the compute cycles alone, which is what the RTL run measures. */
  for (int64_t i = 0; i < m; i++)
    for (int64_t p = 0; p < k; p++)
      a[transpose_a ? p * m + i : i * k + p] = (float)ldexp(a_raw[i * k + p], -fraction);
  for (int64_t p = 0; p < k; p++)
    for (int64_t j = 0; j < n; j++)
      b[transpose_b ? j * k + p : p * n + j] = (float)ldexp(b_raw[p * n + j], -fraction);
  for (int64_t e = 0; e < m * n; e++) c[e] = (float)ldexp(c_raw[e], -fraction);
  bpt_gemm_args args = {.transpose_a = transpose_a != 0, .transpose_b = transpose_b != 0, .m = m, .n = n, .k = k,
                        .alpha = 1.0f, .a = a, .lda = transpose_a ? m : k, .b = b, .ldb = transpose_b ? k : n,
                        .beta = beta ? 1.0f : 0.0f, .c = c, .ldc = n,
                        .a_dtype = BPT_DTYPE_F32, .b_dtype = BPT_DTYPE_F32, .c_dtype = BPT_DTYPE_F32};
  bpt_backend *backend = &context->backend;
  if (backend->vtable->gemm(backend, &args) != BPT_OK) {
    snprintf(message, size, "reference gemm: %s", bpt_context_last_error(context));
    goto done;
  }
  bpt_fpga_report report = {.size = sizeof report};
  if (bpt_fpga_get_report(context, &report) != BPT_OK) {
    snprintf(message, size, "reference gemm: report: %s", bpt_context_last_error(context));
    goto done;
  }
  *model_cycles = report.cycles;
  for (int64_t e = 0; e < m * n; e++) c_raw[e] = (int32_t)ldexp(c[e], fraction);
  failed = 0;
done:
  bpt_context_destroy(context);
  free(a);
  free(b);
  free(c);
  return failed;
}
