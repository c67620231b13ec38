/* Version queries, status strings and dtype facts: the constant tables of the public face. */
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

size_t bpt_dtype_size(bpt_dtype dtype) {
  switch (dtype) {
  case BPT_DTYPE_F32: return 4;
  case BPT_DTYPE_F16: return 2;
  case BPT_DTYPE_BF16: return 2;
  case BPT_DTYPE_FP8_E4M3: return 1;
  case BPT_DTYPE_FP8_E5M2: return 1;
  case BPT_DTYPE_I32: return 4;
  case BPT_DTYPE_U8: return 1;
  }
  return 0;
}

const char *bpt_dtype_name(bpt_dtype dtype) {
  switch (dtype) {
  case BPT_DTYPE_F32: return "f32";
  case BPT_DTYPE_F16: return "f16";
  case BPT_DTYPE_BF16: return "bf16";
  case BPT_DTYPE_FP8_E4M3: return "fp8_e4m3";
  case BPT_DTYPE_FP8_E5M2: return "fp8_e5m2";
  case BPT_DTYPE_I32: return "i32";
  case BPT_DTYPE_U8: return "u8";
  }
  return "unknown";
}
