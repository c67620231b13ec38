"""Misuse of the Python binding: every wrong argument, order, lifetime or concurrent use raises a
bptrain.Error naming what is wrong (never a bare Python error from ctypes or NumPy, a silently changed
value, a wrong result or a crash), and the model stays usable afterwards.

Run by CTest (check_python_misuse) with BPTRAIN_LIBRARY and PYTHONPATH set; skips (77) without NumPy.
"""
import sys
import unittest

from support import expect

import numpy as np

import bptrain


def context():
    return bptrain.Context(seed=3, threads=1)


def classifier(ctx=None, max_batch=8):
    """4 features -> 8 -> 3 classes, compiled for max_batch, with an SGD optimiser."""
    model = bptrain.Model(ctx or context())
    x, y = model.input("x", (4,)), model.input("y", (), "i32")
    model.compile(model.softmax_cross_entropy(model.linear(model.relu(model.linear(x, 8)), 3), y), max_batch)
    return model, bptrain.Optimizer(model, "sgd", learning_rate=0.1)


FEATURES = np.random.RandomState(0).randn(8, 4).astype(np.float32)
LABELS = (np.arange(8) % 3).astype(np.int32)


class Integers(unittest.TestCase):
    """ctypes wraps an int beyond its C type and int() truncates a fraction: both must be refused."""

    def test_beyond_int64_is_refused_not_wrapped(self):
        model = bptrain.Model(context())
        x = model.input("x", (1, 4, 4))
        for call in (lambda: model.max_pool2d(x, 2 ** 64 + 2), lambda: model.linear(model.flatten(x), 2 ** 64 + 2),
                     lambda: model.input("big", (2 ** 64 + 3,)), lambda: model.compile(None, 2 ** 64 + 2),
                     lambda: bptrain.Schedule("step", step_size=2 ** 64 + 1),
                     lambda: bptrain.Context(threads=2 ** 32 + 1), lambda: bptrain.Context(seed=2 ** 64),
                     lambda: bptrain.Context(seed=-1)):
            error = expect(bptrain.InvalidArgumentError, call)
            self.assertIn("must be in", error.message)

    def test_fractions_and_text_are_not_integers(self):
        model = bptrain.Model(context())
        x = model.input("x", (4,))
        expect(bptrain.InvalidArgumentError, model.linear, x, 2.5)
        expect(bptrain.InvalidArgumentError, model.input, "y", (2.7,))
        expect(bptrain.InvalidArgumentError, model.input, "z", "784")  # not the shape (7, 8, 4)
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("linear", {"units": "a"})])
        expect(bptrain.InvalidArgumentError, model.sequential, x, [()])
        expect(bptrain.InvalidArgumentError, model.leaky_relu, x, "0.1")
        self.assertEqual(model.linear(x, 3.0, name="whole").name, "whole")  # an integral float is fine
        expect(bptrain.InvalidArgumentError, model.compile, None, 2.5)

    def test_batch_sizes_and_epochs(self):
        model, optimizer = classifier()
        for batch_size in (0, -1, 2.5, 9, "4"):
            expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, LABELS, batch_size=batch_size)
            expect(bptrain.InvalidArgumentError, model.evaluate, FEATURES, LABELS, batch_size=batch_size)
            expect(bptrain.InvalidArgumentError, model.predict, FEATURES, batch_size=batch_size)
        for epochs in (0, -2, 1.5):
            expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, LABELS, epochs=epochs)
        self.assertEqual(optimizer.steps, 0)
        self.assertEqual(model.predict(FEATURES, batch_size=3).shape, (8, 3))

    def test_numbers(self):
        model, optimizer = classifier()
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, learning_rate="x")
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, learning_rate=-0.1)  # the library's check
        with self.assertRaises(bptrain.InvalidArgumentError):
            optimizer.learning_rate = None
        expect(bptrain.InvalidArgumentError, model.clip_gradient_norm, "1")


if __name__ == "__main__":
    sys.argv[1:1] = ["-v"] if "-v" not in sys.argv else []
    unittest.main()
