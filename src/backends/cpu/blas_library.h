/* The BLAS the CPU backend multiplies with: OpenBLAS, loaded at first use with a core chosen from CPUID
 * where its own detection falls short, checked against a plain product once, and replaced by
 * libbptrain's plain GEMM when it cannot be loaded or gets the check wrong. See blas_library.c. */
#ifndef BPT_CPU_BLAS_LIBRARY_H
#define BPT_CPU_BLAS_LIBRARY_H

#include <stdbool.h>
#include <stdint.h>

#include <cblas.h>

#include "backends/cpu/cpu_features.h"

typedef void (*bpt_cpu_sgemm_fn)(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose_a,
                                 enum CBLAS_TRANSPOSE transpose_b, blasint m, blasint n, blasint k, float alpha,
                                 const float *a, blasint lda, const float *b, blasint ldb, float beta, float *c,
                                 blasint ldc);

/* What was loaded; members are NULL where the library lacks them (no OpenBLAS, a plain CBLAS). */
typedef struct bpt_cpu_blas {
  bpt_cpu_sgemm_fn sgemm; /* the library's cblas_sgemm, NULL when none could be loaded */
  void (*set_num_threads)(int threads);
  int (*get_num_threads)(void);
  void *(*memory_alloc)(int procpos); /* OpenBLAS's workspace allocator, for blas_guard.c */
  void (*memory_free)(void *buffer);
  bpt_cpu_features cpu;
  char library[384];     /* openblas_get_config() and the file, or why nothing was loaded */
  char config[128];      /* openblas_get_config() alone, "" without it */
  char core[32];         /* openblas_get_corename(), "" without one */
  char core_choice[160]; /* who chose the core */
  bool short_of_space;   /* not loaded because loading would not fit in the address space: library says why,
                            and the next bpt_cpu_blas_load tries again */
} bpt_cpu_blas;

/* Loads the BLAS once (thread-safe; never fails: without one, sgemm is NULL and library says why). While
 * short_of_space is set, each call tries again. */
const bpt_cpu_blas *bpt_cpu_blas_load(void);

/* Runs the start-up self-check once, if OpenBLAS's workspace for one thread fits (blas_guard.c); until it has
 * run, products use the plain GEMM. Returns whether it has run. Thread-safe. */
bool bpt_cpu_blas_self_check(void);

/* The self-check's outcome and what multiplies: filled once the check has run ("not run yet" before). */
void bpt_cpu_blas_outcome(const char **self_check, const char **gemm);

/* C (m, n) = alpha op(A) op(B) + beta C, row-major, dimensions within int: every f32 product of the CPU
 * backend goes through here, to OpenBLAS or, where it is absent or failed the self-check, the plain GEMM. */
void bpt_cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* libbptrain's own GEMM (gemm_plain.c), same contract: correct on every CPU, OpenMP over rows. */
void bpt_cpu_sgemm_plain(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* Tests only (the static library exposes it): before the first load, make the loader see `cpu` instead of
 * this CPU's CPUID, and/or put `sgemm` in place of the loaded library's before the self-check. NULL keeps
 * the real one. */
void bpt_cpu_blas_test_plant(const bpt_cpu_features *cpu, bpt_cpu_sgemm_fn sgemm);

#endif
