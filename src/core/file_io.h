/* Opening the files the library reads and writes (checkpoints, IDX data, profiler traces) so that a hostile
 * path cannot hang the process or redirect a write: no open() that blocks on a FIFO or device, nothing but
 * regular files read, temporary files with unguessable names created exclusively and never through a symlink,
 * and an atomic replace for checkpoints. The rules are in docs/robustness.md (class 6). */
#ifndef BPT_CORE_FILE_IO_H
#define BPT_CORE_FILE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "core/context.h"

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

#endif
