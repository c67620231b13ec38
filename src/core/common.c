/* Version queries and status strings: the constant tables of the public face (dtype facts are src/base/dtype.c). */
#include "bptrain/common.h"

#define BPT_STRINGIFY_(x) #x
#define BPT_STRINGIFY(x) BPT_STRINGIFY_(x)

const char *bpt_version(void) {
  return BPT_STRINGIFY(BPT_VERSION_MAJOR) "." BPT_STRINGIFY(BPT_VERSION_MINOR) "." BPT_STRINGIFY(
      BPT_VERSION_PATCH);
}

uint32_t bpt_version_number(void) { return BPT_VERSION_NUMBER; }

int bpt_abi_version(void) { return BPT_ABI_VERSION; }

const char *bpt_status_string(bpt_status status) {
  switch (status) {
  case BPT_OK: return "ok";
  case BPT_ERR_INVALID_ARGUMENT: return "invalid argument";
  case BPT_ERR_OUT_OF_MEMORY: return "out of memory";
  case BPT_ERR_IO: return "input/output error";
  case BPT_ERR_FORMAT: return "malformed data";
  case BPT_ERR_SHAPE: return "shape mismatch";
  case BPT_ERR_DTYPE: return "unsupported data type";
  case BPT_ERR_UNSUPPORTED: return "not supported by this backend";
  case BPT_ERR_DEVICE: return "device error";
  case BPT_ERR_NUMERIC: return "non-finite value";
  case BPT_ERR_STATE: return "call out of order";
  case BPT_ERR_COMM: return "communication error";
  case BPT_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}
