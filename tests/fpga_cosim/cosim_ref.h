/* The C side of the fpga-sim C/RTL co-simulation: runs the HLS C kernel (through the fpga-sim backend's gemm
 * launcher, so the cycle model charges it as in training) on raw fixed-point operands. */
#ifndef BPT_COSIM_REF_H
#define BPT_COSIM_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The fixed format both sides use: fpga-sim's default ap_fixed<16, 6, AP_RND, AP_SAT>. */
enum { BPT_COSIM_WORD_BITS = 16, BPT_COSIM_INTEGER_BITS = 6 };

/* C (m, n) = op(A) op(B) + beta C on fpga-sim's fixed-point C kernel. a_raw is op(A) (m, k) and b_raw op(B)
 * (k, n), row-major raw integers (value = raw / 2^F); the kernel is handed A or B transposed in memory when
 * transpose_a / transpose_b is set, as linear layers call it. c_raw (m, n) is read when beta is 1 and
 * overwritten. model_cycles receives the cycle model's charge for the call. Returns 0, or 1 with a message. */
int bpt_cosim_reference_gemm(int64_t m, int64_t n, int64_t k, int beta, int transpose_a, int transpose_b,
                             const int32_t *a_raw, const int32_t *b_raw, int32_t *c_raw, uint64_t *model_cycles,
                             char *message, size_t size);

#ifdef __cplusplus
}
#endif

#endif
