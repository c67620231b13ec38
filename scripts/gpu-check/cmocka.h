/* A small stand-in for CMocka, used by scripts/gpu-check.sh only on machines without libcmocka (the GPU
 * image has no Debian packages). It covers what tests/test_backend_ops.c and tests/support use: unit
 * tests run in order, assertions, fail_msg, skip and print_message, with the same exit conventions. */
#ifndef BPT_CMOCKA_SHIM_H
#define BPT_CMOCKA_SHIM_H

#include <stdint.h>

typedef void (*CMUnitTestFunction)(void **state);
struct CMUnitTest {
  const char *name;
  CMUnitTestFunction test_func;
};

#define cmocka_unit_test(function) {#function, function}
#define cmocka_run_group_tests(tests, setup, teardown) \
  shim_run_tests((tests), (int)(sizeof(tests) / sizeof((tests)[0])))

int shim_run_tests(const struct CMUnitTest *tests, int count);
void shim_fail(const char *file, int line, const char *format, ...) __attribute__((noreturn, format(printf, 3, 4)));
void shim_skip(void) __attribute__((noreturn));
void print_message(const char *format, ...) __attribute__((format(printf, 1, 2)));
void print_error(const char *format, ...) __attribute__((format(printf, 1, 2)));

#define fail_msg(...) shim_fail(__FILE__, __LINE__, __VA_ARGS__)
#define fail() shim_fail(__FILE__, __LINE__, "failure")
#define skip() shim_skip()
#define assert_true(c) ((c) ? (void)0 : shim_fail(__FILE__, __LINE__, "%s is false", #c))
#define assert_false(c) ((c) ? shim_fail(__FILE__, __LINE__, "%s is true", #c) : (void)0)
#define assert_null(p) assert_true((p) == NULL)
#define assert_non_null(p) assert_true((p) != NULL)
#define assert_int_equal(a, b)                                                                                  \
  do {                                                                                                          \
    intmax_t shim_a_ = (intmax_t)(a), shim_b_ = (intmax_t)(b);                                                  \
    if (shim_a_ != shim_b_) shim_fail(__FILE__, __LINE__, "%jd != %jd (%s, %s)", shim_a_, shim_b_, #a, #b);     \
  } while (0)
#define assert_int_not_equal(a, b) assert_true((intmax_t)(a) != (intmax_t)(b))
#define assert_float_equal(a, b, epsilon)                                                                       \
  do {                                                                                                          \
    double shim_a_ = (a), shim_b_ = (b);                                                                        \
    if (!(shim_a_ - shim_b_ <= (epsilon) && shim_b_ - shim_a_ <= (epsilon)))                                    \
      shim_fail(__FILE__, __LINE__, "%g != %g (%s, %s)", shim_a_, shim_b_, #a, #b);                             \
  } while (0)
#define assert_string_equal(a, b) assert_true(strcmp((a), (b)) == 0)
#define assert_memory_equal(a, b, n) assert_true(memcmp((a), (b), (n)) == 0)

#endif
