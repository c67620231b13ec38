/* The fpga-sim backend's table, lifetime and memory. Device memory is host memory (a C simulation), but every
 * allocation is placed on chip (BRAM) or off chip by the cycle model, and host transfers and copies are
 * charged at the off-chip bandwidth or one lane-wide word per cycle respectively. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/fpga/fpga.h"

bpt_fpga_options bpt_fpga_options_default(void) {
  bpt_fpga_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.format = BPT_FPGA_FORMAT_F32;
  options.word_bits = 16;
  options.integer_bits = 6;
  options.rounding = BPT_FPGA_ROUND;
  options.overflow = BPT_FPGA_SATURATE;
  options.clock_mhz = 200.0;
  options.dsp_slices = 8;
  options.lanes_per_slice = 1;
  options.initiation_interval = 1;
  options.pipeline_depth = 8;
  options.bram_bytes = 216 * 4608; /* ZU3EG: 216 BRAM36 blocks of 4.5 KiB */
  options.offchip_bytes_per_cycle = 16.0;
  options.board_watts = 7.3;
  return options;
}

bpt_status bpt_fpga_validate_options(const bpt_fpga_options *o, char *message, size_t size) {
  const char *problem = NULL;
  if (o->format != BPT_FPGA_FORMAT_F32 && o->format != BPT_FPGA_FORMAT_FIXED)
    problem = "format is unknown";
  else if (o->format == BPT_FPGA_FORMAT_FIXED && (o->word_bits < 2 || o->word_bits > 32))
    problem = "word_bits must be in [2, 32]";
  else if (o->format == BPT_FPGA_FORMAT_FIXED && (o->integer_bits < 1 || o->integer_bits > o->word_bits))
    problem = "integer_bits must be in [1, word_bits]";
  else if (o->rounding != BPT_FPGA_TRUNCATE && o->rounding != BPT_FPGA_ROUND)
    problem = "rounding is unknown";
  else if (o->overflow != BPT_FPGA_WRAP && o->overflow != BPT_FPGA_SATURATE)
    problem = "overflow is unknown";
  else if (!(o->clock_mhz > 0.0))
    problem = "clock_mhz must be > 0";
  else if (o->dsp_slices < 1 || o->lanes_per_slice < 1)
    problem = "dsp_slices and lanes_per_slice must be >= 1";
  else if (o->initiation_interval < 1 || o->pipeline_depth < 1)
    problem = "initiation_interval and pipeline_depth must be >= 1";
  else if (o->bram_bytes < 0)
    problem = "bram_bytes must be >= 0";
  else if (!(o->offchip_bytes_per_cycle > 0.0))
    problem = "offchip_bytes_per_cycle must be > 0";
  else if (!(o->board_watts >= 0.0))
    problem = "board_watts must be >= 0";
  if (!problem) return BPT_OK;
  snprintf(message, size, "%s", problem);
  return BPT_ERR_INVALID_ARGUMENT;
}

static bpt_status fpga_create(bpt_backend *backend, const bpt_backend_options *options) {
  bpt_fpga_state *state = calloc(1, sizeof *state);
  if (!state) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate the fpga-sim state");
  state->model.options = bpt_fpga_options_default();
  state->format = bpt_fpga_format_from_options(&state->model.options);
  backend->state = state;
  backend->num_threads = options->num_threads > 0 ? options->num_threads : 1;
  return BPT_OK;
}

static void fpga_destroy(bpt_backend *backend) {
  bpt_fpga_state *state = bpt_fpga_state_of(backend);
  if (!state) return;
  free(state->model.allocations);
  free(state);
  backend->state = NULL;
}

static bpt_status fpga_alloc(bpt_backend *backend, size_t bytes, void **out) {
  bpt_fpga_model *model = &bpt_fpga_state_of(backend)->model;
  if (model->allocation_count == model->allocation_capacity) {
    int capacity = model->allocation_capacity ? 2 * model->allocation_capacity : 16;
    bpt_fpga_allocation *grown = realloc(model->allocations, (size_t)capacity * sizeof *grown);
    if (!grown) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot grow the allocation table");
    model->allocations = grown;
    model->allocation_capacity = capacity;
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  *out = aligned_alloc(64, rounded ? rounded : 64);
  if (!*out) return bpt_backend_fail(backend, BPT_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  model->allocations[model->allocation_count++] = (bpt_fpga_allocation){.base = *out, .bytes = rounded};
  bpt_fpga_model_place(model);
  return BPT_OK;
}

static void fpga_free(bpt_backend *backend, void *pointer) {
  if (!pointer) return;
  bpt_fpga_model *model = &bpt_fpga_state_of(backend)->model;
  for (int i = 0; i < model->allocation_count; i++) {
    if (model->allocations[i].base != pointer) continue;
    memmove(&model->allocations[i], &model->allocations[i + 1],
            (size_t)(model->allocation_count - i - 1) * sizeof *model->allocations);
    model->allocation_count--;
    break;
  }
  bpt_fpga_model_place(model);
  free(pointer);
}

/* Copies inside the device move one word per lane per cycle on chip, plus off-chip traffic at both ends. */
static void charge_copy(bpt_fpga_model *model, const void *dst, const void *src, size_t bytes) {
  uint64_t count = bytes / 4;
  uint64_t offchip = (dst ? bpt_fpga_offchip_bytes(model, dst, (int64_t)count) : 0) +
                     (src ? bpt_fpga_offchip_bytes(model, src, (int64_t)count) : 0);
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_MEMORY, bpt_fpga_loop_cycles(model, count), offchip, count);
}

/* Host transfers always cross the off-chip link. */
static void charge_host_transfer(bpt_fpga_model *model, size_t bytes) {
  bpt_fpga_charge(model, BPT_FPGA_KERNEL_MEMORY, 0, bytes, bytes / 4);
}

static bpt_status fpga_upload(bpt_backend *backend, void *dst, const void *src, size_t bytes) {
  charge_host_transfer(&bpt_fpga_state_of(backend)->model, bytes);
  if (bytes) memmove(dst, src, bytes);
  return BPT_OK;
}

static bpt_status fpga_download(bpt_backend *backend, void *dst, const void *src, size_t bytes) {
  charge_host_transfer(&bpt_fpga_state_of(backend)->model, bytes);
  if (bytes) memmove(dst, src, bytes);
  return BPT_OK;
}

static bpt_status fpga_copy(bpt_backend *backend, void *dst, const void *src, size_t bytes) {
  charge_copy(&bpt_fpga_state_of(backend)->model, dst, src, bytes);
  if (bytes) memmove(dst, src, bytes);
  return BPT_OK;
}

static bpt_status fpga_memset_zero(bpt_backend *backend, void *dst, size_t bytes) {
  charge_copy(&bpt_fpga_state_of(backend)->model, dst, NULL, bytes);
  if (bytes) memset(dst, 0, bytes);
  return BPT_OK;
}

static bpt_status fpga_engine_select(bpt_backend *backend, int engine) {
  if (engine != 0 && engine != 1)
    return bpt_backend_fail(backend, BPT_ERR_INVALID_ARGUMENT, "engine %d does not exist (0 or 1)", engine);
  bpt_fpga_model_select(&bpt_fpga_state_of(backend)->model, engine);
  return BPT_OK;
}

static bpt_status fpga_engine_join(bpt_backend *backend) {
  bpt_fpga_model_join(&bpt_fpga_state_of(backend)->model);
  return BPT_OK;
}

/* Generated from the BPT_REGISTER_KERNELS lines of this folder (cmake/kernel_table.cmake). */
extern const bpt_op_kernels *const bpt_fpga_kernel_table[BPT_OP_COUNT];

static const bpt_op_kernels *fpga_kernels(const bpt_backend *backend, bpt_op_id op) {
  (void)backend;
  return (unsigned)op < BPT_OP_COUNT ? bpt_fpga_kernel_table[op] : NULL;
}

static const bpt_backend_vtable fpga_vtable = {
    .version = BPT_BACKEND_VTABLE_VERSION,
    .size = sizeof(bpt_backend_vtable),
    .name = "fpga-sim",
    .create = fpga_create,
    .destroy = fpga_destroy,
    /* Host memory underneath, but simulated device memory: transfers go through upload and download so the
     * cycle model charges them. */
    .is_host = false,
    .alloc = fpga_alloc,
    .free = fpga_free,
    .upload = fpga_upload,
    .download = fpga_download,
    .copy = fpga_copy,
    .memset_zero = fpga_memset_zero,
    .synchronize = NULL,
    .kernels = fpga_kernels,
    .gemm = bpt_fpga_gemm,
    .add_scaled = bpt_fpga_add_scaled,
    .sgd_update = bpt_fpga_sgd_update,
    .adam_update = bpt_fpga_adam_update,
    .engine_select = fpga_engine_select,
    .engine_join = fpga_engine_join,
};

const bpt_backend_vtable *bpt_fpga_backend_register(void) { return &fpga_vtable; }
