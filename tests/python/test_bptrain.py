"""Trains a small classifier from Python through the ctypes binding and checks what it learned.

Run by CTest (check_python) with BPTRAIN_LIBRARY pointing at the built library and PYTHONPATH at python/;
skips (77) without NumPy. Nested Python lists and NumPy arrays of any numeric dtype feed the same model.
"""
import math
import os
import random
import sys
import tempfile

from support import expect

import numpy

import bptrain


def clusters(count, seed):
    """Three Gaussian clusters in 4-D, well separated: a linear model can reach ~100% accuracy."""
    generator = random.Random(seed)
    centres = [(2, 0, 0, 1), (-2, 1, 0, -1), (0, -2, 2, 0)]
    features, labels = [], []
    for n in range(count):
        label = n % 3
        features.append([c + generator.gauss(0, 0.5) for c in centres[label]])
        labels.append(label)
    return features, labels


def expect_error(status_name, function, *arguments):
    error = expect(bptrain.Error, function, *arguments)
    assert error.status_name == status_name, "expected %s, got %s: %s" % (status_name, error.status_name, error)
    return error


def main():
    print("libbptrain", bptrain.version(), "ABI", bptrain.abi_version(), "backends", bptrain.backends())
    train_x, train_y = clusters(600, 1)
    test_x, test_y = clusters(300, 2)
    with bptrain.Context(seed=7, threads=1) as context:
        model = bptrain.Model(context)
        x = model.input("x", (4,))
        labels = model.input("labels", (), dtype="i32")
        hidden = model.relu(model.linear(x, 16, name="fc1"))
        loss = model.softmax_cross_entropy(model.linear(hidden, 3, name="fc2"), labels)
        model.compile(loss, max_batch=32)
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.05, momentum=0.9)

        before = model.evaluate(test_x, test_y)
        with tempfile.TemporaryDirectory() as directory:
            metrics = os.path.join(directory, "metrics.csv")
            history = model.fit(optimizer, train_x, train_y, epochs=8, batch_size=32, metrics=metrics,
                                evaluation=(test_x, test_y), verbose=True)
            with open(metrics) as file:
                rows = file.read().splitlines()
            assert rows[0].startswith("kind,epoch,step,train_loss"), rows[0]
            assert sum(row.startswith("step,") for row in rows) == 8 * math.ceil(600 / 32), len(rows)
            assert sum(row.startswith("epoch,") for row in rows) == 8

            after = model.evaluate(test_x, test_y)
            print("before training:", before, "after:", after)
            assert after["accuracy"] >= 0.95, after
            assert after["loss"] < 0.5 * before["loss"], (before, after)
            assert history[-1]["train_loss"] < history[0]["train_loss"], history
            assert optimizer.steps == 8 * math.ceil(600 / 32)

            predictions = model.predict(test_x)
            assert isinstance(predictions, numpy.ndarray) and predictions.shape == (300, 3), predictions
            assert numpy.mean(predictions.argmax(axis=1) == test_y) == after["accuracy"]

            # save / load round trip (a checkpoint): a fresh model loaded from the file evaluates identically.
            path = os.path.join(directory, "model.ckpt")
            model.save(path)
            clone = bptrain.Model(context)
            cx = clone.input("x", (4,))
            clabels = clone.input("labels", (), dtype="i32")
            chidden = clone.relu(clone.linear(cx, 16, name="fc1"))
            clone.compile(clone.softmax_cross_entropy(clone.linear(chidden, 3, name="fc2"), clabels), 32)
            assert clone.evaluate(test_x, test_y)["loss"] != after["loss"]
            clone.load(path)
            assert numpy.array_equal(clone.parameters(), model.parameters())
            assert clone.evaluate(test_x, test_y) == after

            with open(path, "r+b") as file:
                file.truncate(20)
            expect_error("FORMAT", clone.load, path)

        # numpy arrays feed the same model as the lists did.
        by_numpy = model.evaluate(numpy.array(test_x, dtype=numpy.float64), numpy.array(test_y))
        assert abs(by_numpy["loss"] - after["loss"]) < 1e-6 and by_numpy["accuracy"] == after["accuracy"], by_numpy
        loss = model.train_step(optimizer, numpy.array(train_x[:32], dtype=numpy.float32), numpy.array(train_y[:32]))
        assert loss < 0.5, loss
        print("numpy arrays: OK")

        # Errors surface as exceptions with the library's message, never a crash.
        error = expect_error("SHAPE", model.train_step, optimizer, [[1.0, 2.0, 3.0]], [0])
        print("shape error message:", error.message)
        expect_error("SHAPE", model.train_step, optimizer, train_x[:33], train_y[:33])
        error = expect_error("INVALID_ARGUMENT", bptrain.Optimizer, model, "sgd", -1.0)
        assert "learning_rate" in error.message, error.message
        expect_error("INVALID_ARGUMENT", bptrain.Context, "no-such-backend")
    print("python binding: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
