/* bf16 matrix products on the CPU (issue 16.2): bf16 operands, f32 accumulation. The blocking, packing and
 * edge handling (gemm_bf16.c) are plain C shared by two micro-kernels with one layout: the native AVX512_BF16
 * one (gemm_bf16_avx512.c, vdpbf16ps) and a scalar one that computes exactly what vdpbf16ps specifies, so
 * the tests check the packing and the edges on any CPU. gemm_bf16_reference.c is the plain definition. */
#ifndef BPT_CPU_GEMM_BF16_H
#define BPT_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"

/* A tile of C is BPT_BF16_MR rows by BPT_BF16_NR columns (8 x 3 vectors of 16 f32: 24 accumulators, 3 loads of
 * B and 8 broadcasts of A per 24 vdpbf16ps). The reduction runs in blocks of BPT_BF16_KC values (even: pairs),
 * so a packed B panel (KC x NR bf16, 24 KiB) stays in L1 while the row panels pass over it. */
#define BPT_BF16_MR 8
#define BPT_BF16_NR 48
#define BPT_BF16_KC 256

/* f32 -> bf16 as VCVTNE2PS2BF16 does it: round to nearest even, subnormals to signed zero, NaN kept quiet.
 * Selects rather than branches, so that the packing loops vectorise. */
static inline uint16_t bpt_bf16_from_f32_bits(uint32_t bits) {
  const uint32_t signed_zero = (bits >> 16) & 0x8000u, quiet_nan = (bits >> 16) | 0x0040u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t number = (bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  return (uint16_t)((bits & 0x7f800000u) == 0 ? signed_zero : number);
}

/* Packed panels hold pairs: one uint32 per (row or column, pair of reduction indices), the even index in the
 * low half, as vdpbf16ps reads them. A panel is pairs x BPT_BF16_MR words (A) or pairs x BPT_BF16_NR (B);
 * rows, columns and the odd last reduction index beyond the matrix are zero. */

/* op(A) rows [row0, row0 + MR) by reduction [k0, k0 + kc) into panel (kc rounded up to pairs). */
void bpt_bf16_pack_a(const bpt_gemm_args *args, int64_t row0, int64_t k0, int64_t kc, uint32_t *panel);
/* op(B) reduction [k0, k0 + kc) by columns [column0, column0 + NR) into panel. */
void bpt_bf16_pack_b(const bpt_gemm_args *args, int64_t k0, int64_t kc, int64_t column0, uint32_t *panel);

/* tile (MR x NR, f32) = the panels' product over pairs; overwrites the tile. */
typedef void (*bpt_bf16_micro_kernel)(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel, float *tile);

/* The scalar micro-kernel: per pair, acc += a_odd b_odd then acc += a_even b_even, each one f32 FMA (the bf16
 * product is exact in f32, so the FMA is the only rounding), subnormal inputs read as zero and subnormal
 * results flushed to zero: VDPBF16PS's operation as the Intel SDM gives it. */
void bpt_bf16_micro_kernel_scalar(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel, float *tile);
/* The vdpbf16ps micro-kernel; call only where bpt_cpu_has_avx512_bf16(). */
void bpt_bf16_micro_kernel_avx512(int64_t pairs, const uint32_t *a_panel, const uint32_t *b_panel, float *tile);

/* C rows [row0, row0 + rows) by columns [column0, column0 + columns) = alpha tile + beta C (beta 0: C is
 * overwritten, never read). rows <= MR and columns <= NR cut the tile at C's edges. */
void bpt_bf16_store_tile(const float *tile, int64_t rows, int64_t columns, float alpha, float beta, void *c_values,
                         bool c_bf16, int64_t ldc, int64_t row0, int64_t column0);

/* The whole product with the given micro-kernel: C = alpha op(A) op(B) + beta C, A and B f32 (rounded to bf16
 * while packing) or bf16, C f32. OpenMP over the tiles unless called inside a parallel region. Fails with
 * BPT_ERR_OUT_OF_MEMORY (packed panels) or BPT_ERR_UNSUPPORTED (other dtypes); backend may be NULL. */
bpt_status bpt_bf16_gemm_run(bpt_backend *backend, const bpt_gemm_args *args, bpt_bf16_micro_kernel kernel);

/* The plain definition the kernels are held to: each operand rounded to bf16 (bpt_bf16_from_f32_bits; bf16
 * operands as stored), products summed in f32 in reduction order, C = alpha sum + beta C. */
void bpt_bf16_gemm_reference(const bpt_gemm_args *args);

/* CPUID: AVX512F, BW, VL and AVX512_BF16, with the OS saving the ZMM and mask registers (XCR0). */
bool bpt_cpu_has_avx512_bf16(void);

/* The bf16 policy's products on this CPU (args->bf16_products): native when the CPU has AVX512_BF16 and the
 * operands are f32 or bf16 with an f32 C; *handled is false when the caller must run the emulation. */
bpt_status bpt_cpu_gemm_bf16(bpt_backend *backend, const bpt_gemm_args *args, bool *handled);

/* What the bf16 policy's GEMMs run on this CPU, for banners and the info call. */
const char *bpt_cpu_bf16_gemm_mode(void);

#endif
