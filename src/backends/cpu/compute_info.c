/* bpt_cpu_compute_info: the BLAS loader's and the CPU's description (blas_library.c, cpu_features.c), and
 * how bf16 products run. */
#include "bptrain/compute_info.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/blas_library.h"

/* How the CPU backend multiplies bf16 operands. The native bf16 kernels (issue 16.2, gemm_bf16*.c) report
 * themselves here. */
static const char *bf16_gemm_kind(void) { return "emulated (f32 arithmetic on bf16-rounded values)"; }

static char summary[2048];
static pthread_mutex_t summary_lock = PTHREAD_MUTEX_INITIALIZER;
static bool summary_final; /* written once, after the self-check has run; never changed after */

static void write_summary(const bpt_cpu_blas *blas, const char *self_check, const char *gemm) {
  const bpt_cpu_features *cpu = &blas->cpu;
  char flags[64];
  snprintf(flags, sizeof flags, "%s%s%s%s%s", cpu->avx2 ? " avx2" : "", cpu->fma ? " fma" : "",
           cpu->avx512f ? " avx512f" : "", cpu->avx512_bf16 ? " avx512_bf16" : "", cpu->avx512_fp16 ? " avx512_fp16" : "");
  const bool openblas = strcmp(gemm, "OpenBLAS cblas_sgemm") == 0 && blas->config[0];
  snprintf(summary, sizeof summary, "%s, core %s (%s); self-check %s; bf16 GEMM %s; CPU %s [%s]",
           openblas ? blas->config : gemm, blas->core[0] ? blas->core : "-", blas->core_choice,
           strncmp(self_check, "passed", 6) == 0 ? "passed" : self_check, bf16_gemm_kind(),
           cpu->model_name[0] ? cpu->model_name : "unknown", flags[0] ? flags + 1 : "");
}

#define FITS(member) (info->size >= offsetof(bpt_compute_info, member) + sizeof info->member)
#define SET(member, value)                                                                                           \
  do {                                                                                                               \
    if (FITS(member)) info->member = (value);                                                                        \
  } while (0)

bpt_status bpt_cpu_compute_info(bpt_compute_info *info) {
  if (!info || !FITS(blas)) return BPT_ERR_INVALID_ARGUMENT;
  const bpt_cpu_blas *blas = bpt_cpu_blas_load();
  const bool checked = bpt_cpu_blas_self_check();
  const char *self_check, *gemm;
  bpt_cpu_blas_outcome(&self_check, &gemm);
  pthread_mutex_lock(&summary_lock);
  if (checked && !summary_final) {
    write_summary(blas, self_check, gemm);
    summary_final = true;
  }
  const char *line = summary_final ? summary : "CPU backend: BLAS self-check not run yet (no workspace fits)";
  pthread_mutex_unlock(&summary_lock);
  SET(blas, blas->library);
  SET(blas_core, blas->core);
  SET(blas_core_choice, blas->core_choice);
  SET(self_check, self_check);
  SET(gemm, gemm);
  SET(bf16_gemm, bf16_gemm_kind());
  SET(cpu_vendor, blas->cpu.vendor);
  SET(cpu_model, blas->cpu.model_name);
  SET(cpu_family, (int)blas->cpu.family);
  SET(cpu_model_number, (int)blas->cpu.model);
  SET(avx2, blas->cpu.avx2);
  SET(fma, blas->cpu.fma);
  SET(avx512f, blas->cpu.avx512f);
  SET(avx512_bf16, blas->cpu.avx512_bf16);
  SET(avx512_fp16, blas->cpu.avx512_fp16);
  SET(summary, line);
  return BPT_OK;
}
