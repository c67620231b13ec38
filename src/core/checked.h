/* Overflow-checked size arithmetic for every size derived from user input (shape rules, the memory plan,
 * parameter offsets, tensor and batch sizes), and the limits the kernels rely on without checking them.
 * A size that does not fit ends in an error status at graph building or compile time, never in a wrapped
 * count that a kernel then walks past (robustness, issue 18 class 1). */
#ifndef BPT_CORE_CHECKED_H
#define BPT_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One dimension, size attribute (kernel, stride, padding, dilation) or derived extent: kernels and BLAS take
 * them as int (cblas_sgemm's blasint, cuDNN's descriptors), and max pooling stores plane indices as int32. */
#define BPT_MAX_DIM INT64_C(2147483647)
/* Elements of one node for the compiled batch (and of one host tensor): keeps every byte count below 2^43. */
#define BPT_MAX_ELEMENTS (INT64_C(1) << 40)
/* Bytes of one compiled graph's arena or parameter block (64 TiB: far beyond any device, far below SIZE_MAX). */
#define BPT_MAX_BYTES ((size_t)1 << 46)

/* *out = a * b; false (and *out untouched) when the product overflows int64_t. */
static inline bool bpt_checked_mul(int64_t a, int64_t b, int64_t *out) {
  int64_t result;
  if (__builtin_mul_overflow(a, b, &result)) return false;
  *out = result;
  return true;
}

/* *out = a + b; false when the sum overflows int64_t. */
static inline bool bpt_checked_add(int64_t a, int64_t b, int64_t *out) {
  int64_t result;
  if (__builtin_add_overflow(a, b, &result)) return false;
  *out = result;
  return true;
}

/* value + 1, or INT64_MAX when value is already there: the counters a checkpoint restores (steps, forward
 * passes, loss-scaler counts) may hold INT64_MAX, and counting on from there must not wrap. */
static inline int64_t bpt_saturating_increment(int64_t value) { return value < INT64_MAX ? value + 1 : value; }

/* *out = a * b in size_t; false when it overflows or exceeds BPT_MAX_BYTES. */
static inline bool bpt_checked_mul_bytes(size_t a, size_t b, size_t *out) {
  size_t result;
  if (__builtin_mul_overflow(a, b, &result) || result > BPT_MAX_BYTES) return false;
  *out = result;
  return true;
}

/* *out = a + b in size_t; false when it overflows or exceeds BPT_MAX_BYTES. */
static inline bool bpt_checked_add_bytes(size_t a, size_t b, size_t *out) {
  size_t result;
  if (__builtin_add_overflow(a, b, &result) || result > BPT_MAX_BYTES) return false;
  *out = result;
  return true;
}

/* *out = the product of dims[0..count); false when a dim is < 1 or the product exceeds limit. */
static inline bool bpt_checked_product(const int64_t *dims, int count, int64_t limit, int64_t *out) {
  int64_t product = 1;
  for (int i = 0; i < count; i++)
    if (dims[i] < 1 || !bpt_checked_mul(product, dims[i], &product) || product > limit) return false;
  *out = product;
  return true;
}

#endif
