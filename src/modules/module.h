/* The contract between the core library and a loadable module (the CUDA backend, the MPI and NCCL comm
 * engines): the core dlopens libbptrain-<name>.so.<ABI> and calls its one exported function,
 * bpt_module_entry, handing it the services table below; the module answers with its interface. A module
 * links nothing of the core: the few core helpers its sources call (bpt_error, bpt_calloc, ...) are
 * defined in it by module_services.c as calls through the table, so it works the same under
 * libbptrain.so and under a program linked with libbptrain.a. */
#ifndef BPT_MODULES_MODULE_H
#define BPT_MODULES_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "bptrain/comm.h"

/* Bumped whenever a member of either table below changes. Modules also share private layouts with the
 * core (the backend vtable, struct bpt_comm), so a module is only ever used with the library version it
 * was built with: library_version must match as well. */
#define BPT_MODULE_INTERFACE_VERSION 1u
#define BPT_MODULE_ENTRY_SYMBOL "bpt_module_entry"
#define BPT_MODULE_STRING_(x) #x
#define BPT_MODULE_STRING(x) BPT_MODULE_STRING_(x)
#define BPT_MODULE_LIBRARY_VERSION \
  BPT_MODULE_STRING(BPT_VERSION_MAJOR) "." BPT_MODULE_STRING(BPT_VERSION_MINOR) "." BPT_MODULE_STRING(BPT_VERSION_PATCH)

typedef struct bpt_context bpt_context;

/* What the core lends a module. Messages arrive formatted: the module side does the printf. */
typedef struct bpt_module_services {
  uint32_t version; /* BPT_MODULE_INTERFACE_VERSION */
  uint32_t size;    /* sizeof(bpt_module_services) */
  const char *library_version;
  bpt_status (*error)(bpt_context *context, bpt_status status, const char *message);
  void *(*calloc)(bpt_context *context, size_t count, size_t size, const char *what);
  bpt_status (*comm_fail)(bpt_comm *comm, bpt_status status, const char *message);
  double (*comm_seconds)(void);
  void (*comm_sum_into)(bpt_dtype dtype, void *accumulator, const void *source, int64_t count);
  void (*comm_max_into)(float *accumulator, const float *source, int64_t count);
  void (*comm_scale)(bpt_dtype dtype, void *buffer, int64_t count, float scale);
  size_t (*dtype_size)(bpt_dtype dtype);
  const char *(*dtype_name)(bpt_dtype dtype);
  uint16_t (*float_to_f16)(float value);
  uint16_t (*float_to_bf16)(float value);
  /* The MPI engine bootstraps NCCL: it reaches the NCCL module through the core. */
  bpt_status (*comm_nccl_unique_id)(bpt_context *context, bpt_comm_unique_id *out);
} bpt_module_services;

/* What a module offers; members it does not provide are NULL. */
typedef struct bpt_module_interface {
  uint32_t version; /* BPT_MODULE_INTERFACE_VERSION the module was built with */
  uint32_t size;    /* sizeof(bpt_module_interface) as the module was built */
  const char *library_version;
  const char *name; /* "cuda", "mpi", "nccl" */
  /* Backend modules: the backend's table, and whether it can run here (e.g. a device is present);
   * probe fills message on failure. */
  const bpt_backend_vtable *(*backend)(void);
  bpt_status (*probe)(char *message, size_t message_size);
  /* Comm engine modules (src/comm/comm.h describes each). */
  bpt_status (*mpi_open)(bpt_comm *comm, int64_t mpi_comm, bool progress_thread);
  bpt_status (*mpi_share_id)(bpt_context *context, int64_t mpi_comm, double timeout, bpt_comm_unique_id *id,
                             int *rank, int *size, int *local_rank);
  bpt_status (*nccl_open)(bpt_comm *comm, const bpt_comm_unique_id *id, int rank, int world_size, int device);
  bpt_status (*nccl_unique_id)(bpt_context *context, bpt_comm_unique_id *out);
} bpt_module_interface;

/* The one symbol a module exports. Returns the module's interface (never NULL); the module uses services
 * only when their version and size match its own, and the core uses the module only when the interface's
 * do. */
typedef const bpt_module_interface *(*bpt_module_entry_fn)(const bpt_module_services *services);

/* Core side (loader.c). The module file for name: "libbptrain-<name>.so.<ABI>". */
#define BPT_MODULE_FILE_PREFIX "libbptrain-"
/* Room for a load failure: the file, dlerror's text and the directories searched. */
#define BPT_MODULE_MESSAGE_SIZE 1024

/* Loads module name once (later calls return the same interface). On failure returns BPT_ERR_UNSUPPORTED
 * and writes into message which file or library could not be loaded and where it was looked for. */
bpt_status bpt_module_load(const char *name, const bpt_module_interface **out, char *message, size_t message_size);

#endif
