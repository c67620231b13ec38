"""Speculative backpropagation (include/bptrain/speculative.h): a trainer that runs a linear/activation chain
(or a convolutional one: conv2d, batch norm, pooling, flatten) one sample at a time and reuses the backward pass of the previous sample with the same label when the two
softmax outputs are close."""
import ctypes

from . import _arguments, _native
from ._errors import INVALID_ARGUMENT, error
from ._handles import Closing, _Native, serialised
from ._native import lib

_DISTANCES = {"mean_absolute": 0, "l2": 1}


@serialised
class SpeculativeTrainer(Closing):
    """SpeculativeTrainer(model, optimizer, threshold=0.05, ...) over the model's first (images) and last
    (labels) inputs; train_batch(images, labels) steps the optimiser once per mini-batch."""

    def __init__(self, model, optimizer, threshold=0.0, distance="mean_absolute", final_threshold=None,
                 schedule_steps=0, threads=2, gradient_clip=0.0):
        from .model import Model
        what = "SpeculativeTrainer"
        _arguments.instance(model, Model, what, "model")._require_compiled(what)
        model._check_optimizer(optimizer, what)
        _arguments.choice(distance, _DISTANCES, what, "distance")
        options = lib.bpt_speculative_options_default()
        options.threshold = _arguments.real(threshold, what, "threshold")
        options.distance = _DISTANCES[distance]
        options.final_threshold = _arguments.real(threshold if final_threshold is None else final_threshold, what,
                                                  "final_threshold")
        options.schedule_steps = _arguments.integer(schedule_steps, what, "schedule_steps")
        options.threads = _arguments.integer(threads, what, "threads", maximum=_arguments.INT_MAX)
        options.gradient_clip = _arguments.real(gradient_clip, what, "gradient_clip")
        self.model = model
        self._lock = model._lock
        self.context = model.context
        handle = _native.handle()
        images, labels = model.inputs[0], model.inputs[-1]
        self.context.check(lib.bpt_speculative_create(model.handle, images.handle, labels.handle, optimizer.handle,
                                                      ctypes.byref(options), ctypes.byref(handle)))
        # A user of the model's holder, closed first (a graph destroyed first would also detach it).
        self._native = _Native(handle.value, lib.bpt_speculative_destroy, model._native, "speculative trainer")
        self._keep = optimizer

    @property
    def handle(self):
        return self._native.get()

    def train_batch(self, images, labels):
        """Trains on one mini-batch (arrays); returns the mean loss."""
        sources, count = self.model._sources((images, labels), "SpeculativeTrainer.train_batch")
        image_tensor = self.model._tensors[self.model.inputs[0]._address]
        label_tensor = self.model._tensors[self.model.inputs[-1]._address]
        if count > image_tensor.capacity:
            raise error(INVALID_ARGUMENT, "bptrain: SpeculativeTrainer.train_batch: %d samples exceed the compiled "
                                          "max_batch %d" % (count, image_tensor.capacity))
        image_tensor.view()[:count] = sources[0]
        label_tensor.view()[:count] = sources[-1]
        image_tensor.set_batch(count)
        label_tensor.set_batch(count)
        loss = ctypes.c_float()
        self.context.check(lib.bpt_speculative_train_batch(self.handle, image_tensor.handle, label_tensor.handle,
                                                           ctypes.byref(loss)))
        return loss.value

    def counters(self):
        """samples, hits, fallbacks, cold_fallbacks, mean_distance and thread times since the last reset."""
        counters = _native.SpeculativeCounters(size=ctypes.sizeof(_native.SpeculativeCounters))
        self.context.check(lib.bpt_speculative_get_counters(self.handle, ctypes.byref(counters)))
        return {name: getattr(counters, name) for name, _ in counters._fields_ if name != "size"}

    def reset_counters(self):
        self.context.check(lib.bpt_speculative_reset_counters(self.handle))

    def clear_cache(self):
        self.context.check(lib.bpt_speculative_clear_cache(self.handle))

    @property
    def threshold(self):
        """The threshold the next mini-batch will use."""
        return lib.bpt_speculative_current_threshold(self.handle)

    def close(self):
        self._native.close()
