/* Reading IDX files (the MNIST container): a big-endian header of dtype, rank and dimensions followed by
 * the raw elements. Only unsigned-byte payloads are accepted; gzip compression is detected by zlib. */
#ifndef BPT_DATA_IDX_H
#define BPT_DATA_IDX_H

#include <stdint.h>

#include "core/context.h"

#define BPT_IDX_MAX_RANK 4
/* Refuse payloads above 16 GiB before allocating: a corrupt header must not exhaust memory. */
#define BPT_IDX_MAX_BYTES (INT64_C(1) << 34)

typedef struct bpt_idx {
  int rank;
  int64_t dims[BPT_IDX_MAX_RANK];
  int64_t count; /* product of dims */
  uint8_t *data; /* malloc'd, count bytes */
} bpt_idx;

/* Reads and validates path; on failure nothing is allocated and the context says what is wrong. */
bpt_status bpt_idx_read(bpt_context *context, const char *path, bpt_idx *out);
void bpt_idx_free(bpt_idx *idx);

#endif
