/* Environment variables that name an index (BPT_CUDA_DEVICE): decimal digits only, so that "abc", "1x", "",
 * "-1", "+1" or " 1" fail instead of naming another device (atoi read "abc" as 0). Header-only, so the CUDA
 * module and the tests use it without a library symbol. */
#ifndef BPT_BASE_PARSE_INDEX_H
#define BPT_BASE_PARSE_INDEX_H

#include <limits.h>
#include <stdbool.h>

/* Sets *index and returns true when text is 1 to 10 decimal digits whose value is at most INT_MAX. */
static inline bool bpt_parse_index(const char *text, int *index) {
  if (!text || !*text) return false;
  long long value = 0;
  for (const char *c = text; *c; c++) {
    if (*c < '0' || *c > '9' || c - text >= 10) return false;
    value = value * 10 + (*c - '0');
  }
  if (value > INT_MAX) return false;
  *index = (int)value;
  return true;
}

#endif
