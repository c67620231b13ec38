/* The module side of module.h: each module's entry point calls this first with the table it was handed. */
#ifndef BPT_MODULES_MODULE_SERVICES_H
#define BPT_MODULES_MODULE_SERVICES_H

#include <stdbool.h>

#include "modules/module.h"

/* Keeps services for the helpers in module_services.c when their version, size and library version match
 * this module's; false otherwise (the core then refuses the module on its interface's version). */
bool bpt_module_accept_services(const bpt_module_services *services);

/* Each module defines it (cuda_module.c, mpi_module.c, nccl_module.c) and exports nothing else. */
__attribute__((visibility("default"))) const bpt_module_interface *bpt_module_entry(
    const bpt_module_services *services);

#endif
