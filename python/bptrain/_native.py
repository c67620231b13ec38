"""Loads libbptrain with ctypes and declares the C structs and prototypes the binding calls.

Only the C ABI is used, so nothing is compiled on the user's side. libbptrain links no CUDA, NCCL or MPI
(those live in modules it loads on first use), so importing this loads none of them. The builders of graph
ops are declared from the op table in _ops.py; everything else is declared here, grouped by public header.
"""
import ctypes
import ctypes.util
import os
import sys

from ._errors import IO, error

ABI_VERSION = 0
SONAME = "libbptrain.so.%d" % ABI_VERSION
_HERE = os.path.dirname(os.path.abspath(__file__))
# lib/<triplet> for this machine only (Debian's multiarch directory): another architecture's would never load.
_MULTIARCH = getattr(sys.implementation, "_multiarch", None)
_LIBDIRS = ("lib", "lib64") + ((os.path.join("lib", _MULTIARCH),) if _MULTIARCH else ())


def _candidates():
    """(where, path) pairs in search order; where says why that path is tried, for the error message."""
    explicit = os.environ.get("BPTRAIN_LIBRARY")
    if explicit:  # an explicit choice is the only one tried: a silent fallback would hide a typo
        yield "BPTRAIN_LIBRARY", explicit
        return
    yield "beside the package", os.path.join(_HERE, SONAME)
    # The prefix this package was installed under: by CMake (<prefix>/share/bptrain/python/bptrain, next to
    # <prefix>/lib*/) or by pip into an environment whose prefix also holds the library; then CMake's
    # default prefix, for an install whose directory is not in the loader's cache yet.
    prefixes = [sys.prefix, "/usr/local"]
    if _HERE.endswith(os.path.join("share", "bptrain", "python", "bptrain")):
        prefixes.insert(0, os.path.abspath(os.path.join(_HERE, "..", "..", "..", "..")))
    for prefix in dict.fromkeys(prefixes):
        for libdir in _LIBDIRS:
            yield "install prefix %s" % prefix, os.path.join(prefix, libdir, SONAME)
    yield "system search path", SONAME
    found = ctypes.util.find_library("bptrain")
    if found:
        yield "ldconfig", found
    # A development checkout: python/bptrain beside the repository's build directories.
    repository = os.path.abspath(os.path.join(_HERE, "..", ".."))
    if os.path.exists(os.path.join(repository, "include", "bptrain", "common.h")):
        for build in ("build", "build-test", "build-release"):
            yield "repository build", os.path.join(repository, build, SONAME)


def _load():
    looked = []
    for where, candidate in _candidates():
        if os.path.sep in candidate and not os.path.exists(candidate):
            looked.append("  %s (%s): no such file" % (candidate, where))
            continue
        try:
            return ctypes.CDLL(candidate)
        except OSError as failure:
            # dlopen repeats the path first; only the reason after it is new.
            reason = str(failure)
            if reason.startswith(candidate + ": "):
                reason = reason[len(candidate) + 2:]
            looked.append("  %s (%s): %s" % (candidate, where, reason))
    # docs/python.md's install command, from the checkout's root (`pip install ./python` works too).
    raise error(IO, "bptrain: cannot load %s (pip install . in the checkout's root builds and ships it; or set "
                "BPTRAIN_LIBRARY to its path). Tried:\n%s" % (SONAME, "\n".join(looked)))


lib = _load()

status = ctypes.c_int
handle = ctypes.c_void_p
handle_p = ctypes.POINTER(ctypes.c_void_p)
int64_p = ctypes.POINTER(ctypes.c_int64)
float_p = ctypes.POINTER(ctypes.c_float)
int_p = ctypes.POINTER(ctypes.c_int)
size_t = ctypes.c_size_t


def _struct(name, fields, doc):
    """A ctypes mirror of a public option or result struct; its leading size field lets the library accept
    this layout while later versions append fields."""
    return type(name, (ctypes.Structure,), {"_fields_": [("size", size_t)] + fields, "__doc__": doc})


c_int64, c_int, c_float, c_double, c_uint64 = ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_double, \
    ctypes.c_uint64
ContextOptions = _struct("ContextOptions", [("backend", ctypes.c_char_p), ("num_threads", c_int),
                                            ("seed", c_uint64), ("cpu_fallback", c_int)], "bpt_context_options")
OptimizerOptions = _struct("OptimizerOptions", [
    ("kind", c_int), ("learning_rate", c_float), ("momentum", c_float), ("nesterov", c_int),
    ("weight_decay", c_float), ("beta1", c_float), ("beta2", c_float), ("epsilon", c_float)],
    "bpt_optimizer_options")
Conv2dOptions = _struct("Conv2dOptions", [(field, c_int64) for field in (
    "stride_height", "stride_width", "padding_height", "padding_width", "dilation_height", "dilation_width",
    "groups")], "bpt_conv2d_options")
TransformerBlockOptions = _struct("TransformerBlockOptions", [
    ("heads", c_int64), ("mlp_ratio", c_int64), ("epsilon", c_float), ("dropout", c_float), ("causal", c_int),
    ("initializer", c_int), ("recompute", c_int)], "bpt_transformer_block_options")
LayerSpec = _struct("LayerSpec", [("kind", c_int), ("units", c_int64), ("kernel", c_int64), ("stride", c_int64),
                                  ("padding", c_int64), ("rate", c_float)], "bpt_layer_spec")
ScheduleOptions = _struct("ScheduleOptions", [
    ("kind", c_int), ("base_learning_rate", c_float), ("warmup_steps", c_int64), ("warmup_start_factor", c_float),
    ("step_size", c_int64), ("gamma", c_float), ("total_steps", c_int64), ("minimum_learning_rate", c_float)],
    "bpt_schedule_options")
PrecisionOptions = _struct("PrecisionOptions", [
    ("compute_dtype", c_int), ("loss_scaling", c_int), ("initial_loss_scale", c_float),
    ("growth_interval", c_int64), ("growth_factor", c_float), ("backoff_factor", c_float),
    ("saved_activation_storage", c_int), ("keep_all_values", c_int), ("store_activations_16bit", c_int)],
    "bpt_precision_options")
ConvertOptions = _struct("ConvertOptions", [("rounding", c_int), ("saturate", c_int), ("scale", c_float),
                                            ("seed", c_uint64)], "bpt_convert_options")
ValueStatistics = _struct("ValueStatistics", [("mean", c_double), ("standard_deviation", c_double),
                                              ("zero_fraction", c_double), ("count", c_int64)],
                          "bpt_value_statistics")
GraphMemoryStats = _struct("GraphMemoryStats", [
    ("max_batch", c_int64), ("activation_bytes_held", size_t), ("transient_bytes", size_t),
    ("gradient_bytes", size_t), ("parameter_bytes", size_t), ("input_bytes", size_t), ("recompute_bytes", size_t),
    ("activation_bytes", size_t), ("activation_bytes_f32", size_t)], "bpt_graph_memory_stats")
CheckpointContents = _struct("CheckpointContents", [("optimizer", handle), ("dataset", handle), ("epoch", c_int64),
                                                    ("step", c_int64)], "bpt_checkpoint_contents")
OnnxExportOptions = _struct("OnnxExportOptions", [("opset", c_int64), ("input_mean", c_float), ("input_std", c_float),
                                                  ("softmax", c_int)], "bpt_onnx_export_options")
_s = ctypes.c_char_p
ComputeInfo = _struct("ComputeInfo", [
    ("blas", _s), ("blas_core", _s), ("blas_core_choice", _s), ("self_check", _s), ("gemm", _s), ("bf16_gemm", _s),
    ("cpu_vendor", _s), ("cpu_model", _s), ("cpu_family", c_int), ("cpu_model_number", c_int), ("avx2", c_int),
    ("fma", c_int), ("avx512f", c_int), ("avx512_bf16", c_int), ("avx512_fp16", c_int), ("summary", _s)],
    "bpt_compute_info")
CheckpointLoadOptions = _struct("CheckpointLoadOptions", [("strict", c_int)], "bpt_checkpoint_load_options")
FpgaOptions = _struct("FpgaOptions", [
    ("format", c_int), ("word_bits", c_int), ("integer_bits", c_int), ("rounding", c_int), ("overflow", c_int),
    ("clock_mhz", c_double), ("dsp_slices", c_int), ("lanes_per_slice", c_int), ("initiation_interval", c_int),
    ("pipeline_depth", c_int), ("bram_bytes", c_int64), ("offchip_bytes_per_cycle", c_double),
    ("board_watts", c_double)], "bpt_fpga_options")
FpgaReport = _struct("FpgaReport", [
    ("cycles", c_uint64), ("compute_cycles", c_uint64), ("transfer_cycles", c_uint64),
    ("overlap_saved_cycles", c_uint64), ("kernel_calls", c_uint64), ("seconds", c_double), ("joules", c_double),
    ("on_chip_bytes", c_int64), ("off_chip_bytes", c_int64)], "bpt_fpga_report")
FpgaKernelReport = _struct("FpgaKernelReport", [
    ("name", ctypes.c_char_p), ("calls", c_uint64), ("compute_cycles", c_uint64), ("transfer_cycles", c_uint64),
    ("operations", c_uint64), ("utilisation", c_double)], "bpt_fpga_kernel_report")
SpeculativeOptions = _struct("SpeculativeOptions", [
    ("threshold", c_float), ("distance", c_int), ("final_threshold", c_float), ("schedule_steps", c_int64),
    ("threads", c_int), ("gradient_clip", c_float)], "bpt_speculative_options")
SpeculativeCounters = _struct("SpeculativeCounters", [
    ("samples", c_int64), ("hits", c_int64), ("fallbacks", c_int64), ("cold_fallbacks", c_int64),
    ("mean_distance", c_double), ("main_thread_seconds", c_double), ("worker_thread_seconds", c_double)],
    "bpt_speculative_counters")


def _p(structure):
    return ctypes.POINTER(structure)


EvalOptions = type("EvalOptions", (ctypes.Structure,), {"_fields_": [
    ("size", size_t), ("data_input", ctypes.c_char_p), ("labels_input", ctypes.c_char_p), ("logits", ctypes.c_char_p),
    ("batch_size", c_int64), ("top_k", c_int), ("confusion_matrix", ctypes.POINTER(c_int64)),
    ("confusion_classes", c_int64)], "__doc__": "bpt_eval_options"})
EvalResult = _struct("EvalResult", [("samples", c_int64), ("loss", c_double), ("accuracy", c_double),
                                    ("top_k_accuracy", c_double), ("top_k", c_int)], "bpt_eval_result")
_EvalOptionsBytes = EvalOptions
_TrainOptionsBytes = type("_TrainOptionsBytes", (ctypes.Structure,), {"_fields_": [("_bytes", c_uint64 * 26)]})
G, N, T, O, D, C = handle, handle, handle, handle, handle, handle  # graph, node, tensor, optimiser, data set, context
_PROTOTYPES = {
    # common.h
    "bpt_version": (ctypes.c_char_p, []),
    "bpt_version_number": (ctypes.c_uint32, []),
    "bpt_abi_version": (c_int, []),
    "bpt_status_string": (ctypes.c_char_p, [c_int]),
    "bpt_dtype_size": (size_t, [c_int]),
    "bpt_dtype_name": (ctypes.c_char_p, [c_int]),
    # context.h
    "bpt_context_options_default": (ContextOptions, []),
    "bpt_context_create": (status, [_p(ContextOptions), handle_p]),
    "bpt_context_destroy": (None, [C]),
    "bpt_context_last_error": (ctypes.c_char_p, [C]),
    "bpt_context_last_status": (c_int, [C]),
    "bpt_context_backend": (ctypes.c_char_p, [C]),
    "bpt_context_num_threads": (c_int, [C]),
    "bpt_backend_count": (c_int, []),
    "bpt_backend_name": (ctypes.c_char_p, [c_int]),
    "bpt_backend_available": (status, [c_int, ctypes.c_char_p, size_t]),
    # tensor.h
    "bpt_tensor_create": (status, [C, c_int, c_int, int64_p, handle_p]),
    "bpt_tensor_destroy": (None, [T]),
    "bpt_tensor_data": (ctypes.c_void_p, [T]),
    "bpt_tensor_dtype": (c_int, [T]),
    "bpt_tensor_rank": (c_int, [T]),
    "bpt_tensor_dim": (c_int64, [T, c_int]),
    "bpt_tensor_element_count": (c_int64, [T]),
    "bpt_tensor_set_batch": (status, [T, c_int64]),
    # graph.h (the op builders come from _ops.py)
    "bpt_graph_create": (status, [C, handle_p]),
    "bpt_graph_input": (status, [G, ctypes.c_char_p, c_int, c_int, int64_p, handle_p]),
    "bpt_graph_input_sequence": (status, [G, ctypes.c_char_p, c_int, c_int64, c_int, int64_p, handle_p]),
    "bpt_graph_parameter": (status, [G, ctypes.c_char_p, c_int, int64_p, c_int, handle_p]),
    "bpt_graph_nontrainable_parameter": (status, [G, ctypes.c_char_p, c_int, int64_p, c_int, handle_p]),
    "bpt_graph_destroy": (None, [G]),
    "bpt_graph_compile": (status, [G, N, c_int64]),
    "bpt_graph_set_input": (status, [G, N, T]),
    "bpt_graph_forward": (status, [G]),
    "bpt_graph_backward": (status, [G]),
    "bpt_graph_backward_accumulate": (status, [G]),
    "bpt_graph_zero_gradients": (status, [G]),
    "bpt_graph_loss": (status, [G, float_p]),
    "bpt_graph_read": (status, [G, N, T]),
    "bpt_graph_parameter_count": (c_int64, [G]),
    "bpt_graph_read_parameters": (status, [G, float_p, c_int64]),
    "bpt_graph_write_parameters": (status, [G, float_p, c_int64]),
    "bpt_graph_read_gradients": (status, [G, float_p, c_int64]),
    "bpt_graph_find_node": (status, [G, ctypes.c_char_p, handle_p]),
    "bpt_node_name": (ctypes.c_char_p, [N]),
    "bpt_node_rank": (c_int, [N]),
    "bpt_node_dim": (c_int64, [N, c_int]),
    # layers.h (the helpers with plain arguments are ops in _ops.py)
    "bpt_layer_spec_default": (LayerSpec, [c_int]),
    "bpt_layer_sequential": (status, [G, ctypes.c_char_p, N, _p(LayerSpec), c_int, handle_p]),
    "bpt_conv2d_options_default": (Conv2dOptions, []),
    "bpt_transformer_block_options_default": (TransformerBlockOptions, []),
    "bpt_graph_recompute_segment": (status, [G, N, N]),
    # mode.h, fold.h, anomaly.h
    "bpt_graph_set_training": (status, [G, c_int]),
    "bpt_graph_is_training": (c_int, [G]),
    "bpt_graph_set_deterministic": (status, [G, c_int]),
    "bpt_graph_fold_batch_norm": (status, [G, int_p]),
    "bpt_graph_set_anomaly_detection": (status, [G, c_int]),
    "bpt_graph_anomaly_detection": (c_int, [G]),
    "bpt_graph_set_parameter_check": (status, [G, c_int]),
    "bpt_graph_parameter_check": (c_int, [G]),
    # gradients.h, introspection.h, memory.h
    "bpt_graph_clip_gradient_norm": (status, [G, c_float, float_p]),
    "bpt_graph_clip_gradient_value": (status, [G, c_float]),
    "bpt_graph_gradient_norm": (status, [G, N, float_p]),
    "bpt_graph_parameter_node_count": (c_int, [G]),
    "bpt_graph_parameter_node": (handle, [G, c_int]),
    "bpt_node_is_trainable": (c_int, [N]),
    "bpt_graph_node_count": (c_int, [G]),
    "bpt_graph_node": (handle, [G, c_int]),
    "bpt_node_op_name": (ctypes.c_char_p, [N]),
    "bpt_graph_value_statistics": (status, [G, N, _p(ValueStatistics)]),
    "bpt_graph_memory": (status, [G, _p(GraphMemoryStats)]),
    # precision.h, number_format.h
    "bpt_precision_options_default": (PrecisionOptions, []),
    "bpt_graph_set_precision": (status, [G, _p(PrecisionOptions)]),
    "bpt_graph_loss_scale": (c_float, [G]),
    "bpt_graph_skipped_steps": (c_int64, [G]),
    "bpt_convert_options_default": (ConvertOptions, []),
    "bpt_convert": (status, [C, _p(ConvertOptions), c_int64, c_int, ctypes.c_void_p, c_int, ctypes.c_void_p]),
    "bpt_dtype_max_finite": (c_float, [c_int]),
    "bpt_fp8_scale": (status, [C, c_int, float_p, c_int64, float_p]),
    # optimizer.h, schedule.h, parameter_groups.h
    "bpt_optimizer_options_default": (OptimizerOptions, []),
    "bpt_optimizer_create": (status, [G, _p(OptimizerOptions), handle_p]),
    "bpt_optimizer_destroy": (None, [O]),
    "bpt_optimizer_step": (status, [O]),
    "bpt_optimizer_set_learning_rate": (status, [O, c_float]),
    "bpt_optimizer_learning_rate": (c_float, [O]),
    "bpt_optimizer_step_count": (c_int64, [O]),
    "bpt_schedule_options_default": (ScheduleOptions, []),
    "bpt_schedule_learning_rate": (status, [C, _p(ScheduleOptions), c_int64, float_p]),
    # compute_info.h
    "bpt_cpu_compute_info": (status, [_p(ComputeInfo)]),
    "bpt_optimizer_set_schedule": (status, [O, _p(ScheduleOptions)]),
    "bpt_optimizer_set_group": (status, [O, handle_p, c_int, c_float, c_float]),
    "bpt_optimizer_no_decay_on_vectors": (status, [O]),
    "bpt_optimizer_decay_only_matrices": (status, [O]),
    # data.h
    "bpt_dataset_load_idx": (status, [C, ctypes.c_char_p, ctypes.c_char_p, handle_p]),
    "bpt_dataset_load_idx_directory": (status, [C, ctypes.c_char_p, ctypes.c_char_p, handle_p]),
    "bpt_dataset_destroy": (None, [D]),
    "bpt_dataset_size": (c_int64, [D]),
    "bpt_dataset_sample_size": (c_int64, [D]),
    "bpt_dataset_sample_shape": (c_int, [D, int64_p]),
    "bpt_dataset_class_count": (c_int, [D]),
    "bpt_dataset_check_classes": (status, [D, D, c_int, int_p]),
    "bpt_dataset_set_normalization": (status, [D, c_float, c_float]),
    "bpt_dataset_shuffle": (status, [D, c_uint64]),
    "bpt_dataset_reset_order": (status, [D]),
    "bpt_dataset_batch": (status, [D, c_int64, c_int64, T, T]),
    "bpt_dataset_batch_count": (c_int64, [D, c_int64]),
    # checkpoint.h
    "bpt_checkpoint_contents_default": (CheckpointContents, []),
    "bpt_checkpoint_save": (status, [G, ctypes.c_char_p, _p(CheckpointContents)]),
    "bpt_checkpoint_load": (status, [G, ctypes.c_char_p, _p(CheckpointContents)]),
    # profiler.h
    "bpt_profiler_enable": (status, [C, c_int]),
    "bpt_profiler_enabled": (c_int, [C]),
    "bpt_profiler_reset": (status, [C]),
    "bpt_profiler_summary": (size_t, [C, ctypes.c_char_p, size_t]),
    "bpt_profiler_write_trace": (status, [C, ctypes.c_char_p]),
    # train.h: prototypes only, the training helper is not bound yet (bptrain.training keeps its Python
    # loop); the options structs are opaque blocks of their C size (64 and 208 bytes, returned in memory).
    "bpt_eval_options_default": (_EvalOptionsBytes, []),
    "bpt_evaluate": (status, [G, D, _p(EvalOptions), _p(EvalResult)]),
    "bpt_train_options_default": (_TrainOptionsBytes, []),
    "bpt_train": (status, [G, O, D, ctypes.c_void_p, ctypes.c_void_p]),
    "bpt_train_write_metrics_header": (status, [ctypes.c_void_p]),
    "bpt_train_write_metrics_step": (status, [ctypes.c_void_p, ctypes.c_void_p, c_double]),
    "bpt_train_write_metrics_epoch": (status, [ctypes.c_void_p, ctypes.c_void_p]),
    "bpt_graph_summary": (status, [G, ctypes.c_void_p]),
    "bpt_graph_layer_summary": (status, [G, c_int, ctypes.c_void_p]),
    "bpt_graph_summary_text": (size_t, [G, ctypes.c_char_p, size_t]),
    # fpga.h
    "bpt_fpga_options_default": (FpgaOptions, []),
    "bpt_fpga_configure": (status, [C, _p(FpgaOptions)]),
    "bpt_fpga_get_report": (status, [C, _p(FpgaReport)]),
    "bpt_fpga_kernel_count": (c_int, []),
    "bpt_fpga_get_kernel_report": (status, [C, c_int, _p(FpgaKernelReport)]),
    "bpt_fpga_reset_counters": (status, [C]),
    "bpt_fpga_format_report": (status, [C, ctypes.c_char_p, size_t]),
    # speculative.h
    "bpt_speculative_options_default": (SpeculativeOptions, []),
    "bpt_speculative_create": (status, [G, N, N, O, _p(SpeculativeOptions), handle_p]),
    "bpt_speculative_destroy": (None, [handle]),
    "bpt_speculative_train_batch": (status, [handle, T, T, float_p]),
    "bpt_speculative_get_counters": (status, [handle, _p(SpeculativeCounters)]),
    "bpt_speculative_reset_counters": (status, [handle]),
    "bpt_speculative_clear_cache": (status, [handle]),
    "bpt_speculative_current_threshold": (c_float, [handle]),
}

# Calls that only newer libraries have (declared when the loaded library exports them; see has()).
_OPTIONAL_PROTOTYPES = {
    "bpt_checkpoint_load_options_default": (CheckpointLoadOptions, []),
    "bpt_checkpoint_load_with_options": (status, [G, ctypes.c_char_p, _p(CheckpointContents),
                                                  _p(CheckpointLoadOptions), handle_p]),
    "bpt_checkpoint_report_count": (c_int64, [handle, c_int]),
    "bpt_checkpoint_report_name": (ctypes.c_char_p, [handle, c_int, c_int64]),
    "bpt_checkpoint_report_reason": (ctypes.c_char_p, [handle, c_int, c_int64]),
    "bpt_checkpoint_report_destroy": (None, [handle]),
    # onnx.h
    "bpt_onnx_export_options_default": (OnnxExportOptions, []),
    "bpt_graph_export_onnx": (status, [G, ctypes.c_char_p, _p(OnnxExportOptions)]),
}


def declare(name, result, arguments, optional=False):
    """Sets the prototype of C function `name`; an optional one the library lacks is skipped."""
    if optional and not hasattr(lib, name):
        return
    function = getattr(lib, name)
    function.restype = result
    function.argtypes = arguments


for _name, (_result, _arguments) in _PROTOTYPES.items():
    declare(_name, _result, _arguments)
for _name, (_result, _arguments) in _OPTIONAL_PROTOTYPES.items():
    declare(_name, _result, _arguments, optional=True)


def has(name):
    """True when the loaded library exports the C function `name`."""
    return hasattr(lib, name)
