/* Opening the files the library reads and writes (checkpoints, IDX data, profiler traces) so that a hostile
 * path cannot hang the process or redirect a write: no open() that blocks on a FIFO or device, nothing but
 * regular files read, temporary files with unguessable names created exclusively and never through a symlink,
 * and an atomic replace for checkpoints. The rules are in docs/robustness.md (class 6). */
#ifndef BPT_CORE_FILE_IO_H
#define BPT_CORE_FILE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/context.h"

/* The longest path the writers accept. */
#define BPT_FILE_PATH_LIMIT 4096

/* Opens path read-only without blocking (O_NONBLOCK until fstat says it is a regular file, then cleared). A
 * symlink at path is followed (the caller chose the path), but what it ends at must be a regular file: a FIFO,
 * device, socket or directory is refused with BPT_ERR_IO and a message "<what> '<path>': ...". On success
 * *descriptor is open (close it) and *size is the file's size. */
bpt_status bpt_file_open_for_reading(bpt_context *context, const char *path, const char *what, int *descriptor,
                                     int64_t *size);

/* Creates or truncates path for writing, the same way: never blocks, and refuses anything at path that is not a
 * regular file (a symlink is followed, as for reading). */
bpt_status bpt_file_open_for_writing(bpt_context *context, const char *path, const char *what, int *descriptor);

/* Writes bytes to path atomically: a new temporary file "<path>.tmp-<random>" beside it (O_CREAT | O_EXCL |
 * O_NOFOLLOW, so a planted file or symlink there is never written through, and two threads or processes never
 * share one), fsync, rename over path, fsync of the directory. A symlink at path is replaced, not followed; a
 * FIFO, device, socket or directory at path is refused. On any failure path is untouched and the temporary
 * file removed. A new file is 0666 less the umask; a replaced regular file (a symlink's target) keeps its
 * permission bits (issue 30, class 11). */
bpt_status bpt_file_write_atomically(bpt_context *context, const char *path, const char *what, const void *bytes,
                                     size_t size);

/* A replacement written in full beside its path but not yet renamed over it. Files that belong together (an
 * ONNX model and its external data) are each staged, then committed one after the other: a failure while
 * writing either leaves both old files as they were. */
typedef struct bpt_staged_file {
  const char *path, *what; /* the caller's strings, alive until commit or discard */
  char temporary[BPT_FILE_PATH_LIMIT + 64];
  bool pending; /* the temporary file exists */
  bool renamed; /* commit put it in place (even if syncing the directory then failed) */
} bpt_staged_file;

/* The first half of bpt_file_write_atomically: the same checks, the temporary file written and synced. On
 * failure nothing is left behind. */
bpt_status bpt_file_stage(bpt_context *context, const char *path, const char *what, const void *bytes, size_t size,
                          bpt_staged_file *staged);
/* The second half: renames the staged file over its path and syncs the directory. On a failed rename the
 * temporary file is removed and the previous file is unchanged. */
bpt_status bpt_file_commit(bpt_context *context, bpt_staged_file *staged);
/* Removes a staged file that will not be committed; nothing when none is pending. */
void bpt_file_discard(bpt_staged_file *staged);

#endif
