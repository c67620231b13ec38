/* Scalar conversions between f32 and the narrow floating-point formats (IEEE binary16, bfloat16, OCP FP8
 * E4M3 and E5M2). Pure C with no library calls, so the CPU kernels, the tests and a device port share one
 * definition of every rounding decision; it lives in src/base/ because core and backends both use it. One
 * generic encoder and decoder are driven by a small table that describes each format; see docs/precision.md. */
#ifndef BPT_BASE_NUMBER_FORMAT_H
#define BPT_BASE_NUMBER_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "bptrain/common.h"

/* Describes a binary floating-point format of 1 + exponent_bits + mantissa_bits bits. */
typedef struct bpt_number_format {
  int exponent_bits, mantissa_bits, bias;
  uint32_t max_finite_code; /* largest finite magnitude, without the sign bit */
  bool has_infinity;        /* IEEE-like: all-ones exponent holds inf (mantissa 0) and NaNs */
  uint32_t nan_code;        /* canonical quiet NaN magnitude */
  float subnormal_unit;     /* value of the smallest subnormal, 2^(1 - bias - mantissa_bits) */
} bpt_number_format;

/* The descriptor for a floating-point dtype other than f32, or NULL (f32, integers, unknown values). */
const bpt_number_format *bpt_number_format_of(bpt_dtype dtype);

/*
 * Encodes value in format. Rounding is to nearest, ties to even, unless stochastic: then the value is
 * rounded up with probability equal to its distance from the lower neighbour in units of the last place,
 * using the 32 bits of random_bits (values below 2^-8 of the smallest subnormal round to zero).
 * Overflow gives the largest finite value when saturate, otherwise infinity (or NaN for E4M3, which has
 * no infinity); infinite inputs follow the same rule. NaN stays NaN with its sign (and payload where the
 * format has room for it).
 */
uint32_t bpt_number_format_encode(const bpt_number_format *format, float value, bool saturate, bool stochastic,
                                  uint32_t random_bits);

/* Decodes a code of format to the f32 value it denotes; exact for every code. */
float bpt_number_format_decode(const bpt_number_format *format, uint32_t code);

/* Counter-based random bits for stochastic rounding: element index of a stream chosen by seed. The same
 * (seed, index) gives the same bits on every backend, so runs are reproducible and parallel loops need
 * no shared generator state. */
static inline uint32_t bpt_number_format_random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

#endif
