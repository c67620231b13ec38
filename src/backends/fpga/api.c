/* The public fpga-sim API (include/bptrain/fpga.h): configuring the backend of a context and reading the
 * cycle model's report. Everything else about the backend is reached through the vtable. */
#include <stdio.h>
#include <string.h>

#include "backends/fpga/fpga.h"
#include "base/report.h"

static bpt_status fpga_state(bpt_context *context, const char *where, bpt_fpga_state **out) {
  if (!context) return bpt_error(NULL, BPT_ERR_INVALID_ARGUMENT, "%s: context is NULL", where);
  bpt_backend *backend = bpt_context_backend_instance(context);
  if (backend->vtable != bpt_fpga_backend_register())
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "%s: the context runs on backend '%s', not 'fpga-sim'", where,
                     backend->vtable->name);
  *out = bpt_fpga_state_of(backend);
  return BPT_OK;
}

bpt_status bpt_fpga_configure(bpt_context *context, const bpt_fpga_options *options) {
  bpt_fpga_state *state = NULL;
  BPT_CHECK(fpga_state(context, "bpt_fpga_configure", &state));
  if (!options) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_configure: options is NULL");
  bpt_fpga_options copy = bpt_fpga_options_default();
  BPT_CHECK(bpt_copy_options(context, &copy, sizeof copy, options, options->size,
                             offsetof(bpt_fpga_options, board_watts) + sizeof copy.board_watts, "bpt_fpga_configure"));
  char message[128];
  if (bpt_fpga_validate_options(&copy, message, sizeof message) != BPT_OK)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_configure: %s", message);
  state->model.options = copy;
  state->format = bpt_fpga_format_from_options(&copy);
  bpt_fpga_model_place(&state->model);
  bpt_fpga_model_reset(&state->model);
  return BPT_OK;
}

bpt_status bpt_fpga_reset_counters(bpt_context *context) {
  bpt_fpga_state *state = NULL;
  BPT_CHECK(fpga_state(context, "bpt_fpga_reset_counters", &state));
  bpt_fpga_model_reset(&state->model);
  return BPT_OK;
}

static bpt_fpga_report make_report(const bpt_fpga_model *model) {
  bpt_fpga_report report;
  memset(&report, 0, sizeof report);
  report.size = sizeof report;
  report.cycles = bpt_fpga_model_cycles(model);
  for (int k = 0; k < BPT_FPGA_KERNEL_COUNT; k++) {
    report.compute_cycles += model->stats[k].compute_cycles;
    report.transfer_cycles += model->stats[k].transfer_cycles;
    report.kernel_calls += model->stats[k].calls;
  }
  report.overlap_saved_cycles = model->overlap_saved;
  report.seconds = (double)report.cycles / (model->options.clock_mhz * 1e6);
  report.joules = report.seconds * model->options.board_watts;
  double scale = model->options.format == BPT_FPGA_FORMAT_FIXED ? model->options.word_bits / 32.0 : 1.0;
  for (int i = 0; i < model->allocation_count; i++) {
    int64_t bytes = (int64_t)((double)model->allocations[i].bytes * scale);
    if (model->allocations[i].on_chip)
      report.on_chip_bytes += bytes;
    else
      report.off_chip_bytes += bytes;
  }
  return report;
}

bpt_status bpt_fpga_get_report(bpt_context *context, bpt_fpga_report *report) {
  bpt_fpga_state *state = NULL;
  BPT_CHECK(fpga_state(context, "bpt_fpga_get_report", &state));
  if (!report) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_get_report: report is NULL");
  bpt_fpga_report full = make_report(&state->model);
  return bpt_copy_output(context, report, &full, sizeof full,
                         offsetof(bpt_fpga_report, joules) + sizeof report->joules, "bpt_fpga_get_report");
}

int bpt_fpga_kernel_count(void) { return BPT_FPGA_KERNEL_COUNT; }

bpt_status bpt_fpga_get_kernel_report(bpt_context *context, int index, bpt_fpga_kernel_report *report) {
  bpt_fpga_state *state = NULL;
  BPT_CHECK(fpga_state(context, "bpt_fpga_get_kernel_report", &state));
  if (index < 0 || index >= BPT_FPGA_KERNEL_COUNT)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_get_kernel_report: index %d is outside [0, %d)",
                     index, BPT_FPGA_KERNEL_COUNT);
  if (!report) return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_get_kernel_report: report is NULL");
  const bpt_fpga_model *model = &state->model;
  const bpt_fpga_kernel_stats *stats = &model->stats[index];
  bpt_fpga_kernel_report full = {.size = sizeof full,
                                 .name = bpt_fpga_kernel_name((bpt_fpga_kernel)index),
                                 .calls = stats->calls,
                                 .compute_cycles = stats->compute_cycles,
                                 .transfer_cycles = stats->transfer_cycles,
                                 .operations = stats->operations};
  uint64_t cycles = stats->compute_cycles + stats->transfer_cycles;
  full.utilisation = cycles ? (double)stats->operations / ((double)cycles * (double)bpt_fpga_lanes(model)) : 0.0;
  return bpt_copy_output(context, report, &full, sizeof full,
                         offsetof(bpt_fpga_kernel_report, utilisation) + sizeof report->utilisation,
                         "bpt_fpga_get_kernel_report");
}

bpt_status bpt_fpga_format_report(bpt_context *context, char *buffer, size_t size) {
  bpt_fpga_state *state = NULL;
  BPT_CHECK(fpga_state(context, "bpt_fpga_format_report", &state));
  if (!buffer || size == 0)
    return bpt_error(context, BPT_ERR_INVALID_ARGUMENT, "bpt_fpga_format_report: buffer is NULL or empty");
  const bpt_fpga_model *model = &state->model;
  bpt_fpga_report report = make_report(model);
  size_t used = 0;
  buffer[0] = 0;
#define APPEND(...)                                                                                                    \
  do {                                                                                                                 \
    if (used < size) {                                                                                                 \
      int written_ = snprintf(buffer + used, size - used, __VA_ARGS__);                                                \
      used += written_ > 0 ? (size_t)written_ : 0;                                                                     \
    }                                                                                                                  \
  } while (0)
  APPEND("%-20s %10s %14s %12s %7s %6s\n", "kernel", "calls", "compute cyc", "transfer cyc", "share", "util");
  uint64_t all = report.compute_cycles + report.transfer_cycles;
  uint64_t lanes = bpt_fpga_lanes(model);
  for (int k = 0; k < BPT_FPGA_KERNEL_COUNT; k++) {
    const bpt_fpga_kernel_stats *s = &model->stats[k];
    if (!s->calls) continue;
    uint64_t cycles = s->compute_cycles + s->transfer_cycles;
    /* Utilisation: useful lane-operations over lane-cycles the kernel occupied its engine. */
    double utilisation = cycles ? (double)s->operations / ((double)cycles * (double)lanes) : 0.0;
    APPEND("%-20s %10llu %14llu %12llu %6.1f%% %5.1f%%\n", bpt_fpga_kernel_name((bpt_fpga_kernel)k),
           (unsigned long long)s->calls, (unsigned long long)s->compute_cycles, (unsigned long long)s->transfer_cycles,
           all ? 100.0 * (double)cycles / (double)all : 0.0, 100.0 * utilisation);
  }
  APPEND("total %llu cycles (%llu hidden by engine overlap) = %.4f s at %.0f MHz, %.3f J at %.1f W; "
         "%lld bytes on chip, %lld off chip\n",
         (unsigned long long)report.cycles, (unsigned long long)report.overlap_saved_cycles, report.seconds,
         model->options.clock_mhz, report.joules, model->options.board_watts, (long long)report.on_chip_bytes,
         (long long)report.off_chip_bytes);
#undef APPEND
  return BPT_OK;
}
