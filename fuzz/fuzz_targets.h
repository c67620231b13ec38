/* The fuzz targets' bodies, shared by the libFuzzer entry points (fuzz_idx.c, fuzz_checkpoint.c) and by
 * tests/test_fuzz_corpus.c, which replays the committed corpora and regressions in every CTest run. */
#ifndef BPT_FUZZ_TARGETS_H
#define BPT_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* Input: byte 0 selects the mode. Even: bytes 1.. are one IDX file read alone. Odd: bytes 1-2 (little-endian)
 * give the length of an image file starting at byte 3, the rest is a label file; both are loaded as a data
 * set, which is then normalised, shuffled and batched. Returns 0 (libFuzzer's convention). */
int bpt_fuzz_idx(const uint8_t *data, size_t size);

/* Input: one file for the IDX reader, normally a gzip stream. Whatever it accepts from a gzip file is checked
 * against zlib alone: the file must be complete members that inflate to exactly the header and payload. */
int bpt_fuzz_gzip(const uint8_t *data, size_t size);

/* Input: a checkpoint, loaded into a fixed small graph with an Adam optimiser, a data set and a registered
 * buffer (and, for odd sizes, a second time with parameters only). When fix_crcs is non-zero, section CRCs
 * are recomputed first so that a library built with CRC checks reaches the same decoders as a fuzzing build. */
int bpt_fuzz_checkpoint(const uint8_t *data, size_t size, int fix_crcs);

/* Writes a checkpoint of the fixed graph (with optimiser and order when full is non-zero) to path: the seed
 * corpus. Returns 0 on success. */
int bpt_fuzz_checkpoint_seed(const char *path, int full);

/* Input (fuzz_shape_target.c): byte 0 picks the input rank, then sizes (one byte each: 0-31, or with the high
 * bit one of a table of hostile values near 2^30, 2^31, 2^32, 2^62 and INT64_MAX) for its dims, then up to 12
 * ops (one byte picks linear, conv2d, pools, global pool, reshape, flatten, batch norm, dropout, ReLU or a
 * residual add, followed by their sizes), then the compile batch. An accepted graph is compiled and, when
 * small, run forward once. Returns 0. */
int bpt_fuzz_shape(const uint8_t *data, size_t size);

#endif
