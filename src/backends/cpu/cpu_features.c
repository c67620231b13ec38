/* CPUID on x86-64 and the OpenBLAS core for a feature level (see cpu_features.h). Why a core is set at all:
 * OpenBLAS 0.3.21's get_coretype (driver/others/dynamic.c) switches on Intel's base family and extended
 * model; a family-6 extended model it has no case for, 11 and up (Raptor Lake 183, Lunar Lake 189, Arrow
 * Lake 197, Emerald Rapids 207), falls out of the inner switch into the family-15 case and returns
 * Prescott, as does every Intel CPU whose base family is 15 (extended families, Pentium 4). Any other CPU
 * it does not know gives NULL, and gotoblas_dynamic_init then picks by features as
 * bpt_cpu_feature_level_core does; where it knows the model, its choice and that function's agree (Zen on
 * AMD's AVX2 CPUs, Haswell on Intel's, SkylakeX or Cooperlake with AVX-512). 0.3.25 added the missing
 * break. So a core is set only where OpenBLAS would settle for Prescott on a CPU that has AVX or more. */
#include "backends/cpu/cpu_features.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long xcr0(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (unsigned long long)edx << 32 | eax;
}

void bpt_cpu_features_read(bpt_cpu_features *cpu) {
  memset(cpu, 0, sizeof *cpu);
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return;
  const unsigned max_leaf = eax;
  memcpy(cpu->vendor, &ebx, 4);
  memcpy(cpu->vendor + 4, &edx, 4);
  memcpy(cpu->vendor + 8, &ecx, 4);
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const unsigned base_family = eax >> 8 & 0xf, base_model = eax >> 4 & 0xf;
  cpu->family = base_family == 0xf ? base_family + (eax >> 20 & 0xff) : base_family;
  cpu->model = base_family == 0x6 || base_family == 0xf ? (eax >> 16 & 0xf) << 4 | base_model : base_model;
  const bool osxsave = ecx >> 27 & 1, fma = ecx >> 12 & 1, avx = ecx >> 28 & 1;
  const unsigned long long saved = osxsave ? xcr0() : 0;
  const bool ymm = (saved & 0x6) == 0x6, zmm = ymm && (saved & 0xe0) == 0xe0;
  cpu->avx = avx && ymm;
  cpu->fma = fma && ymm;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    cpu->avx2 = cpu->avx && (ebx >> 5 & 1);
    cpu->avx512f = zmm && (ebx >> 16 & 1);
    cpu->avx512dq = cpu->avx512f && (ebx >> 17 & 1);
    cpu->avx512bw = cpu->avx512f && (ebx >> 30 & 1);
    cpu->avx512vl = cpu->avx512f && (ebx >> 31 & 1);
    cpu->avx512_fp16 = cpu->avx512f && (edx >> 23 & 1);
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    cpu->avx512_bf16 = cpu->avx512f && (eax >> 5 & 1);
  }
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004) {
    unsigned words[12];
    for (unsigned leaf = 0; leaf < 3; leaf++)
      __get_cpuid(0x80000002 + leaf, &words[4 * leaf], &words[4 * leaf + 1], &words[4 * leaf + 2],
                  &words[4 * leaf + 3]);
    memcpy(cpu->model_name, words, 48);
    /* The brand string is padded with spaces on some CPUs. */
    char *start = cpu->model_name;
    while (*start == ' ') start++;
    memmove(cpu->model_name, start, strlen(start) + 1);
    for (size_t end = strlen(cpu->model_name); end > 0 && cpu->model_name[end - 1] == ' '; end--)
      cpu->model_name[end - 1] = '\0';
  }
}
#else
void bpt_cpu_features_read(bpt_cpu_features *cpu) { memset(cpu, 0, sizeof *cpu); }
#endif

const char *bpt_cpu_feature_level_core(const bpt_cpu_features *cpu) {
  const bool avx512 = cpu->avx512f && cpu->avx512bw && cpu->avx512dq && cpu->avx512vl;
  if (avx512 && cpu->avx512_bf16) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (cpu->avx2 && cpu->fma)
    return strcmp(cpu->vendor, "AuthenticAMD") == 0 || strcmp(cpu->vendor, "HygonGenuine") == 0 ? "Zen" : "Haswell";
  if (cpu->avx) return "Sandybridge";
  return NULL;
}

const char *bpt_cpu_blas_core_to_set(const bpt_cpu_features *cpu) {
  if (strcmp(cpu->vendor, "GenuineIntel") != 0) return NULL;
  const bool prescott_by_model = cpu->family >= 0xf || (cpu->family == 0x6 && cpu->model >> 4 >= 11);
  if (!prescott_by_model) return NULL;
  const char *level = bpt_cpu_feature_level_core(cpu);
  /* 0.3.21's OPENBLAS_CORETYPE lookup does not reach "Cooperlake" ("Core not found", then its own detection:
   * Prescott on exactly these CPUs; scripts/check-blas-cores.sh shows it). Cooperlake's f32 kernels are
   * SkylakeX's (it adds only bf16 ones), so SkylakeX gives the same SGEMM. */
  return level && strcmp(level, "Cooperlake") == 0 ? "SkylakeX" : level;
}
