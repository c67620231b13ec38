/* libFuzzer entry point for the checkpoint loader (see fuzz_targets.h). The library is built with
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, which skips CRC checks so mutations reach the decoders. */
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return bpt_fuzz_checkpoint(data, size, 0); }
