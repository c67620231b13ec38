/* The cycle and resource model of fpga-sim. A kernel call costs the cycles of its pipelined loops,
 * (trip_count - 1) * II + depth each, plus the cycles to move the bytes of its off-chip operands at the
 * configured bandwidth (transfers are not overlapped with compute: a conservative, non-DATAFLOW design).
 * Two engines (forward and backward datapaths) accumulate cycles separately between joins; a join is the
 * ping-pong buffer swap and commits the longer of the two. */
#include <math.h>
#include <stdlib.h>

#include "backends/fpga/fpga.h"

uint64_t bpt_fpga_pipelined_cycles(uint64_t trip_count, uint64_t initiation_interval, uint64_t depth) {
  return trip_count == 0 ? 0 : (trip_count - 1) * initiation_interval + depth;
}

uint64_t bpt_fpga_lanes(const bpt_fpga_model *model) {
  return (uint64_t)model->options.dsp_slices * (uint64_t)model->options.lanes_per_slice;
}

uint64_t bpt_fpga_loop_cycles(const bpt_fpga_model *model, uint64_t count) {
  const uint64_t lanes = bpt_fpga_lanes(model);
  return bpt_fpga_pipelined_cycles((count + lanes - 1) / lanes, (uint64_t)model->options.initiation_interval,
                                   (uint64_t)model->options.pipeline_depth);
}

/* ceil() as a count of bytes or cycles; the options take any positive bandwidth, so a tiny one saturates one
 * charge at UINT64_MAX instead of converting a double past 2^64 (undefined). The sums of such charges wrap
 * (unsigned, defined): at that bandwidth the report means nothing anyway. */
static uint64_t ceil_saturated(double value) { return value < 0x1p64 ? (uint64_t)ceil(value) : UINT64_MAX; }

/* Bytes one element occupies in the device's memory: fixed point packs W bits. */
static double element_bytes(const bpt_fpga_options *options) {
  return options->format == BPT_FPGA_FORMAT_FIXED ? options->word_bits / 8.0 : 4.0;
}

uint64_t bpt_fpga_offchip_bytes(const bpt_fpga_model *model, const void *pointer, int64_t count) {
  const char *address = pointer;
  for (int i = 0; i < model->allocation_count; i++) {
    const bpt_fpga_allocation *allocation = &model->allocations[i];
    if (address >= allocation->base && address < allocation->base + allocation->bytes)
      return allocation->on_chip ? 0 : ceil_saturated((double)count * element_bytes(&model->options));
  }
  return 0; /* host memory handed straight to a kernel (a label array, a scalar): no device transfer */
}

void bpt_fpga_charge(bpt_fpga_model *model, bpt_fpga_kernel kernel, uint64_t compute_cycles, uint64_t offchip_bytes,
                     uint64_t operations) {
  uint64_t transfer = offchip_bytes ? ceil_saturated((double)offchip_bytes / model->options.offchip_bytes_per_cycle) : 0;
  model->pending[model->engine] += compute_cycles + transfer;
  bpt_fpga_kernel_stats *stats = &model->stats[kernel];
  stats->calls++;
  stats->compute_cycles += compute_cycles;
  stats->transfer_cycles += transfer;
  stats->operations += operations;
}

void bpt_fpga_model_select(bpt_fpga_model *model, int engine) { model->engine = engine ? 1 : 0; }

void bpt_fpga_model_join(bpt_fpga_model *model) {
  uint64_t longer = model->pending[0] > model->pending[1] ? model->pending[0] : model->pending[1];
  uint64_t shorter = model->pending[0] + model->pending[1] - longer;
  model->committed += longer;
  model->overlap_saved += shorter;
  model->pending[0] = model->pending[1] = 0;
  model->engine = 0;
}

uint64_t bpt_fpga_model_cycles(const bpt_fpga_model *model) {
  /* Work not yet joined ran on one engine at a time as far as anyone can tell: count it in full. */
  return model->committed + model->pending[0] + model->pending[1];
}

void bpt_fpga_model_reset(bpt_fpga_model *model) {
  model->committed = model->overlap_saved = 0;
  model->pending[0] = model->pending[1] = 0;
  model->engine = 0;
  for (int k = 0; k < BPT_FPGA_KERNEL_COUNT; k++)
    model->stats[k] = (bpt_fpga_kernel_stats){0};
}

void bpt_fpga_model_place(bpt_fpga_model *model) {
  double used = 0.0;
  double scale = element_bytes(&model->options) / 4.0; /* allocations are sized in f32 containers */
  for (int i = 0; i < model->allocation_count; i++) {
    bpt_fpga_allocation *allocation = &model->allocations[i];
    double bytes = (double)allocation->bytes * scale;
    allocation->on_chip = used + bytes <= (double)model->options.bram_bytes;
    if (allocation->on_chip) used += bytes;
  }
}

const char *bpt_fpga_kernel_name(bpt_fpga_kernel kernel) {
  static const char *const names[BPT_FPGA_KERNEL_COUNT] = {
      "gemm",           "bias_add",       "bias_backward", "activation_forward", "activation_backward",
      "softmax_ce_fwd", "softmax_ce_bwd", "mse_forward",   "mse_backward",       "sgd_update",
      "adam_update",    "add_scaled",     "memory",        "im2col",             "pool",
      "norm"};
  return (unsigned)kernel < BPT_FPGA_KERNEL_COUNT ? names[kernel] : "unknown";
}
