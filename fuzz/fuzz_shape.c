/* libFuzzer entry point for shape inference over random op sequences (see fuzz_targets.h for the input layout). */
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return bpt_fuzz_shape(data, size); }
