"""Host tensors through which batches enter and leave a model's graph, with NumPy views of their buffers."""
import ctypes

from . import _native
from ._handles import _Native
from ._native import lib
from .context import dtype_code, numpy_dtype, require_numpy


class _Tensor:
    """A host tensor that moves batches in and out of a graph; owned by its model."""

    def __init__(self, model, dtype, dims):
        context = model.context
        self.context = context
        self.dtype = dtype
        handle = _native.handle()
        dims_array = (ctypes.c_int64 * len(dims))(*dims)
        context.check(lib.bpt_tensor_create(context.handle, dtype_code(dtype), len(dims), dims_array,
                                            ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_tensor_destroy, model._native, "tensor")
        self.capacity = dims[0]
        self.sample_shape = tuple(dims[1:])

    @property
    def handle(self):
        return self._native.get()

    def _shaped(self, dims):
        """A NumPy view of the buffer's first values as an array of shape `dims`."""
        numpy = require_numpy()
        count = 1
        for d in dims:
            count *= d
        element = ctypes.c_float if self.dtype == "f32" else ctypes.c_int32
        buffer = (element * count).from_address(lib.bpt_tensor_data(self.handle))
        return numpy.frombuffer(buffer, dtype=numpy_dtype(self.dtype)).reshape(dims)

    def view(self):
        """A NumPy view of the whole buffer (capacity rows); valid while the tensor lives, never returned."""
        return self._shaped((self.capacity,) + self.sample_shape)

    def current(self):
        """A NumPy view of the values at the tensor's current dims (a read sets the batch, and a sequence's
        length after a run at a shorter one)."""
        return self._shaped(tuple(lib.bpt_tensor_dim(self.handle, i) for i in range(lib.bpt_tensor_rank(self.handle))))

    def rows(self):
        """How many rows the tensor holds now (dimension 0)."""
        return lib.bpt_tensor_dim(self.handle, 0)

    def set_batch(self, batch):
        self.context.check(lib.bpt_tensor_set_batch(self.handle, batch))
