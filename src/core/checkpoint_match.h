/* Matching a checkpoint's named tensors (PARM, BUFS) to a graph's parameters and buffers by name and shape,
 * the strict rule's first difference, and the load report. checkpoint.c decodes the other sections and
 * applies what matched; this file knows nothing of the graph beyond the items it is handed. */
#ifndef BPT_CORE_CHECKPOINT_MATCH_H
#define BPT_CORE_CHECKPOINT_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bptrain/checkpoint.h"
#include "core/checkpoint_format.h"

/* One parameter or buffer of the graph, as matching sees it. */
typedef struct bpt_match_item {
  const char *name;
  int rank;
  const int64_t *dims;
  int64_t count;
  int64_t match; /* index of the file's tensor with this name and shape, or -1 */
  bool seen;     /* the file has a tensor with this name (of any shape) */
} bpt_match_item;

/* One named tensor of the file: where its header and values sit in the section's payload. */
typedef struct bpt_file_tensor {
  size_t header_at, values_at;
  int64_t count;
  int64_t packed_at; /* its first value in the file's packing of all tensors (OPTM follows PARM's) */
  int item;          /* the graph's item with this name, or -1 */
  bool same_shape;
} bpt_file_tensor;

/* The graph's items of one kind ("parameter" or "buffer") and the file's tensors of the section. */
typedef struct bpt_match {
  const char *kind, *section;
  bpt_match_item *items;
  int item_count;
  int *sorted; /* item indices by name, for lookup */
  bpt_file_tensor *tensors;
  int64_t tensor_count;
  int64_t file_values; /* sum of the file tensors' counts */
  bpt_reader payload;
  bool has_section;
} bpt_match;

/* Prepares matching for items (kept by reference; the caller fills them). */
bpt_status bpt_match_init(bpt_context *context, bpt_match *match, const char *kind, const char *section,
                          bpt_match_item *items, int item_count);
void bpt_match_free(bpt_match *match);

/* Decodes every tensor header of the section (names, dtypes, shapes, that the values are there) and matches
 * them to the items by name; a malformed section or a name twice in it is BPT_ERR_FORMAT. */
bpt_status bpt_match_read(bpt_context *context, const char *where, bpt_match *match, bpt_reader payload);

/* For a strict load: BPT_ERR_SHAPE naming the first item (in the graph's order) that is not in the file or has
 * another shape there, else the first file tensor (in the file's order) that is not in the graph. */
bpt_status bpt_match_check_strict(bpt_context *context, const char *where, const bpt_match *match);

/* Decodes the values of file tensor `index` into values (count floats). */
void bpt_match_values(const bpt_match *match, int64_t index, float *values);

/* Appends what matching found to report: loaded and missing items, skipped file tensors. */
bpt_status bpt_match_report(bpt_context *context, const bpt_match *match, bpt_checkpoint_report *report);

/* "[8,4]" (or "[]" for a scalar) into buffer. */
const char *bpt_match_shape_string(int rank, const int64_t *dims, char *buffer, size_t size);

/* Reports are built by the loader and handed to the caller. */
bpt_checkpoint_report *bpt_checkpoint_report_create(bpt_context *context);
bpt_status bpt_checkpoint_report_add(bpt_context *context, bpt_checkpoint_report *report, bpt_checkpoint_entry entry,
                                     const char *name, const char *reason);

#endif
