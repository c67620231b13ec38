/* Context creation (backend selection by name, threads, seed) and destruction. The reporting helpers and
 * retain/release that other rooms call on a context live in src/base/ (report.c, context_hold.c). */
#include "core/context.h"
#include "core/profiler.h"
#include "core/thread_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bpt_status bpt_backend_error(bpt_context *context, bpt_status status, const char *where) {
  return bpt_error(context, status, "%s: backend '%s': %s", where, context->backend.vtable->name,
                   context->backend.error_message[0] ? context->backend.error_message : bpt_status_string(status));
}

static void free_context(bpt_context *context) {
  bpt_profiler_destroy(context);
  if (context->backend.vtable && context->backend.vtable->destroy) context->backend.vtable->destroy(&context->backend);
  free(context);
}

bpt_context_options bpt_context_options_default(void) {
  bpt_context_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.backend = "cpu";
  options.num_threads = 0;
  options.seed = 42;
  return options;
}

bpt_status bpt_context_create(const bpt_context_options *user_options, bpt_context **out) {
  if (!out) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_context_create: out is NULL");
  *out = NULL;
  bpt_context_options options = bpt_context_options_default();
  if (user_options)
    BPT_CHECK(bpt_copy_options(NULL, &options, sizeof options, user_options, user_options->size,
                               offsetof(bpt_context_options, seed) + sizeof options.seed, "bpt_context_create"));
  const char *name = options.backend ? options.backend : "cpu";
  if (options.num_threads < 0)
    return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "bpt_context_create: num_threads is %d, must be >= 0",
                     options.num_threads);
  const bpt_backend_vtable *table = NULL;
  char why[BPT_ERROR_MESSAGE_SIZE];
  bpt_status found = bpt_backend_registry_load(name, &table, why, sizeof why);
  if (found != BPT_OK) return bpt_error(NULL, found, "bpt_context_create: %s", why);
  if (table->version != BPT_BACKEND_VTABLE_VERSION || table->size > sizeof(bpt_backend_vtable))
    return bpt_error(NULL, BPT_ERR_INTERNAL, "bpt_context_create: backend '%s' has vtable version %u, size %u",
                     name, table->version, table->size);
  int threads;
  BPT_CHECK(bpt_thread_guard_plan(options.num_threads, &threads));
  bpt_context *context = calloc(1, sizeof *context);
  if (!context) return bpt_error(NULL, BPT_ERR_OUT_OF_MEMORY, "bpt_context_create: out of memory");
  context->head.backend = &context->backend;
  context->head.free_context = free_context;
  context->num_threads = options.num_threads;
  context->seed = options.seed;
  context->cpu_fallback = options.cpu_fallback != 0;
  snprintf(context->backend_name, sizeof context->backend_name, "%s", table->name);
  context->backend.vtable = table;
  bpt_backend_options backend_options = {.num_threads = threads};
  bpt_status status = table->create(&context->backend, &backend_options);
  if (status != BPT_OK) {
    bpt_error(NULL, status, "bpt_context_create: backend '%s': %s", name, context->backend.error_message);
    free(context);
    return status;
  }
  context->num_threads = context->backend.num_threads;
  *out = context;
  return BPT_OK;
}

/* Graphs, tensors, data sets and communicators hold the context (and its backend) until they are gone, so
 * destroying it first only marks it; the last of them frees it. */
void bpt_context_destroy(bpt_context *context) {
  if (!context || context->head.destroyed) return;
  context->head.destroyed = true;
  if (context->head.users == 0) free_context(context);
}

const char *bpt_context_backend(const bpt_context *context) { return context ? context->backend_name : NULL; }

int bpt_context_num_threads(const bpt_context *context) { return context ? context->num_threads : 0; }

int bpt_backend_count(void) { return bpt_backend_registry_count(); }

const char *bpt_backend_name(int index) { return bpt_backend_registry_name(index); }
