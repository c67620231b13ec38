/* The bf16 policy's products through oneDNN's matmul (issue 26.1), chosen by measurement over this backend's
 * own vdpbf16ps kernel (docs/benchmarks.md, "oneDNN's matmul beside our bf16 kernel"). oneDNN is opened at
 * run time like OpenBLAS: without libdnnl.so.2 (Debian's libdnnl2), or built without its headers, these calls
 * answer "not handled" and gemm_bf16.c's kernel runs instead. gemm.c asks only where bf16_unit.c chose a bf16
 * unit. BPT_BF16_GEMM=own in the environment keeps the own kernel even when oneDNN is there (for comparisons and
 * tests). */
#ifndef BPT_CPU_ONEDNN_H
#define BPT_CPU_ONEDNN_H

#include <stdbool.h>

#include "backends/backend.h"

/* Runs args (bf16_products, f32 or bf16 operands, f32 or bf16 C) on oneDNN when it is loaded and the CPU has a bf16
 * unit it uses; *handled false otherwise (nothing written), or when oneDNN refused the shape (then the
 * caller's own kernel runs: oneDNN is an accelerator here, never a new way to fail). A status other than
 * BPT_OK is an allocation failure. */
bpt_status bpt_cpu_onednn_gemm(bpt_backend *backend, const bpt_gemm_args *args, bool *handled);

/* What runs the bf16 policy's products through oneDNN, e.g. "oneDNN 2.6.3 matmul (brg:avx512_core_bf16)", or
 * NULL when oneDNN is not used (why: not loaded, not built, switched off), for banners and the info call. */
const char *bpt_cpu_onednn_mode(void);

/* Why oneDNN is not used (a sentence), or NULL when it is. */
const char *bpt_cpu_onednn_absent_reason(void);

#endif
