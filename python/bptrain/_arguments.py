"""Checks of Python arguments before they reach ctypes, which would otherwise truncate 2.5 units to 2, accept
"3" as 3, write a checkpoint to a file named "None" or let a bare TypeError or AttributeError escape: each
failure is an InvalidArgumentError naming the call and the argument, like the library's own messages.
"""
import numbers
import operator
import os

from ._errors import INVALID_ARGUMENT, OUT_OF_MEMORY, Error, error


INT_MAX, INT64_MIN, INT64_MAX, UINT64_MAX = 2 ** 31 - 1, -2 ** 63, 2 ** 63 - 1, 2 ** 64 - 1


def integer(value, what, name, minimum=INT64_MIN, maximum=INT64_MAX):
    """`value` as an int: ints and NumPy integers only (a float or a string is refused, never truncated), in
    [minimum, maximum] (by default int64's range: ctypes would wrap anything beyond it without a word)."""
    if isinstance(value, bool):
        number = None
    else:
        try:
            number = operator.index(value)
        except TypeError:
            number = None
    if number is None:
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s must be an integer, got %r" % (what, name, value))
    if number < minimum or number > maximum:
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s is %d, must be in [%d, %d]" % (what, name, number, minimum,
                                                                                     maximum))
    return number


def real(value, what, name):
    """`value` as a float: any real number (int, float, NumPy scalar), never a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s must be a number, got %r" % (what, name, value))
    return float(value)


def path(value, what):
    """`value` (str, bytes or os.PathLike) as the bytes of a file name for the library."""
    try:
        encoded = os.fsencode(value)
    except TypeError:
        raise error(INVALID_ARGUMENT, "bptrain: %s: expected a path (str, bytes or os.PathLike), got %s" %
                    (what, type(value).__name__)) from None
    if not encoded or b"\0" in encoded:
        raise error(INVALID_ARGUMENT, "bptrain: %s: the path %r is empty or holds a NUL byte" % (what, value))
    return encoded


def name(value, what):
    """A node name: a non-empty str."""
    if not isinstance(value, str) or not value or "\0" in value:  # C would cut "x\0y" to "x"
        raise error(INVALID_ARGUMENT, "bptrain: %s: a name must be a non-empty str without NUL, got %r" %
                    (what, value))
    return value.encode()


def exact_array(numpy, data, dtype, what):
    """`data` as a C-contiguous array of integer `dtype` when every value survives the cast: NumPy's unsafe cast
    would make 0.5 a 0, 2**32 + 1 a 1 and NaN -2**31 without a word (an integral float such as 1.0 is fine)."""
    dtype = numpy.dtype(dtype)
    if getattr(data, "dtype", None) == dtype:
        return numpy.ascontiguousarray(data)
    original = numpy.asarray(data)
    if original.dtype.kind not in "biuf":
        return numpy.ascontiguousarray(original, dtype=dtype)  # strings, objects: NumPy's own error
    with numpy.errstate(invalid="ignore"):
        array = numpy.ascontiguousarray(original, dtype=dtype)
    if not numpy.array_equal(array, original):
        bad = numpy.flatnonzero(array.ravel() != original.ravel())[0]
        raise error(INVALID_ARGUMENT, "bptrain: %s: value %r (index %d) does not fit %s" %
                    (what, original.ravel()[bad].item(), bad, dtype.name))
    return array


def real_array(numpy, data, dtype, what):
    """`data` as a C-contiguous float array of `dtype`, refusing None (NumPy reads it as one NaN), complex
    values (the imaginary part would be dropped), text (NumPy would parse "1.5") and other non-numbers; an
    array too large to copy is OutOfMemoryError, not NumPy's own."""
    if data is None:
        raise error(INVALID_ARGUMENT, "bptrain: %s: got None, expected an array" % what)
    try:
        original = numpy.asarray(data)
        if original.dtype.kind not in "biufO":
            raise error(INVALID_ARGUMENT, "bptrain: %s: %s values are not real numbers" % (what, original.dtype))
        return numpy.ascontiguousarray(original, dtype=dtype)
    except MemoryError:
        raise error(OUT_OF_MEMORY, "bptrain: %s: no memory for a %s copy of the data (shape %s)" %
                    (what, numpy.dtype(dtype).name, getattr(data, "shape", "?"))) from None
    except (TypeError, ValueError, OverflowError) as failure:
        if isinstance(failure, Error):
            raise
        raise error(INVALID_ARGUMENT, "bptrain: %s: cannot read the data as %s values: %s" %
                    (what, numpy.dtype(dtype).name, failure)) from None


def instance(value, kind, what, name):
    """`value` when it is a `kind` (a bptrain class), else InvalidArgumentError."""
    if not isinstance(value, kind):
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s must be a bptrain.%s, got %s" %
                    (what, name, kind.__name__, type(value).__name__))
    return value
