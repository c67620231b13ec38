/* Files at hostile paths (issue 18, class 6): a symlink planted where a save writes never redirects the write,
 * a FIFO, directory or device where the library reads or writes is refused at once with a status instead of
 * blocking open(), and two threads saving to one path never share a temporary file. Every test runs under
 * alarm(): a hang kills the process, so the test fails instead of blocking CTest until its timeout. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "bptrain/checkpoint.h"
#include "bptrain/data.h"
#include "bptrain/onnx.h"
#include "bptrain/profiler.h"
#include "test_support.h"

enum { FEATURES = 6, CLASSES = 3, BATCH = 4, SAVES = 50 };

typedef struct model {
  bpt_context *context;
  bpt_graph *graph;
} model;

static void model_create(model *m, uint64_t seed) {
  m->context = test_context(seed);
  bpt_context *c = m->context;
  int64_t features = FEATURES;
  bpt_node *x, *y, *logits, *loss;
  assert_ok(c, bpt_graph_create(c, &m->graph));
  assert_ok(c, bpt_graph_input(m->graph, "x", BPT_DTYPE_F32, 1, &features, &x));
  assert_ok(c, bpt_graph_input(m->graph, "y", BPT_DTYPE_I32, 0, NULL, &y));
  assert_ok(c, bpt_layer_linear(m->graph, "fc", x, CLASSES, BPT_INIT_XAVIER_UNIFORM, &logits));
  assert_ok(c, bpt_softmax_cross_entropy(m->graph, "loss", logits, y, &loss));
  assert_ok(c, bpt_graph_compile(m->graph, loss, BATCH));
}

static void model_destroy(model *m) {
  bpt_graph_destroy(m->graph);
  bpt_context_destroy(m->context);
}

/* A fresh, empty directory for one test. */
static const char *scratch_directory(const char *name) {
  static char path[2048];
  const char *file = test_write_file(name, "", 0);
  assert_true(strlen(file) < sizeof path);
  strcpy(path, file);
  unlink(path);
  assert_int_equal(mkdir(path, 0700), 0);
  return path;
}

static void write_text(const char *path, const char *text) {
  FILE *file = fopen(path, "wb");
  assert_non_null(file);
  fputs(text, file);
  fclose(file);
}

static void expect_text(const char *path, const char *text) {
  char buffer[256] = "";
  FILE *file = fopen(path, "rb");
  assert_non_null(file);
  size_t got = fread(buffer, 1, sizeof buffer - 1, file);
  fclose(file);
  buffer[got] = 0;
  assert_string_equal(buffer, text);
}

/* No "<name>.tmp-*" file is left in directory. */
static void expect_no_temporary_files(const char *directory) {
  DIR *listing = opendir(directory);
  assert_non_null(listing);
  for (struct dirent *entry; (entry = readdir(listing));)
    if (strstr(entry->d_name, ".tmp-") && entry->d_type != DT_LNK) fail_msg("left behind: %s", entry->d_name);
  closedir(listing);
}

static int arm(void **state) {
  (void)state;
  alarm(20);
  return 0;
}

static int disarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* Symlinks at the temporary name the library used to use (<path>.tmp-<pid>), dangling or to a file, and at
 * the checkpoint path itself: none is written through; the victim keeps its bytes. */
static void symlinks_never_redirect_a_save(void **state) {
  (void)state;
  model m;
  model_create(&m, 1);
  const char *directory = scratch_directory("hostile-symlinks");
  char path[4096], victim[4096], planted[4200], dangling[4096];
  snprintf(path, sizeof path, "%s/run.ckpt", directory);
  snprintf(victim, sizeof victim, "%s/victim", directory);
  snprintf(dangling, sizeof dangling, "%s/would-be-created", directory);
  write_text(victim, "precious");
  snprintf(planted, sizeof planted, "%s.tmp-%ld", path, (long)getpid());
  assert_int_equal(symlink(victim, planted), 0);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  expect_text(victim, "precious");
  unlink(planted);
  assert_int_equal(symlink(dangling, planted), 0);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  struct stat info;
  assert_int_equal(lstat(dangling, &info), -1); /* the dangling link's target was not created */

  /* A symlink at the checkpoint path is replaced by the new file; what it pointed to is left alone. */
  unlink(path);
  assert_int_equal(symlink(victim, path), 0);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  expect_text(victim, "precious");
  assert_int_equal(lstat(path, &info), 0);
  assert_true(S_ISREG(info.st_mode));
  assert_ok(m.context, bpt_checkpoint_load(m.graph, path, NULL));
  unlink(planted);
  expect_no_temporary_files(directory);
  model_destroy(&m);
}

/* Reading through a symlink the caller chose is fine (a checkpoint linked from a results folder). */
static void loading_follows_a_symlink_to_a_regular_file(void **state) {
  (void)state;
  model m;
  model_create(&m, 2);
  const char *directory = scratch_directory("hostile-follow");
  char path[4096], link_path[4096];
  snprintf(path, sizeof path, "%s/real.ckpt", directory);
  snprintf(link_path, sizeof link_path, "%s/latest.ckpt", directory);
  assert_ok(m.context, bpt_checkpoint_save(m.graph, path, NULL));
  assert_int_equal(symlink(path, link_path), 0);
  assert_ok(m.context, bpt_checkpoint_load(m.graph, link_path, NULL));
  model_destroy(&m);
}

/* A FIFO where a checkpoint, an IDX file or a trace is read or written: refused at once, never blocked on. */
static void fifos_are_refused_without_blocking(void **state) {
  (void)state;
  model m;
  model_create(&m, 3);
  const char *directory = scratch_directory("hostile-fifos");
  char fifo[4096], fifo_link[4096], labels[4096], images_gz[4096];
  snprintf(fifo, sizeof fifo, "%s/fifo", directory);
  snprintf(fifo_link, sizeof fifo_link, "%s/link-to-fifo", directory);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(symlink(fifo, fifo_link), 0);
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_checkpoint_load(m.graph, fifo, NULL));
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_checkpoint_load(m.graph, fifo_link, NULL));
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_checkpoint_save(m.graph, fifo, NULL));
  struct stat info;
  assert_int_equal(lstat(fifo, &info), 0);
  assert_true(S_ISFIFO(info.st_mode)); /* not replaced */

  const unsigned char label_bytes[8 + 2] = {0, 0, 8, 1, 0, 0, 0, 2, 0, 1};
  snprintf(labels, sizeof labels, "%s", test_write_file("hostile-labels", label_bytes, sizeof label_bytes));
  bpt_dataset *data = NULL;
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_dataset_load_idx(m.context, fifo, labels, &data));
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_dataset_load_idx(m.context, fifo_link, labels, &data));
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_dataset_load_idx(m.context, labels, fifo, &data));
  assert_null(data);
  /* The directory loader finds "train-images-idx3-ubyte.gz" as a FIFO and refuses it too. */
  snprintf(images_gz, sizeof images_gz, "%s/train-images-idx3-ubyte.gz", directory);
  assert_int_equal(mkfifo(images_gz, 0600), 0);
  char labels_in_directory[4200];
  snprintf(labels_in_directory, sizeof labels_in_directory, "%s/train-labels-idx1-ubyte", directory);
  FILE *file = fopen(labels_in_directory, "wb");
  assert_non_null(file);
  assert_int_equal(fwrite(label_bytes, 1, sizeof label_bytes, file), sizeof label_bytes);
  fclose(file);
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_dataset_load_idx_directory(m.context, directory, "train", &data));

  assert_ok(m.context, bpt_profiler_enable(m.context, 1));
  assert_fails(m.context, BPT_ERR_IO, "FIFO", bpt_profiler_write_trace(m.context, fifo));
  assert_ok(m.context, bpt_profiler_enable(m.context, 0));
  model_destroy(&m);
}

/* Directories and devices are refused the same way. The device is a copy of /dev/null made in the scratch
 * directory (when mknod is allowed), so that a broken build replacing it cannot touch the real one. */
static void directories_and_devices_are_refused(void **state) {
  (void)state;
  model m;
  model_create(&m, 4);
  const char *directory = scratch_directory("hostile-devices");
  assert_fails(m.context, BPT_ERR_IO, "directory", bpt_checkpoint_load(m.graph, directory, NULL));
  assert_fails(m.context, BPT_ERR_IO, "directory", bpt_checkpoint_save(m.graph, directory, NULL));
  assert_fails(m.context, BPT_ERR_IO, "device", bpt_checkpoint_load(m.graph, "/dev/zero", NULL));
  bpt_dataset *data = NULL;
  assert_fails(m.context, BPT_ERR_IO, "device", bpt_dataset_load_idx(m.context, "/dev/zero", NULL, &data));
  char device[4200];
  snprintf(device, sizeof device, "%s/null", directory);
  if (mknod(device, S_IFCHR | 0600, makedev(1, 3)) != 0) {
    print_message("mknod not permitted (%s): the save-over-a-device case is skipped\n", strerror(errno));
  } else {
    assert_fails(m.context, BPT_ERR_IO, "device", bpt_checkpoint_save(m.graph, device, NULL));
    struct stat info;
    assert_int_equal(lstat(device, &info), 0);
    assert_true(S_ISCHR(info.st_mode)); /* not replaced by a regular file */
    assert_ok(m.context, bpt_profiler_enable(m.context, 1));
    assert_fails(m.context, BPT_ERR_IO, "device", bpt_profiler_write_trace(m.context, device));
  }
  model_destroy(&m);
}

typedef struct saver {
  model model;
  const char *path;
  int saved, loaded;
  const volatile int *stop;
  char error[512];
} saver;

static void *save_loop(void *argument) {
  saver *s = argument;
  for (int i = 0; i < SAVES; i++) {
    if (bpt_checkpoint_save(s->model.graph, s->path, NULL) != BPT_OK) {
      snprintf(s->error, sizeof s->error, "%s", bpt_context_last_error(s->model.context));
      return NULL;
    }
    s->saved++;
  }
  return NULL;
}

static void *load_loop(void *argument) {
  saver *s = argument;
  while (!*s->stop) {
    if (bpt_checkpoint_load(s->model.graph, s->path, NULL) != BPT_OK) {
      snprintf(s->error, sizeof s->error, "%s", bpt_context_last_error(s->model.context));
      return NULL;
    }
    s->loaded++;
  }
  return NULL;
}

/* Two threads save to one path 50 times each while a third loads it in a loop: every save succeeds, every load
 * finds a complete checkpoint, and no temporary file is left. */
static void two_threads_save_to_one_path(void **state) {
  (void)state;
  const char *directory = scratch_directory("hostile-threads");
  char path[4096];
  snprintf(path, sizeof path, "%s/shared.ckpt", directory);
  volatile int stop = 0;
  saver savers[3];
  memset(savers, 0, sizeof savers);
  for (int i = 0; i < 3; i++) {
    model_create(&savers[i].model, 10 + (uint64_t)i);
    savers[i].path = path;
    savers[i].stop = &stop;
  }
  assert_ok(savers[0].model.context, bpt_checkpoint_save(savers[0].model.graph, path, NULL));
  pthread_t threads[3];
  assert_int_equal(pthread_create(&threads[2], NULL, load_loop, &savers[2]), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&threads[i], NULL, save_loop, &savers[i]), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(threads[i], NULL);
  stop = 1;
  pthread_join(threads[2], NULL);
  for (int i = 0; i < 3; i++)
    if (savers[i].error[0]) fail_msg("thread %d: %s", i, savers[i].error);
  print_message("%d and %d saves, %d concurrent loads\n", savers[0].saved, savers[1].saved, savers[2].loaded);
  assert_int_equal(savers[0].saved, SAVES);
  assert_int_equal(savers[1].saved, SAVES);
  assert_ok(savers[2].model.context, bpt_checkpoint_load(savers[2].model.graph, path, NULL));
  expect_no_temporary_files(directory);
  for (int i = 0; i < 3; i++)
    model_destroy(&savers[i].model);
}

/* Issue 30, class 11: re-saving over a 0600 checkpoint or ONNX file left it 0644. A replaced file keeps its
 * mode; a new one gets 0666 less the umask. */
static mode_t mode_of(const char *path) {
  struct stat info;
  assert_int_equal(stat(path, &info), 0);
  return info.st_mode & 07777;
}

static void saving_keeps_the_file_mode(void **state) {
  (void)state;
  model m;
  model_create(&m, 1);
  const char *directory = scratch_directory("hostile-modes");
  char checkpoint[4096], onnx[4096];
  snprintf(checkpoint, sizeof checkpoint, "%s/private.ckpt", directory);
  snprintf(onnx, sizeof onnx, "%s/private.onnx", directory);
  const mode_t saved_umask = umask(022);
  for (int kind = 0; kind < 2; kind++) {
    const char *path = kind ? onnx : checkpoint;
    unlink(path);
#define SAVE() assert_ok(m.context, kind ? bpt_graph_export_onnx(m.graph, path, NULL) : bpt_checkpoint_save(m.graph, path, NULL))
    SAVE();
    assert_int_equal(mode_of(path), 0644); /* new: 0666 less the umask 022 */
    assert_int_equal(chmod(path, 0600), 0);
    SAVE();
    if (mode_of(path) != 0600) fail_msg("%s: re-saved over a 0600 file, now %04o", path, (unsigned)mode_of(path));
    assert_int_equal(chmod(path, 0664), 0); /* kept even where the umask would not give it */
    SAVE();
    assert_int_equal(mode_of(path), 0664);
    unlink(path);
    umask(077);
    SAVE();
    assert_int_equal(mode_of(path), 0600); /* new under umask 077 */
    umask(002);
    unlink(path);
    SAVE();
    assert_int_equal(mode_of(path), 0664); /* new under umask 002: not capped at 0644 */
    umask(022);
#undef SAVE
  }
  umask(saved_umask);
  expect_no_temporary_files(directory);
  model_destroy(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(symlinks_never_redirect_a_save, arm, disarm),
      cmocka_unit_test_setup_teardown(loading_follows_a_symlink_to_a_regular_file, arm, disarm),
      cmocka_unit_test_setup_teardown(fifos_are_refused_without_blocking, arm, disarm),
      cmocka_unit_test_setup_teardown(directories_and_devices_are_refused, arm, disarm),
      cmocka_unit_test_setup_teardown(two_threads_save_to_one_path, arm, disarm),
      cmocka_unit_test_setup_teardown(saving_keeps_the_file_mode, arm, disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
