/* OpenBLAS, loaded when the CPU backend first needs it rather than linked, so that its core can be chosen
 * before its constructor reads OPENBLAS_CORETYPE: Debian's 0.3.21 (DYNAMIC_ARCH) settles for its SSE3
 * Prescott kernels on Intel CPUs newer than it knows (3-7x slower, cpu_features.c says which). The user's
 * OPENBLAS_CORETYPE, even empty, is never overridden; ours is set only for the dlopen and removed after,
 * so the process's environment and its children's are as they were. Then a small product in each
 * transpose combination is compared with a plain one; a BLAS that gets it wrong (or none at all) is
 * replaced by gemm_plain.c, with one message on stderr. */
#define _DEFAULT_SOURCE
#include "backends/cpu/blas_library.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/blas_guard.h"

static bpt_cpu_blas blas;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool loaded; /* final: OpenBLAS loaded, or no candidate could be */
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool checked;
static bpt_cpu_sgemm_fn checked_sgemm; /* what bpt_cpu_sgemm calls once checked is set */
static char self_check_text[256] = "not run yet";
static char gemm_text[256] = "libbptrain's plain GEMM until the self-check has run";
static const bpt_cpu_features *planted_cpu;
static bpt_cpu_sgemm_fn planted_sgemm;

void bpt_cpu_blas_test_plant(const bpt_cpu_features *cpu, bpt_cpu_sgemm_fn sgemm) {
  planted_cpu = cpu;
  planted_sgemm = sgemm;
}

/* Where to look, best first: the OpenMP build found at configure time (BLAS and our loops then share one
 * thread pool), the exact file found, then whatever the loader finds. */
static const char *const candidates[] = {
#ifdef BPT_OPENBLAS_DIR
    BPT_OPENBLAS_DIR "/libopenblas.so.0",
#endif
#ifdef BPT_OPENBLAS_FILE
    BPT_OPENBLAS_FILE,
#endif
    "libopenblas.so.0",
};

static void *symbol(void *library, const char *name) { return dlsym(library, name); }

/* Opens the first candidate that loads, with OPENBLAS_CORETYPE=core for the load alone when core is set; sets
 * *short_of_space instead when loading would not fit in the address space. */
static void *open_library(const char *core, bool *was_loaded, bool *short_of_space, const char **path, char *error,
                          size_t capacity) {
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    void *library = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    *was_loaded = library != NULL;
    /* Under an address-space limit OpenBLAS's constructor could spin forever (blas_guard.c). */
    if (!library && !bpt_cpu_blas_load_fits(error, capacity)) {
      *short_of_space = true;
      return NULL;
    }
    if (!library) {
      if (core) setenv("OPENBLAS_CORETYPE", core, 1);
      library = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
      if (core) unsetenv("OPENBLAS_CORETYPE");
    }
    if (library) {
      *path = candidates[i];
      return library;
    }
    if (i == 0) snprintf(error, capacity, "%s", dlerror());
  }
  return NULL;
}

/* One attempt; false when it should be retried (the address space was short). */
static bool load(void) {
  if (planted_cpu)
    blas.cpu = *planted_cpu;
  else
    bpt_cpu_features_read(&blas.cpu);
  /* Read before any dlopen: the user's setting, even an empty one (0.3.21 then picks by features). */
  const char *user = getenv("OPENBLAS_CORETYPE");
  const char *core = user ? NULL : bpt_cpu_blas_core_to_set(&blas.cpu);
  bool was_loaded = false, short_of_space = false;
  const char *path = NULL;
  char error[256] = "";
  void *library = open_library(core, &was_loaded, &short_of_space, &path, error, sizeof error);
  blas.short_of_space = short_of_space;
  if (!library) {
    snprintf(blas.library, sizeof blas.library, "none: cannot load OpenBLAS (%s)", error);
    snprintf(blas.core_choice, sizeof blas.core_choice, "no BLAS loaded");
    return !short_of_space;
  }
  /* Object-to-function pointer conversion through a union: ISO C leaves the direct cast undefined. */
  union {
    void *object;
    bpt_cpu_sgemm_fn sgemm;
    void (*set_num_threads)(int);
    int (*get_num_threads)(void);
    void *(*memory_alloc)(int);
    void (*memory_free)(void *);
    char *(*text)(void);
  } entry;
  entry.object = symbol(library, "cblas_sgemm");
  blas.sgemm = entry.sgemm;
  entry.object = symbol(library, "openblas_set_num_threads");
  blas.set_num_threads = entry.set_num_threads;
  entry.object = symbol(library, "openblas_get_num_threads");
  blas.get_num_threads = entry.get_num_threads;
  entry.object = symbol(library, "blas_memory_alloc");
  blas.memory_alloc = entry.memory_alloc;
  entry.object = symbol(library, "blas_memory_free");
  blas.memory_free = entry.memory_free;
  if (!blas.memory_alloc || !blas.memory_free) blas.memory_alloc = NULL, blas.memory_free = NULL;
  entry.object = symbol(library, "openblas_get_config");
  const char *config = entry.object ? entry.text() : NULL;
  entry.object = symbol(library, "openblas_get_corename");
  const char *corename = entry.object ? entry.text() : NULL;
  snprintf(blas.config, sizeof blas.config, "%s", config ? config : "");
  snprintf(blas.library, sizeof blas.library, "%s (%s)", config ? config : "a CBLAS without openblas_get_config",
           path);
  snprintf(blas.core, sizeof blas.core, "%s", corename ? corename : "");
  if (!blas.sgemm)
    snprintf(blas.library, sizeof blas.library, "none: %s has no cblas_sgemm", path);
  else if (user)
    snprintf(blas.core_choice, sizeof blas.core_choice, "OPENBLAS_CORETYPE set by the user (\"%s\")", user);
  else if (was_loaded)
    snprintf(blas.core_choice, sizeof blas.core_choice, "OpenBLAS's own detection (loaded by the program first)");
  else if (core)
    snprintf(blas.core_choice, sizeof blas.core_choice,
             "chosen by libbptrain from CPUID: %s (OpenBLAS 0.3.21 would pick Prescott for family %u model %u)",
             blas.cpu.avx512_bf16 ? "AVX512_BF16" : blas.cpu.avx512f ? "AVX-512" : blas.cpu.avx2 ? "AVX2" : "AVX",
             blas.cpu.family, blas.cpu.model);
  else
    snprintf(blas.core_choice, sizeof blas.core_choice, "OpenBLAS's own detection");
  /* The library stays loaded for the life of the process: OpenBLAS's threads and buffers outlive any call. */
  return true;
}

const bpt_cpu_blas *bpt_cpu_blas_load(void) {
  if (atomic_load_explicit(&loaded, memory_order_acquire)) return &blas;
  pthread_mutex_lock(&load_lock);
  if (!atomic_load_explicit(&loaded, memory_order_relaxed) && load())
    atomic_store_explicit(&loaded, true, memory_order_release);
  pthread_mutex_unlock(&load_lock);
  return &blas;
}

/* ---- The self-check ------------------------------------------------------------------------------------ */

static float pseudo_random(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
}

/* Runs one product through sgemm and compares it with a double-precision one; on a mismatch writes where. */
static bool check_product(bpt_cpu_sgemm_fn sgemm, bool ta, bool tb, int m, int n, int k, float alpha, float beta,
                          char *why, size_t capacity) {
  /* Leading dimensions 3 beyond the minimum, so a kernel that ignores them is caught too. */
  const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int lda = a_cols + 3, ldb = b_cols + 3, ldc = n + 3;
  float *a = malloc(sizeof(float) * ((size_t)a_rows * lda + (size_t)b_rows * ldb + 2 * (size_t)m * ldc));
  if (!a) {
    snprintf(why, capacity, "no memory for the self-check");
    return true;
  }
  float *b = a + (size_t)a_rows * lda, *c = b + (size_t)b_rows * ldb, *c0 = c + (size_t)m * ldc;
  uint32_t state = 12345u + (uint32_t)(ta * 2 + tb);
  for (size_t i = 0; i < (size_t)a_rows * lda; i++) a[i] = pseudo_random(&state);
  for (size_t i = 0; i < (size_t)b_rows * ldb; i++) b[i] = pseudo_random(&state);
  /* With beta 0, C's old contents must not matter, NaN included (BLAS semantics the backend relies on). */
  for (size_t i = 0; i < (size_t)m * ldc; i++) c0[i] = c[i] = beta == 0.0f ? NAN : pseudo_random(&state);
  sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
        beta, c, ldc);
  bool ok = true;
  for (int i = 0; i < m && ok; i++)
    for (int j = 0; j < n && ok; j++) {
      double sum = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; p++) {
        const double x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        const double y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        sum += x * y;
        magnitude += fabs(x * y);
      }
      const double old = beta == 0.0f ? 0.0 : c0[(size_t)i * ldc + j];
      const double expected = alpha * sum + beta * old;
      const double bound = 1e-5 * (fabs(alpha) * magnitude + fabs(beta * old)) + 1e-6;
      const double got = c[(size_t)i * ldc + j];
      if (!(fabs(got - expected) <= bound)) {
        snprintf(why, capacity, "%s%s %dx%dx%d alpha %g beta %g: C[%d,%d] = %g, expected %g", ta ? "T" : "N",
                 tb ? "T" : "N", m, n, k, alpha, beta, i, j, got, expected);
        ok = false;
      }
    }
  free(a);
  return ok;
}

/* The products the backend asks for: every transpose combination (linear and convolution forward, data and
 * weight gradients), alpha and beta as the kernels pass them (1 and 0 or 1) and general ones, odd sizes
 * below OpenBLAS's threading threshold (so one workspace buffer suffices). */
static bool run_checks(bpt_cpu_sgemm_fn sgemm, char *why, size_t capacity) {
  static const struct {
    int m, n, k;
    float alpha, beta;
  } shapes[] = {{37, 29, 53, 0.75f, -0.5f}, {37, 29, 53, 1.0f, 0.0f}, {5, 67, 3, 1.0f, 1.0f}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int combination = 0; combination < 4; combination++)
      if (!check_product(sgemm, combination & 2, combination & 1, shapes[s].m, shapes[s].n, shapes[s].k,
                         shapes[s].alpha, shapes[s].beta, why, capacity))
        return false;
  return true;
}

bool bpt_cpu_blas_self_check(void) {
  if (atomic_load_explicit(&checked, memory_order_acquire)) return true;
  const bpt_cpu_blas *library = bpt_cpu_blas_load();
  pthread_mutex_lock(&check_lock);
  if (atomic_load_explicit(&checked, memory_order_relaxed)) {
    pthread_mutex_unlock(&check_lock);
    return true;
  }
  if (library->short_of_space) {
    pthread_mutex_unlock(&check_lock);
    return false;
  }
  bpt_cpu_sgemm_fn sgemm = planted_sgemm ? planted_sgemm : library->sgemm;
  /* OpenBLAS must hold a workspace buffer before its first product, or it may retry a mapping forever. */
  if (sgemm && !bpt_cpu_blas_reserve_quietly(1)) {
    pthread_mutex_unlock(&check_lock);
    return false;
  }
  char why[200] = "";
  if (!sgemm) {
    snprintf(self_check_text, sizeof self_check_text, "not run: no BLAS");
    snprintf(gemm_text, sizeof gemm_text, "libbptrain's plain GEMM (no BLAS could be loaded)");
    fprintf(stderr, "libbptrain: %s; matrix products use libbptrain's plain GEMM (slower)\n", library->library);
    checked_sgemm = NULL;
  } else if (run_checks(sgemm, why, sizeof why)) {
    snprintf(self_check_text, sizeof self_check_text, "passed (%s)",
             why[0] ? why : "4 transpose combinations, 37x29x53 and 5x67x3, against a double-precision product");
    snprintf(gemm_text, sizeof gemm_text, "%s", "OpenBLAS cblas_sgemm");
    checked_sgemm = sgemm;
  } else {
    snprintf(self_check_text, sizeof self_check_text, "failed: %s", why);
    snprintf(gemm_text, sizeof gemm_text, "libbptrain's plain GEMM (OpenBLAS core %.31s failed the self-check)",
             library->core[0] ? library->core : "?");
    fprintf(stderr,
            "libbptrain: OpenBLAS's sgemm (core %s) failed the start-up self-check (%s); matrix products use "
            "libbptrain's plain GEMM instead (slower). OPENBLAS_CORETYPE can name another core.\n",
            library->core[0] ? library->core : "?", why);
    checked_sgemm = NULL;
  }
  atomic_store_explicit(&checked, true, memory_order_release);
  pthread_mutex_unlock(&check_lock);
  return true;
}

void bpt_cpu_blas_outcome(const char **self_check, const char **gemm) {
  pthread_mutex_lock(&check_lock);
  *self_check = self_check_text;
  *gemm = gemm_text;
  pthread_mutex_unlock(&check_lock);
}

void bpt_cpu_sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (!bpt_cpu_blas_self_check() || !checked_sgemm) {
    bpt_cpu_sgemm_plain(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  checked_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}
