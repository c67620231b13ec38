// Number formats for mixed precision: casts between f32, f16, bf16 and the two FP8 formats with a scale
// (round to nearest even; FP8 saturates to its largest finite value, as the OCP FP8 recipes do), and the
// loss scaler's fused unscale + finite check, one pass over the gradients with no host synchronisation:
// the flag stays on the device until the caller reads it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backends/cuda/cuda.h"

#define GRID_STRIDE(i, count) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__device__ float load_as_float(bpt_dtype dtype, const void *source, int64_t i) {
  switch (dtype) {
  case BPT_DTYPE_F16: return __half2float(((const __half *)source)[i]);
  case BPT_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)source)[i]);
  case BPT_DTYPE_FP8_E4M3:
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(((const __nv_fp8_storage_t *)source)[i], __NV_E4M3)));
  case BPT_DTYPE_FP8_E5M2:
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(((const __nv_fp8_storage_t *)source)[i], __NV_E5M2)));
  default: return ((const float *)source)[i];
  }
}

__device__ void store_from_float(bpt_dtype dtype, void *destination, int64_t i, float value) {
  switch (dtype) {
  case BPT_DTYPE_F16: ((__half *)destination)[i] = __float2half_rn(value); break;
  case BPT_DTYPE_BF16: ((__nv_bfloat16 *)destination)[i] = __float2bfloat16_rn(value); break;
  case BPT_DTYPE_FP8_E4M3:
    ((__nv_fp8_storage_t *)destination)[i] = __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3);
    break;
  case BPT_DTYPE_FP8_E5M2:
    ((__nv_fp8_storage_t *)destination)[i] = __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E5M2);
    break;
  default: ((float *)destination)[i] = value; break;
  }
}

__global__ void cast_kernel(int64_t count, bpt_dtype source_dtype, const void *source, bpt_dtype destination_dtype,
                            void *destination, float scale) {
  GRID_STRIDE(i, count) store_from_float(destination_dtype, destination, i, load_as_float(source_dtype, source, i) * scale);
}

__global__ void unscale_check_finite_kernel(int64_t count, float *gradients, float inverse_scale,
                                            int32_t *found_nonfinite) {
  bool nonfinite = false;
  GRID_STRIDE(i, count) {
    // Checked before unscaling, as the CPU backend does: a finite gradient that the unscale would push
    // past f32's range (inverse_scale > 1) is not an overflow of the backward pass.
    float value = gradients[i];
    nonfinite |= !isfinite(value);
    gradients[i] = value * inverse_scale;
  }
  // Every writer stores the same 1, so the race between blocks is harmless and needs no atomic.
  if (__syncthreads_or(nonfinite) && threadIdx.x == 0) *found_nonfinite = 1;
}

// values = f32(dtype(values)): an f32 buffer then holds exactly what a dtype buffer would (the precision
// branch's storage emulation, issue 4: nearest even, FP8 saturating, f16/bf16 overflowing to inf).
__global__ void round_to_dtype_kernel(int64_t count, bpt_dtype dtype, float *values) {
  GRID_STRIDE(i, count) {
    float value = values[i];
    switch (dtype) {
    case BPT_DTYPE_F16: value = __half2float(__float2half_rn(value)); break;
    case BPT_DTYPE_BF16: value = __bfloat162float(__float2bfloat16_rn(value)); break;
    case BPT_DTYPE_FP8_E4M3:
      value = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3), __NV_E4M3)));
      break;
    case BPT_DTYPE_FP8_E5M2:
      value = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E5M2), __NV_E5M2)));
      break;
    default: break;
    }
    values[i] = value;
  }
}

static bool floating(bpt_dtype dtype) {
  return dtype == BPT_DTYPE_F32 || dtype == BPT_DTYPE_F16 || dtype == BPT_DTYPE_BF16 || dtype == BPT_DTYPE_FP8_E4M3 ||
         dtype == BPT_DTYPE_FP8_E5M2;
}

bpt_status bpt_cuda_cast(bpt_backend *backend, int64_t count, bpt_dtype source_dtype, const void *source,
                         bpt_dtype destination_dtype, void *destination, float scale) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (!floating(source_dtype) || !floating(destination_dtype))
    return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cast from %s to %s is not supported", bpt_dtype_name(source_dtype),
                            bpt_dtype_name(destination_dtype));
  if (count == 0) return BPT_OK;
  cast_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, source_dtype, source, destination_dtype, destination, scale);
  return bpt_cuda_check_launch(backend, "cast");
}

bpt_status bpt_cuda_unscale_check_finite(bpt_backend *backend, int64_t count, float *gradients, float inverse_scale,
                                         int32_t *found_nonfinite) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (count == 0) return BPT_OK;
  unscale_check_finite_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(
      count, gradients, inverse_scale, found_nonfinite);
  return bpt_cuda_check_launch(backend, "unscale_check_finite");
}

bpt_status bpt_cuda_round_to_dtype(bpt_backend *backend, int64_t count, bpt_dtype dtype, float *values) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (dtype == BPT_DTYPE_F32 || count == 0) return BPT_OK;
  if (!floating(dtype)) return bpt_backend_fail(backend, BPT_ERR_DTYPE, "cannot round to %s", bpt_dtype_name(dtype));
  round_to_dtype_kernel<<<bpt_cuda_blocks(state, count), BPT_CUDA_THREADS, 0, state->stream>>>(count, dtype, values);
  return bpt_cuda_check_launch(backend, "round_to_dtype");
}
