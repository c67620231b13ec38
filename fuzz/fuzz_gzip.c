/* libFuzzer entry point for the IDX reader's gzip path (see fuzz_targets.h). */
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return bpt_fuzz_gzip(data, size); }
