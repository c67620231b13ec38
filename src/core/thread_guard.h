/* Keeps OpenMP from exiting the host process (issue 18, class 3). libgomp calls exit(1) and libomp aborts
 * when they cannot create a team's threads (RLIMIT_NPROC, a container's pids.max, a huge OMP_STACKSIZE,
 * no memory left for stacks). Before a host thread first runs parallel regions with a team size, these
 * functions start that many threads themselves, with the stack size OpenMP will use, and let OpenMP build
 * its pool only when they could. */
#ifndef BPT_CORE_THREAD_GUARD_H
#define BPT_CORE_THREAD_GUARD_H

#include "core/context.h"

/* The largest thread count a context accepts. */
#define BPT_THREAD_GUARD_MAX 1024

/*
 * Decides a new context's thread count on the calling thread. requested 0 means one per processor, cut
 * down to what can start here (at least 1, the calling thread alone); an explicit count that cannot start
 * fails with BPT_ERR_OUT_OF_MEMORY and a message naming the limit. *threads is the count to hand the backend:
 * the request, or the smaller count that fits. A request above BPT_THREAD_GUARD_MAX is BPT_ERR_INVALID_ARGUMENT. The OpenMP pool of the calling thread is started before
 * returning, while the threads are known to fit.
 */
bpt_status bpt_thread_guard_plan(int requested, int *threads);

/*
 * Called by entry points that run parallel regions (forward, backward, the optimiser step, batching) with
 * the context's thread count: on a host thread that has not yet run that many, checks they can start, sets
 * the thread's OpenMP team size to the context's and starts the pool; else returns BPT_ERR_OUT_OF_MEMORY
 * with a message naming `where`. A thread already prepared pays one thread-local comparison.
 */
bpt_status bpt_thread_guard_enter(bpt_context *context, const char *where);

#endif
