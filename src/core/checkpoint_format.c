/* The checkpoint container: explicit little-endian encoding (never a struct dumped from memory, so the bytes
 * are the same on every compiler and platform), per-section CRC32 from zlib, and the crash-safe file write. */
#define _DEFAULT_SOURCE /* pread under -std=c11 */
#include "core/checkpoint_format.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/checkpoint_legacy.h"
#include "core/file_io.h"

static uint32_t crc32_more(uint32_t crc, const unsigned char *bytes, size_t size) {
  uLong value = crc;
  while (size > 0) {
    uInt chunk = size > (1u << 30) ? (1u << 30) : (uInt)size;
    value = crc32(value, bytes, chunk);
    bytes += chunk;
    size -= chunk;
  }
  return (uint32_t)value;
}

static uint32_t crc32_of(const unsigned char *bytes, size_t size) { return crc32_more(0, bytes, size); }

uint32_t bpt_checkpoint_section_crc(const unsigned char *header, const unsigned char *payload, size_t payload_size) {
  return crc32_more(crc32_more(0, header, 16), payload, payload_size);
}

static void store_u32(unsigned char *at, uint32_t value) {
  for (int i = 0; i < 4; i++)
    at[i] = (unsigned char)(value >> (8 * i));
}

static void store_u64(unsigned char *at, uint64_t value) {
  for (int i = 0; i < 8; i++)
    at[i] = (unsigned char)(value >> (8 * i));
}

static uint32_t load_u32(const unsigned char *at) {
  return (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
}

static uint64_t load_u64(const unsigned char *at) { return (uint64_t)load_u32(at) | (uint64_t)load_u32(at + 4) << 32; }

void bpt_writer_free(bpt_writer *writer) {
  free(writer->bytes);
  memset(writer, 0, sizeof *writer);
}

static unsigned char *reserve(bpt_writer *writer, size_t size) {
  if (writer->failed) return NULL;
  if (writer->capacity - writer->size < size) {
    size_t capacity = writer->capacity ? writer->capacity : 4096;
    while (capacity - writer->size < size) {
      if (capacity > SIZE_MAX / 2) {
        writer->failed = true;
        return NULL;
      }
      capacity *= 2;
    }
    unsigned char *bytes = realloc(writer->bytes, capacity);
    if (!bytes) {
      writer->failed = true;
      return NULL;
    }
    writer->bytes = bytes;
    writer->capacity = capacity;
  }
  unsigned char *at = writer->bytes + writer->size;
  writer->size += size;
  return at;
}

void bpt_put_bytes(bpt_writer *writer, const void *bytes, size_t size) {
  unsigned char *at = reserve(writer, size);
  if (at && size) memcpy(at, bytes, size);
}

void bpt_put_u32(bpt_writer *writer, uint32_t value) {
  unsigned char *at = reserve(writer, 4);
  if (at) store_u32(at, value);
}

void bpt_put_u64(bpt_writer *writer, uint64_t value) {
  unsigned char *at = reserve(writer, 8);
  if (at) store_u64(at, value);
}

void bpt_put_i64(bpt_writer *writer, int64_t value) { bpt_put_u64(writer, (uint64_t)value); }

void bpt_put_f32(bpt_writer *writer, float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bpt_put_u32(writer, bits);
}

void bpt_put_f32_array(bpt_writer *writer, const float *values, int64_t count) {
  unsigned char *at = reserve(writer, (size_t)count * 4);
  for (int64_t i = 0; at && i < count; i++) {
    uint32_t bits;
    memcpy(&bits, &values[i], sizeof bits);
    store_u32(at + 4 * i, bits);
  }
}

void bpt_put_string(bpt_writer *writer, const char *text) {
  size_t length = strlen(text);
  bpt_put_u32(writer, (uint32_t)length);
  bpt_put_bytes(writer, text, length);
}

void bpt_writer_start(bpt_writer *writer) { reserve(writer, BPT_CHECKPOINT_HEADER_BYTES); }

void bpt_writer_finish(bpt_writer *writer, uint32_t section_count) {
  if (writer->failed) return;
  unsigned char *header = writer->bytes;
  memcpy(header, BPT_CHECKPOINT_MAGIC, 8);
  store_u32(header + 8, BPT_CHECKPOINT_FORMAT_VERSION);
  store_u32(header + 12, bpt_version_number());
  store_u32(header + 16, section_count);
  store_u32(header + 20, crc32_of(header, 20));
}

size_t bpt_section_begin(bpt_writer *writer, uint32_t tag, uint32_t flags) {
  size_t start = writer->size;
  bpt_put_u32(writer, tag);
  bpt_put_u32(writer, flags);
  bpt_put_u64(writer, 0);
  bpt_put_u32(writer, 0);
  return start;
}

void bpt_section_end(bpt_writer *writer, size_t start) {
  if (writer->failed) return;
  unsigned char *header = writer->bytes + start;
  size_t payload = writer->size - start - BPT_CHECKPOINT_SECTION_HEADER_BYTES;
  store_u64(header + 8, payload);
  store_u32(header + 16, bpt_checkpoint_section_crc(header, header + BPT_CHECKPOINT_SECTION_HEADER_BYTES, payload));
}

static const unsigned char *take(bpt_reader *reader, size_t size) {
  if (reader->overrun || reader->size - reader->offset < size) {
    reader->overrun = true;
    return NULL;
  }
  const unsigned char *at = reader->bytes + reader->offset;
  reader->offset += size;
  return at;
}

bool bpt_get_u32(bpt_reader *reader, uint32_t *value) {
  const unsigned char *at = take(reader, 4);
  if (at) *value = load_u32(at);
  return at != NULL;
}

bool bpt_get_u64(bpt_reader *reader, uint64_t *value) {
  const unsigned char *at = take(reader, 8);
  if (at) *value = load_u64(at);
  return at != NULL;
}

bool bpt_get_i64(bpt_reader *reader, int64_t *value) {
  uint64_t bits;
  if (!bpt_get_u64(reader, &bits)) return false;
  *value = (int64_t)bits;
  return true;
}

bool bpt_get_f32(bpt_reader *reader, float *value) {
  uint32_t bits;
  if (!bpt_get_u32(reader, &bits)) return false;
  memcpy(value, &bits, sizeof bits);
  return true;
}

bool bpt_get_f32_array(bpt_reader *reader, float *values, int64_t count) {
  if (count < 0 || (uint64_t)count > (reader->size - reader->offset) / 4) {
    reader->overrun = true;
    return false;
  }
  const unsigned char *at = take(reader, (size_t)count * 4);
  for (int64_t i = 0; at && i < count; i++) {
    uint32_t bits = load_u32(at + 4 * i);
    memcpy(&values[i], &bits, sizeof bits);
  }
  return at != NULL;
}

bool bpt_get_string(bpt_reader *reader, char *buffer, size_t size) {
  uint32_t length;
  if (!bpt_get_u32(reader, &length)) return false;
  if (length >= size || length > BPT_CHECKPOINT_MAX_STRING) {
    reader->overrun = true;
    return false;
  }
  const unsigned char *at = take(reader, length);
  if (!at) return false;
  memcpy(buffer, at, length);
  buffer[length] = 0;
  /* A NUL inside a name would make two different names compare equal. */
  if (strlen(buffer) != length) {
    reader->overrun = true;
    return false;
  }
  return true;
}

size_t bpt_reader_left(const bpt_reader *reader) { return reader->size - reader->offset; }

const char *bpt_tag_name(uint32_t tag, char buffer[5]) {
  for (int i = 0; i < 4; i++) {
    unsigned char c = (unsigned char)(tag >> (8 * i));
    buffer[i] = c >= 32 && c < 127 ? (char)c : '?';
  }
  buffer[4] = 0;
  return buffer;
}

uint32_t bpt_checkpoint_format_of(const unsigned char *bytes) { return load_u32(bytes + 8); }

bpt_status bpt_checkpoint_split(bpt_context *context, const unsigned char *bytes, size_t size, const char *what,
                                uint32_t *library_version, bpt_section **sections, int *section_count) {
  *sections = NULL;
  *section_count = 0;
  if (size < BPT_CHECKPOINT_HEADER_BYTES || memcmp(bytes, BPT_CHECKPOINT_MAGIC, 8) != 0)
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': not a libbptrain checkpoint (bad magic or %zu bytes)",
                     what, size);
  uint32_t format = load_u32(bytes + 8), count = load_u32(bytes + 16);
  *library_version = load_u32(bytes + 12);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  if (load_u32(bytes + 20) != crc32_of(bytes, 20))
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': header CRC mismatch (file corrupt)", what);
#endif
  if (format == 1)
    return bpt_error(context, BPT_ERR_FORMAT,
                     "checkpoint '%s': format version 1 (before section headers had a CRC; a flipped tag there went "
                     "unnoticed) is no longer read; this library (%s) reads version %u",
                     what, bpt_version(), BPT_CHECKPOINT_FORMAT_VERSION);
  if (format != BPT_CHECKPOINT_FORMAT_VERSION && format != BPT_CHECKPOINT_FORMAT_SLOTS)
    return bpt_error(context, BPT_ERR_FORMAT,
                     "checkpoint '%s': format version %u, this library (%s) reads versions %u and %u", what, format,
                     bpt_version(), BPT_CHECKPOINT_FORMAT_SLOTS, BPT_CHECKPOINT_FORMAT_VERSION);
  /* Each section takes at least its header, which bounds the count before allocating. */
  if (count > (size - BPT_CHECKPOINT_HEADER_BYTES) / BPT_CHECKPOINT_SECTION_HEADER_BYTES)
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': header announces %u sections; the file is too short",
                     what, count);
  bpt_section *table = bpt_calloc(context, count, sizeof *table, "checkpoint section table");
  if (!table) return BPT_ERR_OUT_OF_MEMORY;
  size_t offset = BPT_CHECKPOINT_HEADER_BYTES;
  char tag[5];
  for (uint32_t i = 0; i < count; i++) {
    if (size - offset < BPT_CHECKPOINT_SECTION_HEADER_BYTES) {
      free(table);
      return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': truncated: section %u of %u is missing", what, i + 1,
                       count);
    }
    const unsigned char *header = bytes + offset;
    uint64_t length = load_u64(header + 8);
    offset += BPT_CHECKPOINT_SECTION_HEADER_BYTES;
    if (length > size - offset) {
      free(table);
      return bpt_error(context, BPT_ERR_FORMAT,
                       "checkpoint '%s': truncated: section '%s' announces %llu bytes, %zu remain", what,
                       bpt_tag_name(load_u32(header), tag), (unsigned long long)length, size - offset);
    }
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    if (bpt_checkpoint_section_crc(header, bytes + offset, (size_t)length) != load_u32(header + 16)) {
      free(table);
      return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': section '%s' CRC mismatch (file corrupt)", what,
                       bpt_tag_name(load_u32(header), tag));
    }
#endif
    table[i].tag = load_u32(header);
    table[i].flags = load_u32(header + 4);
    table[i].payload = (bpt_reader){.bytes = bytes + offset, .size = (size_t)length};
    offset += (size_t)length;
  }
  if (offset != size) {
    free(table);
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': %zu bytes of unexpected data after the last section",
                     what, size - offset);
  }
  *sections = table;
  *section_count = (int)count;
  return BPT_OK;
}

bpt_status bpt_write_file_atomically(bpt_context *context, const char *path, const void *bytes, size_t size) {
  return bpt_file_write_atomically(context, path, "checkpoint", bytes, size);
}

static bool read_at(int descriptor, unsigned char *bytes, size_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t got = pread(descriptor, bytes, size > (1u << 30) ? (1u << 30) : size, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= (size_t)got;
    offset += got;
  }
  return true;
}

/* The bytes the header and section headers declare, read with a few small reads before any body is: a file
 * that is no checkpoint (a 4 GiB sparse file of zeros) is refused after 24 bytes, not after reading it all
 * (issue 30, class 9). */
static bpt_status declared_size(bpt_context *context, int descriptor, int64_t file_size, const char *path,
                                int64_t *declared) {
  unsigned char header[BPT_CHECKPOINT_HEADER_BYTES];
  /* An old parameter file (checkpoint_legacy.c) states its value count after its 8-byte magic; the loader
   * explains it, so it is read when that count makes exactly the file. */
  if (file_size >= 16 && read_at(descriptor, header, 16, 0) && bpt_checkpoint_is_legacy(header, 16)) {
    const uint64_t stated = load_u64(header + 8);
    if (stated > (uint64_t)(file_size - 16) / 4 || 16 + 4 * stated != (uint64_t)file_size)
      return bpt_error(context, BPT_ERR_FORMAT, "'%s' is %s, but truncated or malformed (%lld bytes for %llu values)",
                       path, bpt_checkpoint_legacy_kind(header), (long long)file_size, (unsigned long long)stated);
    *declared = file_size;
    return BPT_OK;
  }
  if (file_size < BPT_CHECKPOINT_HEADER_BYTES || !read_at(descriptor, header, sizeof header, 0) ||
      memcmp(header, BPT_CHECKPOINT_MAGIC, 8) != 0)
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': not a libbptrain checkpoint (bad magic or %lld bytes)",
                     path, (long long)file_size);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  if (load_u32(header + 20) != crc32_of(header, 20))
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': header CRC mismatch (file corrupt)", path);
#endif
  const uint32_t count = load_u32(header + 16);
  if (count > (uint64_t)(file_size - BPT_CHECKPOINT_HEADER_BYTES) / BPT_CHECKPOINT_SECTION_HEADER_BYTES)
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': header announces %u sections; the file is too short",
                     path, count);
  int64_t offset = BPT_CHECKPOINT_HEADER_BYTES;
  char tag[5];
  for (uint32_t i = 0; i < count; i++) {
    unsigned char section[BPT_CHECKPOINT_SECTION_HEADER_BYTES];
    if (file_size - offset < BPT_CHECKPOINT_SECTION_HEADER_BYTES || !read_at(descriptor, section, sizeof section, offset))
      return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': truncated: section %u of %u is missing", path, i + 1,
                       count);
    const uint64_t length = load_u64(section + 8);
    offset += BPT_CHECKPOINT_SECTION_HEADER_BYTES;
    if (length > (uint64_t)(file_size - offset))
      return bpt_error(context, BPT_ERR_FORMAT,
                       "checkpoint '%s': truncated: section '%s' announces %llu bytes, %lld remain", path,
                       bpt_tag_name(load_u32(section), tag), (unsigned long long)length, (long long)(file_size - offset));
    offset += (int64_t)length;
  }
  if (offset != file_size)
    return bpt_error(context, BPT_ERR_FORMAT, "checkpoint '%s': %lld bytes of unexpected data after the last section",
                     path, (long long)(file_size - offset));
  *declared = offset;
  return BPT_OK;
}

bpt_status bpt_read_whole_file(bpt_context *context, const char *path, unsigned char **bytes, size_t *size) {
  *bytes = NULL;
  *size = 0;
  int descriptor;
  int64_t file_size, declared = 0;
  BPT_CHECK(bpt_file_open_for_reading(context, path, "checkpoint", &descriptor, &file_size));
  bpt_status status = declared_size(context, descriptor, file_size, path, &declared);
  /* The cap comes before the allocation: more than the machine's memory would reach the OOM killer. */
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  const int64_t memory = pages > 0 && page_size > 0 ? (int64_t)pages * page_size : INT64_MAX;
  if (status == BPT_OK && (declared > BPT_CHECKPOINT_MAX_BYTES || declared > memory))
    status = bpt_error(context, BPT_ERR_FORMAT,
                       "checkpoint '%s': its sections declare %lld bytes, more than the %lld-byte limit or this "
                       "machine's %lld bytes of memory",
                       path, (long long)declared, (long long)BPT_CHECKPOINT_MAX_BYTES, (long long)memory);
  unsigned char *buffer = NULL;
  if (status == BPT_OK) {
    buffer = bpt_calloc(context, (size_t)declared, 1, "checkpoint file buffer");
    if (!buffer) status = BPT_ERR_OUT_OF_MEMORY;
  }
  if (status == BPT_OK && !read_at(descriptor, buffer, (size_t)declared, 0))
    status = bpt_error(context, BPT_ERR_IO, "checkpoint '%s': reading %lld bytes failed: %s", path, (long long)declared,
                       errno ? strerror(errno) : "the file shrank while being read");
  close(descriptor);
  if (status != BPT_OK) {
    free(buffer);
    return status;
  }
  *bytes = buffer;
  *size = (size_t)declared;
  return BPT_OK;
}
