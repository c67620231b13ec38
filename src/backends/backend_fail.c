/* The one way a backend reports a failure: a message in its own buffer, which the core then prefixes with
 * where it happened. Compiled into the core library and into the CUDA module alike (cmake/modules.cmake). */
#include <stdarg.h>
#include <stdio.h>

#include "backends/backend.h"

bpt_status bpt_backend_fail(bpt_backend *backend, bpt_status status, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(backend->error_message, sizeof backend->error_message, format, arguments);
  va_end(arguments);
  return status;
}
