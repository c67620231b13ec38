/* See cmocka.h beside this file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmocka.h"

static jmp_buf test_exit;
enum { PASSED = 1, FAILED = 2, SKIPPED = 3 };

void shim_fail(const char *file, int line, const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  fprintf(stderr, "[  ERROR   ] %s:%d: ", file, line);
  vfprintf(stderr, format, arguments);
  fputc('\n', stderr);
  va_end(arguments);
  longjmp(test_exit, FAILED);
}

void shim_skip(void) { longjmp(test_exit, SKIPPED); }

void print_message(const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vprintf(format, arguments);
  va_end(arguments);
  fflush(stdout);
}

void print_error(const char *format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vfprintf(stderr, format, arguments);
  va_end(arguments);
}

int shim_run_tests(const struct CMUnitTest *tests, int count) {
  int failed = 0;
  for (int i = 0; i < count; i++) {
    printf("[ RUN      ] %s\n", tests[i].name);
    fflush(stdout);
    int outcome = setjmp(test_exit);
    if (outcome == 0) {
      void *state = NULL;
      tests[i].test_func(&state);
      outcome = PASSED;
    }
    printf("%s %s\n", outcome == PASSED ? "[       OK ]" : outcome == SKIPPED ? "[  SKIPPED ]" : "[  FAILED  ]",
           tests[i].name);
    failed += outcome == FAILED;
  }
  printf("[==========] %d test(s), %d failed\n", count, failed);
  return failed;
}
