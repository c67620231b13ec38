/* Number formats and gradient codecs for the comm layer, on host memory. The reductions here are what the
 * MPI engine applies at each hop of its ring; the codecs are what data-parallel compression sends. */
#include "comm/compress.h"

#include <math.h>
#include <string.h>

uint16_t bpt_float_to_f16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to infinity */
  if (magnitude < 0x38800000u) {
    /* Below the smallest normal (2^-14): a multiple of 2^-24, rounded to nearest even by lrintf. */
    float absolute;
    memcpy(&absolute, &magnitude, sizeof absolute);
    return (uint16_t)(sign | (uint32_t)lrintf(absolute * 16777216.0f));
  }
  magnitude += 0xfffu + ((magnitude >> 13) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(sign | ((magnitude - 0x38000000u) >> 13));
}

float bpt_f16_to_float(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    float value = (float)mantissa * (1.0f / 16777216.0f);
    return sign ? -value : value;
  }
  if (exponent == 31)
    bits = sign | 0x7f800000u | (mantissa << 13);
  else
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t bpt_float_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* keep NaN quiet */
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

float bpt_bf16_to_float(uint16_t half) {
  uint32_t bits = (uint32_t)half << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

void bpt_comm_sum_into(bpt_dtype dtype, void *accumulator, const void *source, int64_t count) {
  switch (dtype) {
  case BPT_DTYPE_F32: {
    float *a = accumulator;
    const float *s = source;
    for (int64_t i = 0; i < count; i++)
      a[i] += s[i];
    break;
  }
  case BPT_DTYPE_F16: {
    uint16_t *a = accumulator;
    const uint16_t *s = source;
    for (int64_t i = 0; i < count; i++)
      a[i] = bpt_float_to_f16(bpt_f16_to_float(a[i]) + bpt_f16_to_float(s[i]));
    break;
  }
  case BPT_DTYPE_BF16: {
    uint16_t *a = accumulator;
    const uint16_t *s = source;
    for (int64_t i = 0; i < count; i++)
      a[i] = bpt_float_to_bf16(bpt_bf16_to_float(a[i]) + bpt_bf16_to_float(s[i]));
    break;
  }
  default: { /* int8 in u8 storage */
    int8_t *a = accumulator;
    const int8_t *s = source;
    for (int64_t i = 0; i < count; i++) {
      int sum = a[i] + s[i];
      a[i] = (int8_t)(sum > 127 ? 127 : sum < -128 ? -128 : sum);
    }
    break;
  }
  }
}

void bpt_comm_max_into(float *accumulator, const float *source, int64_t count) {
  for (int64_t i = 0; i < count; i++)
    if (source[i] > accumulator[i] || isnan(source[i])) accumulator[i] = source[i];
}

void bpt_comm_scale(bpt_dtype dtype, void *buffer, int64_t count, float scale) {
  if (scale == 1.0f) return;
  if (dtype == BPT_DTYPE_F32) {
    float *values = buffer;
    for (int64_t i = 0; i < count; i++)
      values[i] *= scale;
  } else if (dtype == BPT_DTYPE_F16) {
    uint16_t *values = buffer;
    for (int64_t i = 0; i < count; i++)
      values[i] = bpt_float_to_f16(bpt_f16_to_float(values[i]) * scale);
  } else if (dtype == BPT_DTYPE_BF16) {
    uint16_t *values = buffer;
    for (int64_t i = 0; i < count; i++)
      values[i] = bpt_float_to_bf16(bpt_bf16_to_float(values[i]) * scale);
  }
}

float bpt_comm_max_abs(const float *values, int64_t count) {
  float largest = 0.0f;
  for (int64_t i = 0; i < count; i++) {
    float magnitude = fabsf(values[i]);
    if (magnitude > largest || isnan(magnitude)) largest = magnitude;
  }
  return largest;
}

void bpt_comm_encode_f16(const float *values, int64_t count, float scale, uint16_t *encoded) {
  for (int64_t i = 0; i < count; i++)
    encoded[i] = bpt_float_to_f16(values[i] * scale);
}

void bpt_comm_decode_f16(const uint16_t *encoded, int64_t count, float scale, float *values) {
  float inverse = 1.0f / scale;
  for (int64_t i = 0; i < count; i++)
    values[i] = bpt_f16_to_float(encoded[i]) * inverse;
}

void bpt_comm_encode_int8(const float *values, int64_t count, float step, int limit, int8_t *encoded) {
  float inverse = step > 0.0f ? 1.0f / step : 0.0f;
  for (int64_t i = 0; i < count; i++) {
    float q = rintf(values[i] * inverse);
    /* NaN (a NaN value, inf times a zero inverse, zero times an infinite one) becomes 0, not (int)NaN. The
     * step all ranks agreed on is NaN whenever any value was not finite, so decoding gives NaN anyway. */
    encoded[i] = (int8_t)(q != q ? 0 : q > (float)limit ? limit : q < (float)-limit ? -limit : (int)q);
  }
}

void bpt_comm_decode_int8(const int8_t *encoded, int64_t count, float step, float *values) {
  for (int64_t i = 0; i < count; i++)
    values[i] = (float)encoded[i] * step;
}

/* The value at ascending position kth after sorting (Hoare quickselect; reorders a). */
static float select_position(float *a, int64_t count, int64_t kth) {
  int64_t low = 0, high = count - 1;
  while (low < high) {
    float x = a[low], y = a[low + (high - low) / 2], z = a[high];
    float pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int64_t i = low, j = high;
    while (i <= j) {
      while (a[i] < pivot)
        i++;
      while (a[j] > pivot)
        j--;
      if (i <= j) {
        float t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    if (kth <= j)
      high = j;
    else if (kth >= i)
      low = i;
    else
      return a[kth];
  }
  return a[kth];
}

/* NaN ranks as the largest magnitude: it must be sent, so that every rank's sum is NaN and the loss scaler
 * skips the step; compared as NaN it would never be selected and k entries would not be filled. */
static float selection_magnitude(float value) { return isnan(value) ? INFINITY : fabsf(value); }

void bpt_comm_select_top_k(const float *values, int64_t count, int64_t k, float *scratch,
                           bpt_comm_sparse_entry *selected) {
  if (k <= 0 || count <= 0) return;
  if (k > count) k = count;
  for (int64_t i = 0; i < count; i++)
    scratch[i] = selection_magnitude(values[i]);
  float threshold = select_position(scratch, count, count - k);
  int64_t above = 0;
  for (int64_t i = 0; i < count; i++)
    above += selection_magnitude(values[i]) > threshold;
  int64_t ties = k - above, filled = 0;
  for (int64_t i = 0; i < count && filled < k; i++) {
    float magnitude = selection_magnitude(values[i]);
    if (magnitude > threshold || (magnitude == threshold && ties-- > 0))
      selected[filled++] = (bpt_comm_sparse_entry){(int32_t)i, values[i]};
  }
}

void bpt_comm_scatter_add(const bpt_comm_sparse_entry *entries, int64_t count, float scale, float *values) {
  for (int64_t i = 0; i < count; i++)
    values[entries[i].index] += scale * entries[i].value;
}

void bpt_comm_decompress_local(const bpt_comm_codec *codec, const void *payload, int64_t count, float *values) {
  switch ((bpt_compression)codec->kind) {
  case BPT_COMPRESSION_F16: bpt_comm_decode_f16(payload, count, codec->f16_scale, values); break;
  case BPT_COMPRESSION_INT8: bpt_comm_decode_int8(payload, count, codec->int8_step, values); break;
  case BPT_COMPRESSION_TOPK:
    memset(values, 0, (size_t)count * sizeof *values);
    bpt_comm_scatter_add(payload, codec->top_k, 1.0f, values);
    break;
  case BPT_COMPRESSION_NONE: memcpy(values, payload, (size_t)count * sizeof *values); break;
  }
}

void bpt_comm_compress(const bpt_comm_codec *codec, float *work, int64_t count, float *residual, void *payload) {
  if (residual)
    for (int64_t i = 0; i < count; i++)
      work[i] += residual[i];
  switch ((bpt_compression)codec->kind) {
  case BPT_COMPRESSION_F16: bpt_comm_encode_f16(work, count, codec->f16_scale, payload); break;
  case BPT_COMPRESSION_INT8: bpt_comm_encode_int8(work, count, codec->int8_step, codec->int8_limit, payload); break;
  case BPT_COMPRESSION_TOPK: bpt_comm_select_top_k(work, count, codec->top_k, codec->top_k_scratch, payload); break;
  case BPT_COMPRESSION_NONE: memcpy(payload, work, (size_t)count * sizeof *work); break;
  }
  if (!residual) return;
  /* A non-finite gradient (or one past f16's range) makes this step's sum non-finite, and the loss scaler
   * drops the step. int8 then keeps the residual it had (the NaN step spoils every value of the bucket);
   * otherwise a non-finite residual value becomes 0, since carried on it would poison every later step. */
  if (codec->kind == BPT_COMPRESSION_INT8 && !isfinite(codec->int8_step)) return;
  if (codec->kind == BPT_COMPRESSION_TOPK) { /* exact: the sent entries leave nothing behind */
    for (int64_t i = 0; i < count; i++)
      residual[i] = isfinite(work[i]) ? work[i] : 0.0f;
    const bpt_comm_sparse_entry *entries = payload;
    for (int64_t i = 0; i < codec->top_k && i < count; i++)
      residual[entries[i].index] = 0.0f;
    return;
  }
  bpt_comm_decompress_local(codec, payload, count, residual);
  for (int64_t i = 0; i < count; i++) {
    const float left_out = work[i] - residual[i];
    residual[i] = isfinite(left_out) ? left_out : 0.0f;
  }
}
