"""Loads libbptrain with ctypes and declares the C prototypes the binding calls.

The library is looked up in this order: the BPTRAIN_LIBRARY environment variable (a path), the lib/
directory of the prefix this package was installed under, then the system's search path (libbptrain.so.0).
Only the C ABI is used, so nothing needs compiling on the user's side.
libbptrain links no CUDA, NCCL or MPI (those live in modules it loads on first use), so importing this loads
neither; only a "cuda" context or a communicator does.
"""
import ctypes
import ctypes.util
import os

ABI_VERSION = 0
_SONAME = "libbptrain.so.%d" % ABI_VERSION


def _candidates():
    explicit = os.environ.get("BPTRAIN_LIBRARY")
    if explicit:
        yield explicit
        return
    # Installed layout: <prefix>/share/bptrain/python/bptrain/_native.py next to <prefix>/lib*/libbptrain.so.0
    prefix = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
    for libdir in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu"), os.path.join("lib", "aarch64-linux-gnu")):
        yield os.path.join(prefix, libdir, _SONAME)
    yield _SONAME
    found = ctypes.util.find_library("bptrain")
    if found:
        yield found


def _load():
    errors = []
    for candidate in _candidates():
        if os.path.sep in candidate and not os.path.exists(candidate):
            errors.append("%s: no such file" % candidate)
            continue
        try:
            return ctypes.CDLL(candidate)
        except OSError as error:
            errors.append(str(error))
    raise ImportError("bptrain: cannot load libbptrain (set BPTRAIN_LIBRARY to its path): " + "; ".join(errors))


lib = _load()

c_status = ctypes.c_int
c_handle = ctypes.c_void_p
c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_float_p = ctypes.POINTER(ctypes.c_float)


class ContextOptions(ctypes.Structure):
    """Mirror of bpt_context_options; its size field lets the library accept this layout forever."""
    _fields_ = [("size", ctypes.c_size_t), ("backend", ctypes.c_char_p), ("num_threads", ctypes.c_int),
                ("seed", ctypes.c_uint64)]


class OptimizerOptions(ctypes.Structure):
    """Mirror of bpt_optimizer_options."""
    _fields_ = [("size", ctypes.c_size_t), ("kind", ctypes.c_int), ("learning_rate", ctypes.c_float),
                ("momentum", ctypes.c_float), ("nesterov", ctypes.c_int), ("weight_decay", ctypes.c_float),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float), ("epsilon", ctypes.c_float)]


_PROTOTYPES = {
    "bpt_version": (ctypes.c_char_p, []),
    "bpt_abi_version": (ctypes.c_int, []),
    "bpt_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "bpt_context_create": (c_status, [ctypes.POINTER(ContextOptions), ctypes.POINTER(c_handle)]),
    "bpt_context_destroy": (None, [c_handle]),
    "bpt_context_last_error": (ctypes.c_char_p, [c_handle]),
    "bpt_context_backend": (ctypes.c_char_p, [c_handle]),
    "bpt_context_num_threads": (ctypes.c_int, [c_handle]),
    "bpt_backend_count": (ctypes.c_int, []),
    "bpt_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
    "bpt_backend_available": (c_status, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
    "bpt_tensor_create": (c_status, [c_handle, ctypes.c_int, ctypes.c_int, c_int64_p, ctypes.POINTER(c_handle)]),
    "bpt_tensor_destroy": (None, [c_handle]),
    "bpt_tensor_data": (ctypes.c_void_p, [c_handle]),
    "bpt_tensor_dim": (ctypes.c_int64, [c_handle, ctypes.c_int]),
    "bpt_tensor_set_batch": (c_status, [c_handle, ctypes.c_int64]),
    "bpt_graph_create": (c_status, [c_handle, ctypes.POINTER(c_handle)]),
    "bpt_graph_destroy": (None, [c_handle]),
    "bpt_graph_input": (c_status, [c_handle, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, c_int64_p,
                                   ctypes.POINTER(c_handle)]),
    "bpt_graph_parameter": (c_status, [c_handle, ctypes.c_char_p, ctypes.c_int, c_int64_p, ctypes.c_int,
                                       ctypes.POINTER(c_handle)]),
    "bpt_linear": (c_status, [c_handle, ctypes.c_char_p, c_handle, c_handle, c_handle, ctypes.POINTER(c_handle)]),
    "bpt_relu": (c_status, [c_handle, ctypes.c_char_p, c_handle, ctypes.POINTER(c_handle)]),
    "bpt_leaky_relu": (c_status, [c_handle, ctypes.c_char_p, c_handle, ctypes.c_float, ctypes.POINTER(c_handle)]),
    "bpt_sigmoid": (c_status, [c_handle, ctypes.c_char_p, c_handle, ctypes.POINTER(c_handle)]),
    "bpt_tanh": (c_status, [c_handle, ctypes.c_char_p, c_handle, ctypes.POINTER(c_handle)]),
    "bpt_softmax_cross_entropy": (c_status, [c_handle, ctypes.c_char_p, c_handle, c_handle,
                                             ctypes.POINTER(c_handle)]),
    "bpt_mse_loss": (c_status, [c_handle, ctypes.c_char_p, c_handle, c_handle, ctypes.POINTER(c_handle)]),
    "bpt_layer_linear": (c_status, [c_handle, ctypes.c_char_p, c_handle, ctypes.c_int64, ctypes.c_int,
                                    ctypes.POINTER(c_handle)]),
    "bpt_graph_compile": (c_status, [c_handle, c_handle, ctypes.c_int64]),
    "bpt_graph_set_input": (c_status, [c_handle, c_handle, c_handle]),
    "bpt_graph_forward": (c_status, [c_handle]),
    "bpt_graph_backward": (c_status, [c_handle]),
    "bpt_graph_loss": (c_status, [c_handle, c_float_p]),
    "bpt_graph_read": (c_status, [c_handle, c_handle, c_handle]),
    "bpt_graph_parameter_count": (ctypes.c_int64, [c_handle]),
    "bpt_graph_read_parameters": (c_status, [c_handle, c_float_p, ctypes.c_int64]),
    "bpt_graph_write_parameters": (c_status, [c_handle, c_float_p, ctypes.c_int64]),
    "bpt_node_rank": (ctypes.c_int, [c_handle]),
    "bpt_node_dim": (ctypes.c_int64, [c_handle, ctypes.c_int]),
    "bpt_node_name": (ctypes.c_char_p, [c_handle]),
    "bpt_optimizer_options_default": (OptimizerOptions, []),
    "bpt_optimizer_create": (c_status, [c_handle, ctypes.POINTER(OptimizerOptions), ctypes.POINTER(c_handle)]),
    "bpt_optimizer_destroy": (None, [c_handle]),
    "bpt_optimizer_step": (c_status, [c_handle]),
    "bpt_optimizer_set_learning_rate": (c_status, [c_handle, ctypes.c_float]),
    "bpt_optimizer_learning_rate": (ctypes.c_float, [c_handle]),
    "bpt_optimizer_step_count": (ctypes.c_int64, [c_handle]),
    "bpt_dataset_load_idx_directory": (c_status, [c_handle, ctypes.c_char_p, ctypes.c_char_p,
                                                  ctypes.POINTER(c_handle)]),
    "bpt_dataset_destroy": (None, [c_handle]),
    "bpt_dataset_size": (ctypes.c_int64, [c_handle]),
    "bpt_dataset_sample_size": (ctypes.c_int64, [c_handle]),
    "bpt_dataset_class_count": (ctypes.c_int, [c_handle]),
    "bpt_dataset_set_normalization": (c_status, [c_handle, ctypes.c_float, ctypes.c_float]),
    "bpt_dataset_shuffle": (c_status, [c_handle, ctypes.c_uint64]),
    "bpt_dataset_batch": (c_status, [c_handle, ctypes.c_int64, ctypes.c_int64, c_handle, c_handle]),
    "bpt_dataset_batch_count": (ctypes.c_int64, [c_handle, ctypes.c_int64]),
}

for _name, (_result, _arguments) in _PROTOTYPES.items():
    _function = getattr(lib, _name)
    _function.restype = _result
    _function.argtypes = _arguments

# Optional parts of the API (newer libraries): declared only when the loaded library has them.
_OPTIONAL_PROTOTYPES = {
    "bpt_profiler_enable": (c_status, [c_handle, ctypes.c_int]),
    "bpt_profiler_write_trace": (c_status, [c_handle, ctypes.c_char_p]),
    "bpt_profiler_summary": (ctypes.c_size_t, [c_handle, ctypes.c_char_p, ctypes.c_size_t]),
}
for _name, (_result, _arguments) in _OPTIONAL_PROTOTYPES.items():
    if hasattr(lib, _name):
        _function = getattr(lib, _name)
        _function.restype = _result
        _function.argtypes = _arguments


def has(name):
    """True when the loaded library exports the C function `name`."""
    return hasattr(lib, name)
