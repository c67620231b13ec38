"""Model (a graph: declare, compile, train, predict, save) and Node (one value in it). The op builders are
made from the table in _ops.py; this file holds what is not a builder: feeding NumPy batches, reading values
back, modes, precision, gradients, introspection and checkpoints.

Batches move through host tensors: a NumPy array's rows are copied once, straight into the tensor's buffer
(np.take or a slice assignment, no Python loop per sample or value); a C-contiguous float32 array is read in
place, without a conversion copy.
"""
import ctypes

from . import _arguments, _native, _ops
from ._errors import INVALID_ARGUMENT, OUT_OF_MEMORY, SHAPE, STATE, UNSUPPORTED, Error, error
from ._handles import Closing, _Native, serialised
from ._native import lib
from .checkpoint import LoadReport, load_checkpoint, save_checkpoint
from ._tensor import _Tensor
from .context import DTYPES, dtype_name, numpy_dtype, require_numpy
from .loop import TrainingLoop

_LOSS_SCALING = {"auto": 0, "none": 1, "dynamic": 2}
_ACTIVATION_STORAGE = {"compute": 0, "f16": 1, "bf16": 2, "fp8": 3}


class Node:
    """A value in a model: an input, a parameter or the result of a layer."""

    def __init__(self, model, handle, dtype="f32", sample_shape=None):
        self.model = model
        self._lock = model._lock
        self._graph = model._native  # keeps the graph's memory (which holds the node) alive
        self._address = handle.value if isinstance(handle, ctypes.c_void_p) else handle
        self.dtype = dtype
        self.sample_shape = sample_shape  # inputs: the declared per-sample shape
        self.sequence = False  # sequence inputs: a run may feed fewer tokens than sample_shape[0]

    @property
    def handle(self):
        """The native node; StateError once its model is closed."""
        self._graph.get()
        if not self._address:
            raise error(INVALID_ARGUMENT, "bptrain: the node handle is NULL")
        return self._address

    @property
    def name(self):
        return lib.bpt_node_name(self.handle).decode(errors="backslashreplace")  # (as in a load's report)

    @property
    def op(self):
        """The op's name ("conv2d", "relu", "parameter", "input", ...)."""
        return lib.bpt_node_op_name(self.handle).decode()

    @property
    def shape(self):
        """Shape including the batch dimension (the compiled maximum) where it has one; after compile()."""
        return tuple(lib.bpt_node_dim(self.handle, axis) for axis in range(lib.bpt_node_rank(self.handle)))

    @property
    def trainable(self):
        """True for a trainable parameter, False for buffers and other nodes."""
        return bool(lib.bpt_node_is_trainable(self.handle))

    def statistics(self):
        """Mean, standard deviation, zero fraction and count of the node's values in the last forward."""
        statistics = _native.ValueStatistics(size=ctypes.sizeof(_native.ValueStatistics))
        self.model.context.check(lib.bpt_graph_value_statistics(self.model.handle, self.handle,
                                                                ctypes.byref(statistics)))
        return {"mean": statistics.mean, "std": statistics.standard_deviation,
                "zero_fraction": statistics.zero_fraction, "count": statistics.count}

    def gradient_norm(self):
        """L2 norm of this parameter's gradient from the last backward pass."""
        norm = ctypes.c_float()
        self.model.context.check(lib.bpt_graph_gradient_norm(self.model.handle, self.handle, ctypes.byref(norm)))
        return norm.value

    def __repr__(self):
        return "Node(%r)" % self.name if self._graph.open and self._address else "Node(<closed>)"


def _builder(op):
    def build(self, *args, name=None, **kwargs):
        if op.method == "softmax_cross_entropy" and {"ignore_index", "label_smoothing"} & kwargs.keys():
            # PyTorch's keywords select the C call with the options; without them the loss is unchanged.
            return self.softmax_cross_entropy_options(*args, name=name, **kwargs)
        arguments = op.bind(args, kwargs)
        node = self._add(op.c_function, self._name(name, op.prefix).encode(), *arguments)
        if op.method in ("softmax_cross_entropy", "softmax_cross_entropy_options"):
            self.logits = args[0] if args else kwargs["logits"]
            self.labels = args[1] if len(args) > 1 else kwargs["labels"]
        elif op.method == "mse_loss":
            self.prediction = args[0] if args else kwargs["prediction"]
        return node
    build.__name__, build.__qualname__ = op.method, "Model." + op.method
    # Tracebacks and the binding's error messages (_messages.user_call) name the method called, not "build".
    build.__code__ = build.__code__.replace(co_name=op.method)
    build.__doc__ = op.doc()
    if op.method == "softmax_cross_entropy":
        build.__doc__ += (" With ignore_index= or label_smoothing= (PyTorch's keywords) it calls "
                          "bpt_softmax_cross_entropy_options() instead.")
    return build


class Model(TrainingLoop, Closing):
    """A define-then-run graph: declare inputs and layers, compile, then train, evaluate, predict and save.

    Layer methods (linear, conv2d, batch_norm, relu, max_pool2d, ...) come from the op table in _ops.py;
    each returns the output Node and takes an optional `name` (default: the kind and a counter)."""

    def __init__(self, context):
        from .context import Context
        self.context = _arguments.instance(context, Context, "Model", "context")
        self._lock = context._lock
        handle = _native.handle()
        context.check(lib.bpt_graph_create(context.handle, ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_graph_destroy, context._native, "model")
        self.inputs = []
        self.loss = None
        self.logits = None  # the logits of a softmax_cross_entropy loss
        self.labels = None  # and its labels (evaluate finds them by this role, wherever they were declared)
        self.prediction = None  # the prediction of an mse_loss
        self.max_batch = 0
        self._tensors = {}
        # Model.read's own tensors: a read sets a sequence's length in the tensor's shape, which must not reach
        # the tensors that feed the inputs.
        self._read_tensors = {}
        self._names = {}

    @property
    def handle(self):
        """The native graph; StateError once the model or its context is closed."""
        return self._native.get()

    @property
    def compiled(self):
        return self.max_batch > 0

    def _name(self, name, kind):
        if name:
            _arguments.name(name, "Model (node name)")  # a str without NUL: C would cut "r\0elu" to "r"
            return name
        self._names[kind] = self._names.get(kind, 0) + 1
        if kind == "loss" and self._names[kind] == 1:  # a model's one loss is "loss", like the C examples'
            return kind
        return "%s%d" % (kind, self._names[kind])

    def _add(self, function, *arguments, dtype="f32", sample_shape=None):
        out = _native.handle()
        self.context.check(function(self.handle, *arguments, ctypes.byref(out)))
        return Node(self, out, dtype, sample_shape)

    # --- declaring the graph ---------------------------------------------------------------------------
    def input(self, name, shape, dtype="f32"):
        """Declares an input fed per batch; `shape` is per sample (() for one class label per sample); `dtype`
        is "f32" or "i32" (or NumPy's float32 or int32)."""
        dtype = dtype_name(dtype, "Model.input %r" % (name,), allowed=("f32", "i32"))
        rank, dims = _ops._dims(shape, "Model.input")
        node = self._add(lib.bpt_graph_input, _arguments.name(name, "Model.input"), DTYPES[dtype], rank, dims,
                         dtype=dtype, sample_shape=tuple(dims[:rank]))
        self.inputs.append(node)
        return node

    def input_sequence(self, name, length, shape=(), dtype="f32"):
        """Declares a sequence input: each sample is `length` tokens of per-token `shape` (() for one token id or
        label per token), so batches are (batch, length, *shape). Per-token ops such as `linear` act on `shape`."""
        dtype = dtype_name(dtype, "Model.input_sequence %r" % (name,), allowed=("f32", "i32"))
        length = _arguments.integer(length, "Model.input_sequence", "length")
        rank, dims = _ops._dims(shape, "Model.input_sequence")
        node = self._add(lib.bpt_graph_input_sequence, _arguments.name(name, "Model.input_sequence"), DTYPES[dtype],
                         length, rank, dims, dtype=dtype, sample_shape=(length,) + tuple(dims[:rank]))
        node.sequence = True
        self.inputs.append(node)
        return node

    def parameter(self, name, shape, init="he_uniform"):
        """Declares a trainable parameter of `shape` (no batch dimension), filled by `init` at compile time."""
        rank, dims = _ops._dims(shape, "Model.parameter")
        init = _ops._enum(_ops.INITIALIZERS, "init")(init, "Model.parameter")[0]
        return self._add(lib.bpt_graph_parameter, _arguments.name(name, "Model.parameter"), rank, dims, init)

    def buffer(self, name, shape, init="zeros"):
        """Declares a non-trainable parameter (batch-norm running statistics, for example)."""
        rank, dims = _ops._dims(shape, "Model.buffer")
        init = _ops._enum(_ops.INITIALIZERS, "init")(init, "Model.buffer")[0]
        return self._add(lib.bpt_graph_nontrainable_parameter, _arguments.name(name, "Model.buffer"), rank, dims,
                         init)

    def sequential(self, x, layers, prefix="layer"):
        """Builds a stack from a table of layers, each a tuple ("conv2d", {"units": 6, "kernel": 5}) or a
        kind name alone ("relu"); kinds: conv2d, batch_norm, relu, max_pool, avg_pool, global_avg_pool,
        flatten, linear, dropout, resnet_block, tanh, sigmoid. Nodes are named "<prefix><index>.<kind>"."""
        kinds = {"conv2d": 0, "batch_norm": 1, "relu": 2, "max_pool": 3, "avg_pool": 4, "global_avg_pool": 5,
                 "flatten": 6, "linear": 7, "dropout": 8, "resnet_block": 9, "tanh": 10, "sigmoid": 11}
        specs = (_native.LayerSpec * max(1, len(layers)))()
        for index, layer in enumerate(layers):
            try:
                kind, fields = (layer, {}) if isinstance(layer, str) else (layer[0], dict(layer[1]) if len(layer) > 1
                                                                           else {})
            except (TypeError, ValueError, IndexError, KeyError):
                raise error(INVALID_ARGUMENT, "bptrain: sequential: layer %d is %r, not a kind name or a (kind, "
                                              "{field: value}) pair" % (index, layer)) from None
            if not isinstance(kind, str) or kind not in kinds:
                raise error(INVALID_ARGUMENT, "bptrain: sequential: layer %d: unknown kind %r (one of %s)" %
                            (index, kind, sorted(kinds)))
            specs[index] = lib.bpt_layer_spec_default(kinds[kind])
            for field, value in fields.items():
                if field not in ("units", "kernel", "stride", "padding", "rate"):
                    raise error(INVALID_ARGUMENT, "bptrain: sequential: layer %d (%s): unknown field %r" %
                                (index, kind, field))
                what = "Model.sequential: layer %d (%s)" % (index, kind)
                convert = _arguments.real if field == "rate" else _arguments.integer
                setattr(specs[index], field, convert(value, what, field))
        return self._add(lib.bpt_layer_sequential, _arguments.name(prefix, "Model.sequential (prefix)"),
                         _ops._node(x, "Model.sequential")[0],
                         specs, len(layers))

    def set_precision(self, compute_dtype="f32", loss_scaling="auto", initial_loss_scale=None,
                      growth_interval=None, growth_factor=None, backoff_factor=None,
                      saved_activation_storage="compute", keep_all_values=False, store_activations_16bit=None):
        """Sets the precision policy (before compile): compute dtype "f32", "f16" or "bf16", loss scaling
        "auto", "none" or "dynamic", how saved activations are stored ("compute", "f16", "bf16", "fp8"), and
        under bf16 whether activations and their gradients are stored as 2-byte values where the plan can
        (store_activations_16bit; the same forward values, about half their memory; the gradient of a value with
        several readers is summed in bf16; None, the default: the library's, 16-bit on the CPU backend; False:
        f32 buffers rounded in place))."""
        options = lib.bpt_precision_options_default()
        what = "Model.set_precision"
        # Only these three: precision.h's compute dtypes (the storage of saved activations is its own argument).
        compute_dtype = dtype_name(compute_dtype, what, "compute_dtype", allowed=("f32", "f16", "bf16"))
        options.compute_dtype = DTYPES[compute_dtype]
        options.loss_scaling = _ops._enum(_LOSS_SCALING, "loss_scaling")(loss_scaling, "Model.set_precision")[0]
        options.saved_activation_storage = _ops._enum(_ACTIVATION_STORAGE, "saved_activation_storage")(
            saved_activation_storage, "Model.set_precision")[0]
        for field, value in (("initial_loss_scale", initial_loss_scale), ("growth_interval", growth_interval),
                             ("growth_factor", growth_factor), ("backoff_factor", backoff_factor)):
            if value is not None:  # (a bare TypeError from ctypes for "big"; 2.5 steps truncated to 2)
                convert = _arguments.integer if field == "growth_interval" else _arguments.real
                setattr(options, field, convert(value, what, field))
        options.keep_all_values = int(bool(keep_all_values))
        if store_activations_16bit is not None:
            options.store_activations_16bit = int(bool(store_activations_16bit))
        self.context.check(lib.bpt_graph_set_precision(self.handle, ctypes.byref(options)))

    @property
    def loss_scale(self):
        return lib.bpt_graph_loss_scale(self.handle)

    @property
    def skipped_steps(self):
        """Optimiser steps skipped because a gradient overflowed under loss scaling."""
        return lib.bpt_graph_skipped_steps(self.handle)

    def compile(self, loss, max_batch):
        """Fixes the graph for batches of up to `max_batch` samples and initialises the parameters.
        `loss` may be None for an inference-only graph."""
        if loss is not None and not isinstance(loss, Node):
            raise error(INVALID_ARGUMENT, "bptrain: compile: loss must be a Node or None")
        max_batch = _arguments.integer(max_batch, "Model.compile", "max_batch")
        self.context.check(lib.bpt_graph_compile(self.handle, loss.handle if loss is not None else None, max_batch))
        self.loss = loss
        self.max_batch = max_batch
        for node in self.inputs:
            self._tensors[node._address] = _Tensor(self, node.dtype, (self.max_batch,) + node.sample_shape)

    def _own_node(self, node, what):
        """`node` when it is a Node of this model (InvalidArgumentError otherwise)."""
        _arguments.instance(node, Node, "Model.%s" % what, "node")
        if node.model is not self:
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: %r belongs to another model" % (what, node))
        return node

    def _require_compiled(self, what):
        if not self.compiled:
            raise error(STATE, "bptrain: %s: the model is not compiled; call model.compile(loss, "
                               "max_batch) first" % _arguments.model_call(what))

    # --- modes and switches --------------------------------------------------------------------------
    def train(self):
        """Training mode: batch norm uses and updates batch statistics, dropout drops."""
        self.context.check(lib.bpt_graph_set_training(self.handle, 1))

    def eval(self):
        """Evaluation mode: batch norm uses its running statistics, dropout passes values through."""
        self.context.check(lib.bpt_graph_set_training(self.handle, 0))

    @property
    def training(self):
        return bool(lib.bpt_graph_is_training(self.handle))

    def set_deterministic(self, deterministic=True):
        """Deterministic stochastic ops (a binary stochastic neuron outputs 1[sigmoid(z) > 0.5])."""
        self.context.check(lib.bpt_graph_set_deterministic(self.handle, int(bool(deterministic))))

    @property
    def anomaly_detection(self):
        """When on, forward and backward stop at the first inf or NaN, naming the op (NumericError)."""
        return bool(lib.bpt_graph_anomaly_detection(self.handle))

    @anomaly_detection.setter
    def anomaly_detection(self, enabled):
        self.context.check(lib.bpt_graph_set_anomaly_detection(self.handle, int(bool(enabled))))

    @property
    def parameter_check(self):
        """When on (the default), an optimiser step that makes a parameter non-finite fails naming it."""
        return bool(lib.bpt_graph_parameter_check(self.handle))

    @parameter_check.setter
    def parameter_check(self, enabled):
        self.context.check(lib.bpt_graph_set_parameter_check(self.handle, int(bool(enabled))))

    def fold_batch_norm(self):
        """Folds batch norms into the convolutions before them (inference only afterwards); returns how many."""
        count = ctypes.c_int()
        self.context.check(lib.bpt_graph_fold_batch_norm(self.handle, ctypes.byref(count)))
        return count.value

    # --- feeding and running -------------------------------------------------------------------------
    def _array(self, data, node, shorter=False):
        """`data` as a C-contiguous array of the node's dtype, shaped (samples,) + the node's sample shape; with
        `shorter`, a sequence input's (samples, t) + per-token shape for a t below its declared length too."""
        numpy = require_numpy()
        what = "input %r" % node.name
        if node.dtype == "i32":
            if data is None:
                raise error(INVALID_ARGUMENT, "bptrain: %s: got None, expected an array" % what)
            try:
                array = _arguments.exact_array(numpy, data, numpy.int32, "input %r is i32" % node.name)
            except MemoryError:
                raise error(OUT_OF_MEMORY, "bptrain: %s: no memory for an int32 copy of the data" % what) from None
            except (TypeError, ValueError, OverflowError) as failure:
                if isinstance(failure, Error):
                    raise
                raise error(INVALID_ARGUMENT, "bptrain: input %r: cannot read the data as %s values: %s" %
                            (node.name, node.dtype, failure)) from None
        else:  # complex, text and None are refused: the cast would drop, parse or invent values
            array = _arguments.real_array(numpy, data, numpy_dtype(node.dtype), what)
        if array.ndim == 0:
            raise error(SHAPE, "bptrain: input %r: expected one row per sample, got a scalar" % node.name)
        per_sample = 1
        for d in node.sample_shape:
            per_sample *= d
        values = 1  # from the shape, so that an empty array of the wrong shape is refused too
        for d in array.shape[1:]:
            values *= d
        length = node.sample_shape[0] if node.sequence else 0
        if shorter and node.sequence and values != per_sample and array.ndim >= 2 and 1 <= array.shape[1] < length \
                and values == array.shape[1] * (per_sample // length):
            return array.reshape((array.shape[0], array.shape[1]) + node.sample_shape[1:])
        if values != per_sample:
            raise error(SHAPE, "bptrain: input %r: samples have %d values (shape %s), the input expects %d (shape %s)"
                        % (node.name, values, array.shape[1:], per_sample, node.sample_shape))
        return array.reshape((array.shape[0],) + node.sample_shape)

    def _sources(self, arrays, what):
        self._require_compiled(what)
        if len(arrays) != len(self.inputs):
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: the model has %d inputs (%s), %d arrays given" %
                        (what, len(self.inputs), ", ".join(node.name for node in self.inputs), len(arrays)))
        sources = [self._array(data, node) for data, node in zip(arrays, self.inputs)]
        counts = sorted({len(source) for source in sources})
        if len(counts) != 1:
            raise error(SHAPE, "bptrain: Model.%s: inputs have different sample counts %s" % (what, counts))
        if counts[0] == 0:  # a loss and an accuracy over no samples would read as 0, not as a mistake
            raise error(SHAPE, "bptrain: Model.%s: the arrays hold no samples" % what)
        return sources, counts[0]

    def _feed(self, sources, rows):
        """Copies the selected rows (a slice or an index array) of each source into its input."""
        numpy = require_numpy()
        for node, source in zip(self.inputs, sources):
            tensor = self._tensors[node._address]
            count = (rows.stop - rows.start) if isinstance(rows, slice) else len(rows)
            if count > tensor.capacity:
                raise error(SHAPE, "bptrain: input %r: a batch of %d samples exceeds the compiled max_batch %d" %
                            (node.name, count, tensor.capacity))
            view = tensor.view()[:count]
            if source is None:
                view[...] = 0
            elif isinstance(rows, slice):
                view[...] = source[rows]
            else:
                numpy.take(source, rows, axis=0, out=view)
            tensor.set_batch(count)
            self.context.check(lib.bpt_graph_set_input(self.handle, node.handle, tensor.handle))

    def set_input(self, node, data):
        """Feeds one batch (an array of samples) into input `node`; a sequence input also takes (samples, t, ...)
        for t below its declared length, and the next forward runs the model at that length."""
        self._require_compiled("set_input")
        node = self._own_node(node, "set_input")
        inputs = [declared for declared in self.inputs if declared._address == node._address]
        if not inputs:  # (the same input found again by Model.node(name) is the declared one)
            raise error(INVALID_ARGUMENT, "bptrain: Model.set_input: %r is not an input of this model" % (node,))
        node = inputs[0]
        source = self._array(data, node, shorter=True)
        tensor = self._tensors[node._address]
        if len(source) > tensor.capacity:
            raise error(SHAPE, "bptrain: input %r: a batch of %d samples exceeds the compiled max_batch %d" %
                        (node.name, len(source), tensor.capacity))
        if source.shape[1:] != node.sample_shape:  # a shorter sequence: a tensor of its own shape
            tensor = _Tensor(self, node.dtype, source.shape)
        tensor.view()[:len(source)] = source
        tensor.set_batch(len(source))
        self.context.check(lib.bpt_graph_set_input(self.handle, node.handle, tensor.handle))

    def forward(self):
        """Runs the forward pass on the inputs set last; returns the loss (None without a loss)."""
        self._require_compiled("forward")
        self.context.check(lib.bpt_graph_forward(self.handle))
        return self.loss_value() if self.loss is not None else None

    def backward(self, accumulate=False):
        """Runs the backward pass; `accumulate` adds to the parameter gradients instead of overwriting them."""
        self._require_compiled("backward")
        function = lib.bpt_graph_backward_accumulate if accumulate else lib.bpt_graph_backward
        self.context.check(function(self.handle))

    def zero_gradients(self):
        self.context.check(lib.bpt_graph_zero_gradients(self.handle))

    def loss_value(self):
        """The loss of the last forward pass."""
        value = ctypes.c_float()
        self.context.check(lib.bpt_graph_loss(self.handle, ctypes.byref(value)))
        return value.value

    def read(self, node):
        """The node's values from the last forward pass as a new array (batch first where it has one)."""
        self._require_compiled("read")
        node = self._own_node(node, "read")
        tensor = self._read_tensors.get(node._address)
        if tensor is None:
            tensor = self._read_tensors[node._address] = _Tensor(self, node.dtype, node.shape or (1,))
        self.context.check(lib.bpt_graph_read(self.handle, node.handle, tensor.handle))
        return tensor.current().copy()

    def clip_gradient_norm(self, max_norm):
        """Scales the gradients to a global L2 norm of at most `max_norm`; returns the norm before."""
        norm = ctypes.c_float()
        max_norm = _arguments.real(max_norm, "Model.clip_gradient_norm", "max_norm")
        self.context.check(lib.bpt_graph_clip_gradient_norm(self.handle, max_norm, ctypes.byref(norm)))
        return norm.value

    def clip_gradient_value(self, limit):
        """Clamps every gradient element to [-limit, limit]."""
        limit = _arguments.real(limit, "Model.clip_gradient_value", "limit")
        self.context.check(lib.bpt_graph_clip_gradient_value(self.handle, limit))

    # --- parameters and introspection ----------------------------------------------------------------
    def parameters(self):
        """All parameters (buffers included), in declaration order, as one flat float32 array."""
        numpy = require_numpy()
        values = numpy.empty(lib.bpt_graph_parameter_count(self.handle), dtype=numpy.float32)
        self.context.check(lib.bpt_graph_read_parameters(self.handle, values.ctypes.data_as(_native.float_p),
                                                         values.size))
        return values

    def set_parameters(self, values):
        """Overwrites all parameters from a flat array (the layout of parameters())."""
        numpy = require_numpy()
        values = _arguments.real_array(numpy, values, numpy.float32, "Model.set_parameters").reshape(-1)
        self.context.check(lib.bpt_graph_write_parameters(self.handle, values.ctypes.data_as(_native.float_p),
                                                          values.size))

    def gradients(self):
        """All parameter gradients of the last backward pass, in the layout of parameters()."""
        numpy = require_numpy()
        values = numpy.empty(lib.bpt_graph_parameter_count(self.handle), dtype=numpy.float32)
        self.context.check(lib.bpt_graph_read_gradients(self.handle, values.ctypes.data_as(_native.float_p),
                                                        values.size))
        return values

    def parameter_nodes(self):
        """The parameter nodes (buffers included) in declaration order."""
        graph = self.handle
        return [Node(self, lib.bpt_graph_parameter_node(graph, index))
                for index in range(lib.bpt_graph_parameter_node_count(graph))]

    def state_dict(self):
        """{parameter name: ndarray of its shape} for every parameter and buffer (copies)."""
        values = self.parameters()
        state, offset = {}, 0
        for node in self.parameter_nodes():
            shape = node.shape
            size = 1
            for d in shape:
                size *= d
            state[node.name] = values[offset:offset + size].reshape(shape).copy()
            offset += size
        return state

    def nodes(self):
        """Every node (inputs, parameters, ops) in creation order."""
        graph = self.handle
        return [Node(self, lib.bpt_graph_node(graph, index)) for index in range(lib.bpt_graph_node_count(graph))]

    def node(self, name):
        """The node called `name` (InvalidArgumentError when there is none)."""
        out = _native.handle()
        self.context.check(lib.bpt_graph_find_node(self.handle, _arguments.name(name, "Model.node"), ctypes.byref(out)))
        return Node(self, out)

    def memory(self):
        """Bytes the compiled graph holds for its largest batch, as a dict."""
        stats = _native.GraphMemoryStats(size=ctypes.sizeof(_native.GraphMemoryStats))
        self.context.check(lib.bpt_graph_memory(self.handle, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name, _ in stats._fields_ if name != "size"}

    # --- checkpoints ---------------------------------------------------------------------------------
    def save(self, path, optimizer=None, dataset=None, epoch=0, step=0):
        """Writes a checkpoint (the library's one model file, docs/checkpoints.md) atomically: parameters and
        buffers, plus the optimiser's state, the data set's order and the loop position when given."""
        self._require_compiled("save")
        save_checkpoint(self, path, optimizer, dataset, epoch, step)

    def load(self, path, optimizer=None, dataset=None, strict=True):
        """Loads a checkpoint into this compiled model. `strict` needs every parameter to match by name and
        shape; strict=False loads the matching ones and reports the rest. Returns a LoadReport (loaded,
        skipped, missing names; epoch and step)."""
        self._require_compiled("load")
        return load_checkpoint(self, path, optimizer, dataset, strict)

    def summary(self):
        """The model summary as text (bpt_graph_summary_text): per layer its output shape, trainable
        parameters, buffers and activation bytes at the compiled batch, then the totals."""
        self._require_compiled("summary")
        needed = lib.bpt_graph_summary_text(self.handle, None, 0)
        buffer = ctypes.create_string_buffer(needed + 1)
        lib.bpt_graph_summary_text(self.handle, buffer, needed + 1)
        return buffer.value.decode()

    def evaluate_dataset(self, dataset, top_k=5, confusion_matrix=False, batch_size=None):
        """The library's evaluation (bpt_evaluate) of a classifier on a Dataset in eval mode: a dict with
        samples, loss, accuracy, top_k and top_k_accuracy, and with confusion_matrix=True a classes x classes
        int64 array (row = label, column = prediction)."""
        self._require_compiled("evaluate_dataset")
        from .data import Dataset
        _arguments.instance(dataset, Dataset, "Model.evaluate_dataset", "dataset")
        options = lib.bpt_eval_options_default()
        options.top_k = _arguments.integer(top_k, "Model.evaluate_dataset", "top_k", maximum=_arguments.INT_MAX)
        options.batch_size = _arguments.integer(batch_size or 0, "Model.evaluate_dataset", "batch_size")
        matrix = None
        if confusion_matrix:
            numpy = require_numpy()
            if self.logits is None:
                raise error(STATE, "bptrain: Model.evaluate_dataset: the model has no logits for a confusion matrix")
            classes = int(self.logits.shape[-1])
            matrix = numpy.zeros((classes, classes), dtype=numpy.int64)
            options.confusion_matrix = matrix.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            options.confusion_classes = classes
        result = _native.EvalResult()
        result.size = ctypes.sizeof(result)
        self.context.check(lib.bpt_evaluate(self.handle, dataset.handle, ctypes.byref(options), ctypes.byref(result)))
        measured = {"samples": result.samples, "loss": result.loss, "accuracy": result.accuracy,
                    "top_k": result.top_k, "top_k_accuracy": result.top_k_accuracy}
        if matrix is not None:
            measured["confusion_matrix"] = matrix
        return measured

    def export_onnx(self, path, opset=17, input_mean=0.0, input_std=1.0, softmax=False):
        """Writes the model's inference computation (evaluation mode, no loss: the logits, or their softmax
        with `softmax`) as an ONNX file; `input_mean` and `input_std` put the input normalisation inside it,
        so that it takes raw pixels in [0, 1]. UnsupportedError names an op without an ONNX equivalent, or
        says the library has no ONNX export (bptrain.has_onnx_export())."""
        self._require_compiled("export_onnx")
        if not _native.has("bpt_graph_export_onnx"):
            raise error(UNSUPPORTED, "bptrain: Model.export_onnx: %s has no bpt_graph_export_onnx" % lib._name)
        options = lib.bpt_onnx_export_options_default()
        what = "Model.export_onnx"
        options.opset = _arguments.integer(opset, what, "opset")
        options.input_mean = _arguments.real(input_mean, what, "input_mean")
        options.input_std = _arguments.real(input_std, what, "input_std")
        options.softmax = int(bool(softmax))
        self.context.check(lib.bpt_graph_export_onnx(self.handle, _arguments.path(path, what), ctypes.byref(options)))

    def close(self):
        """Destroys the optimisers and tensors made for this model, then its graph: using any of them (or its
        nodes) afterwards raises StateError."""
        self._native.close()
        self._tensors = {}
        self._read_tensors = {}


for _method, _op in _ops.TABLE.items():
    setattr(Model, _method, _builder(_op))
serialised(Model)
serialised(Node)

__all__ = ["Model", "Node", "LoadReport"]
