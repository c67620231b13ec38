/* Issue 26.3's question: is there a faster f32 GEMM than Debian's OpenBLAS for the MLP's training shapes? Times
 * one library's cblas_sgemm on the eight products of a 784-512-256-10 MLP step (forward x W^T, weight gradients
 * dy^T x, data gradients dy W) at --batch, fastest of --rounds rounds of --repeats steps. The library is opened
 * by path with dlopen, so any OpenBLAS, BLIS or other CBLAS can be measured beside the one libbptrain loads:
 *
 *   sgemm_libraries_bench libopenblas.so.0 [--symbol cblas_sgemm] [--batch 128] [--rounds 5] [--repeats 200]
 *   python3 -m venv /tmp/sob && /tmp/sob/bin/pip install scipy-openblas32==0.3.34
 *   sgemm_libraries_bench /tmp/sob/lib/python3.11/site-packages/scipy_openblas32/lib/libscipy_openblas.so \
 *       --symbol scipy_cblas_sgemm              # its symbols carry a prefix
 *   apt-get install -y libblis4 && sgemm_libraries_bench libblis.so.4
 *
 * Threads are the library's own setting (OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS, OMP_NUM_THREADS). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CBLAS's enum values (row-major 101, no transpose 111, transpose 112), passed as ints. */
typedef void (*sgemm_fn)(int order, int transpose_a, int transpose_b, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sgemm_libraries_bench LIBRARY [--symbol NAME] [--batch N] [--rounds N] [--repeats N]\n");
    return 2;
  }
  const char *path = argv[1], *name = "cblas_sgemm";
  int batch = 128, rounds = 5, repeats = 200;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--symbol") == 0 && i + 1 < argc)
      name = argv[++i];
    else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
      repeats = atoi(argv[++i]);
    else {
      fprintf(stderr, "sgemm_libraries_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (batch < 1 || batch > 4096 || rounds < 1 || repeats < 1) {
    fprintf(stderr, "sgemm_libraries_bench: --batch is 1..4096, --rounds and --repeats at least 1\n");
    return 2;
  }
  void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fprintf(stderr, "sgemm_libraries_bench: %s\n", dlerror());
    return 1;
  }
  sgemm_fn sgemm;
  *(void **)&sgemm = dlsym(library, name);
  if (!sgemm) {
    fprintf(stderr, "sgemm_libraries_bench: %s has no %s\n", path, name);
    return 1;
  }
  /* OpenBLAS names its kernel set; the same prefix as the GEMM's, if any. */
  char core_name[96];
  const char *prefix_end = strstr(name, "cblas_sgemm");
  snprintf(core_name, sizeof core_name, "%.*sopenblas_get_corename", prefix_end ? (int)(prefix_end - name) : 0, name);
  char *(*corename)(void);
  *(void **)&corename = dlsym(library, core_name);
  /* m, n, k, transpose A, transpose B of the step's products. */
  const int shapes[8][5] = {{batch, 512, 784, 0, 1}, {batch, 256, 512, 0, 1}, {batch, 10, 256, 0, 1},
                            {10, 256, batch, 1, 0},  {256, 512, batch, 1, 0}, {512, 784, batch, 1, 0},
                            {batch, 256, 10, 0, 0},  {batch, 512, 256, 0, 0}};
  const size_t elements = (size_t)4096 * 784;
  float *a = malloc(elements * sizeof *a), *b = malloc(elements * sizeof *b), *c = malloc(elements * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "sgemm_libraries_bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < elements; i++) {
    a[i] = (float)(i % 7) * 0.1f;
    b[i] = (float)(i % 5) * 0.1f;
    c[i] = 0.0f;
  }
  double best = 1e30, flops = 0.0;
  for (int s = 0; s < 8; s++)
    flops += 2.0 * shapes[s][0] * shapes[s][1] * shapes[s][2];
  for (int r = 0; r < rounds; r++) {
    const double start = seconds_now();
    for (int q = 0; q < repeats; q++)
      for (int s = 0; s < 8; s++) {
        const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        sgemm(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
      }
    const double step = (seconds_now() - start) / repeats;
    best = step < best ? step : best;
  }
  printf("sgemm library=%s core=%s batch=%d ms_per_step=%.3f gflops=%.1f\n", path, corename ? corename() : "-", batch,
         best * 1e3, flops / best / 1e9);
  free(a), free(b), free(c);
  return 0;
}
