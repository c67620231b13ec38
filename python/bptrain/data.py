"""IDX data sets (MNIST format, plain or gzip): loading, normalisation, order, and their samples as arrays."""
import ctypes

from . import _arguments, _native
from ._errors import INVALID_ARGUMENT, error
from ._handles import Closing, _Native, serialised
from ._native import lib
from ._tensor import _Tensor
from .context import require_numpy


@serialised
class Dataset(Closing):
    """An IDX data set: Dataset(context, "/usr/share/datasets/fashion-mnist", "train") loads
    "<split>-images-idx3-ubyte" and its labels from a directory; Dataset(context, images=PATH, labels=PATH)
    loads two files (labels optional). `limit` keeps only the first samples of each pass (whole batches)."""

    def __init__(self, context, directory=None, split=None, mean=0.0, std=1.0, limit=None, images=None,
                 labels=None):
        from .context import Context
        self.context = _arguments.instance(context, Context, "Dataset", "context")
        self._lock = context._lock
        handle = _native.handle()
        if directory is not None:
            if split is None or images is not None:
                raise error(INVALID_ARGUMENT, "bptrain: Dataset: give a directory and a split, or images= (and "
                                              "labels=) paths")
            context.check(lib.bpt_dataset_load_idx_directory(context.handle, _arguments.path(directory, "Dataset"),
                                                              _arguments.name(split, "Dataset (split)"),
                                                              ctypes.byref(handle)))
        elif images is not None:
            # Paths only: arrays go straight to fit, evaluate and predict (a Dataset is a file reader).
            labels_path = None if labels is None else _arguments.path(labels, "Dataset (labels=)")
            context.check(lib.bpt_dataset_load_idx(context.handle, _arguments.path(images, "Dataset (images=)"),
                                                    labels_path, ctypes.byref(handle)))
        else:
            raise error(INVALID_ARGUMENT, "bptrain: Dataset: give a directory and a split, or images= paths")
        self._native = _Native(handle.value, lib.bpt_dataset_destroy, context._native, "data set")
        self.has_labels = labels is not None or directory is not None
        self.set_normalization(mean, std)
        # limit=0 or -5 trained on one batch per pass without a word (max(1, limit // batch_size)).
        self.limit = None if limit is None else _arguments.integer(limit, "Dataset", "limit", minimum=1)

    @property
    def handle(self):
        """The native data set; StateError once it or its context is closed."""
        return self._native.get()

    def __len__(self):
        return lib.bpt_dataset_size(self.handle)

    @property
    def sample_size(self):
        """Values per sample (784 for 28x28 images)."""
        return lib.bpt_dataset_sample_size(self.handle)

    @property
    def sample_shape(self):
        """The shape of one sample ((28, 28) for MNIST images)."""
        dims = (ctypes.c_int64 * 8)()
        rank = lib.bpt_dataset_sample_shape(self.handle, dims)
        return tuple(dims[:rank])

    @property
    def classes(self):
        """One more than the largest label (0 without labels); check_classes() validates it."""
        return lib.bpt_dataset_class_count(self.handle)

    def check_classes(self, test=None, requested=0):
        """The class count of a classifier over this training set and `test`, checked against both."""
        classes = ctypes.c_int()
        test = None if test is None else _arguments.instance(test, Dataset, "Dataset.check_classes", "test")
        requested = _arguments.integer(requested, "Dataset.check_classes", "requested", minimum=0,
                                       maximum=_arguments.INT_MAX)
        self.context.check(lib.bpt_dataset_check_classes(self.handle, test.handle if test is not None else None,
                                                         requested, ctypes.byref(classes)))
        return classes.value

    def set_normalization(self, mean, std):
        """Each value becomes (byte / 255 - mean) / std in batches and arrays."""
        what = "Dataset.set_normalization"
        self.context.check(lib.bpt_dataset_set_normalization(self.handle, _arguments.real(mean, what, "mean"),
                                                             _arguments.real(std, what, "std")))

    def shuffle(self, seed):
        self.context.check(lib.bpt_dataset_shuffle(self.handle, _arguments.integer(
            seed, "Dataset.shuffle", "seed", minimum=0, maximum=_arguments.UINT64_MAX)))

    def reset_order(self):
        self.context.check(lib.bpt_dataset_reset_order(self.handle))

    def batch_count(self, batch_size):
        return lib.bpt_dataset_batch_count(self.handle, _arguments.integer(batch_size, "Dataset.batch_count",
                                                                           "batch_size", minimum=1))

    def limit_batches(self, batch_size):
        if self.limit is None:
            return 1 << 62
        return max(1, self.limit // batch_size)

    def arrays(self, chunk=4096):
        """(images, labels): every sample in the current order, normalised, as float32 (samples,) +
        sample_shape, and the labels as int32 (samples,) (None without labels)."""
        numpy = require_numpy()
        count, shape = len(self), self.sample_shape
        images = numpy.empty((count,) + shape, dtype=numpy.float32)
        labels = numpy.empty(count, dtype=numpy.int32) if self.has_labels else None
        owner = _Owner(self)
        image_tensor = _Tensor(owner, "f32", (chunk,) + shape)
        label_tensor = _Tensor(owner, "i32", (chunk,)) if self.has_labels else None
        try:
            for index in range(lib.bpt_dataset_batch_count(self.handle, chunk)):
                self.context.check(lib.bpt_dataset_batch(self.handle, index, chunk, image_tensor.handle,
                                                         label_tensor.handle if label_tensor else None))
                rows = image_tensor.rows()
                images[index * chunk:index * chunk + rows] = image_tensor.view()[:rows]
                if labels is not None:
                    labels[index * chunk:index * chunk + rows] = label_tensor.view()[:rows]
        finally:
            image_tensor._native.close()
            if label_tensor:
                label_tensor._native.close()
        return images, labels

    def images(self):
        """Every sample in the current order, normalised, as a float32 array (samples,) + sample_shape."""
        return self.arrays()[0]

    def labels(self):
        """Every label in the current order as an int32 array (None without labels)."""
        return self.arrays()[1]

    def close(self):
        self._native.close()


class _Owner:
    """What _Tensor needs from its owner: the context and a native holder to hang the tensor on."""

    def __init__(self, dataset):
        self.context = dataset.context
        self._native = dataset._native
