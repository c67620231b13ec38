/* Device memory for the CUDA backend. The caching allocator is CUDA's stream-ordered pool with its release
 * threshold at the maximum, so freed blocks stay with the pool and a training step never reaches
 * cudaMalloc/cudaFree; frees are ordered on the stream, so a block is reused only after the work using it.
 * Uploads are staged through pinned buffers and, when large, cross the bus on a copy stream beside the
 * compute stream (see cuda.h), so the next batch travels while the current step computes and the host
 * carries on preparing the one after; downloads wait, because the caller wants the bytes.
 * The pool is the context's own (cudaMemPoolCreate), not the device's default one: its release threshold and
 * its trim on destroy then touch no other CUDA user of the process (NCCL, PyTorch, a second context). */
#include <stdint.h>
#include <string.h>

#include "backends/cuda/cuda.h"

bpt_status bpt_cuda_memory_create(bpt_backend *backend) {
  bpt_cuda_state *state = bpt_cuda(backend);
  struct cudaMemPoolProps properties;
  memset(&properties, 0, sizeof properties);
  properties.allocType = cudaMemAllocationTypePinned;
  properties.handleTypes = cudaMemHandleTypeNone;
  properties.location.type = cudaMemLocationTypeDevice;
  properties.location.id = state->device;
  BPT_CUDA_TRY(bpt_cuda_check(backend, cudaMemPoolCreate(&state->pool, &properties), "cudaMemPoolCreate"));
  uint64_t keep_everything = UINT64_MAX;
  BPT_CUDA_TRY(bpt_cuda_check(backend,
                              cudaMemPoolSetAttribute(state->pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
                              "cudaMemPoolSetAttribute"));
  BPT_CUDA_TRY(bpt_cuda_check(backend, cudaStreamCreateWithFlags(&state->copy_stream, cudaStreamNonBlocking),
                              "cudaStreamCreate (uploads)"));
  for (int i = 0; i < BPT_CUDA_STAGING_SLOTS; i++) {
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaHostAlloc(&state->staging[i], BPT_CUDA_STAGING_BYTES, cudaHostAllocDefault),
                                "cudaHostAlloc (upload staging)"));
    BPT_CUDA_TRY(bpt_cuda_alloc(backend, BPT_CUDA_STAGING_BYTES, &state->device_staging[i]));
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaEventCreateWithFlags(&state->staging_done[i], cudaEventDisableTiming),
                                "cudaEventCreate"));
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaEventCreateWithFlags(&state->staging_copied[i], cudaEventDisableTiming),
                                "cudaEventCreate"));
  }
  /* The device slots were allocated in the compute stream's order; the copy stream may use them only after. */
  return bpt_cuda_check(backend, cudaStreamSynchronize(state->stream), "upload staging");
}

void bpt_cuda_memory_destroy(bpt_backend *backend) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (state->copy_stream) cudaStreamSynchronize(state->copy_stream);
  if (state->scratch) cudaFreeAsync(state->scratch, state->stream);
  if (state->workspace) cudaFreeAsync(state->workspace, state->stream);
  for (int i = 0; i < BPT_CUDA_STAGING_SLOTS; i++)
    if (state->device_staging[i]) cudaFreeAsync(state->device_staging[i], state->stream);
  if (state->stream) cudaStreamSynchronize(state->stream);
  /* The pool is ours alone: destroying it hands its cached blocks back (blocks still allocated from it are
   * released when they are freed, as CUDA defines for a destroyed pool). */
  if (state->pool) cudaMemPoolDestroy(state->pool);
  state->pool = NULL;
  for (int i = 0; i < BPT_CUDA_STAGING_SLOTS; i++) {
    if (state->staging[i]) cudaFreeHost(state->staging[i]);
    if (state->staging_done[i]) cudaEventDestroy(state->staging_done[i]);
    if (state->staging_copied[i]) cudaEventDestroy(state->staging_copied[i]);
  }
  if (state->copy_stream) cudaStreamDestroy(state->copy_stream);
}

bpt_status bpt_cuda_alloc(bpt_backend *backend, size_t bytes, void **out) {
  bpt_cuda_state *state = bpt_cuda(backend);
  *out = NULL;
  cudaError_t error = cudaMallocFromPoolAsync(out, bytes ? bytes : 256, state->pool, state->stream);
  if (error != cudaSuccess) {
    *out = NULL;
    cudaGetLastError();
    return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes on CUDA device %d (%s)", bytes,
                            state->device, cudaGetErrorString(error));
  }
  return BPT_OK;
}

void bpt_cuda_free(bpt_backend *backend, void *pointer) {
  if (pointer) cudaFreeAsync(pointer, bpt_cuda(backend)->stream);
}

bpt_status bpt_cuda_upload(bpt_backend *backend, void *device_dst, const void *host_src, size_t bytes) {
  bpt_cuda_state *state = bpt_cuda(backend);
  const bool overlap = bytes >= BPT_CUDA_OVERLAP_BYTES;
  for (size_t offset = 0; offset < bytes; offset += BPT_CUDA_STAGING_BYTES) {
    size_t chunk = bytes - offset < BPT_CUDA_STAGING_BYTES ? bytes - offset : BPT_CUDA_STAGING_BYTES;
    int slot = state->staging_next;
    state->staging_next = (slot + 1) % BPT_CUDA_STAGING_SLOTS;
    /* The host waits only until the pinned slot's previous reader is done: the bus copy on the copy stream
     * after an overlapped upload (so an upload larger than both slots does not wait for the compute
     * stream's queued step), the compute stream after a direct one. */
    cudaEvent_t pinned_free = state->staging_overlapped[slot] ? state->staging_copied[slot] : state->staging_done[slot];
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaEventSynchronize(pinned_free), "upload"));
    memcpy(state->staging[slot], (const char *)host_src + offset, chunk);
    void *destination = (char *)device_dst + offset;
    state->staging_overlapped[slot] = overlap;
    if (overlap) {
      /* The transfer runs beside the compute stream; the compute stream waits for it only where the data
       * lands, so the step already queued keeps running while the next batch crosses the bus. The device
       * slot is refilled only after the compute stream's last copy out of it: a device-side wait. */
      BPT_CUDA_TRY(
          bpt_cuda_check(backend, cudaStreamWaitEvent(state->copy_stream, state->staging_done[slot], 0), "upload"));
      BPT_CUDA_TRY(bpt_cuda_check(backend,
                                  cudaMemcpyAsync(state->device_staging[slot], state->staging[slot], chunk,
                                                  cudaMemcpyHostToDevice, state->copy_stream),
                                  "upload"));
      BPT_CUDA_TRY(bpt_cuda_check(backend, cudaEventRecord(state->staging_copied[slot], state->copy_stream), "upload"));
      BPT_CUDA_TRY(bpt_cuda_check(backend, cudaStreamWaitEvent(state->stream, state->staging_copied[slot], 0), "upload"));
      BPT_CUDA_TRY(bpt_cuda_check(backend,
                                  cudaMemcpyAsync(destination, state->device_staging[slot], chunk,
                                                  cudaMemcpyDeviceToDevice, state->stream),
                                  "upload"));
    } else {
      BPT_CUDA_TRY(bpt_cuda_check(
          backend, cudaMemcpyAsync(destination, state->staging[slot], chunk, cudaMemcpyHostToDevice, state->stream),
          "upload"));
    }
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaEventRecord(state->staging_done[slot], state->stream), "upload"));
  }
  return BPT_OK;
}

bpt_status bpt_cuda_download(bpt_backend *backend, void *host_dst, const void *device_src, size_t bytes) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (bytes)
    BPT_CUDA_TRY(bpt_cuda_check(backend, cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, state->stream),
                             "download"));
  /* Also surfaces errors of kernels that ran since the last synchronisation. */
  return bpt_cuda_check(backend, cudaStreamSynchronize(state->stream), "download");
}

bpt_status bpt_cuda_copy(bpt_backend *backend, void *device_dst, const void *device_src, size_t bytes) {
  if (!bytes) return BPT_OK;
  return bpt_cuda_check(backend,
                        cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, bpt_cuda(backend)->stream),
                        "copy");
}

bpt_status bpt_cuda_memset_zero(bpt_backend *backend, void *device_dst, size_t bytes) {
  if (!bytes) return BPT_OK;
  return bpt_cuda_check(backend, cudaMemsetAsync(device_dst, 0, bytes, bpt_cuda(backend)->stream), "memset_zero");
}

bpt_status bpt_cuda_synchronize(bpt_backend *backend) {
  return bpt_cuda_check(backend, cudaStreamSynchronize(bpt_cuda(backend)->stream), "synchronize");
}

/* Grows a stream-ordered buffer: the old one is released after the work queued before it. */
static bpt_status grow(bpt_backend *backend, void **buffer, size_t *capacity, size_t bytes, void **out) {
  bpt_cuda_state *state = bpt_cuda(backend);
  if (bytes > *capacity) {
    size_t rounded = (bytes + (1u << 20) - 1) / (1u << 20) * (1u << 20);
    if (*buffer) cudaFreeAsync(*buffer, state->stream);
    *buffer = NULL;
    *capacity = 0;
    BPT_CUDA_TRY(bpt_cuda_alloc(backend, rounded, buffer));
    *capacity = rounded;
  }
  *out = *buffer;
  return BPT_OK;
}

bpt_status bpt_cuda_scratch(bpt_backend *backend, size_t bytes, void **out) {
  bpt_cuda_state *state = bpt_cuda(backend);
  return grow(backend, &state->scratch, &state->scratch_bytes, bytes, out);
}

bpt_status bpt_cuda_workspace(bpt_backend *backend, size_t bytes, void **out) {
  bpt_cuda_state *state = bpt_cuda(backend);
  return grow(backend, &state->workspace, &state->workspace_bytes, bytes, out);
}
