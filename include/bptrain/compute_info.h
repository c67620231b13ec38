/**
 * @file compute_info.h
 * @brief What the CPU backend computes with: the BLAS, its kernel and how it was chosen, the start-up
 *        self-check, the CPU and its relevant features (docs/ARCHITECTURE.md, "Which BLAS and why").
 */
#ifndef BPTRAIN_COMPUTE_INFO_H
#define BPTRAIN_COMPUTE_INFO_H

#include "common.h"

BPT_EXTERN_C_BEGIN

/** Filled by bpt_cpu_compute_info(). Strings are the library's, valid for the life of the process. */
typedef struct bpt_compute_info {
  size_t size;                  /**< sizeof(bpt_compute_info), set by the caller; fields beyond it stay untouched */
  const char *blas;             /**< the BLAS library: OpenBLAS's openblas_get_config() and the file loaded, or
                                     "none: ..." saying why none could be loaded */
  const char *blas_core;        /**< OpenBLAS's kernel set, openblas_get_corename() ("Zen", "SkylakeX"), or "" */
  const char *blas_core_choice; /**< who chose it: "OpenBLAS's own detection", "chosen by libbptrain from CPUID:
                                     AVX512_BF16 (...)" or "OPENBLAS_CORETYPE set by the user (...)" */
  const char *self_check;       /**< the start-up comparison with a plain product: "passed (...)", "failed: ..."
                                     naming the product and element, or "not run ..." */
  const char *gemm;             /**< what runs f32 matrix products: "OpenBLAS cblas_sgemm" or libbptrain's plain
                                     GEMM and why */
  const char *bf16_gemm;        /**< how the bf16 policy's matrix products run: oneDNN's matmul and its kernel,
                                     "native AVX512_BF16 (vdpbf16ps)", "f32 units (...)" and why (a bf16 unit slower
                                     than the f32 FMAs), or "emulated: bf16 storage, f32 arithmetic (no AVX512_BF16)" */
  const char *cpu_vendor;       /**< CPUID's vendor ("GenuineIntel", "AuthenticAMD"), "" off x86 */
  const char *cpu_model;        /**< the CPU's brand string, "" where it has none */
  int cpu_family;               /**< family and model as /proc/cpuinfo shows them */
  int cpu_model_number;         /**< model (extended model << 4 | model) */
  int avx2;                     /**< 1 when the CPU has the feature and the OS saves its registers, else 0 */
  int fma;                      /**< as avx2: FMA3 */
  int avx512f;                  /**< as avx2: AVX-512 Foundation */
  int avx512_bf16;              /**< as avx2: AVX512_BF16 (vdpbf16ps) */
  int avx512_fp16;              /**< as avx2: AVX512_FP16 */
  const char *summary;          /**< one line of the above for a banner */
} bpt_compute_info;

/**
 * Describes the CPU backend's matrix-product path. Loads the BLAS and runs its self-check if no CPU context
 * has done so yet (that is when OPENBLAS_CORETYPE is read: set it before the first call or context).
 * @param info its @c size set to sizeof(bpt_compute_info) (an older, smaller size fills only its fields)
 * @return ::BPT_OK, or ::BPT_ERR_INVALID_ARGUMENT when @p info is NULL or its size is below that of
 *         bpt_compute_info's first two members.
 */
BPT_API bpt_status bpt_cpu_compute_info(bpt_compute_info *info);

BPT_EXTERN_C_END

#endif
