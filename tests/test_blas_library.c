/* The CPU backend's BLAS (issue 16.1): which OpenBLAS core is chosen for which CPU, that the user's
 * OPENBLAS_CORETYPE wins and ours leaves the environment as it was, that a BLAS failing the start-up
 * self-check is replaced by the plain GEMM (and products stay right), and bpt_cpu_compute_info's fields.
 *
 * The loader runs once per process, so each case about loading re-executes this program ("--child NAME")
 * with the environment and planted CPU or kernel it needs; the child prints what it saw and exits 0 when
 * every expectation held. No case names the core OpenBLAS picks for this CPU by itself: that is the library
 * version's table (0.3.21 takes SkylakeX on a Xeon whose feature level is Cooperlake); the properties are
 * checked instead. The "user-core" child is scripts/check-blas-cores.sh's, run under each core. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/blas_library.h"
#include "test_support.h"

/* ---- Which core for which CPU ------------------------------------------------------------------------ */

static bpt_cpu_features intel(unsigned family, unsigned model, int level) {
  bpt_cpu_features cpu = {.vendor = "GenuineIntel", .family = family, .model = model};
  cpu.avx = level >= 1;
  cpu.avx2 = cpu.fma = level >= 2;
  cpu.avx512f = cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = level >= 3;
  cpu.avx512_bf16 = cpu.avx512_fp16 = level >= 4;
  return cpu;
}

static void assert_core(const char *expected, const char *actual) {
  if (!expected || !actual) {
    assert_ptr_equal(expected, actual);
    return;
  }
  assert_string_equal(expected, actual);
}

static void core_for_each_cpu(void **state) {
  (void)state;
  /* The Xeon (family 6 model 207, AVX512_BF16): OpenBLAS 0.3.21 says Prescott; we set Cooperlake. */
  bpt_cpu_features cpu = intel(6, 207, 4);
  assert_core("Cooperlake", bpt_cpu_feature_level_core(&cpu));
  assert_core("SkylakeX", bpt_cpu_blas_core_to_set(&cpu)); /* 0.3.21 does not take "Cooperlake" */
  cpu.avx512_bf16 = false;
  assert_core("SkylakeX", bpt_cpu_blas_core_to_set(&cpu));
  /* Raptor Lake (183, AVX2 only) falls into the same hole; Alder Lake (151) is known. */
  cpu = intel(6, 183, 2);
  assert_core("Haswell", bpt_cpu_blas_core_to_set(&cpu));
  cpu = intel(6, 151, 2);
  assert_core("Haswell", bpt_cpu_feature_level_core(&cpu));
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  /* Meteor Lake (170, extended model 10) is unknown too but gets OpenBLAS's feature fallback. */
  cpu = intel(6, 170, 2);
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  /* Skylake-SP and Sapphire Rapids: OpenBLAS knows them. */
  cpu = intel(6, 85, 3);
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  cpu = intel(6, 143, 4);
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  /* Extended Intel families (base family 15) with AVX-512 are Prescott to every OpenBLAS; a Pentium 4 is. */
  cpu = intel(19, 1, 4);
  assert_core("SkylakeX", bpt_cpu_blas_core_to_set(&cpu));
  cpu = intel(15, 4, 0);
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  /* AMD: Zen 2 here stays OpenBLAS's (Zen); Zen 5 (family 26) gets OpenBLAS's feature fallback. */
  cpu = intel(23, 49, 2);
  memcpy(cpu.vendor, "AuthenticAMD", 13);
  assert_core("Zen", bpt_cpu_feature_level_core(&cpu));
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  cpu = intel(26, 2, 4);
  memcpy(cpu.vendor, "AuthenticAMD", 13);
  assert_core(NULL, bpt_cpu_blas_core_to_set(&cpu));
  /* AVX-512 without BW/DQ/VL (Knights Landing) is Haswell's level. */
  cpu = intel(6, 87, 3);
  cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = false;
  assert_core("Haswell", bpt_cpu_feature_level_core(&cpu));
}

/* ---- The plain GEMM ---------------------------------------------------------------------------------- */

static void plain_gemm_matches_reference(void **state) {
  (void)state;
  test_random random;
  test_random_seed(&random, 7);
  const int64_t m = 45, n = 38, k = 70, ld = 80;
  float *a = malloc(sizeof(float) * ld * ld), *b = malloc(sizeof(float) * ld * ld);
  float *c = malloc(sizeof(float) * m * ld), *expected = malloc(sizeof(float) * m * ld);
  test_random_fill(&random, a, ld * ld, -1.0f, 1.0f);
  test_random_fill(&random, b, ld * ld, -1.0f, 1.0f);
  for (int combination = 0; combination < 8; combination++) {
    const int ta = combination & 1, tb = combination >> 1 & 1, beta_zero = combination >> 2;
    const float alpha = 0.75f, beta = beta_zero ? 0.0f : -1.5f;
    test_random_fill(&random, c, m * ld, -1.0f, 1.0f);
    memcpy(expected, c, sizeof(float) * m * ld);
    if (beta_zero)
      for (int64_t i = 0; i < m * ld; i++)
        c[i] = NAN; /* beta 0 ignores C */
    test_reference_gemm(ta, tb, m, n, k, alpha, a, ld, b, ld, beta, expected, ld);
    bpt_cpu_sgemm_plain(ta, tb, m, n, k, alpha, a, ld, b, ld, beta, c, ld);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        if (!(fabsf(c[i * ld + j] - expected[i * ld + j]) <= 1e-4f))
          fail_msg("plain GEMM %c%c beta %g: C[%lld,%lld] = %g, expected %g", ta ? 'T' : 'N', tb ? 'T' : 'N',
                   (double)beta, (long long)i, (long long)j, (double)c[i * ld + j], (double)expected[i * ld + j]);
  }
  free(a);
  free(b);
  free(c);
  free(expected);
}

/* ---- The info call ------------------------------------------------------------------------------------ */

static void info_fields_are_filled(void **state) {
  (void)state;
  assert_int_equal(bpt_cpu_compute_info(NULL), BPT_ERR_INVALID_ARGUMENT);
  bpt_compute_info small = {0};
  assert_int_equal(bpt_cpu_compute_info(&small), BPT_ERR_INVALID_ARGUMENT);
  /* An older caller's smaller struct: only the fields inside its size are written. */
  bpt_compute_info older;
  memset(&older, 0, sizeof older);
  older.size = offsetof(bpt_compute_info, blas_core);
  assert_int_equal(bpt_cpu_compute_info(&older), BPT_OK);
  assert_non_null(older.blas);
  assert_null(older.blas_core);
  assert_null(older.summary);

  bpt_compute_info info = {.size = sizeof info};
  assert_int_equal(bpt_cpu_compute_info(&info), BPT_OK);
  const char *strings[] = {info.blas,      info.blas_core,  info.blas_core_choice, info.self_check, info.gemm,
                           info.bf16_gemm, info.cpu_vendor, info.cpu_model,        info.summary};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
    assert_non_null(strings[i]);
  print_message("summary: %s\n", info.summary);
  assert_true(strncmp(info.self_check, "passed", 6) == 0);
  assert_string_equal(info.gemm, "OpenBLAS cblas_sgemm");
  /* scripts/gpu-check.sh builds against a plain CBLAS, which has no config or core name. */
  if (strstr(info.blas, "OpenBLAS")) {
    assert_true(info.blas_core[0] != '\0');
    assert_non_null(strstr(info.summary, info.blas_core));
  }
  /* gemm_bf16.c's two modes (native only where the CPU has AVX512_BF16), or oneDNN's matmul (onednn.c). */
  assert_true(strncmp(info.bf16_gemm, "emulated", 8) == 0 || strncmp(info.bf16_gemm, "native", 6) == 0 ||
              strncmp(info.bf16_gemm, "oneDNN ", 7) == 0 || strncmp(info.bf16_gemm, "f32 units (", 11) == 0);
#if defined(__x86_64__)
  assert_true(info.cpu_vendor[0] != '\0');
  assert_int_equal(info.avx2, __builtin_cpu_supports("avx2") ? 1 : 0);
  assert_int_equal(info.fma, __builtin_cpu_supports("fma") ? 1 : 0);
  assert_int_equal(info.avx512f, __builtin_cpu_supports("avx512f") ? 1 : 0);
#endif
}

/* ---- Loading, in fresh processes ---------------------------------------------------------------------- */

static const char *self_path; /* this program, re-executed as the child */

/* Runs this program with "--child name", env_value for OPENBLAS_CORETYPE (unset when NULL); fails the test
 * when it does not exit 0, showing its output, which is returned in output. */
static void run_child(const char *name, const char *env_value, char *output, size_t capacity) {
  int pipe_fds[2];
  assert_int_equal(pipe(pipe_fds), 0);
  fflush(stdout);
  const pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (env_value)
      setenv("OPENBLAS_CORETYPE", env_value, 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
    setenv("OMP_WAIT_POLICY", "passive", 1);
    char *arguments[] = {(char *)self_path, "--child", (char *)name, NULL};
    execv(self_path, arguments);
    _exit(99);
  }
  close(pipe_fds[1]);
  size_t used = 0;
  ssize_t got;
  while (used + 1 < capacity && (got = read(pipe_fds[0], output + used, capacity - 1 - used)) > 0)
    used += (size_t)got;
  output[used] = '\0';
  close(pipe_fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  print_message("child %s (OPENBLAS_CORETYPE %s):\n%s", name, env_value ? env_value : "unset", output);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void own_detection_where_it_suffices(void **state) {
  (void)state;
  char output[4096];
  run_child("own-detection", NULL, output, sizeof output);
}

static void chosen_core_is_set_for_the_load_only(void **state) {
  (void)state;
  char output[4096];
  run_child("raptor-lake", NULL, output, sizeof output);
}

static void chosen_avx512_core_is_one_openblas_takes(void **state) {
  (void)state;
  char output[4096];
  run_child("emerald-rapids", NULL, output, sizeof output);
}

static void user_coretype_is_respected(void **state) {
  (void)state;
  char output[4096];
  run_child("raptor-lake-user", "Sandybridge", output, sizeof output);
  run_child("raptor-lake-user-empty", "", output, sizeof output);
}

static void wrong_kernel_falls_back(void **state) {
  (void)state;
  char output[8192];
  run_child("wrong-kernel", NULL, output, sizeof output);
  /* The message comes once, however many products run. */
  const char *message = "failed the start-up self-check";
  const char *first = strstr(output, message);
  assert_non_null(first);
  assert_null(strstr(first + 1, message));
}

/* ---- The children --------------------------------------------------------------------------------------- */

static int child_failures;

static void expect(bool condition, const char *what) {
  printf("%s: %s\n", condition ? "ok" : "FAILED", what);
  if (!condition) child_failures++;
}

static bool starts_with(const char *text, const char *prefix) { return strncmp(text, prefix, strlen(prefix)) == 0; }

/* A kernel that gets one thing wrong: it adds beta C twice (right whenever beta is 0). */
static void wrong_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transpose_a, enum CBLAS_TRANSPOSE transpose_b,
                        blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda, const float *b,
                        blasint ldb, float beta, float *c, blasint ldc) {
  (void)order;
  for (blasint i = 0; i < m; i++)
    for (blasint j = 0; j < n; j++)
      c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : 2.0f * beta * c[(size_t)i * ldc + j];
  bpt_cpu_sgemm_plain(transpose_a == CblasTrans, transpose_b == CblasTrans, m, n, k, alpha, a, lda, b, ldb, 1.0f, c,
                      ldc);
}

/* Products through the backend's entry point, all transpose combinations, against the reference. */
static bool products_are_right(void) {
  const int64_t m = 33, n = 41, k = 27, ld = 48;
  float a[48 * 48], b[48 * 48], c[33 * 48], expected[33 * 48];
  test_random random;
  test_random_seed(&random, 3);
  test_random_fill(&random, a, ld * ld, -1.0f, 1.0f);
  test_random_fill(&random, b, ld * ld, -1.0f, 1.0f);
  for (int combination = 0; combination < 4; combination++) {
    test_random_fill(&random, c, m * ld, -1.0f, 1.0f);
    memcpy(expected, c, sizeof c);
    test_reference_gemm(combination & 1, combination >> 1, m, n, k, 1.25f, a, ld, b, ld, 0.5f, expected, ld);
    bpt_cpu_sgemm(combination & 1, combination >> 1, m, n, k, 1.25f, a, ld, b, ld, 0.5f, c, ld);
    for (int64_t i = 0; i < m * ld; i++)
      if (i % ld < n && !(fabsf(c[i] - expected[i]) <= 1e-4f)) return false;
  }
  return true;
}

/* The instructions an x86-64 OpenBLAS core's kernels need (its KERNEL.<core> files; OpenBLAS 0.3.21 up to
 * 0.3.3x's names). Requirements only, not which core a CPU gets: that choice is the library version's. */
typedef struct core_needs {
  const char *name;
  int level;   /* 0 SSE2/SSE3, 1 AVX, 2 AVX2 + FMA, 3 AVX-512 F/BW/DQ/VL, 4 and AVX512_BF16, 5 and FP16 */
  bool fma4;   /* AMD family 15h's four-operand FMA (Bulldozer to Excavator) */
} core_needs;

static const core_needs known_cores[] = {
    {"Katmai", 0, false},      {"Coppermine", 0, false}, {"Northwood", 0, false},   {"Prescott", 0, false},
    {"Banias", 0, false},      {"Atom", 0, false},       {"Core2", 0, false},       {"Penryn", 0, false},
    {"Dunnington", 0, false},  {"Nehalem", 0, false},    {"Athlon", 0, false},      {"Opteron", 0, false},
    {"Opteron_SSE3", 0, false}, {"Barcelona", 0, false}, {"Nano", 0, false},        {"Bobcat", 0, false},
    {"Sandybridge", 1, false}, {"Bulldozer", 1, true},   {"Piledriver", 1, true},   {"Steamroller", 1, true},
    {"Excavator", 1, true},    {"Haswell", 2, false},    {"Zen", 2, false},         {"SkylakeX", 3, false},
    {"Cooperlake", 4, false},  {"SapphireRapids", 5, false},
};

static const core_needs *find_core(const char *name) {
  for (size_t i = 0; i < sizeof known_cores / sizeof known_cores[0]; i++)
    if (strcmp(known_cores[i].name, name) == 0) return &known_cores[i];
  return NULL;
}

static int cpu_level(const bpt_cpu_features *cpu) {
  const bool avx512 = cpu->avx512f && cpu->avx512bw && cpu->avx512dq && cpu->avx512vl;
  if (avx512 && cpu->avx512_bf16 && cpu->avx512_fp16) return 5;
  if (avx512 && cpu->avx512_bf16) return 4;
  if (avx512) return 3;
  if (cpu->avx2 && cpu->fma) return 2;
  return cpu->avx ? 1 : 0;
}

/* A core this test does not know (a newer OpenBLAS's) passes: the self-check and products judge it. */
static bool core_runs_here(const char *core, const bpt_cpu_features *cpu) {
  const core_needs *needs = find_core(core);
  if (!needs) {
    printf("note: core %s is not in this test's table; judged by the self-check and products only\n", core);
    return core[0] != '\0';
  }
  bool fma4 = false;
#if defined(__x86_64__)
  fma4 = __builtin_cpu_supports("fma4");
#endif
  return needs->level <= cpu_level(cpu) && (!needs->fma4 || fma4);
}

static bool core_is_pre_avx(const char *core) {
  const core_needs *needs = find_core(core);
  return needs && needs->level == 0;
}

static int child_main(const char *name) {
  const char *env_before = getenv("OPENBLAS_CORETYPE");
  char env_copy[64] = "";
  if (env_before) snprintf(env_copy, sizeof env_copy, "%s", env_before);
  /* An AVX2 Raptor Lake (family 6 model 183): the Haswell kernels it gets run on any AVX2 machine. */
  bpt_cpu_features raptor_lake = {.vendor = "GenuineIntel", .family = 6, .model = 183};
  snprintf(raptor_lake.model_name, sizeof raptor_lake.model_name, "planted Raptor Lake");
  raptor_lake.avx = raptor_lake.avx2 = raptor_lake.fma = true;
  bpt_cpu_features real;
  bpt_cpu_features_read(&real);
  /* An Emerald Rapids (6/207, AVX512_BF16): libbptrain must set a core name OpenBLAS takes. */
  bpt_cpu_features emerald_rapids = raptor_lake;
  emerald_rapids.model = 207;
  snprintf(emerald_rapids.model_name, sizeof emerald_rapids.model_name, "planted Emerald Rapids");
  emerald_rapids.avx512f = emerald_rapids.avx512bw = emerald_rapids.avx512dq = emerald_rapids.avx512vl = true;
  emerald_rapids.avx512_bf16 = true;
  const bool planted_cpu = starts_with(name, "raptor-lake");
  const bool planted_emerald = strcmp(name, "emerald-rapids") == 0;
  if (planted_cpu && !(real.avx2 && real.fma)) {
    printf("skipped: this CPU has no AVX2, where a planted Raptor Lake's Haswell kernels would not run\n");
    return 0;
  }
  if (planted_emerald && !(real.avx512f && real.avx512bw && real.avx512dq && real.avx512vl)) {
    printf("skipped: this CPU has no AVX-512 F/BW/DQ/VL, where a planted Emerald Rapids' kernels would not run\n");
    return 0;
  }
  bpt_cpu_blas_test_plant(planted_cpu ? &raptor_lake : planted_emerald ? &emerald_rapids : NULL,
                          strcmp(name, "wrong-kernel") == 0 ? wrong_sgemm : NULL);

  bpt_context *context = NULL;
  bpt_context_options options = bpt_context_options_default();
  options.num_threads = 2;
  expect(bpt_context_create(&options, &context) == BPT_OK, "a CPU context is created");
  bpt_compute_info info = {.size = sizeof info};
  expect(bpt_cpu_compute_info(&info) == BPT_OK, "bpt_cpu_compute_info succeeds");
  printf("core %s; choice %s; self-check %s; gemm %s\n", info.blas_core, info.blas_core_choice, info.self_check,
         info.gemm);
  const char *env_after = getenv("OPENBLAS_CORETYPE");
  const bool openblas = strstr(info.blas, "OpenBLAS") != NULL; /* not the GPU image's plain CBLAS */
  if (strcmp(name, "own-detection") == 0) {
    expect(env_after == NULL, "OPENBLAS_CORETYPE still unset");
    const char *level = bpt_cpu_feature_level_core(&real);
    if (strcmp(real.vendor, "GenuineIntel") != 0 && strcmp(real.vendor, "AuthenticAMD") != 0) level = NULL;
    if (level && !bpt_cpu_blas_core_to_set(&real) && strstr(info.blas, "OpenBLAS")) {
      expect(strcmp(info.blas_core_choice, "OpenBLAS's own detection") == 0, "OpenBLAS chose");
      /* Which core OpenBLAS picks for a model is its own table and differs between versions (0.3.21 takes
       * SkylakeX on a Xeon with AVX512_BF16, where the feature level says Cooperlake), so only properties
       * are checked: the core is one this CPU can execute, and not one of the pre-AVX cores the loader
       * exists to avoid. */
      expect(core_runs_here(info.blas_core, &real), "OpenBLAS's core uses only instructions this CPU has");
      expect(!(real.avx && core_is_pre_avx(info.blas_core)), "OpenBLAS's core uses AVX, which this CPU has");
    }
  } else if (strcmp(name, "raptor-lake") == 0) {
    expect(env_after == NULL, "OPENBLAS_CORETYPE unset again after the load");
    expect(starts_with(info.blas_core_choice, "chosen by libbptrain from CPUID: AVX2"), "libbptrain chose");
    if (openblas) expect(strcmp(info.blas_core, "Haswell") == 0, "OpenBLAS runs the chosen Haswell core");
    expect(strcmp(info.cpu_model, "planted Raptor Lake") == 0, "the info reports the CPU the loader saw");
  } else if (planted_emerald) {
    expect(env_after == NULL, "OPENBLAS_CORETYPE unset again after the load");
    expect(starts_with(info.blas_core_choice, "chosen by libbptrain from CPUID"), "libbptrain chose");
    if (openblas) expect(strcmp(info.blas_core, "SkylakeX") == 0, "OpenBLAS runs the chosen core, not Prescott");
  } else if (starts_with(name, "raptor-lake-user")) {
    expect(env_after && strcmp(env_after, env_copy) == 0, "the user's OPENBLAS_CORETYPE is unchanged");
    expect(starts_with(info.blas_core_choice, "OPENBLAS_CORETYPE set by the user"), "the user chose");
    if (env_copy[0] && openblas) expect(strcmp(info.blas_core, env_copy) == 0, "OpenBLAS runs the user's core");
  } else if (strcmp(name, "user-core") == 0) {
    /* scripts/check-blas-cores.sh runs this under each OPENBLAS_CORETYPE the CPU can execute. */
    expect(env_before != NULL, "OPENBLAS_CORETYPE is set (scripts/check-blas-cores.sh sets it)");
    expect(env_after && strcmp(env_after, env_copy) == 0, "the user's OPENBLAS_CORETYPE is unchanged");
    expect(starts_with(info.blas_core_choice, "OPENBLAS_CORETYPE set by the user"), "the user chose");
    expect(starts_with(info.self_check, "passed"), "the user's core passes the start-up self-check");
    expect(starts_with(info.gemm, "OpenBLAS"), "and multiplies");
    if (openblas) {
      expect(core_runs_here(info.blas_core, &real), "the core that ran uses only instructions this CPU has");
      expect(strstr(info.summary, info.blas_core) != NULL, "the banner names the core that ran");
    }
  } else if (strcmp(name, "wrong-kernel") == 0) {
    expect(starts_with(info.self_check, "failed: "), "the self-check failed");
    expect(starts_with(info.gemm, "libbptrain's plain GEMM"), "the plain GEMM replaced the kernel");
    expect(strstr(info.summary, "failed") != NULL, "the summary says so");
  } else {
    expect(false, "a known child case");
  }
  expect(strncmp(info.self_check, "not run", 7) != 0, "the self-check ran");
  expect(products_are_right(), "products through bpt_cpu_sgemm are right");
  expect(products_are_right(), "and again (the message is not repeated)");
  bpt_context_destroy(context);
  return child_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
  self_path = test_self_executable();
  if (!self_path) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(core_for_each_cpu),
      cmocka_unit_test(plain_gemm_matches_reference),
      cmocka_unit_test(info_fields_are_filled),
      cmocka_unit_test(own_detection_where_it_suffices),
      cmocka_unit_test(chosen_core_is_set_for_the_load_only),
      cmocka_unit_test(chosen_avx512_core_is_one_openblas_takes),
      cmocka_unit_test(user_coretype_is_respected),
      cmocka_unit_test(wrong_kernel_falls_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
