/* IDX reader with full validation: magic, dtype byte, rank, dimension product against the payload
 * size (with overflow checks), truncated and trailing data, and gzip corruption. */
#include "core/data/idx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Reads exactly bytes, returning how many were read, or -1 on a decompression error. */
static int64_t read_fully(gzFile file, void *buffer, int64_t bytes) {
  int64_t done = 0;
  while (done < bytes) {
    unsigned chunk = bytes - done > (1 << 30) ? (1u << 30) : (unsigned)(bytes - done);
    int got = gzread(file, (char *)buffer + done, chunk);
    if (got < 0) return -1;
    if (got == 0) break;
    done += got;
  }
  return done;
}

/* Reads up to bytes into a malloc'd *data that grows as data actually arrives (robustness, issue 9): a
 * corrupt 20-byte header promising 16 GiB must not allocate 16 GiB before the file turns out short.
 * Returns the bytes read, -1 on a decompression error, -2 when memory runs out. */
static int64_t read_growing(gzFile file, uint8_t **data, int64_t bytes) {
  int64_t capacity = bytes < (INT64_C(1) << 24) ? bytes : (INT64_C(1) << 24), done = 0;
  uint8_t *buffer = malloc((size_t)capacity);
  if (!buffer) return -2;
  for (;;) {
    int64_t got = read_fully(file, buffer + done, capacity - done);
    if (got < 0) {
      free(buffer);
      return -1;
    }
    done += got;
    if (done < capacity || capacity == bytes) break;
    int64_t grown = capacity > bytes / 2 ? bytes : capacity * 2;
    uint8_t *larger = realloc(buffer, (size_t)grown);
    if (!larger) {
      free(buffer);
      return -2;
    }
    buffer = larger;
    capacity = grown;
  }
  *data = buffer;
  return done;
}

static const char *dtype_byte_name(int code) {
  switch (code) {
  case 0x08: return "unsigned byte";
  case 0x09: return "signed byte";
  case 0x0B: return "int16";
  case 0x0C: return "int32";
  case 0x0D: return "float32";
  case 0x0E: return "float64";
  default: return "unknown";
  }
}

static bpt_status read_header(bpt_context *context, gzFile file, const char *path, bpt_idx *out) {
  unsigned char magic[4];
  int64_t got = read_fully(file, magic, 4);
  if (got < 0) return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': corrupt compressed data", path);
  if (got == 0) return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': file is empty", path);
  if (got < 4) return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': truncated header (%lld of 4 bytes)", path,
                                (long long)got);
  if (magic[0] != 0 || magic[1] != 0)
    return bpt_error(context, BPT_ERR_FORMAT,
                     "IDX file '%s': bad magic %02x %02x %02x %02x (expected 00 00 <dtype> <rank>)", path, magic[0],
                     magic[1], magic[2], magic[3]);
  if (magic[2] != 0x08)
    return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': element type 0x%02x (%s) is not supported; only 0x08 "
                     "(unsigned byte) is", path, magic[2], dtype_byte_name(magic[2]));
  int rank = magic[3];
  if (rank < 1 || rank > BPT_IDX_MAX_RANK)
    return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': rank %d is outside [1, %d]", path, rank, BPT_IDX_MAX_RANK);
  unsigned char raw[4 * BPT_IDX_MAX_RANK];
  got = read_fully(file, raw, 4 * rank);
  if (got != 4 * rank)
    return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': truncated header (dimensions end after %lld bytes)",
                     path, (long long)(got < 0 ? 0 : got) + 4);
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    uint32_t dim = (uint32_t)raw[4 * i] << 24 | (uint32_t)raw[4 * i + 1] << 16 | (uint32_t)raw[4 * i + 2] << 8 |
                   (uint32_t)raw[4 * i + 3];
    if (dim == 0) return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': dimension %d is zero", path, i);
    if ((int64_t)dim > BPT_IDX_MAX_BYTES / count)
      return bpt_error(context, BPT_ERR_FORMAT,
                       "IDX file '%s': dimensions overflow (product exceeds %lld bytes at dimension %d = %u)", path,
                       (long long)BPT_IDX_MAX_BYTES, i, dim);
    count *= dim;
    out->dims[i] = dim;
  }
  out->rank = rank;
  out->count = count;
  return BPT_OK;
}

bpt_status bpt_idx_read(bpt_context *context, const char *path, bpt_idx *out) {
  if (!path || !out) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "IDX reader: NULL path or output");
  memset(out, 0, sizeof *out);
  gzFile file = gzopen(path, "rb");
  if (!file)
    return bpt_error(context, BPT_ERR_IO, "IDX file '%s': cannot open: %s", path,
                     errno ? strerror(errno) : "out of memory");
  bpt_idx idx;
  memset(&idx, 0, sizeof idx);
  bpt_status status = read_header(context, file, path, &idx);
  if (status == BPT_OK) {
    int64_t got = read_growing(file, &idx.data, idx.count);
    unsigned char extra;
    if (got == -2)
      status = bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "IDX file '%s': cannot allocate %lld bytes", path,
                         (long long)idx.count);
    else if (got < 0)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': corrupt compressed data", path);
    else if (got < idx.count)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': truncated: header promises %lld data bytes, found %lld",
                         path, (long long)idx.count, (long long)got);
    else if (read_fully(file, &extra, 1) != 0)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': wrong size: data continues past the %lld bytes the "
                         "header describes", path, (long long)idx.count);
  }
  gzclose(file);
  if (status != BPT_OK) {
    free(idx.data);
    return status;
  }
  *out = idx;
  return BPT_OK;
}

void bpt_idx_free(bpt_idx *idx) {
  if (!idx) return;
  free(idx->data);
  idx->data = NULL;
}
