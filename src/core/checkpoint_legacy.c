/* Old parameter files given to the checkpoint loader (see checkpoint_legacy.h). They cannot be matched by name
 * or checked by shape, so a strict load refuses them with directions, and only a load that asked for leniency
 * fills the parameters by position, saying so in its report. */
#include "core/checkpoint_legacy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/report.h"
#include "core/checkpoint_match.h"
#include "core/graph.h"

enum { LEGACY_HEADER_BYTES = 16 };

const char *bpt_checkpoint_legacy_kind(const unsigned char *bytes) {
  return memcmp(bytes, "BPTPARAM", 8) == 0 ? "an old BPTPARAM parameter file (the C examples' --save format before "
                                             "checkpoints)"
                                           : "an old BPTPARM1 parameter file (the Python binding's save() format "
                                             "before checkpoints)";
}

bool bpt_checkpoint_is_legacy(const unsigned char *bytes, size_t size) {
  return size >= 8 && (memcmp(bytes, "BPTPARAM", 8) == 0 || memcmp(bytes, "BPTPARM1", 8) == 0);
}

bpt_status bpt_checkpoint_load_legacy(bpt_graph *graph, const unsigned char *bytes, size_t size, const char *what,
                                      bpt_checkpoint_contents *contents, bool strict, bpt_checkpoint_report **report) {
  bpt_context *context = graph->context;
  const char *kind = bpt_checkpoint_legacy_kind(bytes);
  int64_t ours = bpt_graph_parameter_count(graph);
  /* Both wrote a little-endian i64 (the examples ran on little-endian machines only). */
  uint64_t stored = 0;
  for (int i = 0; size >= LEGACY_HEADER_BYTES && i < 8; i++)
    stored |= (uint64_t)bytes[8 + i] << (8 * i);
  if (size < LEGACY_HEADER_BYTES || stored > (size - LEGACY_HEADER_BYTES) / 4 ||
      size - LEGACY_HEADER_BYTES != stored * 4)
    return bpt_error(context, BPT_ERR_FORMAT, "'%s' is %s, but truncated or malformed (%zu bytes)", what, kind, size);
  if (strict)
    return bpt_error(context, BPT_ERR_FORMAT,
                     "'%s' is %s, not a checkpoint: %llu values in declaration order without names or shapes, so a "
                     "strict load cannot match or check them. To convert it, load it once with "
                     "bpt_checkpoint_load_with_options and strict = 0, which fills this graph's parameters in order "
                     "when the counts agree (this graph has %lld values), then bpt_checkpoint_save; the C examples' "
                     "--eval does that load and says so",
                     what, kind, (unsigned long long)stored, (long long)ours);
  if ((int64_t)stored != ours)
    return bpt_error(context, BPT_ERR_SHAPE, "'%s' is %s with %llu values; this graph has %lld: not the same model",
                     what, kind, (unsigned long long)stored, (long long)ours);
  if (contents->dataset)
    return bpt_error(context, BPT_ERR_FORMAT, "'%s' is %s: it holds no sample order, but a data set was given", what,
                     kind);
  float *values = bpt_calloc(context, (size_t)(ours ? ours : 1), sizeof *values, "legacy parameter file");
  bpt_checkpoint_report *built = report ? bpt_checkpoint_report_create(context) : NULL;
  bpt_status status = values && (built || !report) ? BPT_OK : BPT_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; status == BPT_OK && i < ours; i++) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; b++)
      bits |= (uint32_t)bytes[LEGACY_HEADER_BYTES + 4 * i + b] << (8 * b);
    memcpy(&values[i], &bits, sizeof bits);
  }
  char reason[160];
  snprintf(reason, sizeof reason, "by position from %.8s file '%.60s' (no names or shapes to check)",
           (const char *)bytes, what);
  for (int p = 0; built && status == BPT_OK && p < graph->parameter_count; p++)
    status = bpt_checkpoint_report_add(context, built, BPT_CHECKPOINT_LOADED, graph->parameters[p]->name, reason);
  for (int i = 0; built && status == BPT_OK && i < graph->buffer_count; i++)
    status = bpt_checkpoint_report_add(context, built, BPT_CHECKPOINT_MISSING, graph->buffers[i].name,
                                       "not in the file (parameter files hold parameters only)");
  if (status == BPT_OK) status = bpt_graph_write_parameters(graph, values, ours);
  if (status == BPT_OK) {
    contents->epoch = contents->step = 0;
    if (report) *report = built;
  } else {
    bpt_checkpoint_report_destroy(built);
  }
  free(values);
  return status;
}
