/* Host-side number formats and gradient compression for the comm layer: 16-bit conversions, the
 * reductions the MPI engine applies between hops, and the int8 and top-k codecs with their decoders.
 * Pure C on host memory, so the CMocka tests check them without MPI. */
#ifndef BPT_COMM_COMPRESS_H
#define BPT_COMM_COMPRESS_H

#include <stdint.h>

#include "bptrain/comm.h"

/* Round-to-nearest-even conversions; NaN stays NaN, overflow goes to infinity (f16). */
uint16_t bpt_float_to_f16(float value);
float bpt_f16_to_float(uint16_t bits);
uint16_t bpt_float_to_bf16(float value);
float bpt_bf16_to_float(uint16_t bits);

/* accumulator[i] += source[i] for f32, f16, bf16 (added in f32, rounded once) and int8 (saturating, the
 * dtype BPT_DTYPE_U8 carrying int8 bits). */
void bpt_comm_sum_into(bpt_dtype dtype, void *accumulator, const void *source, int64_t count);
/* accumulator[i] = max(accumulator[i], source[i]) for f32. */
void bpt_comm_max_into(float *accumulator, const float *source, int64_t count);
/* buffer[i] *= scale for f32, f16 and bf16. */
void bpt_comm_scale(bpt_dtype dtype, void *buffer, int64_t count, float scale);
/* @return max |values[i]| (0 for count 0; NaN propagates). */
float bpt_comm_max_abs(const float *values, int64_t count);

/* f16 codec: encoded = f16(values * scale); decoded = f32(encoded) / scale. */
void bpt_comm_encode_f16(const float *values, int64_t count, float scale, uint16_t *encoded);
void bpt_comm_decode_f16(const uint16_t *encoded, int64_t count, float scale, float *values);

/* int8 codec with step `step`: q = clamp(round(v / step), -limit, limit). decoded = q * step. */
void bpt_comm_encode_int8(const float *values, int64_t count, float step, int limit, int8_t *encoded);
void bpt_comm_decode_int8(const int8_t *encoded, int64_t count, float step, float *values);

/* Top-k: the k entries of values with the largest magnitude (ties to the lower index), written as index and
 * value pairs in increasing index order. scratch holds count floats. */
typedef struct bpt_comm_sparse_entry {
  int32_t index;
  float value;
} bpt_comm_sparse_entry;
void bpt_comm_select_top_k(const float *values, int64_t count, int64_t k, float *scratch,
                           bpt_comm_sparse_entry *selected);
/* values[entry.index] += scale * entry.value for each entry. */
void bpt_comm_scatter_add(const bpt_comm_sparse_entry *entries, int64_t count, float scale, float *values);

/* One bucket's compression: what the data-parallel layer sends for it. */
typedef struct bpt_comm_codec {
  int kind;             /* bpt_compression */
  float f16_scale;      /* f16: values are multiplied by it before the cast (the average, against overflow) */
  float int8_step;      /* int8: value of one step, the same on every rank */
  int int8_limit;       /* int8: largest |q|, so that the sum over ranks fits in int8 */
  int64_t top_k;        /* top-k: entries sent */
  float *top_k_scratch; /* top-k: count floats */
} bpt_comm_codec;

/* Adds residual (when non-NULL) to work, encodes work into payload, and sets residual to what the payload
 * leaves out: afterwards decode(payload) + residual == work (error feedback). */
void bpt_comm_compress(const bpt_comm_codec *codec, float *work, int64_t count, float *residual, void *payload);
/* Decodes this rank's own payload into values (count floats): the inverse used for error feedback. */
void bpt_comm_decompress_local(const bpt_comm_codec *codec, const void *payload, int64_t count, float *values);

#endif
