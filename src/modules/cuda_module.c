/* The entry point of libbptrain-cuda.so: the CUDA backend (src/backends/cuda/) and a probe that says
 * whether this machine has a CUDA device for it. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "modules/module_services.h"

const bpt_backend_vtable *bpt_cuda_backend_register(void);

static bpt_status probe(char *message, size_t message_size) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    snprintf(message, message_size, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(error));
    return BPT_ERR_DEVICE;
  }
  if (count < 1) {
    snprintf(message, message_size, "no CUDA device found");
    return BPT_ERR_DEVICE;
  }
  return BPT_OK;
}

static const bpt_module_interface interface = {
    .version = BPT_MODULE_INTERFACE_VERSION,
    .size = sizeof(bpt_module_interface),
    .library_version = BPT_MODULE_LIBRARY_VERSION,
    .name = "cuda",
    .backend = bpt_cuda_backend_register,
    .probe = probe,
};

const bpt_module_interface *bpt_module_entry(const bpt_module_services *services) {
  bpt_module_accept_services(services);
  return &interface;
}
