"""Checks of Python arguments before they reach ctypes, which would otherwise truncate 2.5 units to 2, accept
"3" as 3, write a checkpoint to a file named "None" or let a bare TypeError or AttributeError escape: each
failure is an InvalidArgumentError naming the call and the argument, like the library's own messages.
"""
import numbers
import operator
import os
import struct

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


def real(value, what, name, single=True):
    """`value` as a float: any real number (int, float, NumPy scalar), never a string. `single` (the default:
    the library's numbers are C floats) refuses a finite value that f32 cannot hold, rather than let ctypes make
    a learning rate of 1e-50 a 0 or 1e39 an infinity; inf and NaN go to the library as they are."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s must be a number, got %r" % (what, name, value))
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float (10**400)
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s is too large for a float" % (what, name)) from None
    if single and number == number and abs(number) != float("inf"):
        try:
            rounded = struct.unpack("f", struct.pack("f", number))[0]
        except OverflowError:
            rounded = None
        if rounded is None or abs(rounded) == float("inf") or (rounded == 0.0 and number != 0.0):
            raise error(INVALID_ARGUMENT, "bptrain: %s: %s is %r, which a 32-bit float cannot hold (it would become "
                                          "%s)" % (what, name, value, "0" if rounded == 0.0 else "infinite"))
    return number


def choice(value, table, what, name):
    """`table[value]` for a str key of `table`, else InvalidArgumentError listing the choices (an unhashable
    value would otherwise raise a bare TypeError)."""
    if not isinstance(value, str) or value not in table:
        raise error(INVALID_ARGUMENT, "bptrain: %s: %s must be one of %s, not %r" % (what, name, sorted(table), value))
    return table[value]


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


def _position(numpy, shape, flat):
    return "[%s]" % ", ".join(str(int(i)) for i in numpy.unravel_index(flat, shape)) if shape else "[]"


def _real_values(numpy, data, what):
    """`data` as an ndarray of real numbers: None, text, bytes and complex values are refused naming the first
    one's position (NumPy would read None as NaN, parse "1e3" and b"1", drop an imaginary part); an object array
    of real numbers comes back as float64."""
    if data is None:
        raise error(INVALID_ARGUMENT, "bptrain: %s: got None, expected an array" % what)
    original = numpy.asarray(data)
    if original.dtype.kind in "biuf":
        return original
    # Text or complex from a list: read the list again as objects to find the element that made it so.
    values = original if original.dtype.kind == "O" or isinstance(data, numpy.ndarray) else \
        numpy.asarray(data, dtype=object)
    if values.dtype.kind == "O":
        for index, value in enumerate(values.flat):
            if not (isinstance(value, (numbers.Real, numpy.bool_)) and not isinstance(value, numpy.ndarray)):
                break
        else:
            return values.astype(numpy.float64)
    else:
        if not values.size:
            raise error(INVALID_ARGUMENT, "bptrain: %s: %s values are not real numbers" % (what, values.dtype))
        index, value = 0, values.flat[0]
    raise error(INVALID_ARGUMENT, "bptrain: %s: the value %r at %s is not a real number (None, text, bytes and "
                                  "complex values are refused, never converted)" %
                (what, value, _position(numpy, values.shape, index)))


def exact_array(numpy, data, dtype, what):
    """`data` as a C-contiguous array of integer `dtype` when every value survives the cast: NumPy's unsafe cast
    would make 0.5 a 0, 2**32 + 1 a 1 and NaN -2**31 without a word (an integral float such as 1.0 is fine)."""
    dtype = numpy.dtype(dtype)
    if getattr(data, "dtype", None) == dtype:
        return numpy.ascontiguousarray(data)
    try:
        original = _real_values(numpy, data, what)
        with numpy.errstate(invalid="ignore"):
            array = numpy.ascontiguousarray(original, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as failure:  # (MemoryError: the caller names the input)
        if isinstance(failure, Error):
            raise
        raise error(INVALID_ARGUMENT, "bptrain: %s: cannot read the data as %s values: %s" %
                    (what, dtype.name, failure)) from None
    if not numpy.array_equal(array, original):
        bad = numpy.flatnonzero(array.ravel() != original.ravel())[0]
        value = original.ravel()[bad].item()
        raise error(INVALID_ARGUMENT, "bptrain: %s: value %r (index %d) %s" % (what, value, bad,
                                                                             _not_integral(numpy, value, dtype)))
    return array


def _not_integral(numpy, value, dtype):
    """Why `value` is not a `dtype` integer: "does not fit int32" read as an overflow for 1.5 and NaN too."""
    if value != value:
        return "is not a number"
    if value in (float("inf"), float("-inf")):
        return "is infinite, not an integer"
    if value != int(value):
        return "is not an integer"
    limits = numpy.iinfo(dtype)
    return "is outside %s's range [%d, %d]" % (dtype.name, limits.min, limits.max)


def real_array(numpy, data, dtype, what):
    """`data` as a C-contiguous float array of `dtype`, refusing None (NumPy reads it as one NaN), complex
    values (the imaginary part would be dropped), text (NumPy would parse "1.5") and other non-numbers, inside
    lists and object arrays too; an array too large to copy is OutOfMemoryError, not NumPy's own."""
    try:
        return numpy.ascontiguousarray(_real_values(numpy, data, what), dtype=dtype)
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


def model_call(what):
    """How the user wrote a call that checks a Model: its own methods as "Model.fit", the classes that take a
    model (Optimizer, SpeculativeTrainer) by their own name ("Model.Optimizer" read as a method that is not)."""
    return what if what[:1].isupper() else "Model." + what
