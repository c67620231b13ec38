"""Python binding of libbptrain over its C ABI (ctypes): no compiler needed, NumPy arrays in and out.

    import bptrain
    with bptrain.Context(seed=1) as context:
        model = bptrain.Model(context)
        x = model.input("x", (2,))
        labels = model.input("labels", (), dtype="i32")
        hidden = model.relu(model.linear(x, 16))
        loss = model.softmax_cross_entropy(model.linear(hidden, 2), labels)
        model.compile(loss, max_batch=32)
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1, momentum=0.9)
        model.fit(optimizer, features, classes, epochs=10, batch_size=32)
        print(model.evaluate(features, classes), model.predict(features[:4]))
        model.save("model.ckpt")

Every failure raises a bptrain.Error subclass (ShapeError, FormatError, FileError, StateError,
InvalidArgumentError, ...) carrying `.status` and `.message`. docs/python.md describes the whole API.

Lifetimes: every object keeps what it was made from alive (a node or optimiser its model, a model or data
set its context), so objects may be dropped in any order. close() (or leaving `with Context()`) destroys an
object and everything made from it at once; using any of them afterwards raises StateError.
"""

from . import _native
from ._errors import (CommError, DeviceError, DtypeError, Error, FileError, FormatError, InternalError,
                      InvalidArgumentError, NumericError, OutOfMemoryError, ShapeError, StateError, UnsupportedError,
                      STATUS_NAMES)
from ._version import __version__
from .checkpoint import LoadReport, has_load_options
from .context import (DTYPES, Context, abi_version, backend_available, backends, choose_backend, compute_info,
                      dtype_max_finite, dtype_size, library_path, version, version_number)
from .data import Dataset
from .metrics import MetricsWriter, plot_metrics
from .model import Model, Node
from .speculative import SpeculativeTrainer
from .training import Optimizer, Schedule

__all__ = ["Error", "InvalidArgumentError", "OutOfMemoryError", "FileError", "FormatError", "ShapeError",
           "DtypeError", "UnsupportedError", "DeviceError", "NumericError", "StateError", "CommError",
           "InternalError", "STATUS_NAMES", "DTYPES", "Context", "Model", "Node", "Optimizer", "Schedule", "Dataset",
           "LoadReport", "SpeculativeTrainer", "MetricsWriter", "compute_info", "version", "version_number", "abi_version",
           "backends", "backend_available", "choose_backend", "dtype_size", "dtype_max_finite", "library_path",
           "has_load_options", "has_onnx_export", "plot_metrics", "profile", "profile_summary", "write_profile_trace"]


def has_onnx_export():
    """True when the loaded library exports ONNX (bpt_graph_export_onnx; Model.export_onnx)."""
    return _native.has("bpt_graph_export_onnx")


def profile(context, enabled=True):
    """Turns the library's profiler on or off for `context` (Context.profile)."""
    context.profile(enabled)


def profile_summary(context):
    """The profiler's summary table as text (Context.profile_summary)."""
    return context.profile_summary()


def write_profile_trace(context, path):
    """Writes the recorded events as a Chrome trace JSON file (Context.write_profile_trace)."""
    context.write_profile_trace(path)


