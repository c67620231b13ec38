/* The capability query over any backend: an op runs on a backend when the backend registered kernels for it
 * and their own supports (if any) accepts the node's dtypes, shapes and attributes. */
#include "backends/backend.h"

bool bpt_backend_supports(const bpt_backend *backend, const bpt_kernel_node *node, const char **reason) {
  const char *unused;
  if (!reason) reason = &unused;
  const bpt_op_kernels *kernels = backend->vtable->kernels ? backend->vtable->kernels(backend, node->op) : NULL;
  if (!kernels) {
    *reason = "the backend has no kernels for this op";
    return false;
  }
  *reason = "";
  return !kernels->supports || kernels->supports(backend, node, reason);
}
