/* What the CPU can do, read from CPUID once, and which OpenBLAS core its feature level calls for. The BLAS
 * loader (blas_library.c) uses it to pick a core where OpenBLAS's own detection would fall short; the
 * public info call (compute_info.c) reports it. */
#ifndef BPT_CPU_FEATURES_H
#define BPT_CPU_FEATURES_H

#include <stdbool.h>

typedef struct bpt_cpu_features {
  char vendor[13];     /* "GenuineIntel", "AuthenticAMD", "" off x86 */
  char model_name[49]; /* the brand string, "" where the CPU has none */
  unsigned family;     /* as Linux's /proc/cpuinfo shows it: base + extended family */
  unsigned model;      /* as /proc/cpuinfo shows it: extended model << 4 | model */
  /* Usable, not only present: the AVX and AVX-512 flags count only when the OS saves their registers. */
  bool avx, avx2, fma, avx512f, avx512bw, avx512dq, avx512vl, avx512_bf16, avx512_fp16;
} bpt_cpu_features;

/* Fills *cpu from this CPU (all false and "" off x86-64). */
void bpt_cpu_features_read(bpt_cpu_features *cpu);

/* The OpenBLAS 0.3.21 core for the CPU's feature level: "Cooperlake" (AVX-512 F/BW/DQ/VL and AVX512_BF16),
 * "SkylakeX" (AVX-512 F/BW/DQ/VL), "Zen" (AVX2 and FMA on AMD or Hygon), "Haswell" (AVX2 and FMA),
 * "Sandybridge" (AVX), or NULL below AVX. */
const char *bpt_cpu_feature_level_core(const bpt_cpu_features *cpu);

/* The core libbptrain sets before loading OpenBLAS, or NULL to leave the choice to OpenBLAS: non-NULL only
 * for the CPUs whose model OpenBLAS 0.3.21 (up to 0.3.24) maps to Prescott whatever their features; the
 * feature-level core, SkylakeX where that is Cooperlake (a name 0.3.21's OPENBLAS_CORETYPE does not take). */
const char *bpt_cpu_blas_core_to_set(const bpt_cpu_features *cpu);

#endif
