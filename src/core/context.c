/* Context creation (backend selection by name, threads, seed) and the error reporting helpers. */
#include "core/context.h"
#include "core/profiler.h"
#include "core/thread_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors from calls that have no context to write to (context creation, a NULL handle). */
static _Thread_local char thread_last_error[BPT_ERROR_MESSAGE_SIZE];
static _Thread_local bpt_status thread_last_status;

bpt_status bpt_error(bpt_context *context, bpt_status status, const char *format, ...) {
  char *buffer = context ? context->last_error : thread_last_error;
  *(context ? &context->last_status : &thread_last_status) = status;
  if (context) context->error_count++;
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(buffer, BPT_ERROR_MESSAGE_SIZE, format, arguments);
  va_end(arguments);
  return status;
}

bpt_status bpt_backend_error(bpt_context *context, bpt_status status, const char *where) {
  return bpt_error(context, status, "%s: backend '%s': %s", where, context->backend.vtable->name,
                   context->backend.error_message[0] ? context->backend.error_message : bpt_status_string(status));
}

void *bpt_calloc(bpt_context *context, size_t count, size_t size, const char *what) {
  void *pointer = calloc(count ? count : 1, size ? size : 1);
  if (!pointer) bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "out of memory allocating %s (%zu x %zu bytes)", what,
                          count, size);
  return pointer;
}

bpt_status bpt_copy_options(bpt_context *context, void *ours, size_t our_size, const void *theirs,
                            size_t their_size, size_t minimum_size, const char *what) {
  if (their_size < minimum_size || their_size > (1u << 16))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: size field is %zu; initialise options with the matching _default() function", what,
                     their_size);
  memcpy(ours, theirs, their_size < our_size ? their_size : our_size);
  *(size_t *)ours = our_size;
  return BPT_OK;
}

bpt_status bpt_copy_output(bpt_context *context, void *theirs, const void *ours, size_t our_size, size_t minimum_size,
                           const char *what) {
  size_t their_size = *(const size_t *)theirs;
  if (their_size < minimum_size || their_size > (1u << 16))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: size field is %zu; set it to the struct's sizeof", what,
                     their_size);
  size_t size = their_size < our_size ? their_size : our_size;
  memcpy(theirs, ours, size);
  *(size_t *)theirs = size;
  return BPT_OK;
}

bpt_backend *bpt_context_backend_instance(bpt_context *context) { return context ? &context->backend : NULL; }

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

static void free_context(bpt_context *context) {
  bpt_profiler_destroy(context);
  if (context->backend.vtable && context->backend.vtable->destroy) context->backend.vtable->destroy(&context->backend);
  free(context);
}

void bpt_context_retain(bpt_context *context) {
  if (context) context->users++;
}

void bpt_context_release(bpt_context *context) {
  if (context && --context->users == 0 && context->destroyed) free_context(context);
}

/* Graphs, tensors, data sets and communicators hold the context (and its backend) until they are gone, so
 * destroying it first only marks it; the last of them frees it. */
void bpt_context_destroy(bpt_context *context) {
  if (!context || context->destroyed) return;
  context->destroyed = true;
  if (context->users == 0) free_context(context);
}

const char *bpt_context_last_error(const bpt_context *context) {
  return context ? context->last_error : thread_last_error;
}

bpt_status bpt_context_last_status(const bpt_context *context) {
  return context ? context->last_status : thread_last_status;
}

const char *bpt_context_backend(const bpt_context *context) { return context ? context->backend_name : NULL; }

int bpt_context_num_threads(const bpt_context *context) { return context ? context->num_threads : 0; }

int bpt_backend_count(void) { return bpt_backend_registry_count(); }

const char *bpt_backend_name(int index) { return bpt_backend_registry_name(index); }
