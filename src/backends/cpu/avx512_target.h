/* What the CPU backend's AVX-512 loops are compiled under. Normally a per-function target attribute on a
 * library built for baseline x86-64 (the loops run only where the CPU reports AVX-512F). In the test build
 * that emulates AVX-512 (cmake -DBPT_AVX512_EMULATION=ON; scripts/check-avx512-emulated.sh) the same loops
 * are compiled for AVX2 + FMA over plain-C intrinsics (tests/support/avx512_emulation.h), so that CPUs
 * without AVX-512 run and test them. Private to the CPU backend; include it instead of <immintrin.h>. */
#ifndef BPT_CPU_AVX512_TARGET_H
#define BPT_CPU_AVX512_TARGET_H

#include <immintrin.h>

#if defined(BPT_AVX512_EMULATION)
#include "avx512_emulation.h"
#define BPT_AVX512_TARGET __attribute__((target("avx2,fma")))
#define BPT_AVX512_BF16_TARGET __attribute__((target("avx2,fma")))
#else
#define BPT_AVX512_TARGET __attribute__((target("avx512f")))
#define BPT_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

#endif
