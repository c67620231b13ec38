/* OpenBLAS's GEMM workspace under an address-space limit (issue 18, class 4).
 *
 * OpenBLAS 0.3.21 as Debian builds it (driver/others/memory.c, the allocator without USE_TLS, NO_WARMUP)
 * keeps a table of workspace slots of BUFFER_SIZE bytes each (128 MiB on x86-64, 32 MiB on arm64). Every
 * GEMM call takes a slot for its packing buffers (interface/gemm.c) and every BLAS thread holds one more
 * (blas_server_omp.c, adjust_thread_buffers, run by openblas_set_num_threads and whenever the OpenMP team
 * size changes). A slot is mapped on first use and kept; when neither mmap nor malloc can provide one,
 * blas_memory_alloc loops forever. So before OpenBLAS can need a new slot, this file maps the slots itself
 * through OpenBLAS's own allocator, each only after a trial mmap of the same size succeeded. */
#define _DEFAULT_SOURCE
#include "backends/cpu/blas_guard.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cblas.h>

/* Exported by libopenblas, not declared in cblas.h. */
void *blas_memory_alloc(int procpos);
void blas_memory_free(void *buffer);

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

static unsigned long long mapped_mib(void) {
  FILE *file = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (file) {
    if (fscanf(file, "%llu", &pages) != 1) pages = 0;
    fclose(file);
  }
  return pages * (unsigned long long)sysconf(_SC_PAGESIZE) >> 20;
}

bpt_status bpt_cpu_blas_reserve(bpt_backend *backend, int threads) {
  if (threads < 1) threads = 1;
  /* One slot per BLAS thread, one per thread of ours calling GEMM at once (convolutions run a GEMM on each
   * thread of a parallel region), and one for a second host thread. */
  int needed = 2 * threads + 1;
  if (needed > MAX_SLOTS) needed = MAX_SLOTS;
  pthread_mutex_lock(&reserve_lock);
  const int held_by_threads = openblas_get_num_threads();
  if (mapped_slots < held_by_threads) mapped_slots = held_by_threads;
  if (mapped_slots >= needed) {
    pthread_mutex_unlock(&reserve_lock);
    return BPT_OK;
  }
  /* Holding the slots at once makes OpenBLAS hand out free mapped ones first and map the rest: those beyond
   * what is known to be mapped get a trial mapping first. */
  void *held[MAX_SLOTS];
  const int to_hold = needed - held_by_threads, known_free = mapped_slots - held_by_threads;
  int count = 0;
  bool fits = true;
  for (; count < to_hold; count++) {
    if (count >= known_free && !(fits = slot_fits())) break;
    held[count] = blas_memory_alloc(0);
    if (!held[count]) {
      fits = false;
      break;
    }
  }
  for (int i = 0; i < count; i++) blas_memory_free(held[i]);
  if (held_by_threads + count > mapped_slots) mapped_slots = held_by_threads + count;
  const int mapped = mapped_slots;
  pthread_mutex_unlock(&reserve_lock);
  if (fits) return BPT_OK;
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
