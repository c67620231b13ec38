"""The graph builders as one table: each line names a Model method, the C function it calls and its
arguments, from which both the C prototype and the Python method are made. An op added to the library is one
more line here (and, for a new kind of argument, one more entry in _KINDS).

An argument is "name:kind" or "name:kind=default"; a default "@other" means "the value of argument other".
Names starting with "_" are filled from the other arguments (a C option struct), not by the caller.
"""
import ctypes

from . import _native
from ._arguments import choice, integer, real
from ._errors import INVALID_ARGUMENT, Error, error

INITIALIZERS = {"zeros": 0, "ones": 1, "he_normal": 2, "he_uniform": 3, "xavier_normal": 4, "xavier_uniform": 5,
                "normal_small": 6}
ESTIMATORS = {"identity": 0, "sigmoid": 1}


def _enum(table, what):
    def convert(value, op, name=None):
        return [choice(value, table, op, what)]
    return convert


def _node(value, op, name=None):
    from .model import Node  # the table is read before model.py exists
    if not isinstance(value, Node):
        raise error(INVALID_ARGUMENT, "bptrain: %s: %sexpected a bptrain.Node, got %s" %
                    (op, "%s: " % name if name else "", type(value).__name__))
    return [value.handle]


def _nodes(value, op, name=None):
    """A list of Nodes as C's (count, bpt_node *const *)."""
    try:
        handles = [_node(node, op, name)[0] for node in value]
    except TypeError:
        raise error(INVALID_ARGUMENT, "bptrain: %s: expected a list of bptrain.Node, got %s" %
                    (op, type(value).__name__)) from None
    return [len(handles), (_native.handle * max(1, len(handles)))(*handles)]


def _optional_node(value, op, name=None):
    return [None] if value is None else _node(value, op, name)


def _number(kind):
    """A float (any real number) or an integer (ints only: 2.5 units or "3" are refused, never truncated)."""
    def convert(value, op, name=None):
        return [real(value, op, name or "a value") if kind is float else integer(value, op, name or "a count or size")]
    return convert


def _dims(value, op, name=None):
    try:
        dims = [integer(d, op, "a dimension") for d in value]
    except (TypeError, Error):
        raise error(INVALID_ARGUMENT, "bptrain: %s: expected a shape (a sequence of ints), got %r" % (op, value)) \
            from None
    return [len(dims), (ctypes.c_int64 * max(1, len(dims)))(*dims)]


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def _conv2d_options(bound, op):
    options = _native.lib.bpt_conv2d_options_default()
    try:
        options.stride_height, options.stride_width = _pair(bound["stride"])
        options.padding_height, options.padding_width = _pair(bound["padding"])
        options.dilation_height, options.dilation_width = _pair(bound["dilation"])
        options.groups = bound["groups"]
    except (TypeError, ValueError):
        raise error(INVALID_ARGUMENT, "bptrain: %s: stride, padding and dilation are ints or (height, width) "
                                      "pairs, groups an int" % op) from None
    return [ctypes.byref(options)]


def _block_options(bound, op):
    options = _native.lib.bpt_transformer_block_options_default()
    options.heads, options.mlp_ratio = integer(bound["heads"], op, "heads"), integer(bound["mlp_ratio"], op, "mlp_ratio")
    options.epsilon, options.dropout = real(bound["epsilon"], op, "epsilon"), real(bound["dropout"], op, "dropout")
    options.causal, options.recompute = int(bool(bound["causal"])), int(bool(bound["recompute"]))
    options.initializer = choice(bound["init"], INITIALIZERS, op, "init")
    return [ctypes.byref(options)]


# kind: (C argument types, convert(value, op) -> C arguments); None converts from all bound values instead.
_KINDS = {
    "node": ([_native.handle], _node),
    "node?": ([_native.handle], _optional_node),
    "nodes": ([ctypes.c_int, _native.handle_p], _nodes),
    "float": ([ctypes.c_float], _number(float)),
    "int64": ([ctypes.c_int64], _number(int)),
    "int": ([ctypes.c_int], _number(int)),
    "bool": ([ctypes.c_int], lambda value, op, name=None: [int(bool(value))]),
    "init": ([ctypes.c_int], _enum(INITIALIZERS, "init")),
    "estimator": ([ctypes.c_int], _enum(ESTIMATORS, "estimator")),
    "dims": ([ctypes.c_int, _native.int64_p], _dims),
    "geometry": ([], None),  # read by a struct argument, no C argument of its own
    "conv2d_options": ([ctypes.POINTER(_native.Conv2dOptions)], _conv2d_options),
    "option": ([], None),  # a field of a struct argument, no C argument of its own
    "block_options": ([ctypes.POINTER(_native.TransformerBlockOptions)], _block_options),
}

# method: (C function, arguments, default name prefix). Layers (which create their parameters) take the plain
# name; ops that take their parameters as nodes end in "_op" where a layer of the same name exists.
OPS = {
    # graph.h
    "linear": ("bpt_layer_linear", "x:node out_features:int64 init:init=he_uniform", "linear"),
    "linear_op": ("bpt_linear", "x:node weight:node bias:node?=", "linear"),
    "relu": ("bpt_relu", "x:node", "relu"),
    "leaky_relu": ("bpt_leaky_relu", "x:node slope:float=0.01", "leaky_relu"),
    "sigmoid": ("bpt_sigmoid", "x:node", "sigmoid"),
    "tanh": ("bpt_tanh", "x:node", "tanh"),
    "gelu": ("bpt_gelu", "x:node", "gelu"),
    "gelu_tanh": ("bpt_gelu_tanh", "x:node", "gelu_tanh"),
    "silu": ("bpt_silu", "x:node", "silu"),
    "mul": ("bpt_mul", "a:node b:node", "mul"),
    "embedding_op": ("bpt_embedding", "ids:node table:node", "embedding"),
    "permute": ("bpt_permute", "x:node axes:dims", "permute"),
    "slice": ("bpt_slice", "x:node axis:int start:int64 length:int64", "slice"),
    "concat": ("bpt_concat", "inputs:nodes axis:int", "concat"),
    "matmul": ("bpt_matmul", "a:node b:node transpose_a:bool=0 transpose_b:bool=0", "matmul"),
    "layer_norm_op": ("bpt_layer_norm", "x:node gamma:node beta:node?= epsilon:float=1e-5", "layer_norm"),
    "rms_norm_op": ("bpt_rms_norm", "x:node gamma:node epsilon:float=1e-5", "rms_norm"),
    "softmax": ("bpt_softmax", "x:node causal:bool=0", "softmax"),
    "scaled_dot_product_attention": ("bpt_scaled_dot_product_attention",
                                     "q:node k:node v:node heads:int64=1 causal:bool=0 dropout:float=0",
                                     "attention"),
    "softmax_cross_entropy": ("bpt_softmax_cross_entropy", "logits:node labels:node", "loss"),
    # softmax_cross_entropy(..., ignore_index=, label_smoothing=) calls this one (model.py)
    "softmax_cross_entropy_options": ("bpt_softmax_cross_entropy_options", "logits:node labels:node "
                                      "ignore_index:int64=-100 label_smoothing:float=0", "loss"),
    "mse_loss": ("bpt_mse_loss", "prediction:node target:node", "loss"),
    # cnn_ops.h
    "conv2d_op": ("bpt_conv2d", "x:node weight:node bias:node?= stride:geometry=1 padding:geometry=0 "
                                "dilation:geometry=1 groups:geometry=1 _options:conv2d_options", "conv"),
    "batch_norm_op": ("bpt_batch_norm", "x:node gamma:node beta:node running_mean:node running_variance:node "
                                        "momentum:float=0.1 epsilon:float=1e-5", "bn"),
    "batch_norm_relu_op": ("bpt_batch_norm_relu", "x:node gamma:node beta:node running_mean:node "
                                                  "running_variance:node momentum:float=0.1 epsilon:float=1e-5", "bn"),
    "max_pool2d": ("bpt_max_pool2d", "x:node kernel:int64 stride:int64=@kernel padding:int64=0", "max_pool"),
    "avg_pool2d": ("bpt_avg_pool2d", "x:node kernel:int64 stride:int64=@kernel padding:int64=0", "avg_pool"),
    "global_avg_pool": ("bpt_global_avg_pool", "x:node", "global_avg_pool"),
    "add": ("bpt_add", "a:node b:node", "add"),
    "add_relu": ("bpt_add_relu", "a:node b:node", "add_relu"),
    "reshape": ("bpt_reshape", "x:node shape:dims", "reshape"),
    "flatten": ("bpt_flatten", "x:node", "flatten"),
    "dropout": ("bpt_dropout", "x:node probability:float=0.5", "dropout"),
    # layers.h
    "conv2d": ("bpt_layer_conv2d", "x:node out_channels:int64 kernel:int64 stride:int64=1 padding:int64=0 "
                                   "bias:bool=1", "conv"),
    "embedding": ("bpt_layer_embedding", "ids:node vocabulary:int64 dim:int64", "embedding"),
    "batch_norm": ("bpt_layer_batch_norm", "x:node", "bn"),
    "batch_norm_relu": ("bpt_layer_batch_norm_relu", "x:node", "bn"),
    "layer_norm": ("bpt_layer_layer_norm", "x:node epsilon:float=1e-5", "layer_norm"),
    "rms_norm": ("bpt_layer_rms_norm", "x:node epsilon:float=1e-5", "rms_norm"),
    "resnet_block": ("bpt_layer_resnet_basic_block", "x:node out_channels:int64 stride:int64=1", "block"),
    # transformer.h
    "transformer_block": ("bpt_layer_transformer_block", "x:node heads:option=4 mlp_ratio:option=4 "
                          "epsilon:option=1e-5 dropout:option=0 causal:option=1 init:option=normal_small "
                          "recompute:option=0 _options:block_options", "block"),
    "transformer_block_cached": ("bpt_layer_transformer_block_cached", "x:node positions:node capacity:int64 "
                                 "heads:option=4 mlp_ratio:option=4 epsilon:option=1e-5 dropout:option=0 "
                                 "causal:option=1 init:option=normal_small recompute:option=0 "
                                 "_options:block_options", "block"),
    "kv_cache_attention": ("bpt_kv_cache_attention", "q:node k:node v:node positions:node heads:int64 "
                           "capacity:int64", "attention"),
    # binary_stochastic.h
    "binary_stochastic": ("bpt_binary_stochastic", "z:node estimator:estimator=identity", "bsn"),
}


class Op:
    """One table entry: parses its argument list, declares the C prototype and converts a call's arguments."""

    def __init__(self, method, function, arguments, prefix):
        self.method, self.function, self.prefix = method, function, prefix
        self.arguments = []  # (name, kind, default or _REQUIRED)
        for text in arguments.split():
            name, _, rest = text.partition(":")
            kind, has_default, default = rest.partition("=")
            if not has_default:
                default = _REQUIRED
            elif kind in ("float", "int64", "int", "geometry") and not default.startswith("@"):
                default = float(default) if kind == "float" else int(default)
            elif kind == "option":  # a number where it reads as one, else a name (an initializer)
                try:
                    default = int(default)
                except ValueError:
                    try:
                        default = float(default)
                    except ValueError:
                        pass
            elif kind == "node?":
                default = None
            elif kind == "bool":
                default = bool(int(default))
            self.arguments.append((name, kind, default))
        argtypes = [_native.handle, ctypes.c_char_p]
        for _, kind, _ in self.arguments:
            argtypes += _KINDS[kind][0]
        _native.declare(function, _native.status, argtypes + [_native.handle_p])
        self.c_function = getattr(_native.lib, function)

    def bind(self, args, kwargs):
        """The C arguments (after graph and name) for a call with these Python arguments."""
        what = "Model.%s" % self.method
        public = [argument for argument in self.arguments if not argument[0].startswith("_")]
        if len(args) > len(public):
            raise error(INVALID_ARGUMENT, "bptrain: %s takes %d arguments, %d given" % (what, len(public), len(args)))
        bound = dict(zip((name for name, _, _ in public), args))
        for name, value in kwargs.items():
            if name in bound or name not in {argument[0] for argument in public}:
                raise error(INVALID_ARGUMENT, "bptrain: %s: unexpected or repeated argument %r" % (what, name))
            bound[name] = value
        for name, kind, default in public:
            if name not in bound:
                if default is _REQUIRED:
                    raise error(INVALID_ARGUMENT, "bptrain: %s: missing argument %r" % (what, name))
                bound[name] = default
        for name, _, default in public:
            if isinstance(default, str) and default.startswith("@") and bound[name] is default:
                bound[name] = bound[default[1:]]
        c_arguments = []
        for name, kind, _ in self.arguments:
            convert = _KINDS[kind][1]
            if convert is None:
                continue
            c_arguments += convert(bound, what) if name.startswith("_") else convert(bound[name], what, name)
        return c_arguments

    def doc(self):
        shown = " ".join("%s%s" % (name, "" if default is _REQUIRED else "=%r" % (default,))
                         for name, _, default in self.arguments if not name.startswith("_"))
        return "%s(%s, name=None): calls %s(); returns the output Node." % (self.method, shown, self.function)


_REQUIRED = object()
TABLE = {method: Op(method, *entry) for method, entry in OPS.items()}
