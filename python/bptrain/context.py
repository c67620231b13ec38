"""The library instance (Context), what the loaded library is (version, backends) and the helpers that need
no graph: dtypes, number-format conversion, the profiler and the fpga-sim backend's cycle model.
"""
import ctypes
import difflib
import sys
import threading

from . import _arguments, _native
from ._errors import DTYPE, INVALID_ARGUMENT, STATE, UNSUPPORTED, error
from ._handles import _Native, serialised
from ._messages import python_message
from ._native import lib

DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "fp8_e4m3": 3, "fp8_e5m2": 4, "i32": 5, "u8": 6}
_ROUNDING = {"nearest_even": 0, "stochastic": 1}


def require_numpy():
    """numpy, or bptrain.UnsupportedError saying how to get it (importing bptrain itself does not need it)."""
    try:
        import numpy
    except ImportError:
        raise error(UNSUPPORTED, "bptrain: this call needs NumPy (pip install numpy, or apt-get install python3-numpy)") \
            from None
    return numpy


# NumPy's names of the dtypes that have a NumPy type (bf16 and the FP8 formats have none).
_NUMPY_NAMES = {"float32": "f32", "float16": "f16", "int32": "i32", "uint8": "u8"}
# Other libraries' names for bptrain dtypes, offered as "did you mean" when a dtype is refused, never taken in
# its place: set_precision("fp16") listed every dtype, the invalid ones too, and left the user to find "f16".
_ALIASES = {"fp32": "f32", "float": "f32", "float64": "f32", "single": "f32", "fp16": "f16", "half": "f16",
            "bfloat16": "bf16", "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
            "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "int": "i32", "int64": "i32"}


def dtype_name(dtype, what, argument="dtype", allowed=tuple(DTYPES)):
    """The bptrain name ("f32") of `dtype` given as that name or as NumPy users write it (np.float32,
    "float32", np.dtype("int32")), when it is one of `allowed`; DtypeError naming the allowed ones otherwise."""
    name = dtype if isinstance(dtype, str) and dtype in DTYPES else _from_numpy(dtype)
    if name in allowed:
        return name
    numpy_names = [numpy_name for numpy_name, own in _NUMPY_NAMES.items() if own in allowed]
    numpy_name = None if isinstance(dtype, str) else _numpy_dtype_name(dtype)
    shown = "NumPy's %s" % numpy_name if numpy_name else repr(dtype)
    raise error(DTYPE, "bptrain: %s: %s must be %s%s, not %s%s" % (
        what, argument, _either(['"%s"' % own for own in allowed]),
        " (or NumPy's %s)" % _either(numpy_names) if numpy_names else "", shown,
        _suggestion(numpy_name or dtype, allowed)))


def _suggestion(spelling, allowed):
    """The " (did you mean 'f16'?)" for a refused spelling near one of `allowed`, else ""."""
    if not isinstance(spelling, str):
        return ""
    near = _ALIASES.get(spelling.lower())
    near = [near] if near in allowed else difflib.get_close_matches(spelling.lower(), allowed, n=1, cutoff=0.7)
    return " (did you mean %r?)" % near[0] if near else ""


def _from_numpy(dtype):
    """The bptrain name of a NumPy spelling of a dtype, or None. A NumPy type or dtype object means NumPy is
    loaded, so bptrain reads it from sys.modules and never imports NumPy for this."""
    if isinstance(dtype, str) and dtype in _NUMPY_NAMES:
        return _NUMPY_NAMES[dtype]
    return _NUMPY_NAMES.get(_numpy_dtype_name(dtype))


def _numpy_dtype_name(dtype):
    numpy = sys.modules.get("numpy")
    if numpy is None or dtype is None:  # numpy.dtype(None) is float64
        return None
    try:
        return numpy.dtype(dtype).name
    except (TypeError, ValueError, KeyError):  # (not a dtype at all: the caller says what is allowed)
        return None


def _either(names):
    return " or ".join(names) if len(names) < 3 else "%s or %s" % (", ".join(names[:-1]), names[-1])


def dtype_code(dtype, what="dtype"):
    """The bpt_dtype value of a dtype ("f32", "i32", np.float32, ...); `what` names the call for errors."""
    return DTYPES[dtype_name(dtype, what)]


def numpy_dtype(dtype):
    """The NumPy type that holds one element of `dtype` (narrow floats as their bit patterns)."""
    numpy = require_numpy()
    dtype = dtype_name(dtype, "dtype")
    return {"f32": numpy.float32, "f16": numpy.uint16, "bf16": numpy.uint16, "fp8_e4m3": numpy.uint8,
            "fp8_e5m2": numpy.uint8, "i32": numpy.int32, "u8": numpy.uint8}[dtype]


def thread_message():
    """The message of the last failed call on this thread that had no context to report to."""
    return (lib.bpt_context_last_error(None) or b"").decode(errors="replace")


def check_without_context(status):
    """Raises the Error for `status` with this thread's message (calls that take no context)."""
    if status:
        raise error(status, python_message(thread_message()))


def version():
    """The loaded library's version, "major.minor.patch"."""
    return lib.bpt_version().decode()


def version_number():
    """The loaded library's version as major * 10000 + minor * 100 + patch."""
    return lib.bpt_version_number()


def abi_version():
    """The ABI major version of the loaded library (the SONAME suffix)."""
    return lib.bpt_abi_version()


def library_path():
    """The file the binding loaded libbptrain from."""
    return lib._name


def backends():
    """Names of the backends the library knows, available here or not (see backend_available())."""
    return [lib.bpt_backend_name(i).decode() for i in range(lib.bpt_backend_count())]


def compute_info():
    """What the CPU backend computes with, as a dict of bpt_compute_info's fields (BLAS, its kernel and who
    chose it, the start-up GEMM self-check, the bf16 GEMM mode, CPU model and features; "summary" is one line)."""
    info = _native.ComputeInfo()
    info.size = ctypes.sizeof(info)
    check_without_context(lib.bpt_cpu_compute_info(ctypes.byref(info)))
    return {name: (value.decode() if isinstance(value, bytes) else value)
            for name, value in ((field, getattr(info, field)) for field, _ in info._fields_ if field != "size")}


def backend_available(name):
    """(True, "") when backend `name` can be used here, else (False, why not). Loads its module if needed."""
    names = backends()
    if name not in names:
        raise error(INVALID_ARGUMENT, "bptrain: unknown backend %r (this library knows %s)" % (name, names))
    reason = ctypes.create_string_buffer(512)
    status = lib.bpt_backend_available(names.index(name), reason, len(reason))
    return status == 0, reason.value.decode(errors="replace")


def choose_backend(preferred=("cuda", "cpu")):
    """The first backend of `preferred` that is available here (UnsupportedError naming why each is not)."""
    reasons = []
    for name in preferred:
        if name in backends():
            available, reason = backend_available(name)
            if available:
                return name
            reasons.append("%s: %s" % (name, reason))
        else:
            reasons.append("%s: not in this library" % name)
    raise error(UNSUPPORTED, "bptrain: none of the backends %s is available: %s" % (list(preferred), "; ".join(reasons)))


def dtype_size(dtype):
    """Bytes of one element of `dtype`."""
    return lib.bpt_dtype_size(dtype_code(dtype, "bptrain.dtype_size"))


def dtype_max_finite(dtype):
    """The largest finite value of a floating-point dtype (65504 for "f16", 448 for "fp8_e4m3")."""
    return lib.bpt_dtype_max_finite(dtype_code(dtype, "bptrain.dtype_max_finite"))


@serialised
class Context:
    """A library instance bound to one backend ("cpu", "cuda", "fpga-sim" or "auto": the first available of
    cuda and cpu); use one per thread. `cpu_fallback` runs nodes the backend lacks on the CPU."""

    def __init__(self, backend="cpu", threads=0, seed=42, cpu_fallback=False):
        self._lock = threading.RLock()  # held by every call on this context and what is made from it
        self._native = None
        if lib.bpt_abi_version() != _native.ABI_VERSION:
            raise error(STATE, "bptrain: the binding expects ABI %d, %s has ABI %d" %
                        (_native.ABI_VERSION, library_path(), lib.bpt_abi_version()))
        if backend == "auto":
            backend = choose_backend()
        options = lib.bpt_context_options_default()
        options.size = ctypes.sizeof(options)
        if not isinstance(backend, str):
            raise error(INVALID_ARGUMENT, "bptrain: Context: backend must be a str, got %r" % (backend,))
        options.backend = _arguments.name(backend, "Context (backend)")  # "cpu\0junk" would be cut to "cpu"
        options.num_threads = _arguments.integer(threads, "Context", "threads", maximum=_arguments.INT_MAX)
        options.seed = _arguments.integer(seed, "Context", "seed", minimum=0, maximum=_arguments.UINT64_MAX)
        options.cpu_fallback = int(bool(cpu_fallback))
        handle = _native.handle()
        check_without_context(lib.bpt_context_create(ctypes.byref(options), ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_context_destroy, None, "context")
        self.seed = seed

    def check(self, status):
        """Raises the Error subclass of `status` with the failed call's message, worded for the Python call
        that made it (_messages.py), when it is not BPT_OK."""
        if status:
            raise error(status, python_message(self.last_message()))

    def last_message(self):
        """The message of the call that just failed on this context; calls without a usable context (a NULL
        or stale handle) report in the thread's slot."""
        handle = self._native.handle if self._native else None
        message = lib.bpt_context_last_error(handle) if handle else None
        return (message or b"").decode(errors="replace") or thread_message()

    @property
    def handle(self):
        if self._native is None:
            raise error(STATE, "bptrain: the context was not created")
        return self._native.get()

    @property
    def backend(self):
        return lib.bpt_context_backend(self.handle).decode()

    @property
    def threads(self):
        return lib.bpt_context_num_threads(self.handle)

    # profiler.h
    def profile(self, enabled=True):
        """Starts (or pauses) the profiler on this context."""
        self.check(lib.bpt_profiler_enable(self.handle, int(bool(enabled))))

    @property
    def profiling(self):
        return bool(lib.bpt_profiler_enabled(self.handle))

    def profile_reset(self):
        self.check(lib.bpt_profiler_reset(self.handle))

    def profile_summary(self):
        """The profiler's summary table as text."""
        size = lib.bpt_profiler_summary(self.handle, None, 0)
        buffer = ctypes.create_string_buffer(size + 1)
        lib.bpt_profiler_summary(self.handle, buffer, size + 1)
        return buffer.value.decode(errors="replace")

    def write_profile_trace(self, path):
        """Writes the recorded events as a Chrome trace JSON file (chrome://tracing, ui.perfetto.dev)."""
        self.check(lib.bpt_profiler_write_trace(self.handle, _arguments.path(path, "Context.write_profile_trace")))

    # number_format.h
    def convert(self, values, source, destination, rounding="nearest_even", saturate=False, scale=1.0, seed=0):
        """Converts a NumPy array between f32, f16, bf16, fp8_e4m3 and fp8_e5m2 (narrow formats as their bit
        patterns: uint16 or uint8 arrays) and returns a new array of the same shape."""
        numpy = require_numpy()
        _arguments.choice(rounding, _ROUNDING, "Context.convert", "rounding")
        source = dtype_name(source, "Context.convert", "source")
        destination = dtype_name(destination, "Context.convert", "destination")
        kind = numpy.dtype(numpy_dtype(source))
        if kind.kind in "ui":  # narrow formats go in as bit patterns: 1.5 must not become the pattern 1
            values = _arguments.exact_array(numpy, values, kind, "convert: %s values are %s bit patterns" %
                                            (source, kind.name))
        else:  # None would be converted as a NaN, text parsed
            values = _arguments.real_array(numpy, values, kind, "Context.convert")
        result = numpy.empty(values.shape, dtype=numpy_dtype(destination))
        options = lib.bpt_convert_options_default()
        options.rounding, options.saturate = _ROUNDING[rounding], int(saturate)
        options.scale = _arguments.real(scale, "convert", "scale")
        options.seed = _arguments.integer(seed, "convert", "seed", minimum=0, maximum=_arguments.UINT64_MAX)
        self.check(lib.bpt_convert(self.handle, ctypes.byref(options), values.size, dtype_code(source),
                                   values.ctypes.data, dtype_code(destination), result.ctypes.data))
        return result

    def fp8_scale(self, values, dtype="fp8_e4m3"):
        """The largest power of two s with max |values| * s within the FP8 format's range."""
        numpy = require_numpy()
        values = _arguments.real_array(numpy, values, numpy.float32, "Context.fp8_scale")
        scale = ctypes.c_float()
        self.check(lib.bpt_fp8_scale(self.handle, dtype_code(dtype, "Context.fp8_scale"), values.ctypes.data_as(_native.float_p),
                                     values.size, ctypes.byref(scale)))
        return scale.value

    # fpga.h
    def configure_fpga(self, **options):
        """Reconfigures the fpga-sim backend: keyword arguments are bpt_fpga_options fields (format="fixed",
        word_bits=16, clock_mhz=300, ...); the others keep their defaults."""
        structure = lib.bpt_fpga_options_default()
        formats = {"f32": 0, "fixed": 1}
        choices = {"rounding": {"truncate": 0, "round": 1}, "overflow": {"wrap": 0, "saturate": 1}, "format": formats}
        for name, value in options.items():
            if name == "size" or name not in dict(_native.FpgaOptions._fields_):
                raise error(INVALID_ARGUMENT, "bptrain: configure_fpga: unknown option %r" % name)
            if name in choices:
                value = _arguments.choice(value, choices[name], "configure_fpga", name)
            elif dict(_native.FpgaOptions._fields_)[name] in (ctypes.c_double, ctypes.c_float):
                value = _arguments.real(value, "configure_fpga", name,
                                        single=dict(_native.FpgaOptions._fields_)[name] is ctypes.c_float)
            else:  # ctypes would raise a bare TypeError for "a" and wrap an int beyond the field
                maximum = _arguments.INT_MAX if dict(_native.FpgaOptions._fields_)[name] is ctypes.c_int else \
                    _arguments.INT64_MAX
                value = _arguments.integer(value, "configure_fpga", name, maximum=maximum)
            setattr(structure, name, value)
        self.check(lib.bpt_fpga_configure(self.handle, ctypes.byref(structure)))

    def fpga_report(self):
        """The fpga-sim cycle model's totals since the last reset, as a dict."""
        report = _native.FpgaReport(size=ctypes.sizeof(_native.FpgaReport))
        self.check(lib.bpt_fpga_get_report(self.handle, ctypes.byref(report)))
        return _fields(report)

    def fpga_kernel_reports(self):
        """One dict per kernel of the cycle model (name, calls, cycles, operations, utilisation)."""
        reports = []
        for index in range(lib.bpt_fpga_kernel_count()):
            report = _native.FpgaKernelReport(size=ctypes.sizeof(_native.FpgaKernelReport))
            self.check(lib.bpt_fpga_get_kernel_report(self.handle, index, ctypes.byref(report)))
            fields = _fields(report)
            fields["name"] = (fields["name"] or b"").decode()
            reports.append(fields)
        return reports

    def fpga_reset_counters(self):
        self.check(lib.bpt_fpga_reset_counters(self.handle))

    def fpga_report_text(self):
        buffer = ctypes.create_string_buffer(1 << 16)
        self.check(lib.bpt_fpga_format_report(self.handle, buffer, len(buffer)))
        return buffer.value.decode(errors="replace")

    def close(self):
        """Destroys everything made from this context, then the context: using any of them afterwards raises
        StateError. Without close() the context lives as long as anything made from it."""
        if self._native is not None:
            self._native.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()


def _fields(structure):
    return {name: getattr(structure, name) for name, _ in structure._fields_ if name != "size"}

