/* Matching a checkpoint's named tensors to a graph's parameters and buffers by name and shape (see
 * checkpoint_match.h), and the report a load hands back. Names are looked up through a sorted index, so a
 * file with many tensors costs n log n, not n times the graph's size. */
#include "core/checkpoint_match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/report.h"
#include "bptrain/tensor.h"
#include "core/graph.h"

typedef struct report_entry {
  char name[BPT_NAME_SIZE];
  char reason[192];
} report_entry;

struct bpt_checkpoint_report {
  report_entry *entries[3];
  int64_t counts[3], capacities[3];
};

bpt_status bpt_match_init(bpt_context *context, bpt_match *match, const char *kind, const char *section,
                          bpt_match_item *items, int item_count) {
  memset(match, 0, sizeof *match);
  match->kind = kind;
  match->section = section;
  match->items = items;
  match->item_count = item_count;
  match->sorted = bpt_calloc(context, (size_t)(item_count ? item_count : 1), sizeof *match->sorted, "checkpoint names");
  if (!match->sorted) return BPT_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < item_count; i++) {
    match->sorted[i] = i;
    items[i].match = -1;
    items[i].seen = false;
  }
  /* Insertion sort rather than qsort, whose comparator would need the items in a global (loads may run on
   * several threads at once); graphs have tens to hundreds of parameters. */
  for (int i = 1; i < item_count; i++) {
    int value = match->sorted[i], j = i;
    while (j > 0 && strcmp(items[match->sorted[j - 1]].name, items[value].name) > 0) {
      match->sorted[j] = match->sorted[j - 1];
      j--;
    }
    match->sorted[j] = value;
  }
  return BPT_OK;
}

void bpt_match_free(bpt_match *match) {
  free(match->sorted);
  free(match->tensors);
  match->sorted = NULL;
  match->tensors = NULL;
}

static int find_item(const bpt_match *match, const char *name) {
  int low = 0, high = match->item_count - 1;
  while (low <= high) {
    int middle = low + (high - low) / 2, order = strcmp(match->items[match->sorted[middle]].name, name);
    if (order == 0) return match->sorted[middle];
    if (order < 0)
      low = middle + 1;
    else
      high = middle - 1;
  }
  return -1;
}

const char *bpt_match_shape_string(int rank, const int64_t *dims, char *buffer, size_t size) {
  size_t used = (size_t)snprintf(buffer, size, "[");
  for (int d = 0; d < rank && used < size; d++)
    used += (size_t)snprintf(buffer + used, size - used, d ? ",%lld" : "%lld", (long long)dims[d]);
  if (used < size) snprintf(buffer + used, size - used, "]");
  return buffer;
}

/* A tensor header: name, dtype, rank, dims. False when malformed. */
static bool read_header(bpt_reader *r, char name[BPT_NAME_SIZE], uint32_t *dtype, uint32_t *rank,
                        int64_t dims[BPT_MAX_RANK]) {
  if (!bpt_get_string(r, name, BPT_NAME_SIZE) || !bpt_get_u32(r, dtype) || !bpt_get_u32(r, rank) ||
      *rank > BPT_MAX_RANK)
    return false;
  for (uint32_t d = 0; d < *rank; d++)
    if (!bpt_get_i64(r, &dims[d])) return false;
  return true;
}

static bpt_status malformed(bpt_context *context, const char *where, const bpt_match *match) {
  return bpt_error(context, BPT_ERR_FORMAT, "%s: section '%s' is truncated or malformed", where, match->section);
}

bpt_status bpt_match_read(bpt_context *context, const char *where, bpt_match *match, bpt_reader payload) {
  match->payload = payload;
  match->has_section = true;
  bpt_reader *r = &match->payload;
  uint32_t count;
  if (!bpt_get_u32(r, &count)) return malformed(context, where, match);
  /* A tensor takes at least 12 bytes (empty name, dtype, rank): this bounds the table by the file's size. */
  if (count > bpt_reader_left(r) / 12) return malformed(context, where, match);
  match->tensors = bpt_calloc(context, count ? count : 1, sizeof *match->tensors, "checkpoint tensor table");
  if (!match->tensors) return BPT_ERR_OUT_OF_MEMORY;
  for (uint32_t t = 0; t < count; t++) {
    bpt_file_tensor *tensor = &match->tensors[t];
    char name[BPT_NAME_SIZE];
    uint32_t dtype, rank;
    int64_t dims[BPT_MAX_RANK];
    tensor->header_at = r->offset;
    if (!read_header(r, name, &dtype, &rank, dims)) return malformed(context, where, match);
    if (dtype != BPT_DTYPE_F32)
      return bpt_error(context, BPT_ERR_DTYPE, "%s: %s '%s' is %s in the file; this library reads f32", where,
                       match->kind, name, bpt_dtype_name((bpt_dtype)dtype));
    /* The values must be in the section, which also bounds the product before it can overflow. */
    int64_t values = 1, limit = (int64_t)(bpt_reader_left(r) / 4);
    for (uint32_t d = 0; d < rank; d++) {
      if (dims[d] < 0 || (dims[d] > 0 && values > limit / dims[d])) return malformed(context, where, match);
      values *= dims[d];
    }
    if (values > limit) return malformed(context, where, match);
    tensor->values_at = r->offset;
    tensor->count = values;
    tensor->packed_at = match->file_values;
    match->file_values += values;
    r->offset += (size_t)values * 4;
    tensor->item = find_item(match, name);
    match->tensor_count = t + 1;
    if (tensor->item < 0) continue;
    bpt_match_item *item = &match->items[tensor->item];
    bool same = rank == (uint32_t)item->rank;
    for (uint32_t d = 0; same && d < rank; d++)
      same = dims[d] == item->dims[d];
    tensor->same_shape = same;
    if (item->seen)
      return bpt_error(context, BPT_ERR_FORMAT, "%s: %s '%s' appears twice in the file", where, match->kind, name);
    item->seen = true;
    if (same) item->match = t;
  }
  if (bpt_reader_left(r) != 0) return malformed(context, where, match);
  return BPT_OK;
}

/* Name and shape of file tensor `index`, re-read from its header (validated by bpt_match_read). */
static void tensor_header(const bpt_match *match, int64_t index, char name[BPT_NAME_SIZE], int *rank,
                          int64_t dims[BPT_MAX_RANK]) {
  bpt_reader r = match->payload;
  r.offset = match->tensors[index].header_at;
  r.overrun = false;
  uint32_t dtype, stored_rank;
  read_header(&r, name, &dtype, &stored_rank, dims);
  *rank = (int)stored_rank;
}

void bpt_match_values(const bpt_match *match, int64_t index, float *values) {
  bpt_reader r = match->payload;
  r.offset = match->tensors[index].values_at;
  r.overrun = false;
  bpt_get_f32_array(&r, values, match->tensors[index].count);
}

/* Why a file tensor with an item's name was not loaded: "shape [8,4] in the file, [3,4] in the graph". */
static void shape_reason(const bpt_match *match, int64_t index, char *reason, size_t size) {
  char name[BPT_NAME_SIZE], theirs[64], ours[64];
  int rank;
  int64_t dims[BPT_MAX_RANK];
  tensor_header(match, index, name, &rank, dims);
  const bpt_match_item *item = &match->items[match->tensors[index].item];
  snprintf(reason, size, "shape %s in the file, %s in the graph",
           bpt_match_shape_string(rank, dims, theirs, sizeof theirs),
           bpt_match_shape_string(item->rank, item->dims, ours, sizeof ours));
}

bpt_status bpt_match_check_strict(bpt_context *context, const char *where, const bpt_match *match) {
  static const char hint[] = "; a load with strict = 0 loads what matches";
  char reason[192], shape[128], name[BPT_NAME_SIZE];
  int rank;
  int64_t dims[BPT_MAX_RANK];
  for (int i = 0; i < match->item_count; i++) {
    const bpt_match_item *item = &match->items[i];
    if (item->match >= 0) continue;
    for (int64_t t = 0; t < match->tensor_count; t++)
      if (match->tensors[t].item == i) {
        shape_reason(match, t, reason, sizeof reason);
        return bpt_error(context, BPT_ERR_SHAPE, "%s: %s '%s': %s%s", where, match->kind, item->name, reason, hint);
      }
    /* A renamed layer shows as a missing name with an unknown one in its place: say both. */
    char place[320] = "";
    if (i < match->tensor_count && match->tensors[i].item < 0) {
      tensor_header(match, i, name, &rank, dims);
      snprintf(place, sizeof place, " (the file has %s '%s' %s in its place, which is not in this graph)", match->kind,
               name, bpt_match_shape_string(rank, dims, shape, sizeof shape));
    }
    return bpt_error(context, BPT_ERR_SHAPE, "%s: %s '%s' %s is missing in the file%s%s", where, match->kind,
                     item->name, bpt_match_shape_string(item->rank, item->dims, reason, sizeof reason), place, hint);
  }
  for (int64_t t = 0; t < match->tensor_count; t++) {
    if (match->tensors[t].item >= 0) continue;
    tensor_header(match, t, name, &rank, dims);
    return bpt_error(context, BPT_ERR_SHAPE, "%s: %s '%s' %s in the file is not in this graph%s", where, match->kind,
                     name, bpt_match_shape_string(rank, dims, shape, sizeof shape), hint);
  }
  return BPT_OK;
}

bpt_status bpt_match_report(bpt_context *context, const bpt_match *match, bpt_checkpoint_report *report) {
  char reason[192], name[BPT_NAME_SIZE];
  int rank;
  int64_t dims[BPT_MAX_RANK];
  /* An item whose name the file has with another shape is listed once, as that file tensor, skipped. */
  for (int i = 0; i < match->item_count; i++)
    if (match->items[i].match >= 0)
      BPT_CHECK(bpt_checkpoint_report_add(context, report, BPT_CHECKPOINT_LOADED, match->items[i].name, ""));
    else if (!match->items[i].seen)
      BPT_CHECK(
          bpt_checkpoint_report_add(context, report, BPT_CHECKPOINT_MISSING, match->items[i].name, "not in the file"));
  for (int64_t t = 0; t < match->tensor_count; t++) {
    const bpt_file_tensor *tensor = &match->tensors[t];
    if (tensor->item >= 0 && tensor->same_shape) continue;
    tensor_header(match, t, name, &rank, dims);
    if (tensor->item >= 0)
      shape_reason(match, t, reason, sizeof reason);
    else
      snprintf(reason, sizeof reason, "not in this graph");
    BPT_CHECK(bpt_checkpoint_report_add(context, report, BPT_CHECKPOINT_SKIPPED, name, reason));
  }
  return BPT_OK;
}

/* ---- the report ---- */

bpt_checkpoint_report *bpt_checkpoint_report_create(bpt_context *context) {
  return bpt_calloc(context, 1, sizeof(bpt_checkpoint_report), "checkpoint report");
}

bpt_status bpt_checkpoint_report_add(bpt_context *context, bpt_checkpoint_report *report, bpt_checkpoint_entry entry,
                                     const char *name, const char *reason) {
  int e = (int)entry;
  if (report->counts[e] == report->capacities[e]) {
    int64_t capacity = report->capacities[e] ? 2 * report->capacities[e] : 16;
    report_entry *entries = realloc(report->entries[e], (size_t)capacity * sizeof *entries);
    if (!entries) return bpt_error(context, BPT_ERR_OUT_OF_MEMORY, "checkpoint report: out of memory");
    report->entries[e] = entries;
    report->capacities[e] = capacity;
  }
  report_entry *at = &report->entries[e][report->counts[e]++];
  snprintf(at->name, sizeof at->name, "%s", name);
  snprintf(at->reason, sizeof at->reason, "%s", reason);
  return BPT_OK;
}

static const report_entry *entry_at(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry, int64_t index) {
  if (!report || (int)entry < 0 || (int)entry > 2 || index < 0 || index >= report->counts[entry]) return NULL;
  return &report->entries[entry][index];
}

int64_t bpt_checkpoint_report_count(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry) {
  return report && (int)entry >= 0 && (int)entry <= 2 ? report->counts[entry] : 0;
}

const char *bpt_checkpoint_report_name(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry, int64_t index) {
  const report_entry *at = entry_at(report, entry, index);
  return at ? at->name : NULL;
}

const char *bpt_checkpoint_report_reason(const bpt_checkpoint_report *report, bpt_checkpoint_entry entry,
                                         int64_t index) {
  const report_entry *at = entry_at(report, entry, index);
  return at ? at->reason : NULL;
}

void bpt_checkpoint_report_destroy(bpt_checkpoint_report *report) {
  if (!report) return;
  for (int e = 0; e < 3; e++)
    free(report->entries[e]);
  free(report);
}
