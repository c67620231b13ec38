/* A byte-level text corpus for the language-model examples: one file, or every regular file without an extension
 * in a directory, concatenated in name order (Debian's fortunes: /usr/share/games/fortunes holds each collection
 * as "name", "name.dat" and "name.u8"; the extensionless one is the text). Header-only, so an example needs no
 * build change. Errors end the run with a message naming the path, as the examples' other loaders do. */
#ifndef BPT_EXAMPLE_TEXT_CORPUS_H
#define BPT_EXAMPLE_TEXT_CORPUS_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct text_corpus {
  unsigned char *bytes;
  int64_t size;
  int files;
} text_corpus;

static void text_corpus_fail(const char *path, const char *what) {
  fprintf(stderr, "error: text corpus '%s': %s\n", path, what);
  exit(1);
}

static void text_corpus_append(text_corpus *corpus, const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) text_corpus_fail(path, strerror(errno));
  struct stat status;
  if (fstat(fileno(file), &status) != 0 || status.st_size < 0) text_corpus_fail(path, "cannot read its size");
  const int64_t size = (int64_t)status.st_size;
  if (size > INT64_C(1) << 40) text_corpus_fail(path, "larger than 1 TiB");
  unsigned char *grown = (unsigned char *)realloc(corpus->bytes, (size_t)(corpus->size + size + 1));
  if (!grown) text_corpus_fail(path, "out of memory");
  corpus->bytes = grown;
  if (size > 0 && fread(corpus->bytes + corpus->size, 1, (size_t)size, file) != (size_t)size)
    text_corpus_fail(path, "short read");
  fclose(file);
  corpus->size += size;
  corpus->files++;
}

static int text_corpus_compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Loads path (a file, or a directory as described above). Fails when the result has fewer than minimum bytes. */
static text_corpus text_corpus_load(const char *path, int64_t minimum) {
  text_corpus corpus = {NULL, 0, 0};
  struct stat status;
  if (stat(path, &status) != 0) {
    char message[512];
    snprintf(message, sizeof message, "%s%s", strerror(errno),
             strcmp(path, "/usr/share/games/fortunes") == 0
                 ? " (install Debian's fortunes package, or give any text file with --data FILE)"
                 : "");
    text_corpus_fail(path, message);
  }
  if (!S_ISDIR(status.st_mode)) {
    text_corpus_append(&corpus, path);
  } else {
    DIR *directory = opendir(path);
    if (!directory) text_corpus_fail(path, strerror(errno));
    char **names = NULL;
    size_t count = 0;
    for (struct dirent *entry; (entry = readdir(directory));) {
      if (entry->d_name[0] == '.' || strchr(entry->d_name, '.')) continue;
      char **grown = (char **)realloc(names, (count + 1) * sizeof *names);
      if (!grown || !(grown[count] = strdup(entry->d_name))) text_corpus_fail(path, "out of memory");
      names = grown;
      count++;
    }
    closedir(directory);
    qsort(names, count, sizeof *names, text_corpus_compare_names);
    for (size_t i = 0; i < count; i++) {
      char file[4096];
      struct stat file_status;
      if (snprintf(file, sizeof file, "%s/%s", path, names[i]) < (int)sizeof file && stat(file, &file_status) == 0 &&
          S_ISREG(file_status.st_mode))
        text_corpus_append(&corpus, file);
      free(names[i]);
    }
    free(names);
  }
  if (corpus.size < minimum) {
    char message[160];
    snprintf(message, sizeof message, "holds %lld bytes of text in %d files; at least %lld are needed",
             (long long)corpus.size, corpus.files, (long long)minimum);
    text_corpus_fail(path, message);
  }
  return corpus;
}

#endif
