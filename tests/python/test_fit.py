"""Model.fit on par with the C library's bpt_train (issue 29): the training accuracy in the history and the
metrics CSV, a callback that stops training, early stopping on a monitored metric with patience and
min_delta, and restore_best writing back the best epoch's parameters."""
import contextlib
import csv
import io
import os
import tempfile
import unittest

import support  # noqa: F401 (the binding on sys.path, the NumPy skip)
from support import expect

import bptrain
import numpy as np


def classifier(context):
    model = bptrain.Model(context)
    x, y = model.input("x", (4,)), model.input("y", (), "i32")
    hidden = model.relu(model.linear(x, 8, name="fc1"), name="relu1")
    model.compile(model.softmax_cross_entropy(model.linear(hidden, 3, name="fc2"), y), 16)
    return model


def data(count=64):
    """Separable samples: class c has feature c raised by 3."""
    features = np.random.RandomState(1).randn(count, 4).astype(np.float32)
    labels = (np.arange(count) % 3).astype(np.int32)
    features[np.arange(count), labels] += 3
    return features, labels


class Fit(unittest.TestCase):
    def setUp(self):
        self.context = bptrain.Context(threads=1, seed=7)
        self.model = classifier(self.context)
        self.optimizer = bptrain.Optimizer(self.model, "sgd", learning_rate=0.1, momentum=0.9)

    def tearDown(self):
        self.context.close()

    def test_train_accuracy_in_history_and_csv(self):
        features, labels = data()
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "metrics.csv")
            history = self.model.fit(self.optimizer, features, labels, epochs=4, metrics=path)
            with open(path) as file:
                rows = [row for row in csv.DictReader(file) if row["kind"] == "epoch"]
        self.assertEqual(len(rows), 4)
        for record, row in zip(history, rows):
            self.assertTrue(0.0 <= record["train_accuracy"] <= 1.0)
            self.assertAlmostEqual(float(row["train_accuracy"]), record["train_accuracy"], places=4)
        self.assertGreater(history[-1]["train_accuracy"], history[0]["train_accuracy"])
        self.assertGreater(history[-1]["train_accuracy"], 0.9)

    def test_train_accuracy_counts_each_batch(self):
        # One epoch without shuffling at a fixed learning rate of 0: the running accuracy over the batches is
        # exactly the accuracy of the (unchanged) model on the data.
        features, labels = data(40)
        frozen = bptrain.Optimizer(self.model, "sgd", learning_rate=0.0)
        expected = self.model.evaluate(features, labels, batch_size=16)["accuracy"]
        history = self.model.fit(frozen, features, labels, epochs=1, batch_size=16, shuffle=False)
        self.assertAlmostEqual(history[0]["train_accuracy"], expected, places=6)

    def test_whole_set_batch_warns_once_when_verbose(self):
        # One batch holding every sample is one optimiser step per epoch: verbose says so once, on stderr, in
        # the C examples' words; two batches, or a quiet fit, say nothing.
        features, labels = data(16)
        warning = "warning: the batch holds the whole training set (16 samples): one optimiser step per epoch"
        for batch_size, verbose, count in ((16, True, 1), (8, True, 0), (16, False, 0)):
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                self.model.fit(self.optimizer, features, labels, epochs=3, batch_size=batch_size, verbose=verbose)
            self.assertEqual(stderr.getvalue().count(warning), count, (batch_size, verbose, stderr.getvalue()))

    def test_callback_stops_training(self):
        features, labels = data()
        seen = []
        history = self.model.fit(self.optimizer, features, labels, epochs=5,
                                 callback=lambda record: seen.append(record) or record["epoch"] == 2)
        self.assertEqual([record["epoch"] for record in history], [1, 2])
        self.assertEqual(seen, history)

    def test_early_stopping_with_patience(self):
        features, labels = data()
        # No later epoch improves train_loss by more than min_delta: epoch 1 stays best, and patience 2 stops
        # after epoch 3.
        history = self.model.fit(self.optimizer, features, labels, epochs=10, monitor="train_loss", patience=2,
                                 min_delta=1e9)
        self.assertEqual(len(history), 3)
        self.assertEqual([record["improved"] for record in history], [True, False, False])
        self.assertEqual(history[-1]["best_epoch"], 1)
        # Patience 0 never stops but still tracks the best epoch.
        history = self.model.fit(self.optimizer, features, labels, epochs=3, monitor="train_loss")
        self.assertEqual(len(history), 3)
        self.assertTrue(all(record["improved"] for record in history))
        self.assertEqual(history[-1]["best_epoch"], 3)

    def test_restore_best(self):
        features, labels = data()
        snapshots = []
        history = self.model.fit(self.optimizer, features, labels, epochs=3, monitor="test_accuracy",
                                 evaluation=(features, labels), min_delta=2.0, patience=5, restore_best=True,
                                 callback=lambda record: snapshots.append(self.model.parameters()))
        self.assertEqual(len(history), 3)
        self.assertFalse(np.array_equal(snapshots[0], snapshots[-1]))
        np.testing.assert_array_equal(self.model.parameters(), snapshots[0])

    def test_labels_checked_before_training(self):
        features, labels = data()
        labels[37] = 3  # the model has classes 0..2
        before = self.model.parameters()
        failure = expect(bptrain.InvalidArgumentError, self.model.fit, self.optimizer, features, labels, epochs=2)
        self.assertIn("label 3 of sample 37", str(failure))
        np.testing.assert_array_equal(self.model.parameters(), before)  # no step was taken

    def test_bad_early_stopping_arguments(self):
        features, labels = data()
        expect(bptrain.InvalidArgumentError, self.model.fit, self.optimizer, features, labels, monitor="loss")
        expect(bptrain.InvalidArgumentError, self.model.fit, self.optimizer, features, labels, monitor="test_loss")
        expect(bptrain.InvalidArgumentError, self.model.fit, self.optimizer, features, labels, restore_best=True)
        expect(bptrain.InvalidArgumentError, self.model.fit, self.optimizer, features, labels,
               monitor="train_loss", min_delta=-1)


if __name__ == "__main__":
    unittest.main()
