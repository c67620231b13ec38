"""Python binding of libbptrain over its C ABI (ctypes): no compiler needed on the user's side.

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
        print(model.evaluate(features, classes))
        model.save("model.params")

Arrays may be numpy arrays (used without copying rows one value at a time) or nested Python sequences.

Lifetimes: every object keeps what it was made from alive (a node or optimiser its model, a model or data
set its context), so objects may be dropped in any order. close() (or leaving `with Context()`) destroys an
object and everything made from it at once; using any of them afterwards raises Error (status STATE).
"""
import array
import ctypes
import os
import random
import struct
import time
import weakref

from . import _native
from ._native import lib
from .metrics import MetricsWriter, plot_metrics

try:
    import numpy as _numpy
except ImportError:  # numpy is optional
    _numpy = None

__all__ = ["Error", "Context", "Model", "Node", "Optimizer", "Dataset", "version", "abi_version",
           "backends", "plot_metrics"]

_DTYPES = {"f32": (0, "f", 4), "i32": (5, "i", 4)}
_INITIALIZERS = {"zeros": 0, "ones": 1, "he_normal": 2, "he_uniform": 3, "xavier_normal": 4, "xavier_uniform": 5}
_OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2}
_STATUS_NAMES = ["OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "IO", "FORMAT", "SHAPE", "DTYPE", "UNSUPPORTED",
                 "DEVICE", "NUMERIC", "STATE", "COMM", "INTERNAL"]
_PARAMETERS_MAGIC = b"BPTPARM1"
_STATE, _INVALID_ARGUMENT = 10, 1


class Error(Exception):
    """A libbptrain call failed: `status` is the bpt_status value, `message` the context's last error."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _STATUS_NAMES[status] if 0 <= status < len(_STATUS_NAMES) else str(status)
        self.message = message
        super().__init__("%s (%s)" % (message, lib.bpt_status_string(status).decode()))


def _last_message(context_handle):
    """The message of the call that just failed on context_handle: calls made without a context (or whose
    handle argument was NULL) report in the calling thread's slot, read with bpt_context_last_error(NULL)."""
    message = lib.bpt_context_last_error(context_handle) if context_handle else None
    if not message:
        message = lib.bpt_context_last_error(None)
    return (message or b"").decode(errors="replace")


class _Native:
    """Owns one native handle and destroys it exactly once, never while a native object that uses it exists.

    Each holder keeps its parent (what it was made from: model -> context, optimiser -> model) alive with a
    strong reference and counts its own users. close() closes the users first (newest first), then the handle;
    dropped without close() (garbage, a reference cycle, interpreter exit) a holder that still has users waits
    for the last one to go. So any order of close() and of destruction is safe, and use after close raises
    bptrain.Error instead of reaching freed memory. The destroy function is kept on the holder so that it is
    still callable while the interpreter tears the module down.
    """

    __slots__ = ("handle", "what", "parent", "_destroy", "_users", "_children", "_orphaned", "__weakref__")

    def __init__(self, handle, destroy, parent, what):
        self.handle = handle
        self.what = what
        self.parent = parent
        self._destroy = destroy
        self._users = 0
        self._children = []
        self._orphaned = False
        if parent is not None:
            parent._users += 1
            children = parent._children
            if len(children) >= 32 and len(children) & (len(children) - 1) == 0:  # drop the dead now and then
                children[:] = [reference for reference in children if reference() is not None]
            children.append(weakref.ref(self))

    def get(self):
        """The native handle; bptrain.Error (STATE) once it (or what it was made from) is closed."""
        if self.handle is None:
            raise Error(_STATE, "bptrain: the %s is closed" % self.what)
        return self.handle

    @property
    def open(self):
        return self.handle is not None

    def close(self):
        children, self._children = self._children, []
        for reference in reversed(children):
            child = reference()
            if child is not None:
                child.close()
        self._release()

    def _release(self):
        if self.handle is None:
            return
        if self._users > 0:  # only while the collector finalises a cycle: the last user's release frees us
            self._orphaned = True
            return
        handle, self.handle = self.handle, None
        if self._destroy is not None:
            self._destroy(handle)
        parent = self.parent
        if parent is not None:
            parent._users -= 1
            if parent._orphaned and parent._users == 0:
                parent._release()

    def __del__(self):
        self._release()


def version():
    """The library version, "major.minor.patch"."""
    return lib.bpt_version().decode()


def abi_version():
    """The ABI major version of the loaded library (the SONAME suffix)."""
    return lib.bpt_abi_version()


def backends():
    """Names of the backends compiled into the loaded library."""
    return [lib.bpt_backend_name(i).decode() for i in range(lib.bpt_backend_count())]


class Context:
    """A library instance bound to one backend ("cpu", "cuda" or "fpga-sim"); use one per thread."""

    def __init__(self, backend="cpu", threads=0, seed=42):
        self._native = None
        if lib.bpt_abi_version() != _native.ABI_VERSION:
            raise ImportError("bptrain: binding expects ABI %d, library has ABI %d" %
                              (_native.ABI_VERSION, lib.bpt_abi_version()))
        options = _native.ContextOptions(ctypes.sizeof(_native.ContextOptions), backend.encode(), threads, seed)
        handle = _native.c_handle()
        status = lib.bpt_context_create(ctypes.byref(options), ctypes.byref(handle))
        if status:
            raise Error(status, _last_message(None))
        self._native = _Native(handle.value, lib.bpt_context_destroy, None, "context")
        self.seed = seed

    def check(self, status):
        """Raises Error with the message of the failed call when `status` is not BPT_OK."""
        if status:
            raise Error(status, _last_message(self._native.handle if self._native else None))

    @property
    def handle(self):
        if self._native is None:
            raise Error(_STATE, "bptrain: the context was not created")
        return self._native.get()

    @property
    def backend(self):
        return lib.bpt_context_backend(self.handle).decode()

    @property
    def threads(self):
        return lib.bpt_context_num_threads(self.handle)

    def close(self):
        """Destroys everything made from this context, then the context: using any of them afterwards raises
        Error (STATE). Without close() the context lives as long as anything made from it."""
        if self._native is not None:
            self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()


class _Tensor:
    """A host tensor used to move batches in and out of a graph."""

    def __init__(self, context, dtype, dims, owner):
        self.context = context
        self.dtype = dtype
        handle = _native.c_handle()
        dims_array = (ctypes.c_int64 * len(dims))(*dims)
        context.check(lib.bpt_tensor_create(context.handle, _DTYPES[dtype][0], len(dims), dims_array,
                                            ctypes.byref(handle)))
        # Used by its model's graph (set as input, read into): closed with the model, before the context.
        self._native = _Native(handle.value, lib.bpt_tensor_destroy, owner, "tensor")
        self.capacity = dims[0]
        self.row_bytes = _DTYPES[dtype][2]
        for d in dims[1:]:
            self.row_bytes *= d

    @property
    def handle(self):
        return self._native.get()

    def data(self):
        return lib.bpt_tensor_data(self.handle)

    def set_batch(self, batch):
        self.context.check(lib.bpt_tensor_set_batch(self.handle, batch))

    def close(self):
        self._native.close()


class _Rows:
    """Samples held contiguously in host memory (numpy array or flattened Python sequence)."""

    def __init__(self, data, dtype):
        typecode = _DTYPES[dtype][1]
        if _numpy is not None and isinstance(data, _numpy.ndarray):
            self.keep = _numpy.ascontiguousarray(data, dtype=_numpy.float32 if dtype == "f32" else _numpy.int32)
            self.shape = self.keep.shape
            self.address = self.keep.ctypes.data
        else:
            shape, flat = _flatten(data)
            self.keep = array.array(typecode, flat)
            if self.keep.itemsize != 4:
                raise TypeError("bptrain: this platform's array('%s') is not 4 bytes" % typecode)
            self.shape = shape
            self.address = self.keep.buffer_info()[0] if len(self.keep) else 0
        if not self.shape:
            raise ValueError("bptrain: expected one row per sample, got a scalar")
        self.count = self.shape[0]
        self.row_bytes = 4
        for d in self.shape[1:]:
            self.row_bytes *= d

    def copy_rows(self, tensor, indices):
        if self.row_bytes != tensor.row_bytes:
            raise Error(5, "bptrain: samples have %d values, the input expects %d" %
                        (self.row_bytes // 4, tensor.row_bytes // 4))
        if len(indices) > tensor.capacity:
            raise Error(5, "bptrain: batch of %d samples exceeds the compiled max_batch %d" %
                        (len(indices), tensor.capacity))
        destination = tensor.data()
        for position, index in enumerate(indices):
            ctypes.memmove(destination + position * self.row_bytes, self.address + index * self.row_bytes,
                           self.row_bytes)
        tensor.set_batch(len(indices))


def _flatten(data):
    if isinstance(data, (int, float)):
        return (), [data]
    rows = list(data)
    if not rows:
        return (0,), []
    shapes_and_values = [_flatten(row) for row in rows]
    inner = shapes_and_values[0][0]
    flat = []
    for shape, values in shapes_and_values:
        if shape != inner:
            raise ValueError("bptrain: ragged nested sequence (%s vs %s)" % (shape, inner))
        flat.extend(values)
    return (len(rows),) + inner, flat


class Node:
    """A value in a model: an input, a parameter or the result of a layer."""

    def __init__(self, model, handle, dtype="f32"):
        self.model = model
        self._graph = model._native  # keeps the graph's memory (which holds the node) alive
        self._address = handle.value if isinstance(handle, ctypes.c_void_p) else handle
        self.dtype = dtype

    @property
    def handle(self):
        """The native node; Error once its model is closed."""
        self._graph.get()
        if not self._address:
            raise Error(_INVALID_ARGUMENT, "bptrain: the node handle is NULL")
        return self._address

    @property
    def name(self):
        return lib.bpt_node_name(self.handle).decode()

    @property
    def shape(self):
        """Shape including the batch dimension (the compiled maximum), available after compile()."""
        return tuple(lib.bpt_node_dim(self.handle, axis) for axis in range(lib.bpt_node_rank(self.handle)))

    def __repr__(self):
        return "Node(%r)" % self.name if self._graph.open and self._address else "Node(<closed>)"


class Model:
    """A define-then-run graph: declare inputs and layers, compile, then train and evaluate."""

    def __init__(self, context):
        self.context = context
        handle = _native.c_handle()
        context.check(lib.bpt_graph_create(context.handle, ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_graph_destroy, context._native, "model")
        self.inputs = []
        self.loss = None
        self.logits = None
        self.max_batch = 0
        self._tensors = {}
        self._names = {}

    @property
    def handle(self):
        """The native graph; Error once the model or its context is closed."""
        return self._native.get()

    def _name(self, name, kind):
        if name:
            return name
        self._names[kind] = self._names.get(kind, 0) + 1
        return "%s%d" % (kind, self._names[kind])

    def _add(self, function, *arguments, dtype="f32"):
        out = _native.c_handle()
        self.context.check(function(self.handle, *arguments, ctypes.byref(out)))
        return Node(self, out, dtype)

    def input(self, name, shape, dtype="f32"):
        """Declares an input fed per batch; `shape` is per sample (() for one class label per sample)."""
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        node = self._add(lib.bpt_graph_input, name.encode(), _DTYPES[dtype][0], len(shape), dims, dtype=dtype)
        self.inputs.append(node)
        return node

    def linear(self, x, out_features, name=None, init="he_uniform"):
        """A fully connected layer with its weight and bias parameters ("<name>.weight", "<name>.bias")."""
        return self._add(lib.bpt_layer_linear, self._name(name, "linear").encode(), x.handle, out_features,
                         _INITIALIZERS[init])

    def relu(self, x, name=None):
        return self._add(lib.bpt_relu, self._name(name, "relu").encode(), x.handle)

    def leaky_relu(self, x, slope=0.01, name=None):
        return self._add(lib.bpt_leaky_relu, self._name(name, "leaky_relu").encode(), x.handle, slope)

    def sigmoid(self, x, name=None):
        return self._add(lib.bpt_sigmoid, self._name(name, "sigmoid").encode(), x.handle)

    def tanh(self, x, name=None):
        return self._add(lib.bpt_tanh, self._name(name, "tanh").encode(), x.handle)

    def softmax_cross_entropy(self, logits, labels, name="loss"):
        """Classification loss; `logits` is remembered for evaluate() and predict()."""
        self.logits = logits
        return self._add(lib.bpt_softmax_cross_entropy, name.encode(), logits.handle, labels.handle)

    def mse_loss(self, prediction, target, name="loss"):
        return self._add(lib.bpt_mse_loss, name.encode(), prediction.handle, target.handle)

    def compile(self, loss, max_batch):
        """Fixes the graph for batches of up to `max_batch` samples and initialises the parameters."""
        self.context.check(lib.bpt_graph_compile(self.handle, loss.handle if loss else None, max_batch))
        self.loss = loss
        self.max_batch = max_batch
        for node in self.inputs:
            self._tensors[node._address] = _Tensor(self.context, node.dtype, node.shape, self._native)
        if self.logits is not None:
            self._tensors[self.logits._address] = _Tensor(self.context, "f32", self.logits.shape, self._native)

    def _feed(self, sources, indices):
        for node, rows in zip(self.inputs, sources):
            tensor = self._tensors[node._address]
            rows.copy_rows(tensor, indices)
            self.context.check(lib.bpt_graph_set_input(self.handle, node.handle, tensor.handle))

    def _sources(self, arrays):
        if len(arrays) != len(self.inputs):
            raise ValueError("bptrain: the model has %d inputs, %d arrays given" % (len(self.inputs), len(arrays)))
        sources = [_Rows(data, node.dtype) for data, node in zip(arrays, self.inputs)]
        counts = {rows.count for rows in sources}
        if len(counts) != 1:
            raise ValueError("bptrain: inputs have different sample counts %s" % sorted(counts))
        return sources, counts.pop()

    def _read_loss(self):
        value = ctypes.c_float()
        self.context.check(lib.bpt_graph_loss(self.handle, ctypes.byref(value)))
        return value.value

    def train_step(self, optimizer, *arrays):
        """One forward, backward and optimiser step on one batch (one array per input); returns the loss."""
        sources, count = self._sources(arrays)
        self._feed(sources, range(count))
        return self._step(optimizer)

    def _step(self, optimizer):
        self.context.check(lib.bpt_graph_forward(self.handle))
        self.context.check(lib.bpt_graph_backward(self.handle))
        self.context.check(lib.bpt_optimizer_step(optimizer.handle))
        return self._read_loss()

    def fit(self, optimizer, *data, epochs=1, batch_size=None, shuffle=True, seed=None, metrics=None,
            evaluation=None, verbose=False):
        """Trains on arrays (one per input, in declaration order) or on a Dataset.

        `evaluation` is the same kind of data, evaluated after each epoch. `metrics` names a CSV file that
        receives one row per step and per epoch (the format of the C examples' --metrics). Returns one dict
        per epoch: epoch, train_loss, and test_loss / test_accuracy when `evaluation` is given.
        """
        batch_size = batch_size or self.max_batch
        seed = self.context.seed if seed is None else seed
        writer = MetricsWriter(metrics) if metrics else None
        history = []
        step = 0
        start = time.monotonic()
        try:
            for epoch in range(1, epochs + 1):
                total, samples = 0.0, 0
                for count in self._batches(data, batch_size, shuffle, seed + epoch):
                    loss = self._step(optimizer)
                    step += 1
                    total += loss * count
                    samples += count
                    if writer:
                        writer.step(epoch, step, loss, optimizer.learning_rate, time.monotonic() - start)
                record = {"epoch": epoch, "train_loss": total / max(samples, 1)}
                if evaluation is not None:
                    result = self.evaluate(*(evaluation if isinstance(evaluation, tuple) else (evaluation,)),
                                           batch_size=batch_size)
                    record["test_loss"], record["test_accuracy"] = result["loss"], result["accuracy"]
                if writer:
                    writer.epoch(epoch, step, record, optimizer.learning_rate, time.monotonic() - start)
                if verbose:
                    print("epoch %d: %s" % (epoch, ", ".join("%s %.4f" % item for item in record.items()
                                                               if item[0] != "epoch")), flush=True)
                history.append(record)
        finally:
            if writer:
                writer.close()
        return history

    def _batches(self, data, batch_size, shuffle, seed):
        """Feeds each batch into the inputs and yields its sample count."""
        if batch_size > self.max_batch:
            raise ValueError("bptrain: batch_size %d exceeds the compiled max_batch %d" % (batch_size, self.max_batch))
        if len(data) == 1 and isinstance(data[0], Dataset):
            dataset = data[0]
            if len(self.inputs) != 2:
                raise ValueError("bptrain: a Dataset feeds a model with two inputs (images, labels)")
            if shuffle:
                self.context.check(lib.bpt_dataset_shuffle(dataset.handle, seed))
            images, labels = (self._tensors[node._address] for node in self.inputs)
            batches = min(lib.bpt_dataset_batch_count(dataset.handle, batch_size), dataset.limit_batches(batch_size))
            for index in range(batches):
                self.context.check(lib.bpt_dataset_batch(dataset.handle, index, batch_size, images.handle,
                                                         labels.handle))
                for node, tensor in zip(self.inputs, (images, labels)):
                    self.context.check(lib.bpt_graph_set_input(self.handle, node.handle, tensor.handle))
                yield lib.bpt_tensor_dim(images.handle, 0)
            return
        sources, count = self._sources(data)
        order = list(range(count))
        if shuffle:
            random.Random(seed).shuffle(order)
        for first in range(0, count, batch_size):
            indices = order[first:first + batch_size]
            self._feed(sources, indices)
            yield len(indices)

    def predict(self, x, output=None, batch_size=None):
        """Runs forward on samples `x` (the first input; other inputs are fed zeros) and returns the
        values of `output` (default: the logits) as a list of rows."""
        output = output or self.logits
        batch_size = batch_size or self.max_batch
        sources = [_Rows(x, self.inputs[0].dtype)]
        count = sources[0].count
        for node in self.inputs[1:]:
            per_sample = self._tensors[node._address].row_bytes // 4
            zeros = [0] * count if len(node.shape) == 1 else [[0] * per_sample] * count
            sources.append(_Rows(zeros, node.dtype))
        tensor = self._tensors.get(output._address) or _Tensor(self.context, "f32", output.shape, self._native)
        self._tensors[output._address] = tensor
        width = tensor.row_bytes // 4
        rows = []
        for first in range(0, count, batch_size):
            indices = range(first, min(first + batch_size, count))
            self._feed(sources, indices)
            self.context.check(lib.bpt_graph_forward(self.handle))
            self.context.check(lib.bpt_graph_read(self.handle, output.handle, tensor.handle))
            values = ctypes.cast(tensor.data(), _native.c_float_p)
            rows.extend(values[n * width:(n + 1) * width] for n in range(len(indices)))
        return rows

    def evaluate(self, *data, batch_size=None):
        """Mean loss and (for classification) accuracy over arrays or a Dataset, without training."""
        batch_size = batch_size or self.max_batch
        logits = self._tensors.get(self.logits._address) if self.logits is not None else None
        total, correct, samples = 0.0, 0, 0
        labels_tensor = self._tensors[self.inputs[-1]._address]
        for count in self._batches(data, batch_size, False, 0):
            self.context.check(lib.bpt_graph_forward(self.handle))
            total += self._read_loss() * count
            samples += count
            if logits is not None:
                self.context.check(lib.bpt_graph_read(self.handle, self.logits.handle, logits.handle))
                width = logits.row_bytes // 4
                values = ctypes.cast(logits.data(), _native.c_float_p)
                truth = ctypes.cast(labels_tensor.data(), ctypes.POINTER(ctypes.c_int32))
                for n in range(count):
                    row = values[n * width:(n + 1) * width]
                    correct += row.index(max(row)) == truth[n]
        result = {"loss": total / max(samples, 1), "samples": samples}
        if logits is not None:
            result["accuracy"] = correct / max(samples, 1)
        return result

    def parameters(self):
        """All parameters, in declaration order, as a flat array('f')."""
        count = lib.bpt_graph_parameter_count(self.handle)
        values = array.array("f", bytes(4 * count))
        pointer = ctypes.cast(values.buffer_info()[0], _native.c_float_p)
        self.context.check(lib.bpt_graph_read_parameters(self.handle, pointer, count))
        return values

    def set_parameters(self, values):
        """Overwrites all parameters from a flat sequence of floats (the layout of parameters())."""
        values = array.array("f", values)
        pointer = ctypes.cast(values.buffer_info()[0], _native.c_float_p)
        self.context.check(lib.bpt_graph_write_parameters(self.handle, pointer, len(values)))

    def save(self, path):
        """Saves the parameters to `path` (magic, count, little-endian f32 values), written atomically.

        This stores parameters only; the library's checkpoint format (docs/checkpoints.md, issue 9) will
        also hold optimiser state and replace this format behind the same call.
        """
        values = self.parameters()
        if struct.pack("=H", 1) != struct.pack("<H", 1):
            values.byteswap()
        temporary = "%s.tmp%d" % (path, os.getpid())
        with open(temporary, "wb") as file:
            file.write(_PARAMETERS_MAGIC + struct.pack("<q", len(values)) + values.tobytes())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)

    def load(self, path):
        """Loads parameters saved by save() into this (compiled, same-shaped) model."""
        with open(path, "rb") as file:
            blob = file.read()
        if blob[:8] != _PARAMETERS_MAGIC or len(blob) < 16:
            raise Error(4, "%s: not a bptrain parameter file" % path)
        (count,) = struct.unpack("<q", blob[8:16])
        if len(blob) != 16 + 4 * count:
            raise Error(4, "%s: holds %d bytes of values, expected %d" % (path, len(blob) - 16, 4 * count))
        values = array.array("f", blob[16:])
        if struct.pack("=H", 1) != struct.pack("<H", 1):
            values.byteswap()
        self.set_parameters(values)

    def close(self):
        """Destroys the optimisers and tensors made for this model, then its graph: using any of them (or its
        nodes) afterwards raises Error (STATE)."""
        self._native.close()
        self._tensors = {}


class Optimizer:
    """SGD (with momentum), Adam or AdamW over a compiled model's parameters."""

    def __init__(self, model, kind="sgd", learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=0.0,
                 beta1=0.9, beta2=0.999, epsilon=1e-8):
        if kind not in _OPTIMIZERS:
            raise ValueError("bptrain: optimizer kind must be one of %s" % sorted(_OPTIMIZERS))
        options = lib.bpt_optimizer_options_default()
        options.size = ctypes.sizeof(_native.OptimizerOptions)
        options.kind = _OPTIMIZERS[kind]
        options.learning_rate = learning_rate
        options.momentum = momentum
        options.nesterov = int(nesterov)
        options.weight_decay = weight_decay
        options.beta1, options.beta2, options.epsilon = beta1, beta2, epsilon
        self.context = model.context
        self.model = model
        handle = _native.c_handle()
        self.context.check(lib.bpt_optimizer_create(model.handle, ctypes.byref(options), ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_optimizer_destroy, model._native, "optimizer")

    @property
    def handle(self):
        """The native optimiser; Error once it, its model or its context is closed."""
        return self._native.get()

    @property
    def learning_rate(self):
        return lib.bpt_optimizer_learning_rate(self.handle)

    @learning_rate.setter
    def learning_rate(self, value):
        self.context.check(lib.bpt_optimizer_set_learning_rate(self.handle, value))

    @property
    def steps(self):
        return lib.bpt_optimizer_step_count(self.handle)

    def close(self):
        self._native.close()


class Dataset:
    """An IDX data set (MNIST format, plain or gzip), e.g. Dataset(context, "/usr/share/datasets/fashion-mnist",
    "train"). `limit` keeps only the first samples of each pass (whole batches), for quick runs."""

    def __init__(self, context, directory, split, mean=0.0, std=1.0, limit=None):
        self.context = context
        handle = _native.c_handle()
        context.check(lib.bpt_dataset_load_idx_directory(context.handle, directory.encode(), split.encode(),
                                                          ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_dataset_destroy, context._native, "data set")
        context.check(lib.bpt_dataset_set_normalization(self.handle, mean, std))
        self.limit = limit

    @property
    def handle(self):
        """The native data set; Error once it or its context is closed."""
        return self._native.get()

    def __len__(self):
        return lib.bpt_dataset_size(self.handle)

    @property
    def sample_size(self):
        return lib.bpt_dataset_sample_size(self.handle)

    @property
    def classes(self):
        return lib.bpt_dataset_class_count(self.handle)

    def limit_batches(self, batch_size):
        if self.limit is None:
            return 1 << 62
        return max(1, self.limit // batch_size)

    def close(self):
        self._native.close()


def profile(context, enabled=True):
    """Turns the library's profiler on or off for `context` (needs a library with include/bptrain/profiler.h)."""
    if not _native.has("bpt_profiler_enable"):
        raise Error(7, "this libbptrain has no profiler")
    context.check(lib.bpt_profiler_enable(context.handle, int(enabled)))


def profile_summary(context):
    """The profiler's summary table as text."""
    size = lib.bpt_profiler_summary(context.handle, None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    lib.bpt_profiler_summary(context.handle, buffer, size + 1)
    return buffer.value.decode()


def write_profile_trace(context, path):
    """Writes the recorded events as a Chrome trace JSON file (chrome://tracing, ui.perfetto.dev)."""
    context.check(lib.bpt_profiler_write_trace(context.handle, path.encode()))
