/* Keeps OpenBLAS from hanging when address space runs out (issue 18, class 4); see blas_guard.c. */
#ifndef BPT_CPU_BLAS_GUARD_H
#define BPT_CPU_BLAS_GUARD_H

#include "backends/backend.h"

/*
 * Makes sure OpenBLAS holds the GEMM workspace buffers a team of `threads` can use, before a BLAS call can
 * ask for one: each is mapped here after a trial mapping showed it fits. Fails with BPT_ERR_OUT_OF_MEMORY,
 * saying how much could not be reserved, instead of letting OpenBLAS retry forever. Process-wide and
 * thread-safe; only the first call for a larger team maps anything.
 */
bpt_status bpt_cpu_blas_reserve(bpt_backend *backend, int threads);

/* Whether loading OpenBLAS fits in the address space now: its constructor maps a workspace buffer for each
 * default thread and, when one does not fit, retries forever. When not, writes why. */
bool bpt_cpu_blas_load_fits(char *why, size_t capacity);

/* bpt_cpu_blas_reserve without a backend to report to: whether the buffers for `threads` are mapped. */
bool bpt_cpu_blas_reserve_quietly(int threads);

#endif
