/* Finds, loads and checks the loadable modules (module.h): libbptrain-<name>.so.<ABI> is looked for in the
 * directories of BPTRAIN_MODULE_PATH, then next to the code of this library (libbptrain.so's directory, or
 * the program's when it links libbptrain.a), then in the install prefix's lib directory. A module stays
 * loaded until the process ends: backends and engines keep device and MPI state that outlives any handle. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/compress.h"
#include "core/context.h"
#include "modules/module.h"

#ifndef BPT_MODULE_INSTALL_DIR
#define BPT_MODULE_INSTALL_DIR ""
#endif

static bpt_status service_error(bpt_context *context, bpt_status status, const char *message) {
  return bpt_error(context, status, "%s", message);
}

static bpt_status service_comm_fail(bpt_comm *comm, bpt_status status, const char *message) {
  return bpt_comm_fail(comm, status, "%s", message);
}

static const bpt_module_services services = {
    .version = BPT_MODULE_INTERFACE_VERSION,
    .size = sizeof(bpt_module_services),
    .library_version = BPT_MODULE_LIBRARY_VERSION,
    .error = service_error,
    .calloc = bpt_calloc,
    .comm_fail = service_comm_fail,
    .comm_seconds = bpt_comm_seconds,
    .comm_sum_into = bpt_comm_sum_into,
    .comm_max_into = bpt_comm_max_into,
    .comm_scale = bpt_comm_scale,
    .dtype_size = bpt_dtype_size,
    .dtype_name = bpt_dtype_name,
    .float_to_f16 = bpt_float_to_f16,
    .float_to_bf16 = bpt_float_to_bf16,
    .comm_nccl_unique_id = bpt_comm_nccl_unique_id,
};

enum { MODULES_MAX = 8 };

typedef struct loaded_module {
  char name[16];
  const bpt_module_interface *interface;
} loaded_module;

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded_module modules[MODULES_MAX];
static int modules_loaded;

/* Appends to a message buffer, truncating quietly (the message is for people). */
static void append(char *message, size_t size, const char *format, const char *a, const char *b) {
  size_t used = strlen(message);
  if (used + 1 < size) snprintf(message + used, size - used, format, a, b);
}

/* The directory holding this code: libbptrain.so's, or the program's when linked statically. */
static void own_directory(char *out, size_t size) {
  Dl_info info;
  out[0] = '\0';
  if (!dladdr((const void *)bpt_module_load, &info) || !info.dli_fname || !strchr(info.dli_fname, '/')) return;
  snprintf(out, size, "%s", info.dli_fname);
  char *slash = strrchr(out, '/');
  if (slash == out)
    slash[1] = '\0';
  else
    *slash = '\0';
}

/* Checks what a module's entry returned; fills message when it is not usable with this library. */
static bool compatible(const bpt_module_interface *interface, const char *name, const char *path, char *message,
                       size_t size) {
  if (!interface) {
    snprintf(message, size, "%s: %s returned no interface", path, BPT_MODULE_ENTRY_SYMBOL);
    return false;
  }
  if (interface->version != BPT_MODULE_INTERFACE_VERSION || interface->size < sizeof(bpt_module_interface) ||
      !interface->library_version || strcmp(interface->library_version, BPT_MODULE_LIBRARY_VERSION) != 0 ||
      !interface->name || strcmp(interface->name, name) != 0) {
    snprintf(message, size,
             "%s is module '%s' for libbptrain %s (module interface %u, %u bytes); this libbptrain %s needs module "
             "'%s' with interface %u, %zu bytes: install the modules built with this library",
             path, interface->name ? interface->name : "?",
             interface->library_version ? interface->library_version : "?", interface->version, interface->size,
             BPT_MODULE_LIBRARY_VERSION, name, BPT_MODULE_INTERFACE_VERSION, sizeof(bpt_module_interface));
    return false;
  }
  return true;
}

/* Tries one file. Returns its interface, or NULL with *found telling whether the file exists (then
 * message says why it could not be used: usually dlerror naming a library it needs). */
static const bpt_module_interface *try_file(const char *path, const char *name, bool *found, char *message,
                                            size_t size) {
  struct stat info;
  *found = stat(path, &info) == 0;
  if (!*found) return NULL;
  /* dlopen opens without O_NONBLOCK: a FIFO there would wait forever for a writer, and a device would be read
   * as if it were a library (issue 30, class 10). Only a regular file (or a symlink to one) is loaded. */
  if (!S_ISREG(info.st_mode)) {
    snprintf(message, size, "could not load %s: it is %s, not a regular file", path,
             S_ISFIFO(info.st_mode)  ? "a FIFO"
             : S_ISDIR(info.st_mode) ? "a directory"
             : S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode) ? "a device"
             : S_ISSOCK(info.st_mode)                          ? "a socket"
                                                               : "not a regular file");
    return NULL;
  }
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    snprintf(message, size, "could not load %s: %s", path, why ? why : "unknown dlopen failure");
    return NULL;
  }
  void *symbol = dlsym(handle, BPT_MODULE_ENTRY_SYMBOL);
  bpt_module_entry_fn entry = NULL;
  memcpy(&entry, &symbol, sizeof entry); /* dlsym hands back an object pointer; POSIX allows this */
  if (!symbol) {
    snprintf(message, size, "%s has no %s: not a libbptrain module", path, BPT_MODULE_ENTRY_SYMBOL);
    dlclose(handle);
    return NULL;
  }
  const bpt_module_interface *interface = entry(&services);
  if (!compatible(interface, name, path, message, size)) {
    dlclose(handle);
    return NULL;
  }
  return interface; /* the handle stays open for the life of the process */
}

/* Walks the search path; on failure message names the file and every place it was looked for. */
static const bpt_module_interface *search(const char *name, char *message, size_t size) {
  char file[64], directories[4096] = "", own[2048];
  snprintf(file, sizeof file, BPT_MODULE_FILE_PREFIX "%s.so.%d", name, BPT_ABI_VERSION);
  const char *variable = secure_getenv("BPTRAIN_MODULE_PATH");
  size_t used = 0;
  if (variable) used = (size_t)snprintf(directories, sizeof directories, "%s:", variable);
  own_directory(own, sizeof own);
  if (used < sizeof directories)
    snprintf(directories + used, sizeof directories - used, "%s:%s", own, BPT_MODULE_INSTALL_DIR);
  char tried[1024] = "";
  for (char *cursor = directories, *next; cursor; cursor = next) {
    next = strchr(cursor, ':');
    if (next) *next++ = '\0';
    if (!cursor[0]) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", cursor, file);
    bool found = false;
    const bpt_module_interface *interface = try_file(path, name, &found, message, size);
    if (interface || found) return interface; /* a file that exists but fails is the answer to report */
    append(tried, sizeof tried, "%s%s", tried[0] ? ", " : "", cursor);
  }
  snprintf(message, size,
           "module %s not found (looked in %s; set BPTRAIN_MODULE_PATH to the directory holding it): "
           "libbptrain was built without it, or it was not installed next to the library",
           file, tried[0] ? tried : "no directory");
  return NULL;
}

bpt_status bpt_module_load(const char *name, const bpt_module_interface **out, char *message, size_t message_size) {
  *out = NULL;
  if (message_size) message[0] = '\0';
  pthread_mutex_lock(&modules_lock);
  for (int i = 0; i < modules_loaded; i++)
    if (strncmp(modules[i].name, name, sizeof modules[i].name) == 0) *out = modules[i].interface;
  /* A failure is not remembered: the user may install the module or set BPTRAIN_MODULE_PATH and retry. */
  if (!*out && modules_loaded < MODULES_MAX && (*out = search(name, message, message_size))) {
    snprintf(modules[modules_loaded].name, sizeof modules[modules_loaded].name, "%s", name);
    modules[modules_loaded++].interface = *out;
  }
  pthread_mutex_unlock(&modules_lock);
  return *out ? BPT_OK : BPT_ERR_UNSUPPORTED;
}
