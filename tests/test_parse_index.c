/* bpt_parse_index (src/base/parse_index.h), which reads BPT_CUDA_DEVICE: only plain decimal indices up to
 * INT_MAX are accepted; everything atoi or strtol would quietly turn into some number is refused. */
#include <limits.h>

#include "base/parse_index.h"
#include "test_support.h"

static void indices_are_read(void **state) {
  (void)state;
  const struct {
    const char *text;
    int value;
  } cases[] = {{"0", 0}, {"7", 7}, {"12", 12}, {"007", 7}, {"2147483647", INT_MAX}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int index = -1;
    assert_true(bpt_parse_index(cases[i].text, &index));
    assert_int_equal(index, cases[i].value);
  }
}

static void anything_else_is_refused(void **state) {
  (void)state;
  const char *const refused[] = {"", "abc", "1x", "x1", "-1", "+1", " 1", "1 ", "1.0", "2147483648",
                                 "99999999999", "00000000001"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    int index = 42;
    assert_false(bpt_parse_index(refused[i], &index));
    assert_int_equal(index, 42); /* left as it was */
  }
  int index = 42;
  assert_false(bpt_parse_index(NULL, &index));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(indices_are_read), cmocka_unit_test(anything_else_is_refused)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
