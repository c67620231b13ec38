/* Facts about each element type (its size in bytes and its name), which every room uses. */
#include "bptrain/common.h"

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
