/**
 * @file context.h
 * @brief The context: which backend runs the work, how many threads, which seed, and the last error.
 */
#ifndef BPTRAIN_CONTEXT_H
#define BPTRAIN_CONTEXT_H

#include "common.h"

BPT_EXTERN_C_BEGIN

/** A library instance bound to one backend. Not thread-safe: use one context per thread. */
typedef struct bpt_context bpt_context;

/** Options for bpt_context_create(); get them from bpt_context_options_default(). */
typedef struct bpt_context_options {
  size_t size;         /**< sizeof(bpt_context_options), set by the default function */
  const char *backend; /**< "cpu" (default), "cuda" or "fpga-sim" */
  int num_threads;     /**< CPU threads for BLAS and element-wise loops, at most 1024; 0 means all cores,
                            or fewer where the thread or address-space limits leave less room */
  uint64_t seed;       /**< seeds initialisers and stochastic ops; equal seeds give equal runs */
  /** What bpt_graph_compile() does with a node the backend cannot run: 0 (default) fails with
   * BPT_ERR_UNSUPPORTED and a message naming node, op and backend; 1 runs that node on the CPU, copying its
   * inputs from the device and its outputs back (slower, for ops a backend lacks). */
  int cpu_fallback;
} bpt_context_options;

/** @return the default options: backend "cpu", all cores, seed 42, no CPU fallback. */
BPT_API bpt_context_options bpt_context_options_default(void);

/**
 * Creates a context. On failure *out is NULL and bpt_context_last_error(NULL) says why: an explicit
 * num_threads whose threads cannot start here (RLIMIT_NPROC, pids.max, OMP_STACKSIZE) or whose OpenBLAS
 * workspace does not fit in the address space is BPT_ERR_OUT_OF_MEMORY (docs/robustness.md).
 * @param options may be NULL for the defaults
 */
BPT_API bpt_status bpt_context_create(const bpt_context_options *options, bpt_context **out);

/**
 * Destroys a context. Graphs, tensors, data sets and communicators made from it keep it (and its backend)
 * alive: destroyed first, it is freed when the last of them is destroyed, so any order is safe. NULL is a
 * no-op.
 */
BPT_API void bpt_context_destroy(bpt_context *context);

/**
 * @return the message of the last failed call on @p context ("" if none). With NULL, the message of the
 * last failed call on this thread that had no context to report to (such as bpt_context_create()).
 */
BPT_API const char *bpt_context_last_error(const bpt_context *context);

/**
 * @return the status of the last failed call on @p context (::BPT_OK if none), the one that came with
 * bpt_context_last_error()'s message. With NULL, that of the last failed call on this thread that had no
 * context to report to: context creation, and any call given a NULL handle or a handle whose graph or
 * context is gone.
 */
BPT_API bpt_status bpt_context_last_status(const bpt_context *context);

/** @return the name of the backend the context runs on, or NULL for a NULL context. */
BPT_API const char *bpt_context_backend(const bpt_context *context);

/** @return the number of CPU threads the context uses (with num_threads 0, what fitted), or 0 for NULL. */
BPT_API int bpt_context_num_threads(const bpt_context *context);

/** @return how many backends this library knows: the built-in ones ("cpu", "fpga-sim") and those that live
 *  in loadable modules ("cuda"), whether or not their module can be loaded here (see bpt_backend_available()). */
BPT_API int bpt_backend_count(void);

/** @return the name of backend @p index (0 <= index < bpt_backend_count()), or NULL. */
BPT_API const char *bpt_backend_name(int index);

/**
 * Says whether backend @p index can be used on this machine: built-in backends always can; a module
 * backend can when its module (\c libbptrain-NAME.so.0, found as docs/guide.md "Backends" describes) and
 * the libraries it needs load and a device is present. Loads the module if it is not loaded yet.
 * @param reason when not NULL, receives why not (the file or library that could not be loaded, dlerror's
 *        text, or the missing device), or "" when available; truncated to @p reason_size bytes.
 * @return ::BPT_OK when available; ::BPT_ERR_UNSUPPORTED when the module or a library it needs cannot be
 *         loaded; ::BPT_ERR_DEVICE when it loads but finds no device; ::BPT_ERR_INVALID_ARGUMENT for an
 *         index out of range.
 */
BPT_API bpt_status bpt_backend_available(int index, char *reason, size_t reason_size);

BPT_EXTERN_C_END

#endif
