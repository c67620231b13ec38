/* Checks, before any data is read or any training runs, that a file an example writes only at its end (--save,
 * --onnx, --profile, --checkpoint, ...) can be created, so that a typo in a directory ends the run at once
 * instead of after minutes of training whose result is then lost. Header-only, for the C and C++ examples. */
#ifndef BPT_EXAMPLE_OUTPUT_H
#define BPT_EXAMPLE_OUTPUT_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Exits(2) with a message naming option and path unless a file can be created beside path: the library writes
 * checkpoints and ONNX files to a temporary file there and renames it, so creating one is the honest test
 * (a directory's permission bits do not say, for root or on /proc). A directory at path is refused too, and so
 * is any other file that is not a regular one (/dev/null, a FIFO): the library's writers refuse those, but only
 * at the end. --metrics is the exception: the examples open it themselves at the start, so /dev/stdout works. */
static inline void example_check_output_file(const char *option, const char *path) {
  struct stat status;
  if (!path) return;
  const bool exists = *path && stat(path, &status) == 0;
  if (!*path || (exists && S_ISDIR(status.st_mode))) {
    fprintf(stderr, "error: %s '%s': %s; nothing was run\n", option, path,
            *path ? "is a directory, not a file" : "is empty");
    exit(2);
  }
  if (exists && !S_ISREG(status.st_mode)) {
    if (strcmp(option, "--metrics") == 0) return;
    fprintf(stderr, "error: %s '%s': is not a regular file (a device or FIFO), which the library does not write; "
            "nothing was run\n", option, path);
    exit(2);
  }
  char probe[4096];
  if (snprintf(probe, sizeof probe, "%s.probe-%ld", path, (long)getpid()) >= (int)sizeof probe) {
    fprintf(stderr, "error: %s: the path is too long; nothing was run\n", option);
    exit(2);
  }
  int file = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (file < 0) {
    fprintf(stderr, "error: %s '%s': cannot create a file there (%s); nothing was run\n", option, path,
            strerror(errno));
    exit(2);
  }
  close(file);
  unlink(probe);
}

#endif
