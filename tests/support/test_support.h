/* Helpers shared by the CMocka tests: contexts, random data, finite-difference gradient checks,
 * reference kernels and temporary files. Every test executable links this file. */
#ifndef BPT_TEST_SUPPORT_H
#define BPT_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bptrain.h"

/* Asserts a call returned BPT_OK, printing the context's last error otherwise. */
#define assert_ok(context, expression)                                                                                 \
  do {                                                                                                                 \
    bpt_status assert_ok_status_ = (expression);                                                                       \
    if (assert_ok_status_ != BPT_OK)                                                                                   \
      fail_msg("%s returned %s: %s", #expression, bpt_status_string(assert_ok_status_),                                \
               bpt_context_last_error(context));                                                                       \
  } while (0)

/* Asserts a call failed with the given status and that the context's message contains `fragment`. */
#define assert_fails(context, expected, fragment, expression)                                                          \
  test_assert_fails((context), (expected), (fragment), (expression), #expression, __FILE__, __LINE__)
void test_assert_fails(const bpt_context *context, bpt_status expected, const char *fragment, bpt_status actual,
                       const char *expression, const char *file, int line);

/* A CPU context with 2 threads and the given seed. */
bpt_context *test_context(uint64_t seed);

/* Deterministic pseudo-random numbers for test inputs (independent of the library's generator). */
typedef struct test_random {
  uint64_t state;
} test_random;
void test_random_seed(test_random *random, uint64_t seed);
float test_random_uniform(test_random *random, float low, float high);
/* Fills values with uniform numbers in [low, high], never exactly zero. */
void test_random_fill(test_random *random, float *values, int64_t count, float low, float high);

/* Relative error ||a - b|| / max(||b||, tiny), in double. */
double test_relative_error(const float *a, const float *b, int64_t count);

/*
 * Compares the graph's analytic parameter gradients with central finite differences of the loss.
 * The graph must be compiled with a loss and have its inputs set. Checks at most max_checks parameter
 * elements spread over all parameters (all of them when max_checks <= 0). Each element must satisfy
 * |analytic - numeric| <= absolute_tolerance + relative_tolerance * max(|analytic|, |numeric|).
 */
void test_check_gradients(bpt_context *context, bpt_graph *graph, double step, double absolute_tolerance,
                          double relative_tolerance, int max_checks);

/* Naive row-major C = alpha op(A) op(B) + beta C in double, the reference for GEMM-based kernels. */
void test_reference_gemm(int transpose_a, int transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* The whole file at path, with a NUL byte after its *size bytes (size may be NULL), so text files read as
 * strings; fails the test when the file cannot be read. The caller frees it. */
unsigned char *test_read_file(const char *path, size_t *size);

/* Writes bytes to a fresh file under the build's temporary folder; returns its path (static buffer per call
 * index slot, valid until the 8th following call). */
const char *test_write_file(const char *name, const void *bytes, size_t size);
/* Writes bytes gzip-compressed. */
const char *test_write_gzip_file(const char *name, const void *bytes, size_t size);

/* The running test program's own path (from /proc/self/exe, read once), for tests that re-execute themselves
 * as a child with another environment or limits; NULL where it cannot be read (such tests then skip). */
const char *test_self_executable(void);

/* After reaping a child that a signal ended (SIGKILL on purpose): removes the registration file LLVM's
 * OpenMP runtime (libomp, which clang builds link) keeps in /dev/shm per process. A child killed while it
 * was writing that file leaves it empty, and libomp then refuses to start in any later process that gets
 * the same pid ("OMP: Error #15 ... unknown library already initialized"). A no-op without such a file
 * (GCC's libgomp keeps none). */
void test_forget_killed_process(int pid);

/* Returns the Fashion-MNIST directory when it is installed, else NULL (tests then skip). */
const char *test_fashion_mnist_directory(void);

#endif
