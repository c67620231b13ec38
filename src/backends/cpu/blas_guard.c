/* OpenBLAS's GEMM workspace under an address-space limit (issue 18, class 4).
 *
 * OpenBLAS 0.3.21 as Debian builds it (driver/others/memory.c, the allocator without USE_TLS, NO_WARMUP)
 * keeps a table of workspace slots of BUFFER_SIZE bytes each (128 MiB on x86-64, 32 MiB on arm64). Every
 * GEMM call takes a slot for its packing buffers (interface/gemm.c) and every BLAS thread holds one more
 * (blas_server_omp.c, adjust_thread_buffers, run by openblas_set_num_threads and whenever the OpenMP team
 * size changes). A slot is mapped on first use and kept; when neither mmap nor malloc can provide one,
 * blas_memory_alloc loops forever. So before OpenBLAS can need a new slot, this file maps the slots itself
 * through OpenBLAS's own allocator, each only after a trial mmap of the same size succeeded. Without
 * OpenBLAS's allocator (no OpenBLAS, or another CBLAS: blas_library.c) there is nothing to reserve. */
#define _GNU_SOURCE
#include "backends/cpu/blas_guard.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "backends/cpu/blas_library.h"

#if defined(__aarch64__)
#define OPENBLAS_BUFFER_BYTES ((size_t)32 << 20)
#else
#define OPENBLAS_BUFFER_BYTES ((size_t)128 << 20)
#endif
/* OpenBLAS's malloc fallback asks for one page more than a slot. */
#define OPENBLAS_SLOT_BYTES (OPENBLAS_BUFFER_BYTES + 4096)
/* The most slots reserved: Debian's build (MAX_THREADS=64) has a table of 128 (NUM_BUFFERS = 2 x MAX_THREADS)
 * and prints a warning when it overflows into its auxiliary one. Teams above 59 threads are covered only in
 * part. */
#define MAX_SLOTS 120

static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
/* Slots known to be mapped: those OpenBLAS's threads held when first asked, plus those mapped here. */
static int mapped_slots = -1;

/* Whether a mapping of one slot's size fits now (RLIMIT_AS, overcommit), without keeping it. */
static int slot_fits(void) {
  void *trial = mmap(NULL, OPENBLAS_SLOT_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (trial == MAP_FAILED) return 0;
  munmap(trial, OPENBLAS_SLOT_BYTES);
  return 1;
}

/* The threads OpenBLAS 0.3.21's constructor maps a slot for (blas_get_cpu_number): OPENBLAS_NUM_THREADS, else
 * GOTO_NUM_THREADS, else OMP_NUM_THREADS, at most the CPUs this process may run on, at most 64. */
static int load_time_threads(void) {
  int cpus = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus < 1) cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  int wanted = 0;
  const char *names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && wanted <= 0; i++) {
    const char *value = getenv(names[i]);
    if (value) wanted = atoi(value);
  }
  int threads = wanted > 0 && wanted < cpus ? wanted : cpus;
  return threads < 64 ? threads : 64;
}

bool bpt_cpu_blas_load_fits(char *why, size_t capacity) {
  /* Its segments and libgfortran's are about 40 MiB. */
  const int threads = load_time_threads();
  const size_t bytes = (size_t)threads * OPENBLAS_SLOT_BYTES + ((size_t)64 << 20);
  void *trial = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (trial != MAP_FAILED) {
    munmap(trial, bytes);
    return true;
  }
  struct rlimit limit;
  char limit_text[64] = "no RLIMIT_AS";
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    snprintf(limit_text, sizeof limit_text, "RLIMIT_AS %llu MiB", (unsigned long long)(limit.rlim_cur >> 20));
  snprintf(why, capacity,
           "loading it maps %zu MiB (a %zu MiB buffer for each of %d threads; OPENBLAS_NUM_THREADS lowers that), "
           "which does not fit (%s)",
           bytes >> 20, OPENBLAS_BUFFER_BYTES >> 20, threads, limit_text);
  return false;
}

static unsigned long long mapped_mib(void) {
  FILE *file = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (file) {
    if (fscanf(file, "%llu", &pages) != 1) pages = 0;
    fclose(file);
  }
  return pages * (unsigned long long)sysconf(_SC_PAGESIZE) >> 20;
}

/* Maps the slots for a team of `threads`; false when the next one does not fit (*needed and *mapped say how
 * far it got). */
static bool reserve(int threads, int *needed_out, int *mapped_out) {
  const bpt_cpu_blas *blas = bpt_cpu_blas_load();
  if (!blas->memory_alloc || !blas->get_num_threads) return true;
  if (threads < 1) threads = 1;
  /* One slot per BLAS thread, one per thread of ours calling GEMM at once (convolutions run a GEMM on each
   * thread of a parallel region), and one for a second host thread. */
  int needed = 2 * threads + 1;
  if (needed > MAX_SLOTS) needed = MAX_SLOTS;
  *needed_out = needed;
  pthread_mutex_lock(&reserve_lock);
  const int held_by_threads = blas->get_num_threads();
  if (mapped_slots < held_by_threads) mapped_slots = held_by_threads;
  if (mapped_slots >= needed) {
    pthread_mutex_unlock(&reserve_lock);
    return true;
  }
  /* Holding the slots at once makes OpenBLAS hand out free mapped ones first and map the rest: those beyond
   * what is known to be mapped get a trial mapping first. */
  void *held[MAX_SLOTS];
  const int to_hold = needed - held_by_threads, known_free = mapped_slots - held_by_threads;
  int count = 0;
  bool fits = true;
  for (; count < to_hold; count++) {
    if (count >= known_free && !(fits = slot_fits())) break;
    held[count] = blas->memory_alloc(0);
    if (!held[count]) {
      fits = false;
      break;
    }
  }
  for (int i = 0; i < count; i++) blas->memory_free(held[i]);
  if (held_by_threads + count > mapped_slots) mapped_slots = held_by_threads + count;
  *mapped_out = mapped_slots;
  pthread_mutex_unlock(&reserve_lock);
  return fits;
}

bool bpt_cpu_blas_reserve_quietly(int threads) {
  int needed = 0, mapped = 0;
  return reserve(threads, &needed, &mapped);
}

bpt_status bpt_cpu_blas_reserve(bpt_backend *backend, int threads) {
  if (threads < 1) threads = 1;
  int needed = 0, mapped = 0;
  if (reserve(threads, &needed, &mapped)) return BPT_OK;
  struct rlimit limit;
  char limit_text[64] = "no RLIMIT_AS";
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    snprintf(limit_text, sizeof limit_text, "RLIMIT_AS %llu MiB", (unsigned long long)(limit.rlim_cur >> 20));
  return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY,
                          "cannot reserve OpenBLAS's GEMM workspace for %d threads: it needs %d buffers of %zu MiB "
                          "(%zu MiB), %d are mapped and the next does not fit (%s, %llu MiB mapped); ask for "
                          "fewer threads or raise the limit",
                          threads, needed, OPENBLAS_BUFFER_BYTES >> 20, needed * (OPENBLAS_BUFFER_BYTES >> 20), mapped,
                          limit_text, mapped_mib());
}
