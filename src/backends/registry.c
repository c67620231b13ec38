/* The list of backends: cpu and fpga-sim are built in, cuda lives in its own module (libbptrain-cuda.so,
 * src/modules/) that is loaded on first use, so the core library loads on machines without CUDA. Adding a
 * backend means one line here (plus its own folder, and a module in CMake when it needs other libraries). */
#include <stdio.h>
#include <string.h>

#include "backends/backend.h"
#include "bptrain/context.h"
#include "modules/module.h"

const bpt_backend_vtable *bpt_cpu_backend_register(void);
const bpt_backend_vtable *bpt_fpga_backend_register(void);

typedef struct backend_entry {
  const char *name;
  bpt_backend_register_fn builtin; /* NULL for a module backend */
  const char *module;              /* module name (module.h) when not built in */
} backend_entry;

static const backend_entry backends[] = {
    {"cpu", bpt_cpu_backend_register, NULL},
    {"cuda", NULL, "cuda"},
    {"fpga-sim", bpt_fpga_backend_register, NULL},
};

int bpt_backend_registry_count(void) { return (int)(sizeof backends / sizeof backends[0]); }

const char *bpt_backend_registry_name(int index) {
  return index >= 0 && index < bpt_backend_registry_count() ? backends[index].name : NULL;
}

/* Loads entry's table; for a module backend, also asks the module whether it can run here when probe. */
static bpt_status load_entry(const backend_entry *entry, bool probe, const bpt_backend_vtable **out, char *message,
                             size_t message_size) {
  *out = NULL;
  if (entry->builtin) {
    *out = entry->builtin();
    return BPT_OK;
  }
  const bpt_module_interface *module = NULL;
  char why[BPT_MODULE_MESSAGE_SIZE];
  if (bpt_module_load(entry->module, &module, why, sizeof why) != BPT_OK || !module->backend) {
    snprintf(message, message_size, "backend '%s' is not available: %s", entry->name,
             module ? "its module has no backend" : why);
    return BPT_ERR_UNSUPPORTED;
  }
  if (probe && module->probe) {
    bpt_status status = module->probe(why, sizeof why);
    if (status != BPT_OK) {
      snprintf(message, message_size, "backend '%s': %s", entry->name, why);
      return status;
    }
  }
  *out = module->backend();
  return BPT_OK;
}

bpt_status bpt_backend_registry_load(const char *name, const bpt_backend_vtable **out, char *message,
                                     size_t message_size) {
  *out = NULL;
  for (int i = 0; i < bpt_backend_registry_count(); i++)
    if (name && strcmp(backends[i].name, name) == 0) return load_entry(&backends[i], false, out, message, message_size);
  char known[128] = "";
  for (int i = 0; i < bpt_backend_registry_count(); i++) {
    strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
    strncat(known, backends[i].name, sizeof known - strlen(known) - 1);
  }
  snprintf(message, message_size, "unknown backend '%s' (known: %s)", name ? name : "(null)", known);
  return BPT_ERR_INVALID_ARGUMENT;
}

const bpt_backend_vtable *bpt_backend_registry_get(int index) {
  const bpt_backend_vtable *table = NULL;
  char ignored[8];
  if (index >= 0 && index < bpt_backend_registry_count())
    load_entry(&backends[index], false, &table, ignored, sizeof ignored);
  return table;
}

const bpt_backend_vtable *bpt_backend_registry_find(const char *name) {
  const bpt_backend_vtable *table = NULL;
  char ignored[8];
  bpt_backend_registry_load(name, &table, ignored, sizeof ignored);
  return table;
}

bpt_status bpt_backend_available(int index, char *reason, size_t reason_size) {
  char message[BPT_MODULE_MESSAGE_SIZE] = "";
  bpt_status status = BPT_ERR_INVALID_ARGUMENT;
  const bpt_backend_vtable *table = NULL;
  if (index < 0 || index >= bpt_backend_registry_count())
    snprintf(message, sizeof message, "bpt_backend_available: index %d is not in [0, %d)", index,
             bpt_backend_registry_count());
  else
    status = load_entry(&backends[index], true, &table, message, sizeof message);
  if (reason && reason_size) snprintf(reason, reason_size, "%s", message);
  return status;
}
