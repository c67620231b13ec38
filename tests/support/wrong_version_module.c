/* A stand-in libbptrain-cuda.so.0 built for another module interface version: the loader must refuse it
 * with a message, never call into it (tests/test_modules.c). */
#include "modules/module.h"

__attribute__((visibility("default"))) const bpt_module_interface *bpt_module_entry(const bpt_module_services *services);

static const bpt_module_interface interface = {
    .version = BPT_MODULE_INTERFACE_VERSION + 1000,
    .size = sizeof(bpt_module_interface),
    .library_version = "0.0.1",
    .name = "cuda",
};

const bpt_module_interface *bpt_module_entry(const bpt_module_services *services) {
  (void)services;
  return &interface;
}
