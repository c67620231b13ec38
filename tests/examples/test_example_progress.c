/* The examples' progress bar on bpt_train's progress reports: its rate is samples over the library's seconds
 * since the epoch began (so the first batch counts and one batch per epoch reads right), and a clock that
 * has not moved prints "-", never an infinite or made-up rate (issue 29). */
#define _POSIX_C_SOURCE 200809L /* dup, dup2, nanosleep */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "example_util.h"

static int failures = 0;

/* Sends stderr to a temporary file until read_stderr(); NULL (and a failure counted) when none can be made. */
static FILE *capture_stderr(int *saved) {
  FILE *file = tmpfile();
  if (!file) {
    printf("cannot make a temporary file\n");
    failures++;
    return NULL;
  }
  fflush(stderr);
  *saved = dup(fileno(stderr));
  dup2(fileno(file), fileno(stderr));
  return file;
}

/* Puts stderr back and reads what was written to it into line. */
static void read_stderr(FILE *file, int saved, char *line, size_t size) {
  fflush(stderr);
  dup2(saved, fileno(stderr));
  close(saved);
  rewind(file);
  line[fread(line, 1, size - 1, file)] = 0;
  fclose(file);
}

/* Feeds one report to the bar with stderr sent to a file and checks that the drawn line holds @p expected. */
static void expect_line(int64_t batch, int64_t batches, int64_t samples, double seconds, const char *expected) {
  int saved;
  FILE *file = capture_stderr(&saved);
  if (!file) return;
  example_progress bar = {.total = (long)samples}; /* as batch 1 of the epoch set it */
  bpt_train_progress report = {.size = sizeof report,
                               .epoch = 1,
                               .epochs = 1,
                               .batch = batch,
                               .batches = batches,
                               .samples = samples,
                               .total = samples,
                               .seconds = seconds,
                               .running_loss = 0.5};
  example_progress_callback(&bar, &report);
  char line[512];
  read_stderr(file, saved, line, sizeof line);
  if (!strstr(line, expected) || (batches > 1 && strstr(line, "warning"))) {
    printf("FAIL: expected \"%s\" in \"%s\"\n", expected, line);
    failures++;
  }
}

/* A bar the example's own loop starts (ddp_mnist, speculative_mnist) times itself, whatever its memory held:
 * they start it on an uninitialised stack struct, where a stale library_clock read as "-" samples/s. */
static void expect_own_clock(void) {
  int saved;
  FILE *file = capture_stderr(&saved);
  if (!file) return;
  example_progress bar = {.library_clock = true, .library_seconds = 0.0}; /* what the stack may hold */
  example_progress_start(&bar, "epoch 1/1", 100);
  struct timespec pause = {.tv_nsec = 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  bar.done = 100;
  example_progress_finish(&bar, 0.5);
  char line[512];
  read_stderr(file, saved, line, sizeof line);
  if (strstr(line, "- samples/s")) {
    printf("FAIL: the example's own bar printed no rate: \"%s\"\n", line);
    failures++;
  }
}

int main(void) {
  expect_own_clock();
  expect_line(1, 1, 60000, 2.0, "60000/60000  30000 samples/s"); /* one batch is the whole epoch */
  expect_line(1, 1, 100, 0.0, "100/100  - samples/s");           /* no time measured: no rate */
  expect_line(1, 1, 100, 1.0, "warning: the batch holds the whole training set (100 samples)");
  expect_line(2, 2, 100, 4.0, "100/100  25 samples/s"); /* two batches: no warning */
  if (failures == 0) printf("progress bar: rates from the library's epoch clock\n");
  return failures ? 1 : 0;
}
