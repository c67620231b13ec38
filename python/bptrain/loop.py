"""The training loop of Model: fit, train_step, evaluate and predict over arrays or a Dataset. Batches
are fed by Model._feed (one copy into the input buffer); evaluation and prediction run in evaluation mode.
"""
import sys
import time

from . import _arguments
from ._errors import INVALID_ARGUMENT, OUT_OF_MEMORY, STATE, error
from ._native import lib
from ._tensor import _Tensor
from .context import require_numpy
from .metrics import MetricsWriter


class _Progress:
    """verbose's bar on an interactive stderr, like the C examples': "epoch 1/3 [=====>    ] 120/469  loss 0.43",
    redrawn at most every 0.1 s; nothing when stderr is a file or a pipe (the epoch lines say enough there)."""

    def __init__(self, epochs, batches):
        self.epochs, self.batches = epochs, batches
        self.interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.last = 0.0

    def warn_whole_batch(self, samples):
        """The C examples' warning (examples/common/example_util.c), on any stderr: one batch holding the whole
        training set is one optimiser step per epoch, far less training than the epoch count suggests."""
        print("warning: the batch holds the whole training set (%d samples): one optimiser step per epoch; a "
              "smaller batch_size trains more per epoch" % samples, file=sys.stderr, flush=True)

    def update(self, epoch, batch, loss, final=False):
        now = time.monotonic()
        if not self.interactive or (not final and now - self.last < 0.1):
            return
        self.last = now
        filled = 30 * batch // max(self.batches, 1)
        bar = "=" * filled + (">" if filled < 30 else "") + " " * max(29 - filled, 0)
        sys.stderr.write("\repoch %d/%d [%s] %d/%d  loss %.4f%s" % (epoch, self.epochs, bar, batch, self.batches,
                                                                   loss, "\n" if final else ""))
        sys.stderr.flush()


class TrainingLoop:
    """Mixed into Model: the methods that run whole passes over data."""

    def train_step(self, optimizer, *arrays, clip_norm=None):
        """One forward, backward and optimiser step on one batch (one array per input); returns the loss."""
        self._check_optimizer(optimizer, "train_step")
        sources, count = self._sources(arrays, "train_step")
        self._feed(sources, slice(0, count))
        return self._step(optimizer, clip_norm)

    def _step(self, optimizer, clip_norm, logits=None):
        self.context.check(lib.bpt_graph_forward(self.handle))
        if logits is not None:  # read before backward, which may reuse the activations' memory
            self.context.check(lib.bpt_graph_read(self.handle, self.logits.handle, logits.handle))
        self.context.check(lib.bpt_graph_backward(self.handle))
        if clip_norm:
            self.clip_gradient_norm(clip_norm)
        self.context.check(lib.bpt_optimizer_step(optimizer.handle))
        return self.loss_value()

    def fit(self, optimizer, *data, epochs=1, batch_size=None, shuffle=True, seed=None, metrics=None,
            evaluation=None, verbose=False, clip_norm=None, callback=None, monitor=None, patience=0,
            min_delta=0.0, restore_best=False):
        """Trains (in training mode) on arrays (one per input, in declaration order) or on a Dataset, like the
        C library's bpt_train.

        `evaluation` is the same kind of data, evaluated after each epoch. `metrics` names a CSV file that
        receives one row per step and per epoch (the format of the C examples' --metrics); `callback(record)`
        is called after each epoch and stops training there when it returns a true value. `verbose` prints a line per
        epoch and, on an interactive stderr, a progress bar per batch; it warns on stderr when one batch holds
        the whole training set (one optimiser step per epoch). Returns one dict per epoch: epoch,
        train_loss, train_accuracy (classifiers: the running accuracy of the epoch's training batches), and
        test_loss / test_accuracy when `evaluation` is given; with a `monitor`, also improved and best_epoch.

        Early stopping, as bpt_train's: `monitor` is "test_loss" or "test_accuracy" (need `evaluation`) or
        "train_loss"; training stops after `patience` epochs in a row without an improvement larger than
        `min_delta` (patience 0: never stops, still tracks the best epoch), and with `restore_best` the
        parameters (buffers included; not the optimiser's state) of the best epoch are written back at the end.
        An optimiser's schedule counts optimiser steps: one per batch, continuing across epochs and fit calls.
        """
        self._require_compiled("fit")
        self._check_optimizer(optimizer, "fit")
        if isinstance(evaluation, list):
            evaluation = tuple(evaluation)
        epochs = _arguments.integer(epochs, "Model.fit", "epochs", minimum=0)
        batch_size = self._batch_size(batch_size, "fit")
        seed = self.context.seed if seed is None else _arguments.integer(seed, "Model.fit", "seed", minimum=0,
                                                                          maximum=_arguments.UINT64_MAX)
        monitors = {"test_loss": -1, "test_accuracy": 1, "train_loss": -1}  # the sign of "better"
        if monitor is not None and monitor not in monitors:
            raise error(INVALID_ARGUMENT, "bptrain: Model.fit: monitor must be one of %s or None, not %r"
                        % (", ".join(sorted(monitors)), monitor))
        if monitor in ("test_loss", "test_accuracy") and evaluation is None:
            raise error(INVALID_ARGUMENT, "bptrain: Model.fit: monitor=%r needs evaluation= data" % monitor)
        if monitor == "test_accuracy" and self.logits is None:
            raise error(INVALID_ARGUMENT, "bptrain: Model.fit: monitor='test_accuracy' needs a classifier "
                                          "(softmax_cross_entropy)")
        patience = _arguments.integer(patience, "Model.fit", "patience", minimum=0)
        min_delta = _arguments.real(min_delta, "Model.fit", "min_delta")
        if not min_delta >= 0:
            raise error(INVALID_ARGUMENT, "bptrain: Model.fit: min_delta must be >= 0, not %r" % min_delta)
        if restore_best and monitor is None:
            raise error(INVALID_ARGUMENT, "bptrain: Model.fit: restore_best=True needs a monitor")
        numpy = require_numpy()
        logits = None
        label_input = self._label_input()  # by its role in the loss, wherever it was declared
        # Training accuracy for a (batch, classes) classifier; a sequence's per-token logits have no such row.
        if self.logits is not None and label_input is not None and len(self.logits.shape) == 2:
            logits = self._tensors.get(self.logits._address)
            if logits is None:
                logits = self._tensors[self.logits._address] = _Tensor(self, "f32", self.logits.shape)
        labels = self._tensors[label_input._address] if logits is not None else None
        if logits is not None:
            self._check_labels(data, logits.sample_shape[-1], "fit")
        best, best_epoch, best_parameters, waited = None, 0, None, 0
        writer = MetricsWriter(metrics) if metrics else None
        history = []
        step = 0
        start = time.monotonic()
        progress = _Progress(epochs, self._batch_total(data, batch_size)) if verbose else None
        try:
            for epoch in range(1, epochs + 1):
                self.train()
                total, samples, batch, correct = 0.0, 0, 0, 0
                for count in self._batches(data, batch_size, shuffle, (seed + epoch) % (1 << 64), "fit"):
                    loss = self._step(optimizer, clip_norm, logits)
                    if logits is not None:
                        predicted = logits.view()[:count].reshape(count, -1).argmax(axis=1)
                        correct += int(numpy.count_nonzero(predicted == labels.view()[:count]))
                    step += 1
                    batch += 1
                    total += loss * count
                    samples += count
                    if writer:
                        writer.step(epoch, step, loss, optimizer.learning_rate, time.monotonic() - start)
                    if progress:
                        if epoch == 1 and batch == 1 and progress.batches == 1 and count > 1:
                            progress.warn_whole_batch(count)
                        progress.update(epoch, batch, total / samples, final=batch == progress.batches)
                record = {"epoch": epoch, "train_loss": total / max(samples, 1)}
                if logits is not None:
                    record["train_accuracy"] = correct / max(samples, 1)
                if evaluation is not None:
                    result = self.evaluate(*(evaluation if isinstance(evaluation, tuple) else (evaluation,)),
                                           batch_size=batch_size)
                    record["test_loss"] = result["loss"]
                    if "accuracy" in result:
                        record["test_accuracy"] = result["accuracy"]
                stop = False
                if monitor is not None:
                    value = record[monitor]
                    record["improved"] = best is None or monitors[monitor] * (value - best) > min_delta
                    if record["improved"]:
                        best, best_epoch, waited = value, epoch, 0
                        if restore_best:
                            best_parameters = self.parameters()
                    else:
                        waited += 1
                        stop = patience > 0 and waited >= patience
                    record["best_epoch"] = best_epoch
                if writer:
                    writer.epoch(epoch, step, record, optimizer.learning_rate, time.monotonic() - start)
                if verbose:
                    print("epoch %d: %s" % (epoch, ", ".join("%s %.4f" % item for item in record.items()
                                                               if item[0] not in ("epoch", "improved", "best_epoch"))),
                          flush=True)
                history.append(record)
                if callback is not None and callback(record):
                    stop = True
                if stop:
                    if verbose:
                        print("stopped after epoch %d%s" % (epoch, " (no %s improvement for %d epochs)" %
                                                            (monitor, patience) if monitor and waited else ""),
                              flush=True)
                    break
            if best_parameters is not None and best_epoch != len(history):
                self.set_parameters(best_parameters)
                if verbose:
                    print("restored the parameters of epoch %d (best %s %.4f)" % (best_epoch, monitor, best),
                          flush=True)
        finally:
            if writer:
                writer.close()
        return history

    def _check_labels(self, data, classes, what):
        """Labels given as arrays checked once against the class count, before any step: the kernel would
        find a bad one only mid-training, with an index relative to its batch. A Dataset checks its own
        (Dataset.check_classes)."""
        from .data import Dataset
        if len(data) != len(self.inputs) or (len(data) == 1 and isinstance(data[0], Dataset)):
            return  # _sources reports the mismatch
        label_input = self._label_input()
        if label_input is None:
            return
        numpy = require_numpy()
        position = next(i for i, node in enumerate(self.inputs) if node is label_input)
        values = self._array(data[position], label_input).reshape(-1)
        bad = numpy.flatnonzero((values < 0) | (values >= classes))
        if bad.size:
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: label %d of sample %d is not a class of this model "
                                          "(0..%d); %d labels are out of range" % (what, int(values[bad[0]]),
                                                                                  int(bad[0]), classes - 1, bad.size))

    def _batch_total(self, data, batch_size):
        """The batches of one pass over data (arrays or a Dataset), for the progress bar."""
        from .data import Dataset
        if len(data) == 1 and isinstance(data[0], Dataset):
            return min(data[0].batch_count(batch_size), data[0].limit_batches(batch_size))
        try:
            count = len(data[0])
        except (IndexError, TypeError):  # no arrays, or a scalar: _batches reports it
            count = 0
        return -(-count // batch_size)

    def _check_optimizer(self, optimizer, what):
        """An optimiser of another model would step that model's parameters with its stale gradients."""
        from .training import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise error(INVALID_ARGUMENT, "bptrain: %s: the first argument must be a bptrain.Optimizer" %
                        _arguments.model_call(what))
        if optimizer.model is not self:
            raise error(INVALID_ARGUMENT, "bptrain: %s: the optimizer was made for another model" %
                        _arguments.model_call(what))

    def _batch_size(self, batch_size, what):
        """batch_size, or the compiled max_batch for None; an int in 1..max_batch."""
        if batch_size is None:
            return self.max_batch
        batch_size = _arguments.integer(batch_size, "Model.%s" % what, "batch_size")
        if batch_size < 1 or batch_size > self.max_batch:
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: batch_size %d is not in 1..%d (the compiled max_batch)"
                        % (what, batch_size, self.max_batch))
        return batch_size

    def _batches(self, data, batch_size, shuffle, seed, what):
        """Feeds each batch into the inputs and yields its sample count."""
        from .data import Dataset
        numpy = require_numpy()
        if batch_size < 1 or batch_size > self.max_batch:
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: batch_size %d is not in 1..%d (the compiled max_batch)"
                        % (what, batch_size, self.max_batch))
        if len(data) == 1 and isinstance(data[0], Dataset):
            dataset = data[0]
            label_input = self._label_input()
            inputs = [node for node in self.inputs if node is not label_input] + [label_input]
            if len(self.inputs) != 2 or label_input is None or inputs[0].dtype != "f32":
                raise error(INVALID_ARGUMENT, "bptrain: Model.%s: a Dataset feeds a model with two inputs (f32 "
                                              "images, i32 labels); this one has %d" % (what, len(self.inputs)))
            if shuffle:
                self.context.check(lib.bpt_dataset_shuffle(dataset.handle, seed))
            images, labels = (self._tensors[node._address] for node in inputs)
            batches = min(lib.bpt_dataset_batch_count(dataset.handle, batch_size), dataset.limit_batches(batch_size))
            for index in range(batches):
                self.context.check(lib.bpt_dataset_batch(dataset.handle, index, batch_size, images.handle,
                                                         labels.handle))
                for node, tensor in zip(inputs, (images, labels)):
                    self.context.check(lib.bpt_graph_set_input(self.handle, node.handle, tensor.handle))
                yield images.rows()
            return
        sources, count = self._sources(data, what)
        order = numpy.random.RandomState(seed % (1 << 32)).permutation(count) if shuffle else None
        for first in range(0, count, batch_size):
            last = min(first + batch_size, count)
            self._feed(sources, order[first:last] if shuffle else slice(first, last))
            yield last - first

    def _label_input(self):
        """The declared input that holds the labels: the softmax_cross_entropy's labels wherever they were
        declared (None when they are not an input), or without that loss the one i32 input."""
        if self.labels is not None:
            return next((node for node in self.inputs if node._address == self.labels._address), None)
        found = [node for node in self.inputs if node.dtype == "i32"]
        return found[0] if len(found) == 1 else None

    def _default_output(self, output, what):
        from .model import Node
        if output is not None:
            return _arguments.instance(output, Node, "Model.%s" % what, "output")
        output = self.logits or self.prediction
        if output is None:
            raise error(INVALID_ARGUMENT, "bptrain: Model.%s: the model has no softmax_cross_entropy or mse_loss "
                                          "to take the output from; pass output=<node>" % what)
        return output

    def _with_mode(self, training):
        """Context manager: the given mode for the duration, then the previous one."""
        model = self

        class Mode:
            def __enter__(self):
                self.previous = model.training
                model.context.check(lib.bpt_graph_set_training(model.handle, int(training)))

            def __exit__(self, *exception):
                model.context.check(lib.bpt_graph_set_training(model.handle, int(self.previous)))
        return Mode()

    def predict(self, x, output=None, batch_size=None):
        """Runs forward (in evaluation mode) on samples `x` for the first input (other inputs are fed zeros)
        and returns the values of `output` (default: the logits or the MSE prediction) as an ndarray of shape
        (samples,) + the output's per-sample shape."""
        numpy = require_numpy()
        self._require_compiled("predict")
        output = self._default_output(output, "predict")
        batch_size = self._batch_size(batch_size, "predict")  # a step below 1 would return np.empty's garbage
        if not self.inputs:
            raise error(STATE, "bptrain: Model.predict: the model has no inputs to feed x into")
        if output.model is not self:
            raise error(INVALID_ARGUMENT, "bptrain: Model.predict: output %r belongs to another model" % (output,))
        if output.op == "parameter":
            raise error(INVALID_ARGUMENT, "bptrain: Model.predict: output %r is a parameter, not a value per sample; "
                                          "read it with state_dict()" % output.name)
        source = self._array(x, self.inputs[0])
        count = len(source)
        sources = [source] + [None] * (len(self.inputs) - 1)
        tensor = self._tensors.get(output._address)
        if tensor is None:
            tensor = self._tensors[output._address] = _Tensor(self, "f32", output.shape)
        try:
            result = numpy.empty((count,) + tensor.sample_shape, dtype=numpy.float32)
        except MemoryError:
            raise error(OUT_OF_MEMORY, "bptrain: Model.predict: no memory for the scores of %d samples" % count) \
                from None
        with self._with_mode(False):
            for first in range(0, count, batch_size):
                last = min(first + batch_size, count)
                self._feed(sources, slice(first, last))
                self.context.check(lib.bpt_graph_forward(self.handle))
                self.context.check(lib.bpt_graph_read(self.handle, output.handle, tensor.handle))
                if tensor.rows() != last - first:  # computed from parameters alone: no batch dimension
                    raise error(INVALID_ARGUMENT, "bptrain: Model.predict: output %r has no batch dimension"
                                % output.name)
                result[first:last] = tensor.view()[:last - first]
        return result

    def evaluate(self, *data, batch_size=None):
        """Mean loss and (for classification) accuracy in evaluation mode over arrays or a Dataset."""
        numpy = require_numpy()
        self._require_compiled("evaluate")
        if self.loss is None:
            raise error(STATE, "bptrain: Model.evaluate: the model was compiled without a loss")
        batch_size = self._batch_size(batch_size, "evaluate")
        logits = None
        if self.logits is not None:
            logits = self._tensors.get(self.logits._address)
            if logits is None:
                logits = self._tensors[self.logits._address] = _Tensor(self, "f32", self.logits.shape)
        total, correct, samples = 0.0, 0, 0
        label_input = self._label_input()  # by its role in the loss: the last input was read as the labels
        labels = self._tensors[label_input._address] if label_input is not None else None
        if labels is None:
            logits = None
        with self._with_mode(False):
            for count in self._batches(data, batch_size, False, 0, "evaluate"):
                self.context.check(lib.bpt_graph_forward(self.handle))
                total += self.loss_value() * count
                samples += count
                if logits is not None:
                    self.context.check(lib.bpt_graph_read(self.handle, self.logits.handle, logits.handle))
                    predicted = logits.view()[:count].reshape(count, -1).argmax(axis=1)
                    correct += int(numpy.count_nonzero(predicted == labels.view()[:count].reshape(count)))
        result = {"loss": total / max(samples, 1), "samples": samples}
        if logits is not None:
            result["accuracy"] = correct / max(samples, 1)
        return result
