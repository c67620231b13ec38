/* IDX reader with full validation: magic, dtype byte, rank, dimension product against the payload
 * size (with overflow checks), truncated and trailing data, and gzip corruption, truncation (a missing
 * CRC/size trailer) and trailing garbage. */
#define _POSIX_C_SOURCE 200809L /* read, lseek under -std=c11 */
#include "core/data/idx.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/file_io.h"

/* The bytes of an IDX file, plain or gzip. The gzip side is zlib's inflate driven directly rather than gzread:
 * gzread accepts a member whose trailer is cut off and ignores garbage after it, while here a member counts
 * only once inflate has checked its CRC32 and ISIZE trailer, and after the last member the file must end. */
typedef struct source {
  int descriptor;
  bool gzip;
  bool input_ended;  /* read() returned 0 */
  bool member_open;  /* inside a gzip member: its trailer has not been checked yet */
  bool ended;        /* nothing more to decompress: the file ended right after a complete member */
  const char *error; /* why the compressed data is refused (then reads return -1) */
  z_stream stream;
  unsigned char input[1 << 16];
} source;

static void refill(source *s) {
  if (s->stream.avail_in > 0 || s->input_ended) return;
  for (;;) {
    ssize_t got = read(s->descriptor, s->input, sizeof s->input);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      s->input_ended = true;
      if (got < 0) s->error = strerror(errno);
      return;
    }
    s->stream.next_in = s->input;
    s->stream.avail_in = (uInt)got;
    return;
  }
}

/* Between members: the file must end here or another member (magic 1f 8b) begin. RFC 1952 allows a series of
 * members (what `cat a.gz b.gz` makes, and gzip -d reads); anything else after a member is refused. */
static void next_member(source *s) {
  refill(s);
  if (s->stream.avail_in == 0) {
    s->ended = !s->error;
    return;
  }
  if (s->stream.next_in[0] != 0x1f || (s->stream.avail_in > 1 && s->stream.next_in[1] != 0x8b)) {
    s->error = "unexpected data after the end of the gzip stream";
    return;
  }
  if (inflateReset(&s->stream) != Z_OK) s->error = "cannot restart the decompressor";
  s->member_open = true;
}

/* Reads up to bytes (never decompressing more than asked for); returns the count, 0 at a valid end, -1 on
 * corrupt, truncated or trailing data (s->error says which). */
static int64_t source_read(source *s, void *buffer, int64_t bytes) {
  if (s->error) return -1;
  if (!s->gzip) {
    int64_t done = 0;
    while (done < bytes) {
      size_t chunk = bytes - done > (1 << 30) ? (size_t)1 << 30 : (size_t)(bytes - done);
      ssize_t got = read(s->descriptor, (char *)buffer + done, chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        s->error = strerror(errno);
        return -1;
      }
      if (got == 0) break;
      done += got;
    }
    return done;
  }
  int64_t done = 0;
  while (done < bytes && !s->ended) {
    if (!s->member_open) {
      next_member(s);
      if (s->error) return -1;
      continue;
    }
    refill(s);
    if (s->error) return -1;
    uInt chunk = bytes - done > (1 << 30) ? (1u << 30) : (uInt)(bytes - done);
    s->stream.next_out = (Bytef *)buffer + done;
    s->stream.avail_out = chunk;
    int status = inflate(&s->stream, Z_NO_FLUSH);
    done += chunk - s->stream.avail_out;
    if (status == Z_STREAM_END) {
      s->member_open = false; /* trailer checked by inflate: CRC32 and ISIZE match */
    } else if (status == Z_BUF_ERROR && s->input_ended && s->stream.avail_in == 0) {
      s->error = "truncated gzip stream (the member or its CRC/size trailer is cut off)";
      return -1;
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      s->error = s->stream.msg ? s->stream.msg : "corrupt compressed data";
      return -1;
    } else if (s->input_ended && s->stream.avail_in == 0 && chunk == s->stream.avail_out) {
      s->error = "truncated gzip stream (the member or its CRC/size trailer is cut off)";
      return -1;
    }
  }
  return done;
}

/* Reads exactly bytes, returning how many were read, or -1 on a decompression error. */
static int64_t read_fully(source *file, void *buffer, int64_t bytes) { return source_read(file, buffer, bytes); }

/* Reads up to bytes into a malloc'd *data that grows as data actually arrives (robustness, issue 9): a
 * corrupt 20-byte header promising 16 GiB must not allocate 16 GiB before the file turns out short.
 * Returns the bytes read, -1 on a decompression error, -2 when memory runs out. */
static int64_t read_growing(source *file, uint8_t **data, int64_t bytes) {
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

static bpt_status read_header(bpt_context *context, source *file, const char *path, bpt_idx *out) {
  unsigned char magic[4];
  int64_t got = read_fully(file, magic, 4);
  if (got < 0) return bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': %s", path, file->error);
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
  source *file = bpt_calloc(context, 1, sizeof *file, "IDX reader");
  if (!file) return BPT_ERR_OUT_OF_MEMORY;
  bpt_status status = bpt_file_open_for_reading(context, path, "IDX file", &file->descriptor, NULL);
  if (status != BPT_OK) {
    free(file);
    return status;
  }
  /* gzip when the file starts with its magic (an IDX file starts with two zero bytes). */
  refill(file);
  file->gzip = file->stream.avail_in >= 2 && file->input[0] == 0x1f && file->input[1] == 0x8b;
  if (file->gzip) {
    file->member_open = true;
    if (inflateInit2(&file->stream, 16 + MAX_WBITS) != Z_OK)
      status = bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "IDX file '%s': cannot start the decompressor", path);
  } else if (file->stream.avail_in > 0) {
    /* Plain: the bytes already read go back by seeking (a regular file, so it can). */
    if (lseek(file->descriptor, 0, SEEK_SET) != 0)
      status = bpt_error(context, BPT_ERR_IO, "IDX file '%s': cannot seek: %s", path, strerror(errno));
  }
  if (status == BPT_OK && file->error)
    status = bpt_error(context, BPT_ERR_IO, "IDX file '%s': read failed: %s", path, file->error);
  bpt_idx idx;
  memset(&idx, 0, sizeof idx);
  if (status == BPT_OK) status = read_header(context, file, path, &idx);
  if (status == BPT_OK) {
    int64_t got = read_growing(file, &idx.data, idx.count);
    unsigned char extra;
    int64_t more = got >= idx.count ? read_fully(file, &extra, 1) : 0;
    if (got == -2)
      status = bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "IDX file '%s': cannot allocate %lld bytes", path,
                         (long long)idx.count);
    else if (got < 0 || more < 0)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': %s", path, file->error);
    else if (got < idx.count)
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': truncated: header promises %lld data bytes, found %lld",
                         path, (long long)idx.count, (long long)got);
    else if (more != 0)
      /* Decompression stops here: one byte past what the header describes is enough to refuse. */
      status = bpt_error(context, BPT_ERR_FORMAT, "IDX file '%s': wrong size: data continues past the %lld bytes the "
                         "header describes", path, (long long)idx.count);
  }
  if (file->gzip) inflateEnd(&file->stream);
  close(file->descriptor);
  free(file);
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
