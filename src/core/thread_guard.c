/* Checks that OpenMP's threads can start before OpenMP tries (core/thread_guard.h): the check starts the
 * same number of threads with the same stack size, holds them all at once, then releases them. */
#define _DEFAULT_SOURCE
#include "core/thread_guard.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/openmp_limits.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* The team size this host thread's OpenMP runtime was set to and has run, and the largest checked. */
static _Thread_local int entered_threads;
static _Thread_local int checked_threads;

/* libgomp's reading of a stack size (env.c, parse_stacksize): digits, optional spaces, then an optional unit
 * B, K, M or G (any case; none means K); anything else, or a value that overflows, is ignored. */
static bool parse_stack_size(const char *text, size_t *bytes) {
  if (!text) return false;
  while (isspace((unsigned char)*text)) text++;
  if (!isdigit((unsigned char)*text)) return false;
  errno = 0;
  char *end;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno) return false;
  while (isspace((unsigned char)*end)) end++;
  unsigned shift = 10;
  if (*end) {
    switch (tolower((unsigned char)*end)) {
      case 'b': shift = 0; break;
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      default: return false;
    }
    end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
  }
  if (((value << shift) >> shift) != value || (value << shift) > SIZE_MAX) return false;
  *bytes = (size_t)(value << shift);
  return true;
}

/* The stack size OpenMP gives its threads, 0 for the pthread default, and the variable that chose it. libgomp
 * takes OMP_STACKSIZE, else GOMP_STACKSIZE; clang's libomp also reads KMP_STACKSIZE: the largest is used, so
 * the check is never easier than what either runtime will do. */
static size_t openmp_stack_size(const char **variable) {
  static const char *const names[] = {"OMP_STACKSIZE", "GOMP_STACKSIZE", "KMP_STACKSIZE"};
  size_t largest = 0;
  *variable = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    size_t bytes;
    if (!parse_stack_size(getenv(names[i]), &bytes) || bytes <= largest) continue;
    /* libgomp skips GOMP_STACKSIZE when OMP_STACKSIZE is valid; counting it anyway errs on the safe side. */
    largest = bytes;
    *variable = names[i];
  }
  return largest;
}

typedef struct probe {
  pthread_mutex_t lock;
  pthread_cond_t released_changed;
  bool released;
} probe;

static void *probe_wait(void *argument) {
  probe *p = argument;
  pthread_mutex_lock(&p->lock);
  while (!p->released) pthread_cond_wait(&p->released_changed, &p->lock);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Starts up to count threads, all alive at once, and joins them; returns how many started and, when fewer,
 * the error of the first that did not. */
static int start_threads(int count, size_t stack_size, int *error) {
  *error = 0;
  pthread_t *threads = calloc((size_t)count, sizeof *threads);
  if (!threads) {
    *error = ENOMEM;
    return 0;
  }
  pthread_attr_t attributes;
  if (pthread_attr_init(&attributes) != 0) {
    free(threads);
    *error = ENOMEM;
    return 0;
  }
  /* libgomp keeps the default attributes when the size is refused (below PTHREAD_STACK_MIN): so does this. */
  if (stack_size) (void)pthread_attr_setstacksize(&attributes, stack_size);
  probe p = {.released = false};
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.released_changed, NULL);
  int started = 0;
  for (; started < count; started++) {
    int status = pthread_create(&threads[started], &attributes, probe_wait, &p);
    if (status != 0) {
      *error = status;
      break;
    }
  }
  pthread_mutex_lock(&p.lock);
  p.released = true;
  pthread_cond_broadcast(&p.released_changed);
  pthread_mutex_unlock(&p.lock);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  pthread_cond_destroy(&p.released_changed);
  pthread_mutex_destroy(&p.lock);
  pthread_attr_destroy(&attributes);
  free(threads);
  return started;
}

/* How many of `wanted` team threads can run: a team of n needs n - 1 workers, and one more thread is kept
 * spare because libgomp shrinks its pool after a smaller team and starts threads again for a larger one,
 * while the exiting ones may still count against the limit. */
static int threads_that_fit(int wanted, size_t stack_size, int *error) {
  if (wanted <= 1) {
    *error = 0;
    return wanted;
  }
  int started = start_threads(wanted, stack_size, error);
  return started >= wanted ? wanted : (started > 1 ? started : 1);
}

/* "RLIMIT_NPROC 40" or "RLIMIT_AS 512 MiB" when those limits are set, for the failure message. */
static void describe_limits(char *text, size_t size) {
  struct rlimit limit;
  size_t used = 0;
  text[0] = '\0';
  if (getrlimit(RLIMIT_NPROC, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    used += (size_t)snprintf(text + used, size - used, "; RLIMIT_NPROC is %llu", (unsigned long long)limit.rlim_cur);
  if (used < size && getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    snprintf(text + used, size - used, "; RLIMIT_AS is %llu MiB", (unsigned long long)(limit.rlim_cur >> 20));
}

static bpt_status refuse(bpt_context *context, const char *where, int wanted, int fits, int error, size_t stack_size,
                         const char *variable) {
  char stack[96], limits[96];
  if (variable)
    snprintf(stack, sizeof stack, "a stack of %llu MiB from %s", (unsigned long long)(stack_size >> 20), variable);
  else
    snprintf(stack, sizeof stack, "the default stack size");
  describe_limits(limits, sizeof limits);
  return bpt_error(context, BPT_ERR_OUT_OF_MEMORY,
                   "%s: cannot start %d threads for OpenMP (with one spare): only %d fit, the next failed with '%s' "
                   "(%s; the thread or process limit, RLIMIT_NPROC or a container's pids.max, or memory for stacks "
                   "is exhausted%s); ask for fewer threads (num_threads %d fits) or raise the limit",
                   where, wanted, fits, strerror(error), stack, limits, fits);
}

/* Sets this thread's team size and lets OpenMP start its pool now, while the threads are known to fit:
 * memory taken after this (compile, data) cannot leave the first forward pass without thread stacks. */
static void start_pool(int threads) {
#ifdef _OPENMP
  bpt_openmp_fix_team();
  omp_set_num_threads(threads);
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
    }
  }
#endif
  entered_threads = threads;
  if (threads > checked_threads) checked_threads = threads;
}

bpt_status bpt_thread_guard_plan(int requested, int *threads) {
  /* Far more threads than any machine runs well: refused before the check starts them all. */
  if (requested > BPT_THREAD_GUARD_MAX)
    return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_context_create: num_threads is %d, at most %d are supported",
                     requested, BPT_THREAD_GUARD_MAX);
  int wanted = requested;
#ifdef _OPENMP
  if (wanted == 0) wanted = omp_get_num_procs();
#endif
  if (wanted < 1) wanted = 1;
  if (wanted > BPT_THREAD_GUARD_MAX) wanted = BPT_THREAD_GUARD_MAX;
  /* A team larger than OpenMP will give would leave OpenBLAS waiting for threads that never come. */
  wanted = bpt_openmp_usable_threads(wanted);
  if (requested > wanted) requested = wanted;
  const char *variable;
  const size_t stack_size = openmp_stack_size(&variable);
  int error;
  const int fits = threads_that_fit(wanted, stack_size, &error);
  if (fits < wanted && requested > 0)
    return refuse(NULL, "bpt_context_create", wanted, fits, error, stack_size, variable);
  *threads = fits < wanted ? fits : requested;
  start_pool(fits);
  return BPT_OK;
}

bpt_status bpt_thread_guard_enter(bpt_context *context, const char *where) {
  const int threads = context->num_threads > 0 ? context->num_threads : 1;
  /* omp_get_dynamic reads one variable: a caller that turned dynamic adjustment back on is caught too. */
#ifdef _OPENMP
  if (__builtin_expect(entered_threads == threads && !omp_get_dynamic(), 1)) return BPT_OK;
#else
  if (__builtin_expect(entered_threads == threads, 1)) return BPT_OK;
#endif
  if (threads > checked_threads) {
    const char *variable;
    const size_t stack_size = openmp_stack_size(&variable);
    int error;
    const int fits = threads_that_fit(threads, stack_size, &error);
    if (fits < threads) return refuse(context, where, threads, fits, error, stack_size, variable);
  }
  start_pool(threads);
  return BPT_OK;
}
