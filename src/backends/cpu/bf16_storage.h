/* Reading and writing activations stored as bf16 (the bf16 policy's storage dtype, issue 24.5): kernels that
 * register with BPT_REGISTER_KERNELS_16BIT load each element to f32, compute in f32 and store it rounded to
 * nearest even, exactly as bpt_cpu_round_to_dtype rounds an f32 buffer in place (subnormals kept), so a bf16-
 * stored graph holds the values the rounding path would. */
#ifndef BPT_CPU_BF16_STORAGE_H
#define BPT_CPU_BF16_STORAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/backend.h"

static inline float bpt_bf16_widen(uint16_t half) {
  const uint32_t bits = (uint32_t)half << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* Round to nearest even on the upper 16 bits (a carry into the exponent overflows to inf); NaN stays NaN,
 * made quiet. */
static inline uint16_t bpt_bf16_narrow(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x0040u : rounded);
}

/* Element i of a buffer stored as f32 or (bf16 true) as bf16. */
static inline float bpt_storage_load(const void *values, bool bf16, int64_t i) {
  return bf16 ? bpt_bf16_widen(((const uint16_t *)values)[i]) : ((const float *)values)[i];
}

static inline void bpt_storage_store(void *values, bool bf16, int64_t i, float value) {
  if (bf16)
    ((uint16_t *)values)[i] = bpt_bf16_narrow(value);
  else
    ((float *)values)[i] = value;
}

static inline bool bpt_tensor_is_bf16(const bpt_kernel_tensor *tensor) { return tensor->dtype == BPT_DTYPE_BF16; }

/* Rows staged through f32: kernels written for f32 rows (the vectorised loops of the row-wise ops) run on a
 * bf16-stored row widened into a small staging buffer and write their results into another, which is rounded
 * back; f32 rows are used where they lie. The staging is small (in L1 for a chunk, in cache for a row), so the
 * 16-bit path adds no pass over the tensors in memory, where widening whole tensors around the kernel
 * (kernel_call.c) costs two. Element-wise kernels stage
 * chunks of at most BPT_STORAGE_STAGE values, on the stack. */
#define BPT_STORAGE_STAGE 1024

/* n bf16 values widened into f32 (a signalling NaN made quiet), and n f32 values rounded to bf16 as
 * bpt_bf16_narrow does: vector loops for the CPU's widest level (bf16_rows.c). */
void bpt_cpu_bf16_widen_row(const uint16_t *source, int64_t n, float *destination);
void bpt_cpu_bf16_narrow_row(const float *source, int64_t n, uint16_t *destination);

/* Copies between storages (slice, concat, permute rows): n values from source (element source_at, bf16 when
 * source16) to destination (destination_at, destination16), bytes copied where the two agree, else widened or
 * rounded. bpt_cpu_storage_add: destination += source, summed in f32 and rounded once where destination is bf16
 * (staged in chunks). bpt_cpu_storage_zero: n zeros (+0 in either storage). */
void bpt_cpu_storage_copy(void *destination, bool destination16, int64_t destination_at, const void *source,
                          bool source16, int64_t source_at, int64_t n);
void bpt_cpu_storage_add(void *destination, bool destination16, int64_t destination_at, const void *source,
                         bool source16, int64_t source_at, int64_t n);
void bpt_cpu_storage_zero(void *destination, bool destination16, int64_t destination_at, int64_t n);

/* The n values at element `at` of values (bf16 when bf16 is set) as f32: in place, or widened into staging. */
static inline const float *bpt_storage_read_row(const void *values, bool bf16, int64_t at, int64_t n,
                                                float *staging) {
  if (!bf16) return (const float *)values + at;
  bpt_cpu_bf16_widen_row((const uint16_t *)values + at, n, staging);
  return staging;
}

/* Where a kernel writes n f32 results for element `at` of values: in place, or staging (bpt_storage_commit_row
 * rounds it back), holding the stored values first when the kernel adds into them (accumulate). */
static inline float *bpt_storage_write_row(void *values, bool bf16, int64_t at, int64_t n, bool accumulate,
                                           float *staging) {
  if (!bf16) return (float *)values + at;
  if (accumulate) bpt_storage_read_row(values, true, at, n, staging);
  return staging;
}

static inline void bpt_storage_commit_row(void *values, bool bf16, int64_t at, int64_t n, const float *staging) {
  if (bf16) bpt_cpu_bf16_narrow_row(staging, n, (uint16_t *)values + at);
}

#endif
