/* libFuzzer entry point for the IDX reader and data-set loader (see fuzz_targets.h for the input layout). */
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return bpt_fuzz_idx(data, size); }
