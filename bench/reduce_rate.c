/* γ of the ring cost model (docs/comm.md): seconds per byte of the sum a[i] += b[i] on f32, the reduction each
 * ring step does on the chunk it receives. The all-reduce timings alone cannot give it: β and γ enter the
 * ring's cost only as 2β + γ for every rank count. Run by bench/ring_model.py's users as build/reduce_rate_bench.
 *
 *   reduce_rate_bench [MiB] [rounds]   (defaults 64 and 20; prints the fastest round) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 64, rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 20;
  if (mib < 1 || mib > 4096 || rounds < 1 || rounds > 10000) {
    fprintf(stderr, "reduce_rate_bench: MiB must be 1-4096 and rounds 1-10000\n");
    return 2;
  }
  size_t count = (size_t)mib << 18; /* floats in mib MiB */
  float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
  if (!a || !b) {
    fprintf(stderr, "reduce_rate_bench: cannot allocate 2 x %ld MiB\n", mib);
    free(a);
    free(b);
    return 1;
  }
  for (size_t i = 0; i < count; i++)
    a[i] = 0.0f, b[i] = (float)(i % 7) * 0.125f;
  double best = 1e30;
  for (long r = 0; r < rounds; r++) {
    double start = now();
    for (size_t i = 0; i < count; i++)
      a[i] += b[i];
    double elapsed = now() - start;
    if (elapsed < best) best = elapsed;
  }
  double bytes = (double)count * sizeof(float);
  printf("f32 sum a += b over %ld MiB: fastest of %ld rounds %.3f ms, gamma = %.4g s/byte (%.2f GB/s); a[1] = %g\n",
         mib, rounds, 1e3 * best, best / bytes, bytes / best / 1e9, (double)a[1]);
  free(a);
  free(b);
  return 0;
}
