/* Which units run the bf16 policy's products on this CPU (issue 26.1): a bf16 unit (oneDNN's matmul, AMX tiles
 * where oneDNN has them, or the own vdpbf16ps kernel) or the f32 FMA units (cblas_sgemm on the bf16 values).
 * AVX512_BF16 alone does not decide it: on AMD Zen 4 bf16 products ran 2.0-3.1x OpenBLAS's f32 ones, but on the
 * Intel Xeon measured (family 6 model 207, without AMX) vdpbf16ps does half the f32 FMA's work per second and
 * the same products run faster as f32 arithmetic. So the choice is measured once per process: bf16_unit.c times the two
 * instructions' throughput in registers. BPT_BF16_GEMM=bf16|own|f32 overrides it (docs/precision.md). */
#ifndef BPT_CPU_BF16_UNIT_H
#define BPT_CPU_BF16_UNIT_H

#include <stdbool.h>

/* True where the bf16 policy's matrix products (linear's, matmul's) go to a bf16 unit: oneDNN's matmul, AMX
 * tiles included, or the own kernel where bpt_cpu_bf16_dot_pays(); false where they run on the f32 units, as
 * on CPUs without AVX512_BF16. Decided once per process. */
bool bpt_cpu_bf16_products_native(void);

/* True where the own vdpbf16ps kernels pay (the probe, or BPT_BF16_GEMM=bf16|own): conv2d's bf16 lowering, the
 * attention's bf16 blocks and gemm's own kernel. AMX makes oneDNN's products native but not these. */
bool bpt_cpu_bf16_dot_pays(void);

/* Why, in words, for bpt_cpu_bf16_gemm_mode(): the override, AMX, or the probe's ratio. NULL where the CPU
 * has no AVX512_BF16 (nothing to choose). */
const char *bpt_cpu_bf16_unit_choice(void);

/* The probe's result: vdpbf16ps's multiply-adds per second over the f32 FMA's (fastest of three alternating
 * rounds each). 0 where it did not run (no AVX512_BF16, an override, or the AVX-512 emulation build). */
double bpt_cpu_bf16_unit_ratio(void);

/* The ratio at and above which the bf16 unit takes the products: below it the narrowing and packing the unit
 * needs eat the gain. */
#define BPT_CPU_BF16_UNIT_MIN_RATIO 1.25

/* The probe itself, exposed for the tests: work per second of vdpbf16ps over vfmadd231ps, both in ZMM
 * registers with 12 independent accumulators, fastest of `rounds` alternating rounds. Needs AVX512_BF16. */
double bpt_cpu_bf16_unit_probe(int rounds);

#endif
