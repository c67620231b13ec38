/* The list of compiled-in backends. Adding a backend means one line here (plus its own folder). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"

const bpt_backend_vtable *bpt_cpu_backend_register(void);
const bpt_backend_vtable *bpt_fpga_backend_register(void);
#ifdef BPT_HAVE_CUDA
const bpt_backend_vtable *bpt_cuda_backend_register(void);
#endif

static const bpt_backend_register_fn backend_registrations[] = {
    bpt_cpu_backend_register,
#ifdef BPT_HAVE_CUDA
    bpt_cuda_backend_register,
#endif
    bpt_fpga_backend_register,
};

int bpt_backend_registry_count(void) {
  return (int)(sizeof backend_registrations / sizeof backend_registrations[0]);
}

const bpt_backend_vtable *bpt_backend_registry_get(int index) {
  if (index < 0 || index >= bpt_backend_registry_count()) return NULL;
  return backend_registrations[index]();
}

const bpt_backend_vtable *bpt_backend_registry_find(const char *name) {
  for (int i = 0; i < bpt_backend_registry_count(); i++) {
    const bpt_backend_vtable *table = bpt_backend_registry_get(i);
    if (table && name && strcmp(table->name, name) == 0) return table;
  }
  return NULL;
}

bpt_status bpt_backend_fail(bpt_backend *backend, bpt_status status, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(backend->error_message, sizeof backend->error_message, format, arguments);
  va_end(arguments);
  return status;
}
