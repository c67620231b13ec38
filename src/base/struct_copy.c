/* Copying size-tagged structs between the caller's layout and ours, so that callers compiled against older,
 * smaller option and report structs keep working (docs/ARCHITECTURE.md, "The public face"). */
#include <string.h>

#include "base/report.h"

bpt_status bpt_copy_options(bpt_context *context, void *ours, size_t our_size, const void *theirs, size_t their_size,
                            size_t minimum_size, const char *what) {
  if (their_size < minimum_size || their_size > (1u << 16))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT,
                     "%s: size field is %zu; initialise options with the matching _default() function", what,
                     their_size);
  memcpy(ours, theirs, their_size < our_size ? their_size : our_size);
  *(size_t *)ours = our_size;
  return BPT_OK;
}

bpt_status bpt_copy_output(bpt_context *context, void *theirs, const void *ours, size_t our_size, size_t minimum_size,
                           const char *what) {
  size_t their_size = *(const size_t *)theirs;
  if (their_size < minimum_size || their_size > (1u << 16))
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: size field is %zu; set it to the struct's sizeof", what,
                     their_size);
  size_t size = their_size < our_size ? their_size : our_size;
  memcpy(theirs, ours, size);
  *(size_t *)theirs = size;
  return BPT_OK;
}
