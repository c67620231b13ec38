/* The checkpoint container, independent of what is stored in it: little-endian encoders and bounds-checked
 * decoders, tagged sections with a CRC32 each (header and payload), an atomic file write and a size-capped whole-file read.
 * checkpoint.c decides what goes into the sections; docs/checkpoints.md describes the bytes. */
#ifndef BPT_CORE_CHECKPOINT_FORMAT_H
#define BPT_CORE_CHECKPOINT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/context.h"

#define BPT_CHECKPOINT_MAGIC "bptckpt\n"
/* Version 2: each section's CRC covers its header's tag, flags and length too (version 1: the payload only), and
 * GRPH holds every node's op attributes, slot by slot. Version 3: GRPH holds each node's declared parameters and
 * run-time state by name instead (docs/checkpoints.md). Version 2 files still load. */
#define BPT_CHECKPOINT_FORMAT_VERSION 3u
#define BPT_CHECKPOINT_FORMAT_SLOTS 2u
#define BPT_CHECKPOINT_HEADER_BYTES 24
#define BPT_CHECKPOINT_SECTION_HEADER_BYTES 20
/* Section flag: a reader that does not know the tag may skip the section. */
#define BPT_SECTION_OPTIONAL 1u
/* Refuse files above 64 GiB before allocating: a corrupt or hostile size must not exhaust memory. */
#define BPT_CHECKPOINT_MAX_BYTES (INT64_C(1) << 36)
/* Longest string (names) a checkpoint may hold. */
#define BPT_CHECKPOINT_MAX_STRING 4096

#define BPT_TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

/* A growable byte buffer; a failed allocation sticks (failed = true) and is reported once at the end. */
typedef struct bpt_writer {
  unsigned char *bytes;
  size_t size, capacity;
  bool failed;
} bpt_writer;

void bpt_writer_free(bpt_writer *writer);
void bpt_put_bytes(bpt_writer *writer, const void *bytes, size_t size);
void bpt_put_u32(bpt_writer *writer, uint32_t value);
void bpt_put_u64(bpt_writer *writer, uint64_t value);
void bpt_put_i64(bpt_writer *writer, int64_t value);
void bpt_put_f32(bpt_writer *writer, float value);
void bpt_put_f32_array(bpt_writer *writer, const float *values, int64_t count);
void bpt_put_string(bpt_writer *writer, const char *text);
/* Starts a section; returns the offset bpt_section_end() needs. */
size_t bpt_section_begin(bpt_writer *writer, uint32_t tag, uint32_t flags);
/* Fills in the section's length and CRC. */
void bpt_section_end(bpt_writer *writer, size_t start);
/* Writes the file header for section_count sections at the start of the buffer (reserved by bpt_writer_start). */
void bpt_writer_start(bpt_writer *writer);
void bpt_writer_finish(bpt_writer *writer, uint32_t section_count);

/* A bounds-checked cursor over one section's payload. Every get returns false past the end (and sets
 * overrun), so decoders can chain them and report one "truncated" error. */
typedef struct bpt_reader {
  const unsigned char *bytes;
  size_t size, offset;
  bool overrun;
} bpt_reader;

bool bpt_get_u32(bpt_reader *reader, uint32_t *value);
bool bpt_get_u64(bpt_reader *reader, uint64_t *value);
bool bpt_get_i64(bpt_reader *reader, int64_t *value);
bool bpt_get_f32(bpt_reader *reader, float *value);
/* Decodes count floats into values (caller-allocated). */
bool bpt_get_f32_array(bpt_reader *reader, float *values, int64_t count);
/* Copies a string into buffer (size bytes, NUL-terminated); false when it does not fit or is truncated. */
bool bpt_get_string(bpt_reader *reader, char *buffer, size_t size);
/* Bytes left in the section. */
size_t bpt_reader_left(const bpt_reader *reader);

typedef struct bpt_section {
  uint32_t tag, flags;
  bpt_reader payload;
} bpt_section;

/* Validates the header and every section's bounds and CRC (the CRC check is compiled out in fuzzing builds so
 * that fuzzers reach the decoders) and returns the section table (free it). `what` names the file in messages. */
bpt_status bpt_checkpoint_split(bpt_context *context, const unsigned char *bytes, size_t size, const char *what,
                                uint32_t *library_version, bpt_section **sections, int *section_count);
/* The format version of a buffer bpt_checkpoint_split accepted. */
uint32_t bpt_checkpoint_format_of(const unsigned char *bytes);

/* A section's CRC: its header's first 16 bytes (tag, flags, length), then the payload. */
uint32_t bpt_checkpoint_section_crc(const unsigned char *header, const unsigned char *payload, size_t payload_size);

/* "GRPH" for a tag, into a 5-byte buffer, with non-printable bytes as '?'. */
const char *bpt_tag_name(uint32_t tag, char buffer[5]);

/* Writes bytes to path atomically: a temporary file beside it, fsync, rename over path, fsync of the
 * directory. On any failure path is untouched and the temporary file is removed. */
bpt_status bpt_write_file_atomically(bpt_context *context, const char *path, const void *bytes, size_t size);
/* Reads a checkpoint file into a malloc'd buffer: its magic, header CRC and section lengths first, then only
 * the bytes they declare, which must be the whole file and fit both BPT_CHECKPOINT_MAX_BYTES and memory. */
bpt_status bpt_read_whole_file(bpt_context *context, const char *path, unsigned char **bytes, size_t *size);

#endif
