"""Checking the Python values handed to the C library before ctypes sees them.

ctypes converts silently where it should refuse: an int beyond the C type wraps (2**64 + 2 reaches C as 2),
a float given for an integer is truncated by int(), a bytes path becomes the text "b'...'", None the text
"None", and a string with a NUL byte is cut at it. Each helper here turns those into an
InvalidArgumentError naming the argument, so a misuse never reaches the library as a different, valid value.
"""
import numbers
import operator
import os

from ._errors import INVALID_ARGUMENT, error

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
UINT64 = (0, (1 << 64) - 1)


def integer(value, what, minimum=INT64[0], maximum=INT64[1]):
    """`value` as a Python int in [minimum, maximum]: ints, NumPy integers and integral floats (3.0) pass;
    fractions, NaN, strings, None and out-of-range values raise InvalidArgumentError naming `what`."""
    try:
        number = operator.index(value)
    except TypeError:
        if not isinstance(value, numbers.Real) or not float(value).is_integer():
            raise error(INVALID_ARGUMENT, "bptrain: %s must be an integer, not %r" % (what, value)) from None
        number = int(value)
    if isinstance(number, bool):
        number = int(number)
    if not minimum <= number <= maximum:
        raise error(INVALID_ARGUMENT, "bptrain: %s is %d, must be in [%d, %d]" % (what, number, minimum, maximum))
    return number


def number(value, what):
    """`value` as a float (for a C float or double argument), or InvalidArgumentError naming `what`."""
    if isinstance(value, (str, bytes)) or value is None:
        raise error(INVALID_ARGUMENT, "bptrain: %s must be a number, not %r" % (what, value))
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise error(INVALID_ARGUMENT, "bptrain: %s must be a number, not %r" % (what, value)) from None


def path(value, what):
    """A file system path (str, bytes or os.PathLike) as the bytes the C library opens."""
    try:
        encoded = os.fsencode(value)
    except TypeError:
        raise error(INVALID_ARGUMENT, "bptrain: %s: a path must be a str, bytes or os.PathLike, not %r" %
                    (what, value)) from None
    if not encoded or b"\0" in encoded:
        raise error(INVALID_ARGUMENT, "bptrain: %s: the path %r is empty or holds a NUL byte" % (what, value))
    return encoded


def text(value, what):
    """A name for the C library (a str; ints and the like are written out) as UTF-8 without NUL bytes."""
    if value is None or isinstance(value, bytes):
        raise error(INVALID_ARGUMENT, "bptrain: %s must be a str, not %r" % (what, value))
    encoded = str(value).encode()
    if b"\0" in encoded:
        raise error(INVALID_ARGUMENT, "bptrain: %s %r holds a NUL byte" % (what, value))
    return encoded
