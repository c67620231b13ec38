/* The team OpenMP will really give (issue 30, class 1). OpenBLAS's OpenMP build asks for omp_get_max_threads()
 * threads and its threaded GEMM waits, spinning, for every one of them: a team the runtime shrinks
 * (OMP_THREAD_LIMIT, OMP_DYNAMIC, OMP_MAX_ACTIVE_LEVELS=0) never finishes. Shared by core (the context's
 * thread count) and the CPU backend (the count handed to OpenBLAS), so it is a header of its own. */
#ifndef BPT_BASE_OPENMP_LIMITS_H
#define BPT_BASE_OPENMP_LIMITS_H

#ifdef _OPENMP
#include <omp.h>
#endif

/* The largest team, at most `wanted`, that a parallel region started by the calling thread gets: 1 when no
 * region can be active (OMP_MAX_ACTIVE_LEVELS=0, or already as deep as allowed), else at most the thread
 * limit. Dynamic adjustment is not read here: bpt_openmp_fix_team turns it off on the calling thread. */
static inline int bpt_openmp_usable_threads(int wanted) {
  if (wanted < 1) return 1;
#ifdef _OPENMP
  if (omp_get_max_active_levels() <= omp_get_active_level()) return 1;
  const int limit = omp_get_thread_limit();
  if (limit >= 1 && wanted > limit) wanted = limit;
#endif
  return wanted;
}

/* Makes the calling thread's next parallel regions get the team they ask for: with dynamic adjustment on
 * (OMP_DYNAMIC=true) the runtime may hand OpenBLAS fewer threads than it waits for. */
static inline void bpt_openmp_fix_team(void) {
#ifdef _OPENMP
  if (omp_get_dynamic()) omp_set_dynamic(0);
#endif
}

#endif
