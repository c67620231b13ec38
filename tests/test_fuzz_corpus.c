/* Replays the fuzzers' seed corpora and every committed regression input (fuzz/corpus, fuzz/regressions)
 * through the fuzz target bodies in each CTest run, so a fixed crash stays fixed without clang or libFuzzer.
 * Also checks that the committed seed checkpoints still load (a format break shows up here first); regenerate
 * them with BPT_REGENERATE_FUZZ_SEEDS=1 after an intentional format change. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"

/* The target bodies are compiled into this test directly: one file, shared with the libFuzzer builds. */
#include "../fuzz/fuzz_targets.c"
#include "../fuzz/fuzz_shape_target.c"

static const char *source_dir(void) {
  const char *directory = getenv("BPT_SOURCE_DIR");
  return directory ? directory : ".";
}

/* Runs every file of fuzz/<kind>/<target> through run; returns how many there were. */
static int replay(const char *kind, const char *target, int (*run)(const uint8_t *, size_t)) {
  char folder[4096];
  snprintf(folder, sizeof folder, "%s/fuzz/%s/%s", source_dir(), kind, target);
  DIR *directory = opendir(folder);
  if (!directory) return 0;
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(directory))) {
    if (entry->d_name[0] == '.') continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", folder, entry->d_name);
    size_t size;
    unsigned char *bytes = test_read_file(path, &size);
    run(bytes, size);
    free(bytes);
    count++;
  }
  closedir(directory);
  return count;
}

static int checkpoint_with_fixed_crcs(const uint8_t *data, size_t size) { return bpt_fuzz_checkpoint(data, size, 1); }

static void corpora_and_regressions_replay_cleanly(void **state) {
  (void)state;
  int idx = replay("corpus", "idx", bpt_fuzz_idx) + replay("regressions", "idx", bpt_fuzz_idx);
  int checkpoints = replay("corpus", "checkpoint", checkpoint_with_fixed_crcs) +
                    replay("regressions", "checkpoint", checkpoint_with_fixed_crcs);
  int gzip = replay("corpus", "gzip", bpt_fuzz_gzip) + replay("regressions", "gzip", bpt_fuzz_gzip);
  int shapes = replay("corpus", "shape", bpt_fuzz_shape) + replay("regressions", "shape", bpt_fuzz_shape);
  print_message("replayed %d IDX, %d gzip, %d checkpoint and %d shape inputs\n", idx, gzip, checkpoints, shapes);
  assert_true(gzip >= 3);
  assert_true(shapes >= 4);
  assert_true(idx >= 6);
  assert_true(checkpoints >= 2);
}

static void seed_checkpoints_still_load(void **state) {
  (void)state;
  const char *names[2] = {"parameters-only.ckpt", "full.ckpt"};
  for (int full = 0; full < 2; full++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/fuzz/corpus/checkpoint/%s", source_dir(), names[full]);
    if (getenv("BPT_REGENERATE_FUZZ_SEEDS")) assert_int_equal(bpt_fuzz_checkpoint_seed(path, full), 0);
    fixture *f = checkpoint_fixture();
    bpt_checkpoint_contents contents = bpt_checkpoint_contents_default();
    contents.optimizer = full ? f->optimizer : NULL;
    contents.dataset = full ? f->dataset : NULL;
    assert_ok(f->context, bpt_checkpoint_load(f->graph, path, &contents));
    assert_int_equal(contents.epoch, 2);
    assert_int_equal(contents.step, 1);
    assert_true(f->buffer[2] == -4.0f);
  }
}

/* An IDX header promising 4 GiB followed by 4 bytes is refused as truncated, under an address-space limit of
 * 1 GiB: the reader must not allocate what the header promises before the data arrives. */
static void huge_idx_header_does_not_allocate(void **state) {
  (void)state;
#if defined(__SANITIZE_ADDRESS__)
  skip(); /* ASan reserves terabytes of shadow memory, so an address-space limit cannot apply */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  skip();
#endif
#endif
  char path[4096];
  snprintf(path, sizeof path, "%s/fuzz/regressions/idx/huge-header-short-file", source_dir());
  size_t size;
  unsigned char *bytes = test_read_file(path, &size);
  const char *file = test_write_file("huge-header.idx", bytes + 1, size - 1); /* byte 0 is the fuzz mode */
  free(bytes);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    struct rlimit limit = {1ul << 30, 1ul << 30};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(2);
    bpt_context *context;
    bpt_context_options options = bpt_context_options_default();
    options.num_threads = 1;
    if (bpt_context_create(&options, &context) != BPT_OK) _exit(3);
    bpt_idx idx;
    bpt_status status = bpt_idx_read(context, file, &idx);
    _exit(status == BPT_ERR_FORMAT && strstr(bpt_context_last_error(context), "truncated") ? 0 : 1);
  }
  int status;
  waitpid(child, &status, 0);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(seed_checkpoints_still_load),
      cmocka_unit_test(corpora_and_regressions_replay_cleanly),
      cmocka_unit_test(huge_idx_header_does_not_allocate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
