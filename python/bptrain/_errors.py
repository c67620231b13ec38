"""bptrain.Error and one subclass per bpt_status, so callers can catch a kind of failure (ShapeError,
FormatError...) or every failure of the library (Error). Python-side misuse raises the same classes with the
status the C library would have given, so no bare ValueError or KeyError escapes the binding.
"""

# Values of bpt_status (include/bptrain/common.h); fixed, bindings may hard-code them.
OK, INVALID_ARGUMENT, OUT_OF_MEMORY, IO, FORMAT, SHAPE, DTYPE, UNSUPPORTED, DEVICE, NUMERIC, STATE, COMM, \
    INTERNAL = range(13)
STATUS_NAMES = ("OK", "INVALID_ARGUMENT", "OUT_OF_MEMORY", "IO", "FORMAT", "SHAPE", "DTYPE", "UNSUPPORTED",
                "DEVICE", "NUMERIC", "STATE", "COMM", "INTERNAL")
_STATUS_TEXT = ("ok", "invalid argument", "out of memory", "I/O error", "malformed file", "shape mismatch",
                "wrong data type", "unsupported", "device error", "numeric error", "wrong state",
                "communication error", "internal error")


class Error(Exception):
    """A libbptrain call (or the binding on its behalf) failed: `status` is the bpt_status value,
    `status_name` its name ("SHAPE"), `message` what went wrong and where."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
        self.message = message
        text = _STATUS_TEXT[status] if 0 <= status < len(_STATUS_TEXT) else "status %d" % status
        super().__init__("%s (%s)" % (message, text))


class InvalidArgumentError(Error, ValueError):
    """BPT_ERR_INVALID_ARGUMENT: a bad handle, option, name or value."""


class OutOfMemoryError(Error, MemoryError):
    """BPT_ERR_OUT_OF_MEMORY."""


class FileError(Error, OSError):
    """BPT_ERR_IO: a file could not be opened, read or written (also: the library could not be loaded)."""

    def __str__(self):  # OSError's own __str__ would print the args tuple
        return Exception.__str__(self)


class FormatError(Error):
    """BPT_ERR_FORMAT: a file was read but its contents are malformed or of another kind."""


class ShapeError(Error, ValueError):
    """BPT_ERR_SHAPE: shapes do not fit together."""


class DtypeError(Error, TypeError):
    """BPT_ERR_DTYPE: a data type is not accepted here."""


class UnsupportedError(Error):
    """BPT_ERR_UNSUPPORTED: the backend or this build cannot do it."""


class DeviceError(Error):
    """BPT_ERR_DEVICE: the device is missing or failed."""


class NumericError(Error, ArithmeticError):
    """BPT_ERR_NUMERIC: a value went infinite or NaN."""


class StateError(Error):
    """BPT_ERR_STATE: a call out of order (fit before compile, backward before forward, a closed object)."""


class CommError(Error):
    """BPT_ERR_COMM: a collective operation failed or timed out."""


class InternalError(Error):
    """BPT_ERR_INTERNAL: a bug in libbptrain."""


_CLASSES = {INVALID_ARGUMENT: InvalidArgumentError, OUT_OF_MEMORY: OutOfMemoryError, IO: FileError,
            FORMAT: FormatError, SHAPE: ShapeError, DTYPE: DtypeError, UNSUPPORTED: UnsupportedError,
            DEVICE: DeviceError, NUMERIC: NumericError, STATE: StateError, COMM: CommError, INTERNAL: InternalError}


def error(status, message):
    """The Error subclass for `status`, carrying `message`."""
    return _CLASSES.get(status, Error)(status, message)
