/* The loadable modules (src/modules/): a missing, broken or mismatched module file is a status whose
 * message names the file (and dlerror's reason), the built-in backends are always available, and the
 * modules of this build load from BPTRAIN_MODULE_PATH. Tests that need a module to be absent run first:
 * a module, once loaded, stays loaded for the life of the process. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

static int backend_index(const char *name) {
  for (int i = 0; i < bpt_backend_count(); i++)
    if (strcmp(bpt_backend_name(i), name) == 0) return i;
  fail_msg("no backend '%s' in the list", name);
  return -1;
}

/* A fresh directory under the build tree for module files. */
static const char *module_directory(const char *name) {
  static char path[1024];
  const char *binary = getenv("BPT_BINARY_DIR");
  snprintf(path, sizeof path, "%s/test-modules-%s", binary ? binary : ".", name);
  mkdir(path, 0755);
  return path;
}

static bool module_built(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/libbptrain-%s.so.0", getenv("BPT_BINARY_DIR"), name);
  return access(path, F_OK) == 0;
}

static void builtin_backends_are_always_available(void **state) {
  (void)state;
  char reason[256] = "stale";
  assert_int_equal(bpt_backend_available(backend_index("cpu"), reason, sizeof reason), BPT_OK);
  assert_string_equal(reason, "");
  assert_int_equal(bpt_backend_available(backend_index("fpga-sim"), NULL, 0), BPT_OK);
  assert_int_equal(bpt_backend_available(-1, reason, sizeof reason), BPT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(reason, "index -1"));
  assert_int_equal(bpt_backend_available(bpt_backend_count(), reason, 8), BPT_ERR_INVALID_ARGUMENT);
  assert_int_equal(strlen(reason), 7); /* truncated to the caller's size */
}

static void a_missing_module_is_a_status_naming_the_file(void **state) {
  (void)state;
  const char *empty = module_directory("empty");
  setenv("BPTRAIN_MODULE_PATH", empty, 1);
  char reason[1024];
  assert_int_equal(bpt_backend_available(backend_index("cuda"), reason, sizeof reason), BPT_ERR_UNSUPPORTED);
  assert_non_null(strstr(reason, "libbptrain-cuda.so.0 not found"));
  assert_non_null(strstr(reason, empty));

  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = NULL;
  assert_fails(NULL, BPT_ERR_UNSUPPORTED, "libbptrain-cuda.so.0 not found", bpt_context_create(&options, &context));
  assert_null(context);

  context = test_context(1);
  bpt_comm *comm = NULL;
  assert_fails(context, BPT_ERR_UNSUPPORTED, "the mpi engine is not available: module libbptrain-mpi.so.0 not found",
               bpt_comm_create_mpi(context, BPT_COMM_MPI_WORLD, NULL, &comm));
  assert_null(comm);
  bpt_comm_unique_id id;
  assert_fails(context, BPT_ERR_UNSUPPORTED, "libbptrain-nccl.so.0 not found", bpt_comm_nccl_unique_id(context, &id));
  assert_fails(context, BPT_ERR_UNSUPPORTED, "libbptrain-mpi.so.0 not found",
               bpt_comm_create_nccl_mpi(context, BPT_COMM_MPI_WORLD, 0, NULL, &comm));
  bpt_context_destroy(context);
}

static void a_module_that_cannot_load_reports_dlerror(void **state) {
  (void)state;
  const char *broken = module_directory("broken");
  char path[1100];
  snprintf(path, sizeof path, "%s/libbptrain-cuda.so.0", broken);
  FILE *file = fopen(path, "w");
  assert_non_null(file);
  fputs("not an ELF file\n", file);
  fclose(file);
  setenv("BPTRAIN_MODULE_PATH", broken, 1);
  char reason[1024];
  assert_int_equal(bpt_backend_available(backend_index("cuda"), reason, sizeof reason), BPT_ERR_UNSUPPORTED);
  assert_non_null(strstr(reason, "could not load"));
  assert_non_null(strstr(reason, path));
  /* dlerror's own words follow the path: "invalid ELF header" or "file too short" */
  assert_true(strstr(reason, "ELF") || strstr(reason, "too short"));
}

/* Issue 30, class 10: a FIFO named like a module made dlopen wait forever for a writer. alarm() bounds the
 * test: before the fix SIGALRM ends it as a failure instead of a hang. */
static void a_fifo_or_directory_named_like_a_module_is_refused(void **state) {
  (void)state;
  const char *directory = module_directory("fifo");
  char path[1100];
  snprintf(path, sizeof path, "%s/libbptrain-cuda.so.0", directory);
  unlink(path);
  if (mkfifo(path, 0600) != 0) {
    print_message("cannot make a FIFO here: skipping\n");
    skip();
  }
  setenv("BPTRAIN_MODULE_PATH", directory, 1);
  char reason[1024];
  alarm(30);
  assert_int_equal(bpt_backend_available(backend_index("cuda"), reason, sizeof reason), BPT_ERR_UNSUPPORTED);
  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = NULL;
  assert_int_equal(bpt_context_create(&options, &context), BPT_ERR_UNSUPPORTED);
  alarm(0);
  if (!strstr(reason, "it is a FIFO, not a regular file") || !strstr(reason, path)) fail_msg("reason: %s", reason);
  assert_non_null(strstr(bpt_context_last_error(NULL), "a FIFO"));
  unlink(path);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(bpt_backend_available(backend_index("cuda"), reason, sizeof reason), BPT_ERR_UNSUPPORTED);
  if (!strstr(reason, "it is a directory")) fail_msg("reason: %s", reason);
  rmdir(path);
}

static void a_module_of_another_version_is_refused(void **state) {
  (void)state;
  char directory[1024];
  snprintf(directory, sizeof directory, "%s/wrong-version-module", getenv("BPT_BINARY_DIR"));
  setenv("BPTRAIN_MODULE_PATH", directory, 1);
  char reason[1024];
  assert_int_equal(bpt_backend_available(backend_index("cuda"), reason, sizeof reason), BPT_ERR_UNSUPPORTED);
  assert_non_null(strstr(reason, "for libbptrain 0.0.1"));
  assert_non_null(strstr(reason, "install the modules built with this library"));
}

/* With this build's modules: cuda loads, then either runs or says there is no device (BPT_ERR_DEVICE, as a
 * context on it does). */
static void this_build_s_modules_load(void **state) {
  (void)state;
  if (!module_built("cuda")) {
    print_message("skipped: this build has no cuda module\n");
    skip();
  }
  setenv("BPTRAIN_MODULE_PATH", getenv("BPT_BINARY_DIR"), 1);
  char reason[1024];
  bpt_status status = bpt_backend_available(backend_index("cuda"), reason, sizeof reason);
  bpt_context_options options = bpt_context_options_default();
  options.backend = "cuda";
  bpt_context *context = NULL;
  if (status == BPT_OK) {
    assert_ok(NULL, bpt_context_create(&options, &context));
    assert_string_equal(bpt_context_backend(context), "cuda");
    bpt_context_destroy(context);
    return;
  }
  assert_int_equal(status, BPT_ERR_DEVICE);
  assert_non_null(strstr(reason, "CUDA device"));
  assert_fails(NULL, BPT_ERR_DEVICE, "backend 'cuda'", bpt_context_create(&options, &context));
  assert_null(context);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(builtin_backends_are_always_available),
      cmocka_unit_test(a_missing_module_is_a_status_naming_the_file),
      cmocka_unit_test(a_module_that_cannot_load_reports_dlerror),
      cmocka_unit_test(a_fifo_or_directory_named_like_a_module_is_refused),
      cmocka_unit_test(a_module_of_another_version_is_refused),
      cmocka_unit_test(this_build_s_modules_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
