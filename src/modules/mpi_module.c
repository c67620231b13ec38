/* The entry point of libbptrain-mpi.so: the MPI comm engine (src/comm/mpi.c). */
#include "comm/comm.h"
#include "modules/module_services.h"

static const bpt_module_interface interface = {
    .version = BPT_MODULE_INTERFACE_VERSION,
    .size = sizeof(bpt_module_interface),
    .library_version = BPT_MODULE_LIBRARY_VERSION,
    .name = "mpi",
    .mpi_open = bpt_comm_mpi_open,
    .mpi_share_id = bpt_comm_mpi_share_id,
};

const bpt_module_interface *bpt_module_entry(const bpt_module_services *services) {
  bpt_module_accept_services(services);
  return &interface;
}
