/* Compiled into every loadable module: the core helpers that module sources call (bpt_error, bpt_calloc,
 * bpt_comm_fail, ...), defined here as calls through the services table the core hands over at load time.
 * So a module needs no symbol of the core, and one module file serves libbptrain.so and libbptrain.a
 * alike. Only the entry point is exported; everything here is hidden. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "modules/module.h"
#include "modules/module_services.h"

static const bpt_module_services *services;

bool bpt_module_accept_services(const bpt_module_services *offered) {
  if (!offered || offered->version != BPT_MODULE_INTERFACE_VERSION || offered->size < sizeof(bpt_module_services) ||
      !offered->library_version || strcmp(offered->library_version, BPT_MODULE_LIBRARY_VERSION) != 0)
    return false;
  services = offered;
  return true;
}

bpt_status bpt_error(bpt_context *context, bpt_status status, const char *format, ...) {
  char message[BPT_ERROR_MESSAGE_SIZE];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  return services->error(context, status, message);
}

bpt_status bpt_comm_fail(bpt_comm *comm, bpt_status status, const char *format, ...) {
  char message[BPT_ERROR_MESSAGE_SIZE];
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  return services->comm_fail(comm, status, message);
}

void *bpt_calloc(bpt_context *context, size_t count, size_t size, const char *what) {
  return services->calloc(context, count, size, what);
}

double bpt_comm_seconds(void) { return services->comm_seconds(); }

void bpt_comm_sum_into(bpt_dtype dtype, void *accumulator, const void *source, int64_t count) {
  services->comm_sum_into(dtype, accumulator, source, count);
}

void bpt_comm_max_into(float *accumulator, const float *source, int64_t count) {
  services->comm_max_into(accumulator, source, count);
}

void bpt_comm_scale(bpt_dtype dtype, void *buffer, int64_t count, float scale) {
  services->comm_scale(dtype, buffer, count, scale);
}

size_t bpt_dtype_size(bpt_dtype dtype) { return services->dtype_size(dtype); }

const char *bpt_dtype_name(bpt_dtype dtype) { return services->dtype_name(dtype); }

uint16_t bpt_float_to_f16(float value) { return services->float_to_f16(value); }

uint16_t bpt_float_to_bf16(float value) { return services->float_to_bf16(value); }

/* Only the MPI module calls it (NCCL's bootstrap over MPI); the NCCL module defines its own. */
#ifndef BPT_MODULE_DEFINES_NCCL_UNIQUE_ID
bpt_status bpt_comm_nccl_unique_id(bpt_context *context, bpt_comm_unique_id *out) {
  return services->comm_nccl_unique_id(context, out);
}
#endif
