/* Calling an op's registered kernels for a node: the graph-free description the kernels read, and the CPU
 * fallback, which runs a node the graph's backend does not support on a CPU backend with explicit transfers
 * (inputs, saved buffer and gradients downloaded to host copies, results uploaded back). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "core/precision.h"

static_assert(BPT_MAX_INPUTS <= BPT_KERNEL_MAX_INPUTS && BPT_MAX_INT_ATTRIBUTES == BPT_KERNEL_MAX_INT_ATTRIBUTES &&
                  BPT_MAX_FLOAT_ATTRIBUTES == BPT_KERNEL_MAX_FLOAT_ATTRIBUTES,
              "a node's inputs and attributes must fit its kernel description");

static void describe_tensor(const bpt_node *node, bool with_gradient, bpt_kernel_tensor *tensor) {
  tensor->dtype = node->storage; /* the node's dtype unless the storage plan narrowed it (storage.c) */
  tensor->rank = node->rank;
  tensor->count = 1;
  for (int i = 0; i < node->rank; i++) {
    tensor->dims[i] = i == 0 && node->batched ? node->graph->batch : node->dims[i];
    tensor->count *= tensor->dims[i];
  }
  memcpy(tensor->strides, node->strides, sizeof tensor->strides);
  tensor->value = node->value;
  tensor->grad = with_gradient ? node->grad : NULL;
  tensor->beta = 1.0f;
}

void bpt_node_describe(const bpt_node *node, bpt_kernel_node *description) {
  bpt_kernel_node *d = description;
  d->op = node->op;
  d->name = node->name;
  d->input_count = node->input_count;
  for (int i = 0; i < node->input_count; i++)
    describe_tensor(node->inputs[i], node->inputs[i]->requires_grad, &d->inputs[i]);
  describe_tensor(node, true, &d->output);
  d->saved = node->saved;
  memcpy(d->int_attributes, node->int_attributes, sizeof d->int_attributes);
  memcpy(d->float_attributes, node->float_attributes, sizeof d->float_attributes);
  /* State the op hands to its kernels (relu's mask choice) travels in the slots its declaration names. */
  const bpt_op_definition *definition = bpt_op_get(node->op);
  for (int i = 0; i < definition->state_count; i++) {
    const bpt_state_decl *state = &definition->state[i];
    if (state->kernel_slot < 0) continue;
    if (state->type == BPT_OP_VALUE_FLOAT)
      d->float_attributes[state->kernel_slot] = node->float_state[state->slot];
    else
      d->int_attributes[state->kernel_slot] = node->int_state[state->slot];
  }
  d->seed = 0;
  d->evaluation = node->graph->evaluation;
  d->deterministic = node->graph->deterministic;
  d->bf16_products = bpt_graph_bf16_products(node->graph);
}

static bpt_status kernel_failed(const bpt_node *node, bpt_status status, const char *what) {
  return bpt_node_error(node, status, "%s kernel failed on backend '%s': %s", what, node->kernel_backend->vtable->name,
                        node->kernel_backend->error_message[0] ? node->kernel_backend->error_message
                                                               : bpt_status_string(status));
}

/* The fallback's host copies: one per device pointer of the description, swapped into a copy of it. */
typedef struct host_copies {
  void *buffers[2 * BPT_KERNEL_MAX_INPUTS + 3];
  int count;
} host_copies;

static size_t tensor_bytes(const bpt_kernel_tensor *tensor) {
  return (size_t)tensor->count * bpt_dtype_size(tensor->dtype);
}

/* Replaces *pointer (device, bytes long) by a host copy, downloaded when fetch is set (zeroed otherwise). */
static bpt_status to_host(bpt_node *node, host_copies *copies, void **pointer, size_t bytes, bool fetch) {
  if (!*pointer) return BPT_OK;
  void *host = calloc(1, bytes ? bytes : 1);
  if (!host) return bpt_node_error(node, BPT_ERR_OUT_OF_MEMORY, "CPU fallback: cannot allocate %zu bytes", bytes);
  copies->buffers[copies->count++] = host;
  bpt_backend *device = node->graph->backend;
  if (fetch && bytes && device->vtable->download(device, host, *pointer, bytes) != BPT_OK)
    return bpt_node_error(node, BPT_ERR_DEVICE, "CPU fallback: download from backend '%s' failed: %s",
                          device->vtable->name, device->error_message);
  *pointer = host;
  return BPT_OK;
}

static bpt_status to_device(bpt_node *node, void *device_pointer, const void *host, size_t bytes) {
  bpt_backend *device = node->graph->backend;
  if (!device_pointer || !bytes) return BPT_OK;
  if (device->vtable->upload(device, device_pointer, host, bytes) != BPT_OK)
    return bpt_node_error(node, BPT_ERR_DEVICE, "CPU fallback: upload to backend '%s' failed: %s", device->vtable->name,
                          device->error_message);
  return BPT_OK;
}

static size_t saved_bytes(const bpt_node *node) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  return node->saved && definition->saved_bytes ? definition->saved_bytes(node) : 0;
}

/* Forward writes the output, the saved buffer and the unbatched buffers among the inputs that no gradient
 * flows to (batch norm's running statistics); backward writes the input gradients (with beta 1 it adds to
 * them, so they are fetched first). */
static bpt_status run_on_cpu(bpt_node *node, const bpt_kernel_node *description, bool backward) {
  bpt_kernel_node host = *description;
  host_copies copies = {.count = 0};
  bpt_status status = BPT_OK;
  for (int i = 0; i < host.input_count && status == BPT_OK; i++) {
    bpt_kernel_tensor *input = &host.inputs[i];
    status = to_host(node, &copies, &input->value, tensor_bytes(input), true);
    if (status == BPT_OK && backward)
      status = to_host(node, &copies, (void **)&input->grad, tensor_bytes(input), input->beta != 0.0f);
  }
  /* The output is fetched too: a folded batch_norm_relu works in place on the convolution's output. */
  if (status == BPT_OK) status = to_host(node, &copies, &host.output.value, tensor_bytes(&host.output), true);
  if (status == BPT_OK && backward)
    status = to_host(node, &copies, (void **)&host.output.grad, tensor_bytes(&host.output), true);
  if (status == BPT_OK) status = to_host(node, &copies, &host.saved, saved_bytes(node), backward);
  if (status == BPT_OK) {
    bpt_backend *cpu = node->kernel_backend;
    cpu->error_message[0] = 0;
    status = (backward ? node->kernels->backward : node->kernels->forward)(cpu, &host);
    if (status != BPT_OK) status = kernel_failed(node, status, backward ? "backward" : "forward");
  }
  for (int i = 0; i < host.input_count && status == BPT_OK; i++) {
    const bpt_kernel_tensor *input = &host.inputs[i], *device = &description->inputs[i];
    if (backward) {
      status = to_device(node, device->grad, input->grad, tensor_bytes(input));
    } else if (!node->inputs[i]->batched && !node->inputs[i]->requires_grad &&
               node->inputs[i]->op == BPT_OP_PARAMETER) {
      status = to_device(node, device->value, input->value, tensor_bytes(input));
    }
  }
  if (status == BPT_OK && !backward) {
    status = to_device(node, description->output.value, host.output.value, tensor_bytes(&host.output));
    if (status == BPT_OK) status = to_device(node, description->saved, host.saved, saved_bytes(node));
  }
  for (int i = 0; i < copies.count; i++)
    free(copies.buffers[i]);
  return status;
}

/* The bf16-stored tensors of a node whose kernels take f32 only (bpt_node_kernels_widen_bf16): each distinct
 * device buffer gets an f32 copy in the policy's scratch, widened first where the kernels read it and narrowed
 * back where they wrote it, so the values are those the rounding path gives (f32 compute, one rounding of each
 * result). A buffer named twice (a folded batch_norm_relu works in place) has one copy. */
typedef struct widened_buffers {
  void *device[2 * BPT_KERNEL_MAX_INPUTS + 2];
  float *f32[2 * BPT_KERNEL_MAX_INPUTS + 2];
  int64_t count[2 * BPT_KERNEL_MAX_INPUTS + 2];
  bool read[2 * BPT_KERNEL_MAX_INPUTS + 2], written[2 * BPT_KERNEL_MAX_INPUTS + 2];
  int n;
} widened_buffers;

static void add_buffer(widened_buffers *buffers, const bpt_kernel_tensor *tensor, void *device, bool read,
                       bool written) {
  if (!device || tensor->dtype != BPT_DTYPE_BF16) return;
  for (int i = 0; i < buffers->n; i++)
    if (buffers->device[i] == device) {
      buffers->read[i] |= read;
      buffers->written[i] |= written;
      return;
    }
  const int i = buffers->n++;
  buffers->device[i] = device;
  buffers->count[i] = tensor->count;
  buffers->read[i] = read;
  buffers->written[i] = written;
}

static void *f32_copy(const widened_buffers *buffers, void *device) {
  for (int i = 0; i < buffers->n; i++)
    if (buffers->device[i] == device) return buffers->f32[i];
  return device;
}

static void widen_tensor(const widened_buffers *buffers, bpt_kernel_tensor *tensor) {
  if (tensor->dtype != BPT_DTYPE_BF16) return;
  tensor->value = f32_copy(buffers, tensor->value);
  tensor->grad = f32_copy(buffers, tensor->grad);
  tensor->dtype = BPT_DTYPE_F32;
}

static bpt_status cast_buffers(bpt_node *node, const widened_buffers *buffers, bool narrow) {
  bpt_backend *backend = node->graph->backend;
  for (int i = 0; i < buffers->n; i++) {
    if (!(narrow ? buffers->written[i] : buffers->read[i])) continue;
    backend->error_message[0] = 0;
    const bpt_status status =
        narrow ? backend->vtable->cast(backend, buffers->count[i], BPT_DTYPE_F32, buffers->f32[i], BPT_DTYPE_BF16,
                                       buffers->device[i], 1.0f)
               : backend->vtable->cast(backend, buffers->count[i], BPT_DTYPE_BF16, buffers->device[i], BPT_DTYPE_F32,
                                       buffers->f32[i], 1.0f);
    if (status != BPT_OK)
      return bpt_node_error(node, status, "%s its bf16 storage for f32 kernels: %s", narrow ? "narrowing" : "widening",
                            backend->error_message);
  }
  return BPT_OK;
}

/* Forward reads the inputs and writes the output; backward reads the inputs and the output that the op says it
 * reads (the memory plan may have reused the others, so the kernels do not touch them), the output's gradient,
 * and writes the input gradients (reading them first where it adds to them, beta 1). */
static bpt_status run_widened(bpt_node *node, const bpt_kernel_node *description, bool backward) {
  const bpt_op_definition *definition = bpt_op_get(node->op);
  widened_buffers buffers = {.n = 0};
  for (int i = 0; i < description->input_count; i++) {
    const bpt_kernel_tensor *input = &description->inputs[i];
    const bool read = !backward || !definition->backward_reads_input || definition->backward_reads_input(node, i);
    if (read) add_buffer(&buffers, input, input->value, true, false);
    if (backward) add_buffer(&buffers, input, input->grad, input->beta != 0.0f, true);
  }
  const bool output_read = backward && (!definition->backward_reads_output || definition->backward_reads_output(node));
  if (!backward || output_read)
    add_buffer(&buffers, &description->output, description->output.value, backward, !backward);
  if (backward) add_buffer(&buffers, &description->output, description->output.grad, true, false);
  size_t bytes = 0, offsets[2 * BPT_KERNEL_MAX_INPUTS + 2];
  for (int i = 0; i < buffers.n; i++) { /* 64-byte aligned copies, as the memory plan aligns buffers */
    offsets[i] = bytes;
    bytes += ((size_t)buffers.count[i] * sizeof(float) + 63) / 64 * 64;
  }
  float *scratch;
  BPT_CHECK(bpt_precision_widen_scratch(node->graph, bytes ? bytes : 64, &scratch));
  for (int i = 0; i < buffers.n; i++)
    buffers.f32[i] = scratch + offsets[i] / sizeof(float);
  BPT_CHECK(cast_buffers(node, &buffers, false));
  bpt_kernel_node f32 = *description;
  for (int i = 0; i < f32.input_count; i++)
    widen_tensor(&buffers, &f32.inputs[i]);
  widen_tensor(&buffers, &f32.output);
  bpt_backend *backend = node->kernel_backend;
  backend->error_message[0] = 0;
  const bpt_status status = (backward ? node->kernels->backward : node->kernels->forward)(backend, &f32);
  if (status != BPT_OK) return kernel_failed(node, status, backward ? "backward" : "forward");
  return cast_buffers(node, &buffers, true);
}

static bool names_bf16(const bpt_kernel_node *description) {
  bool any = description->output.dtype == BPT_DTYPE_BF16;
  for (int i = 0; i < description->input_count; i++)
    any |= description->inputs[i].dtype == BPT_DTYPE_BF16;
  return any;
}

static bpt_status run(bpt_node *node, const bpt_kernel_node *description, bool backward) {
  const bpt_op_kernels *kernels = node->kernels;
  if (!kernels)
    return bpt_node_error(node, BPT_ERR_UNSUPPORTED, "no kernels on backend '%s' (compile the graph first)",
                          node->graph->backend->vtable->name);
  if (node->kernel_backend != node->graph->backend) return run_on_cpu(node, description, backward);
  if (bpt_node_kernels_widen_bf16(node) && names_bf16(description)) return run_widened(node, description, backward);
  bpt_backend *backend = node->kernel_backend;
  bpt_status status = (backward ? kernels->backward : kernels->forward)(backend, description);
  return status == BPT_OK ? BPT_OK : kernel_failed(node, status, backward ? "backward" : "forward");
}

bpt_status bpt_node_run_forward_kernels(bpt_node *node, const bpt_kernel_node *description) {
  return run(node, description, false);
}

bpt_status bpt_node_run_backward_kernels(bpt_node *node, bpt_kernel_node *description) {
  for (int i = 0; i < description->input_count; i++)
    if (description->inputs[i].grad)
      description->inputs[i].beta = bpt_node_take_unset_gradient(node->inputs[i]) ? 0.0f : 1.0f;
  return run(node, description, true);
}

bpt_status bpt_node_forward_kernels(bpt_node *node) {
  bpt_kernel_node description;
  bpt_node_describe(node, &description);
  return bpt_node_run_forward_kernels(node, &description);
}

bpt_status bpt_node_backward_kernels(bpt_node *node) {
  bpt_kernel_node description;
  bpt_node_describe(node, &description);
  return bpt_node_run_backward_kernels(node, &description);
}
