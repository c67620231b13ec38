/* What one OpenMP parallel region costs under the waiting policy in the environment (issue 16.3): GAP us of
 * serial work, then a region in which each of 2 threads works WORK us, REGIONS times; the time beyond
 * GAP + WORK per region is the fork, the wake-up of sleeping threads and the closing barrier. A training step
 * of the MLP runs about 22 regions (bench/shared_cores.sh's workload), which turns this into a step cost.
 * Prints "omp_region gap_us=G work_us=W overhead_us=O" (the best of 7 repetitions).
 *
 *   [OMP_WAIT_POLICY=passive | GOMP_SPINCOUNT=N] omp_region_bench [--gap 200] [--work 100] [--regions 500]
 */
#include <omp.h>
#include <stdio.h>

#include "example_util.h"

/* Work that occupies the core without touching memory, for a set time. */
static void busy(double microseconds) {
  const double end = example_seconds() + microseconds * 1e-6;
  while (example_seconds() < end) {
  }
}

int main(int argc, char **argv) {
  static const char *const valued[] = {"--gap", "--work", "--regions", NULL};
  example_check_arguments(argc, argv, valued, NULL, "usage: omp_region_bench [--gap US] [--work US] [--regions N]\n");
  const double gap = example_option_double(argc, argv, "--gap", 200.0);
  const double work = example_option_double(argc, argv, "--work", 100.0);
  const long regions = example_option_long(argc, argv, "--regions", 500);
  double best = -1.0;
  for (int repetition = 0; repetition < 7; repetition++) {
    const double start = example_seconds();
    for (long region = 0; region < regions; region++) {
      busy(gap);
#pragma omp parallel num_threads(2)
      busy(work);
    }
    const double overhead = (example_seconds() - start) / (double)regions * 1e6 - gap - work;
    if (best < 0.0 || overhead < best) best = overhead;
  }
  printf("omp_region gap_us=%.0f work_us=%.0f overhead_us=%.1f\n", gap, work, best);
  return 0;
}
