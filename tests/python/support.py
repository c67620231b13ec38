"""Shared by the Python tests: the binding on sys.path (when run by hand from the repository), a clear skip
when NumPy is missing, small IDX files and a tiny classifier."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.abspath(os.path.join(HERE, "..", ".."))
if os.path.join(REPOSITORY, "python") not in sys.path:  # after PYTHONPATH, which CTest sets
    sys.path.append(os.path.join(REPOSITORY, "python"))

try:
    import numpy  # noqa: F401
except ImportError:
    print("SKIP: %s has no NumPy (apt-get install python3-numpy, or pip install numpy)" % sys.executable)
    sys.exit(77)

import bptrain  # noqa: E402


def write_idx(directory, count=6, height=2, width=2, split="train", labels=None):
    """An IDX data set "<split>" of count height x width images, pixel i of sample n = (n * h * w + i) % 256,
    with labels n % 3 unless given."""
    labels = [n % 3 for n in range(count)] if labels is None else labels
    with open(os.path.join(directory, split + "-images-idx3-ubyte"), "wb") as file:
        file.write(struct.pack(">IIII", 0x803, count, height, width) +
                   bytes((n % 256) for n in range(count * height * width)))
    with open(os.path.join(directory, split + "-labels-idx1-ubyte"), "wb") as file:
        file.write(struct.pack(">II", 0x801, count) + bytes(labels))


def expect(error_class, function, *arguments, **keywords):
    """Calls function and returns the bptrain error it raised, which must be of error_class, carry the
    matching status and a message."""
    try:
        function(*arguments, **keywords)
    except bptrain.Error as error:
        assert isinstance(error, error_class), "expected %s, got %s: %s" % (error_class.__name__,
                                                                          type(error).__name__, error)
        assert bptrain.STATUS_NAMES[error.status] == error.status_name and error.message, error
        return error
    raise AssertionError("expected %s from %s" % (error_class.__name__, function))
