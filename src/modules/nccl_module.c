/* The entry point of libbptrain-nccl.so: the NCCL comm engine (src/comm/nccl.c). */
#include "comm/comm.h"
#include "modules/module_services.h"

static const bpt_module_interface interface = {
    .version = BPT_MODULE_INTERFACE_VERSION,
    .size = sizeof(bpt_module_interface),
    .library_version = BPT_MODULE_LIBRARY_VERSION,
    .name = "nccl",
    .nccl_open = bpt_comm_nccl_open,
    .nccl_unique_id = bpt_comm_nccl_unique_id,
};

const bpt_module_interface *bpt_module_entry(const bpt_module_services *services) {
  bpt_module_accept_services(services);
  return &interface;
}
