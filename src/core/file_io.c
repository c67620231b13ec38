/* Safe opens for every file the library touches (see file_io.h): readers and writers that cannot block on a
 * FIFO and refuse what is not a regular file, and the crash-safe checkpoint write with an exclusive,
 * unguessable temporary name. */
#define _GNU_SOURCE /* O_NOFOLLOW, O_CLOEXEC, O_DIRECTORY, fsync under -std=c11 */
#include "core/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#define PATH_LIMIT BPT_FILE_PATH_LIMIT

static const char *kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

/* After an O_NONBLOCK open: a regular file gets its blocking mode back, anything else is refused. */
static bpt_status keep_if_regular(bpt_context *context, int descriptor, const char *path, const char *what,
                                  int64_t *size) {
  struct stat info;
  bpt_status status = BPT_OK;
  if (fstat(descriptor, &info) != 0)
    status = bpt_error(context, BPT_ERR_IO, "%s '%s': cannot stat: %s", what, path, strerror(errno));
  else if (!S_ISREG(info.st_mode))
    status = bpt_error(context, BPT_ERR_IO, "%s '%s': is %s, not a regular file", what, path, kind_of(info.st_mode));
  else {
    int flags = fcntl(descriptor, F_GETFL);
    if (flags < 0 || fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK) != 0)
      status = bpt_error(context, BPT_ERR_IO, "%s '%s': fcntl failed: %s", what, path, strerror(errno));
  }
  if (status != BPT_OK) {
    close(descriptor);
    return status;
  }
  if (size) *size = (int64_t)info.st_size;
  return BPT_OK;
}

bpt_status bpt_file_open_for_reading(bpt_context *context, const char *path, const char *what, int *descriptor,
                                     int64_t *size) {
  *descriptor = -1;
  /* O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever, before fstat could refuse it. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot open: %s", what, path, strerror(errno));
  BPT_CHECK(keep_if_regular(context, fd, path, what, size));
  *descriptor = fd;
  return BPT_OK;
}

bpt_status bpt_file_open_for_writing(bpt_context *context, const char *path, const char *what, int *descriptor) {
  *descriptor = -1;
  /* Without O_TRUNC first: truncating is only right once we know it is a regular file. A FIFO without a reader
   * fails at once with ENXIO under O_NONBLOCK instead of blocking. */
  /* 0666: a new file gets what the umask leaves, like any program's (issue 30, class 11). */
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
  if (fd < 0) {
    int error = errno;
    struct stat info;
    /* A FIFO without a reader says ENXIO: name what is there rather than "no such device". */
    if (stat(path, &info) == 0 && !S_ISREG(info.st_mode))
      return bpt_error(context, BPT_ERR_IO, "%s '%s': is %s, not a regular file", what, path, kind_of(info.st_mode));
    return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot open for writing: %s", what, path, strerror(error));
  }
  BPT_CHECK(keep_if_regular(context, fd, path, what, NULL));
  if (ftruncate(fd, 0) != 0) {
    int error = errno;
    close(fd);
    return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot truncate: %s", what, path, strerror(error));
  }
  *descriptor = fd;
  return BPT_OK;
}

/* 64 unpredictable bits for a temporary name. The kernel's generator when there is one; otherwise a mix of
 * time, process, a per-process counter and addresses. Safety never rests on it (O_EXCL does that); it only
 * keeps someone who plants files from guessing the name in advance. */
static uint64_t random_bits(void) {
  static _Atomic uint64_t counter;
  uint64_t bits = 0;
#if defined(__linux__)
  if (getrandom(&bits, sizeof bits, GRND_NONBLOCK) == (ssize_t)sizeof bits) return bits;
#endif
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  uint64_t x = (uint64_t)now.tv_nsec ^ (uint64_t)now.tv_sec << 30 ^ (uint64_t)getpid() << 17 ^
               atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u ^ (uint64_t)(uintptr_t)&bits;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9u;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebu;
  return x ^ x >> 31;
}

/* Directory part of path ("." when there is none), for the fsync that makes the rename durable. */
static void directory_of(const char *path, char *buffer, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(buffer, size, ".");
  else if (slash == path)
    snprintf(buffer, size, "/");
  else
    snprintf(buffer, size, "%.*s", (int)(slash - path), path);
}

static bool write_all(int descriptor, const unsigned char *bytes, size_t size) {
  while (size > 0) {
    ssize_t written = write(descriptor, bytes, size > (1u << 30) ? (1u << 30) : size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    bytes += written;
    size -= (size_t)written;
  }
  return true;
}

/* Creates a fresh temporary file beside path; its name goes into temporary. */
static bpt_status create_temporary(bpt_context *context, const char *path, const char *what, char *temporary,
                                   size_t size, int *descriptor, mode_t mode) {
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(temporary, size, "%s.tmp-%016llx", path, (unsigned long long)random_bits());
    /* O_EXCL fails on anything already there, a symlink included (dangling or not); O_NOFOLLOW says so twice. */
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd >= 0) {
      /* The umask applied to 0666 is a new file's mode; a replaced file's own mode is kept exactly, since
       * open() cannot give more than the umask allows. */
      if (mode != (mode_t)-1 && fchmod(fd, mode) != 0) {
        const int error = errno;
        close(fd);
        unlink(temporary);
        return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot give '%s' the mode %04o of the file it replaces: %s",
                         what, path, temporary, (unsigned)mode, strerror(error));
      }
      *descriptor = fd;
      return BPT_OK;
    }
    if (errno != EEXIST && errno != EINTR)
      return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot create '%s': %s", what, path, temporary,
                       strerror(errno));
  }
  return bpt_error(context, BPT_ERR_IO, "%s '%s': cannot create a temporary file beside it (100 names taken)", what,
                   path);
}

bpt_status bpt_file_stage(bpt_context *context, const char *path, const char *what, const void *bytes, size_t size,
                          bpt_staged_file *staged) {
  staged->path = path;
  staged->what = what;
  staged->pending = false;
  staged->renamed = false;
  if (strlen(path) > PATH_LIMIT)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s '%.64s...': path too long", what, path);
  /* rename() would replace a FIFO or device node (or, as root, /dev/null itself): only a regular file, a
   * symlink (replaced by the new file, its target untouched) or nothing may be at path. */
  struct stat existing;
  if (lstat(path, &existing) == 0 && !S_ISREG(existing.st_mode) && !S_ISLNK(existing.st_mode))
    return bpt_error(context, BPT_ERR_IO, "%s '%s': is %s, not a regular file; not replacing it", what, path,
                     kind_of(existing.st_mode));
  /* The file being replaced (a symlink's target, which is what a reader sees) keeps its permissions: re-saving a
   * private 0600 model must not publish it. Set-id and sticky bits are not carried over. */
  mode_t mode = (mode_t)-1;
  struct stat target;
  if (stat(path, &target) == 0 && S_ISREG(target.st_mode)) mode = target.st_mode & 0777;
  int descriptor = -1;
  BPT_CHECK(create_temporary(context, path, what, staged->temporary, sizeof staged->temporary, &descriptor, mode));
  const char *failed = NULL;
  if (!write_all(descriptor, bytes, size))
    failed = "write";
  else if (fsync(descriptor) != 0)
    failed = "fsync";
  int error = errno;
  if (close(descriptor) != 0 && !failed) {
    failed = "close";
    error = errno;
  }
  if (failed) {
    unlink(staged->temporary);
    return bpt_error(context, BPT_ERR_IO, "%s '%s': %s failed: %s; the previous file is unchanged", what, path,
                     failed, strerror(error));
  }
  staged->pending = true;
  return BPT_OK;
}

void bpt_file_discard(bpt_staged_file *staged) {
  if (staged->pending) unlink(staged->temporary);
  staged->pending = false;
}

bpt_status bpt_file_commit(bpt_context *context, bpt_staged_file *staged) {
  const char *path = staged->path, *what = staged->what;
  if (!staged->pending) return bpt_error(context, BPT_ERR_INTERNAL, "%s '%s': nothing staged to commit", what, path);
  if (rename(staged->temporary, path) != 0) {
    const int error = errno;
    bpt_file_discard(staged);
    return bpt_error(context, BPT_ERR_IO, "%s '%s': rename failed: %s; the previous file is unchanged", what, path,
                     strerror(error));
  }
  staged->pending = false;
  staged->renamed = true;
  char directory[PATH_LIMIT];
  directory_of(path, directory, sizeof directory);
  int directory_descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* Without the directory fsync a power loss could forget the rename (the new name), not the data. */
  /* Some file systems (network, FUSE) cannot fsync a directory and say EINVAL: the rename stands regardless. */
  if (directory_descriptor < 0 || (fsync(directory_descriptor) != 0 && errno != EINVAL)) {
    const int error = errno;
    if (directory_descriptor >= 0) close(directory_descriptor);
    return bpt_error(context, BPT_ERR_IO, "%s '%s': written, but syncing directory '%s' failed: %s", what, path,
                     directory, strerror(error));
  }
  close(directory_descriptor);
  return BPT_OK;
}

bpt_status bpt_file_write_atomically(bpt_context *context, const char *path, const char *what, const void *bytes,
                                     size_t size) {
  bpt_staged_file staged;
  BPT_CHECK(bpt_file_stage(context, path, what, bytes, size, &staged));
  return bpt_file_commit(context, &staged);
}
