"""Misuse of the Python binding: every wrong argument, order, lifetime or concurrent use raises a
bptrain.Error naming what is wrong (never a bare Python error from ctypes or NumPy, a silently changed
value, a wrong result or a crash), and the model stays usable afterwards.

Run by CTest (check_python_misuse) with BPTRAIN_LIBRARY and PYTHONPATH set; skips (77) without NumPy.
"""
import os
import subprocess
import sys
import tempfile
import threading
import unittest

from support import expect, write_idx

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
            expect(bptrain.InvalidArgumentError, call)

    def test_fractions_and_text_are_not_integers(self):
        model = bptrain.Model(context())
        x = model.input("x", (4,))
        expect(bptrain.InvalidArgumentError, model.linear, x, 2.5)
        expect(bptrain.InvalidArgumentError, model.input, "y", (2.7,))
        expect(bptrain.InvalidArgumentError, model.input, "z", "784")  # not the shape (7, 8, 4)
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("linear", {"units": "a"})])
        expect(bptrain.InvalidArgumentError, model.sequential, x, [()])
        expect(bptrain.InvalidArgumentError, model.leaky_relu, x, "0.1")
        expect(bptrain.InvalidArgumentError, model.linear, x, 3.0)  # a count is an int, even an integral float
        expect(bptrain.InvalidArgumentError, model.compile, None, 2.5)

    def test_batch_sizes_and_epochs(self):
        model, optimizer = classifier()
        for batch_size in (0, -1, 2.5, 9, "4"):
            expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, LABELS, batch_size=batch_size)
            expect(bptrain.InvalidArgumentError, model.evaluate, FEATURES, LABELS, batch_size=batch_size)
            expect(bptrain.InvalidArgumentError, model.predict, FEATURES, batch_size=batch_size)
        for epochs in (-2, 1.5):  # (epochs=0 trains nothing and returns [])
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


    def test_argument_errors_are_bptrain_errors_naming_the_argument(self):
        model, optimizer = classifier()
        for seed, shown in ((2.5, "2.5"), ("a", "'a'"), (-1, "-1"), (2 ** 64 + 5, str(2 ** 64 + 5))):
            # 2.5 and "a" were bare TypeErrors, -1 and 2**64 + 5 were taken silently
            error = expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, LABELS, seed=seed)
            self.assertIn("seed", error.message)
            self.assertIn(shown, error.message)
        self.assertEqual(optimizer.steps, 0)
        self.assertEqual(len(model.fit(optimizer, FEATURES, LABELS, seed=2 ** 64 - 1)), 1)  # the largest seed
        fresh = bptrain.Model(model.context)
        for keywords in ({"initial_loss_scale": "big"}, {"growth_interval": 2.5}, {"growth_factor": [2]},
                         {"backoff_factor": "half"}, {"loss_scaling": ["dynamic"]},
                         {"saved_activation_storage": {}}):
            error = expect(bptrain.InvalidArgumentError, fresh.set_precision, **keywords)
            self.assertIn(list(keywords)[0], error.message)
        self.assertIn("compute_dtype", expect(bptrain.DtypeError, fresh.set_precision, ["f16"]).message)
        for call in (lambda: bptrain.Optimizer(model, ["sgd"]), lambda: bptrain.Schedule({}),
                     lambda: model.context.convert([1.0], "f32", "f16", rounding=[]),
                     lambda: model.leaky_relu(model.inputs[0], "0.1")):
            expect(bptrain.InvalidArgumentError, call)
        self.assertIn("slope", expect(bptrain.InvalidArgumentError, model.leaky_relu, model.inputs[0], "x").message)

    def test_rates_a_32_bit_float_cannot_hold_are_refused(self):
        model, optimizer = classifier()
        for rate in (1e-50, -1e-46, 1e39):  # 1e-50 became a learning rate of 0: training that never moves
            error = expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, learning_rate=rate)
            self.assertIn("learning_rate", error.message)
            with self.assertRaises(bptrain.InvalidArgumentError):
                optimizer.learning_rate = rate
            expect(bptrain.InvalidArgumentError, bptrain.Schedule, base_learning_rate=rate)
        self.assertAlmostEqual(optimizer.learning_rate, 0.1, places=6)
        self.assertGreater(bptrain.Optimizer(model, learning_rate=1e-40).learning_rate, 0)  # subnormal, not 0
        bptrain.Optimizer(model, learning_rate=0.0)  # an exact 0 is what it says
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, momentum=10 ** 400)  # a bare OverflowError


class Arrays(unittest.TestCase):
    """NumPy casts unsafely; values that a cast would change must be refused, never fed."""

    def test_accepted_dtypes_and_layouts_give_the_same_scores(self):
        model, _ = classifier()
        reference = model.predict(FEATURES)
        wide = np.zeros((8, 8), np.float32)
        wide[:, ::2] = FEATURES
        for variant in (FEATURES.astype(np.float64), FEATURES.astype(object), FEATURES.tolist(),
                        np.asfortranarray(FEATURES), wide[:, ::2], FEATURES.T.copy().T, FEATURES.reshape(8, 2, 2)):
            np.testing.assert_array_equal(model.predict(variant), reference)
        ints = model.evaluate(FEATURES, LABELS)
        for labels in (LABELS.astype(np.int64), LABELS.astype(np.uint8), LABELS.astype(np.float64),
                       LABELS.tolist(), LABELS.reshape(8, 1)):
            self.assertEqual(model.evaluate(FEATURES, labels), ints)
        self.assertEqual(model.predict(np.zeros((0, 4), np.float32)).shape, (0, 3))

    def test_values_a_cast_would_change_are_refused(self):
        model, optimizer = classifier()
        before = model.parameters()
        # (InvalidArgumentError, like any data that cannot be read as the input's values)
        expect(bptrain.InvalidArgumentError, model.predict, FEATURES.astype(np.complex64))  # imaginary part dropped
        expect(bptrain.InvalidArgumentError, model.predict, FEATURES.astype(str))  # parsed as numbers
        expect(bptrain.InvalidArgumentError, model.train_step, optimizer, FEATURES, LABELS + 0.5)  # truncated
        expect(bptrain.InvalidArgumentError, model.evaluate, FEATURES, np.full(8, np.nan))
        big = expect(bptrain.InvalidArgumentError, model.train_step, optimizer, FEATURES,
                     LABELS.astype(np.int64) + 2 ** 32)
        self.assertIn("int32", big.message)  # would have wrapped to LABELS
        expect(bptrain.InvalidArgumentError, model.evaluate, FEATURES, [2 ** 70] * 8)  # not a bare OverflowError
        expect(bptrain.InvalidArgumentError, model.predict, None)
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, None)
        expect(bptrain.InvalidArgumentError, model.predict, [[1, 2], [3]])  # ragged
        np.testing.assert_array_equal(model.parameters(), before)
        self.assertEqual(optimizer.steps, 0)

    def test_none_text_bytes_and_complex_inside_lists_are_refused_naming_the_position(self):
        model, optimizer = classifier()
        before = model.parameters()
        rows = FEATURES.tolist()
        for bad, position in ((None, "[2, 1]"), ("1e3", "[2, 1]"), (" 2 ", "[2, 1]"), (b"1", "[2, 1]"),
                              (1 + 2j, "[2, 1]")):
            data = [list(row) for row in rows]
            data[2][1] = bad
            for variant in (data, np.array(data, dtype=object)):
                error = expect(bptrain.InvalidArgumentError, model.train_step, optimizer, variant, LABELS)
                self.assertIn(position, error.message)  # (None was fed as a NaN that poisoned the weights)
                self.assertIn(repr(bad), error.message)
                expect(bptrain.InvalidArgumentError, model.predict, variant)
        for labels in (LABELS + 1j, LABELS.astype(str), LABELS.astype(bytes), LABELS.astype(object) + 0.5,
                       [0, 1, None, 0, 1, 2, 0, 1], [0, 1, "2", 0, 1, 2, 0, 1], np.array([0, 1, 2.5] + [0] * 5,
                                                                                          dtype=object)):
            # complex labels lost their imaginary part, "2" was parsed, an object 0.5 became 0
            expect(bptrain.InvalidArgumentError, model.train_step, optimizer, FEATURES, labels)
            expect(bptrain.InvalidArgumentError, model.evaluate, FEATURES, labels)
        expect(bptrain.InvalidArgumentError, model.set_parameters, [1.0, None] + [0.0] * (before.size - 2))
        expect(bptrain.InvalidArgumentError, model.context.convert, [1.0, "2"], "f32", "f16")
        expect(bptrain.InvalidArgumentError, model.context.convert, [15360, None], "f16", "f32")
        np.testing.assert_array_equal(model.parameters(), before)
        self.assertEqual(optimizer.steps, 0)
        # real numbers in an object array or a list are fine, labels included
        mixed = np.array([[int(v) if i % 2 else np.float32(v) for i, v in enumerate(row)] for row in rows], object)
        np.testing.assert_allclose(model.predict(mixed), model.predict(mixed.astype(np.float64)), rtol=1e-6)
        self.assertEqual(model.evaluate(FEATURES, LABELS.astype(object)), model.evaluate(FEATURES, LABELS))

    def test_an_array_too_large_to_copy(self):
        model, optimizer = classifier()
        # a float32 copy would need 512 TiB: more than any address space, so refused even with overcommit
        huge = np.broadcast_to(np.zeros(4), (2 ** 45, 4))
        error = expect(bptrain.OutOfMemoryError, model.predict, huge)  # was NumPy's own _ArrayMemoryError
        self.assertIn("'x'", error.message)
        expect(bptrain.OutOfMemoryError, model.fit, optimizer, huge, np.broadcast_to(np.int32(0), (2 ** 45,)))
        self.assertEqual(optimizer.steps, 0)

    def test_no_samples_and_wrong_shapes(self):
        model, optimizer = classifier()
        empty = np.zeros((0, 4), np.float32), np.zeros(0, np.int32)
        expect(bptrain.ShapeError, model.fit, optimizer, *empty)  # trained nothing, reported loss 0
        expect(bptrain.ShapeError, model.evaluate, *empty)  # reported loss 0 and accuracy 0
        expect(bptrain.ShapeError, model.train_step, optimizer, *empty)
        expect(bptrain.ShapeError, model.predict, np.zeros((0, 5), np.float32))  # empty, but the wrong shape
        expect(bptrain.ShapeError, model.predict, np.float32(1))
        expect(bptrain.ShapeError, model.evaluate, FEATURES[:, :3], LABELS)
        expect(bptrain.ShapeError, model.evaluate, FEATURES, LABELS[:7])
        self.assertEqual(optimizer.steps, 0)

    def test_other_array_arguments(self):
        model, optimizer = classifier()
        model.train_step(optimizer, FEATURES, LABELS)
        before = model.parameters()
        expect(bptrain.InvalidArgumentError, model.set_parameters, None)  # was written as one NaN
        expect(bptrain.InvalidArgumentError, model.set_parameters, ["a"] * before.size)  # was a bare ValueError
        np.testing.assert_array_equal(model.parameters(), before)
        ctx = model.context
        expect(bptrain.InvalidArgumentError, ctx.convert, np.array([1.5, 2.0]), "f16", "f32")  # read as bits 1, 2
        expect(bptrain.InvalidArgumentError, ctx.convert, np.array([70000]), "f16", "f32")  # wrapped to 4464
        expect(bptrain.InvalidArgumentError, ctx.convert, None, "f32", "f16")  # converted NaN
        expect(bptrain.InvalidArgumentError, ctx.fp8_scale, None)
        np.testing.assert_array_equal(ctx.convert(np.array([15360, 16384]), "f16", "f32"), [1.0, 2.0])
        fpga = bptrain.Context("fpga-sim", threads=1)
        expect(bptrain.InvalidArgumentError, fpga.configure_fpga, word_bits="a")  # was a bare TypeError
        expect(bptrain.InvalidArgumentError, fpga.configure_fpga, word_bits=2 ** 32 + 16)  # wrapped to 16
        fpga.configure_fpga(word_bits=16, clock_mhz=300)
        # a parameter has no batch dimension: predict returned its rows as if they were scores per sample
        expect(bptrain.InvalidArgumentError, model.predict, FEATURES, output=model.node("linear1.weight"))


class Roles(unittest.TestCase):
    """evaluate read the last declared input as the labels."""

    def test_labels_declared_first_or_shaped_one_per_sample(self):
        reference, _ = classifier()
        expected = reference.evaluate(FEATURES, LABELS)
        for shape in ((), (1,)):
            model = bptrain.Model(reference.context)
            y, x = model.input("y", shape, "i32"), model.input("x", (4,))  # the labels first
            model.compile(model.softmax_cross_entropy(model.linear(model.relu(model.linear(x, 8)), 3), y), 8)
            model.set_parameters(reference.parameters())
            # accuracy was 0.0 (logits compared with the features) or 5.36 (labels (8, 1) against (8,))
            self.assertEqual(model.evaluate(LABELS.reshape((8,) + shape), FEATURES), expected)
            with tempfile.TemporaryDirectory() as directory:
                write_idx(directory, count=8, height=2, width=2)
                data = bptrain.Dataset(model.context, directory, "train")
                images, labels = data.arrays()
                reference_result = reference.evaluate(images.reshape(8, 4), labels)
                self.assertEqual(model.evaluate(data), reference_result)  # (refused: "two inputs" before)
                self.assertEqual(len(model.fit(bptrain.Optimizer(model), data)), 1)


class PathsAndNames(unittest.TestCase):
    """str(path).encode() turned None into the file "None" and b"x" into "b'x'", and C cut names at a NUL."""

    def test_paths(self):
        model, optimizer = classifier()
        with tempfile.TemporaryDirectory() as directory:
            os.chdir(directory)
            try:
                expect(bptrain.InvalidArgumentError, model.save, None)
                expect(bptrain.InvalidArgumentError, model.save, "")
                expect(bptrain.InvalidArgumentError, model.save, os.path.join(directory, "a\0b"))
                expect(bptrain.InvalidArgumentError, model.export_onnx, None)
                expect(bptrain.InvalidArgumentError, model.context.write_profile_trace, None)
                self.assertEqual(os.listdir(directory), [])
                model.save(os.path.join(directory, "a").encode())  # bytes and os.PathLike name the file itself
                model.load(__import__("pathlib").Path(directory, "a"))
                self.assertEqual(os.listdir(directory), ["a"])
                expect(bptrain.InvalidArgumentError, model.load, os.path.join(directory, "a\0junk"))
                expect(bptrain.FileError, model.save, directory)  # the library's message: a directory
                expect(bptrain.FileError, model.load, os.path.join(directory, "missing"))
                with open(os.path.join(directory, "garbage"), "wb") as file:
                    file.write(b"garbage" * 20)
                expect(bptrain.FormatError, model.load, os.path.join(directory, "garbage"))
                error = expect(bptrain.FileError, model.fit, optimizer, FEATURES, LABELS,
                               metrics=os.path.join(directory, "no", "m.csv"))
                self.assertIn("m.csv", error.message)
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, model.context, None, "train")
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, model.context, images=b"x\0y")
            finally:
                os.chdir(os.path.dirname(os.path.abspath(__file__)))

    def test_metrics_on_a_fifo_a_device_or_a_full_disk(self):
        """open() waited forever for a FIFO's reader, and /dev/full or a full disk raised a bare OSError."""
        script = """if True:
            import os, resource, signal, sys
            import numpy as np
            import bptrain
            path, limit = sys.argv[1], int(sys.argv[2])
            if limit:  # writes beyond it fail with EFBIG (SIGXFSZ ignored), as on a full disk
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            model = bptrain.Model(bptrain.Context(threads=1))
            x, y = model.input("x", (4,)), model.input("y", (), "i32")
            model.compile(model.softmax_cross_entropy(model.linear(x, 3), y), 8)
            try:
                model.fit(bptrain.Optimizer(model), np.zeros((800, 4)), np.zeros(800), epochs=2, batch_size=2,
                          metrics=path)
            except bptrain.FileError as error:
                print(error.message)
        """
        with tempfile.TemporaryDirectory() as directory:
            fifo = os.path.join(directory, "fifo.csv")
            os.mkfifo(fifo)
            for path, limit, expected in ((fifo, 0, "a FIFO"), ("/dev/full", 0, "a character device"),
                                          (os.path.join(directory, "m.csv"), 2000, "cannot write")):
                run = subprocess.run([sys.executable, "-c", script, path, str(limit)], capture_output=True, text=True,
                                     timeout=60)
                self.assertEqual((run.returncode, run.stderr), (0, ""))
                self.assertIn(expected, run.stdout)
                self.assertIn(path, run.stdout)

    def test_a_lenient_load_of_a_name_that_is_not_utf8(self):
        """load(strict=False) replaced the parameters, then raised UnicodeDecodeError on the file's other name."""
        import ctypes
        source, _ = classifier()
        dims = (ctypes.c_int64 * 1)(4)
        saved = bptrain.Model(source.context)
        x, y = saved.input("x", (4,)), saved.input("y", (), "i32")
        saved._add(bptrain._native.lib.bpt_graph_parameter, b"extra\xff", 1, dims, 1)  # C takes any bytes
        hidden = saved.relu(saved.linear(x, 8))
        saved.compile(saved.softmax_cross_entropy(saved.linear(hidden, 3), y), 8)
        target, _ = classifier(source.context)
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "odd.ckpt")
            saved.save(path)
            report = target.load(path, strict=False)
        self.assertEqual(report.skipped, ["extra\\xff"])
        self.assertEqual(sorted(report.loaded), sorted(target.state_dict()))
        state = saved.state_dict()
        for name, values in target.state_dict().items():
            np.testing.assert_array_equal(values, state[name])

    def test_names(self):
        model = bptrain.Model(context())
        expect(bptrain.InvalidArgumentError, model.input, "x\0y", (4,))
        expect(bptrain.InvalidArgumentError, model.input, None, (4,))
        x = model.input("x", (4,))
        expect(bptrain.InvalidArgumentError, model.relu, x, name="r\0elu")
        expect(bptrain.InvalidArgumentError, model.node, "x\0anything")
        expect(bptrain.InvalidArgumentError, bptrain.Context, "cpu\0junk")
        expect(bptrain.InvalidArgumentError, model.relu, x, name=7)


class Messages(unittest.TestCase):
    """The library's messages name the Python call the user made and Python's spellings (issue 29): a Python
    traceback said "bpt_optimizer_create: ..." and "a load with strict = 0"."""

    def assertMessage(self, error, start, *parts):
        self.assertTrue(error.message.startswith(start), error.message)
        self.assertNotIn("bpt_", error.message)
        for part in parts:
            self.assertIn(part, error.message)

    def test_the_c_function_becomes_the_python_call(self):
        model, optimizer = classifier()
        self.assertMessage(expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, learning_rate=-1),
                           "bptrain: Optimizer: learning_rate -1 must be finite")
        self.assertMessage(expect(bptrain.InvalidArgumentError, model.node, "nope"), "bptrain: Model.node: ")
        self.assertMessage(expect(bptrain.InvalidArgumentError, bptrain.Context, "nope"), "bptrain: Context: ")
        self.assertMessage(expect(bptrain.InvalidArgumentError, bptrain.Schedule("cosine").learning_rate, 1),
                           "bptrain: Schedule.learning_rate: ")
        self.assertMessage(expect(bptrain.DtypeError, model.context.fp8_scale, FEATURES, "f32"),
                           "bptrain: Context.fp8_scale: ")
        fresh = bptrain.Model(model.context)
        self.assertMessage(expect(bptrain.ShapeError, fresh.conv2d, fresh.input("x", (4,)), 3, 3),
                           "bptrain: Model.conv2d 'conv1': ")  # a builder names its method and its node

    def test_classes_that_take_a_model_are_named_as_written(self):
        # "bptrain: Model.Optimizer: the model is not compiled" named a method that does not exist
        fresh = bptrain.Model(context())
        fresh.input("x", (4,))
        self.assertMessage(expect(bptrain.StateError, bptrain.Optimizer, fresh),
                           "bptrain: Optimizer: the model is not compiled")
        model, optimizer = classifier()
        other, _ = classifier()
        self.assertMessage(expect(bptrain.InvalidArgumentError, bptrain.SpeculativeTrainer, model,
                                  bptrain.Optimizer(other)),
                           "bptrain: SpeculativeTrainer: the optimizer was made for another model")

    def test_a_call_from_a_callback_names_itself_not_fit(self):
        model, optimizer = classifier()

        def callback(*arguments, **keywords):
            bptrain.Optimizer(model, learning_rate=-2)
        error = expect(bptrain.InvalidArgumentError, model.fit, optimizer, FEATURES, LABELS, callback=callback)
        self.assertMessage(error, "bptrain: Optimizer: learning_rate -2")

    def test_c_spellings_in_messages_read_as_python(self):
        model, _ = classifier()
        self.assertMessage(expect(bptrain.InvalidArgumentError, bptrain.Context, threads=-1),
                           "bptrain: Context: threads is -1")
        self.assertMessage(expect(bptrain.StateError, model.context.write_profile_trace, os.devnull),
                           "bptrain: Context.write_profile_trace: ", "call context.profile() first")
        other = bptrain.Model(model.context)
        x, y = other.input("x", (4,)), other.input("y", (), "i32")
        other.compile(other.softmax_cross_entropy(other.linear(x, 5), y), 8)
        with tempfile.TemporaryDirectory() as directory:
            other.save(os.path.join(directory, "other.ckpt"))
            error = expect(bptrain.ShapeError, model.load, os.path.join(directory, "other.ckpt"))
        self.assertIn("a load with strict=False loads what matches", error.message)
        self.assertNotIn("strict = 0", error.message)
        sequence = bptrain.Model(model.context)
        self.assertMessage(expect(bptrain.ShapeError, sequence.transformer_block, sequence.input("x", (4,))),
                           "bptrain: Model.transformer_block ", "declare it with model.input_sequence()")
        normalised = bptrain.Model(model.context)
        x, y = normalised.input("x", (4,)), normalised.input("y", (), "i32")
        statistics = [normalised.parameter(name, (4,)) for name in ("g", "b", "mean", "variance")]
        self.assertIn("made with model.buffer()", expect(bptrain.ShapeError, normalised.batch_norm_op, x,
                                                         *statistics).message)
        normalised.compile(normalised.softmax_cross_entropy(normalised.batch_norm(x), y), 8)
        normalised.eval()
        normalised.set_input(x, FEATURES)
        normalised.set_input(y, LABELS)
        normalised.forward()
        self.assertIn("call model.train() first", expect(bptrain.StateError, normalised.backward).message)


class Dtypes(unittest.TestCase):
    """dtype arguments take NumPy's spellings too (issue 29): input("x", (4,), dtype=np.float32) was refused
    with 'dtype must be "f32" or "i32", not <class 'numpy.float32'>'."""

    def test_numpy_dtypes_are_accepted_where_they_map_to_a_valid_dtype(self):
        model = bptrain.Model(context())
        for index, dtype in enumerate((np.float32, "float32", np.dtype("float32"), "f4")):
            self.assertEqual(model.input("x%d" % index, (4,), dtype=dtype).dtype, "f32")
        y = model.input("y", (), dtype=np.int32)
        self.assertEqual((y.dtype, model.input_sequence("tokens", 3, dtype="int32").dtype), ("i32", "i32"))
        self.assertEqual(bptrain.dtype_size(np.float16), 2)
        halves = model.context.convert(FEATURES, np.float32, "f16")
        np.testing.assert_array_equal(halves, model.context.convert(FEATURES, "f32", "f16"))

    def test_other_dtypes_are_refused_naming_the_valid_ones(self):
        model = bptrain.Model(context())
        for dtype in (np.float64, "float64", np.uint8, None, "f16"):
            error = expect(bptrain.DtypeError, model.input, "x", (4,), dtype=dtype)
            self.assertIn("bptrain: Model.input 'x': dtype must be \"f32\" or \"i32\" (or NumPy's float32 or "
                          "int32), not ", error.message)
        self.assertIn("not NumPy's float64", expect(bptrain.DtypeError, model.input_sequence, "t", 3,
                                                    dtype=np.float64).message)

    def test_set_precision_lists_the_compute_dtypes_and_suggests_the_near_one(self):
        """set_precision("fp16") listed all seven dtypes, fp8_e4m3, i32 and u8 too, and no hint (issue 29)."""
        valid = 'compute_dtype must be "f32", "f16" or "bf16" (or NumPy\'s float32 or float16), not '
        for dtype, hint in (("fp16", " (did you mean 'f16'?)"), ("bfloat16", " (did you mean 'bf16'?)"),
                            ("FP32", " (did you mean 'f32'?)"), ("i32", ""), ("fp8_e4m3", "")):
            error = expect(bptrain.DtypeError, bptrain.Model(context()).set_precision, dtype)
            self.assertEqual(error.message, "bptrain: Model.set_precision: %s%r%s" % (valid, dtype, hint))
        bptrain.Model(context()).set_precision(np.float16)  # NumPy's name of f16

    def test_a_dtype_name_needs_no_numpy(self):
        script = ("import sys, bptrain\n"
                  "model = bptrain.Model(bptrain.Context(threads=1))\n"
                  "print(model.input('x', (4,), dtype='float32').dtype, 'numpy' in sys.modules)\n")
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        self.assertEqual((run.returncode, run.stdout, run.stderr), (0, "f32 False\n", ""))


class Ownership(unittest.TestCase):
    """Objects of another model, or of the wrong kind, are refused before they reach C."""

    def test_optimizer_of_another_model(self):
        model, optimizer = classifier()
        other, other_optimizer = classifier(model.context)
        model.train_step(optimizer, FEATURES, LABELS)
        before, other_before = model.parameters(), other.parameters()
        # other.train_step(optimizer) used to step `model` with its stale gradients and train nothing of `other`
        expect(bptrain.InvalidArgumentError, other.train_step, optimizer, FEATURES, LABELS)
        expect(bptrain.InvalidArgumentError, other.fit, optimizer, FEATURES, LABELS)
        expect(bptrain.InvalidArgumentError, other.train_step, "sgd", FEATURES, LABELS)
        expect(bptrain.InvalidArgumentError, other.save, "unused.ckpt", optimizer=optimizer)
        expect(bptrain.InvalidArgumentError, other.save, "unused.ckpt", optimizer="sgd")
        expect(bptrain.InvalidArgumentError, other.save, "unused.ckpt", dataset=FEATURES)
        np.testing.assert_array_equal(model.parameters(), before)
        np.testing.assert_array_equal(other.parameters(), other_before)
        self.assertEqual((optimizer.steps, other_optimizer.steps), (1, 0))

    def test_nodes_and_objects_of_the_wrong_kind(self):
        model, optimizer = classifier()
        other, _ = classifier(model.context)
        model.train_step(optimizer, FEATURES, LABELS)
        expect(bptrain.InvalidArgumentError, model.read, None)
        expect(bptrain.InvalidArgumentError, model.read, other.logits)
        expect(bptrain.InvalidArgumentError, model.predict, FEATURES, output="logits")
        expect(bptrain.InvalidArgumentError, model.set_input, other.inputs[0], FEATURES)
        expect(bptrain.InvalidArgumentError, model.evaluate_dataset, None)
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, None)
        expect(bptrain.InvalidArgumentError, bptrain.Model, None)
        expect(bptrain.InvalidArgumentError, bptrain.Dataset, None, "directory", "train")
        model.set_input(model.node("x"), FEATURES)  # the same input found by name is fine
        empty = bptrain.Model(model.context)
        weight = empty.parameter("w", (2,))
        empty.compile(None, 2)
        expect(bptrain.StateError, empty.predict, FEATURES, output=weight)  # no input: was an IndexError

    def test_evaluation_as_a_list(self):
        model, optimizer = classifier()
        history = model.fit(optimizer, FEATURES, LABELS, evaluation=[FEATURES, LABELS])
        self.assertIn("test_accuracy", history[0])


class Threads(unittest.TestCase):
    """ctypes drops the GIL in C calls: threads sharing a model must be serialised, not interleaved."""

    def test_two_threads_predicting_get_their_own_scores(self):
        model = bptrain.Model(context())  # wide enough that a forward lasts while the other thread feeds
        x = model.input("x", (64,))
        model.compile(model.mse_loss(model.linear(model.relu(model.linear(x, 512)), 4), model.input("t", (4,))), 16)
        inputs = [np.random.RandomState(seed).randn(160, 64).astype(np.float32) for seed in (1, 2)]
        expected = [model.predict(x) for x in inputs]
        wrong, failures, start = [], [], threading.Barrier(2)

        def work(x, reference):
            start.wait()
            try:
                for _ in range(300):  # 10 batches each: interleaved, thread 1's batch was read by thread 2
                    # (close, not equal: a BLAS may sum in another order on another thread; the other
                    # thread's scores, which an interleaving returned, are nowhere near)
                    if not np.allclose(model.predict(x), reference, rtol=1e-4, atol=1e-5):
                        wrong.append(1)
            except Exception as failure:  # noqa: BLE001 (reported below)
                failures.append(failure)
        threads = [threading.Thread(target=work, args=pair) for pair in zip(inputs, expected)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual((len(wrong), failures), (0, []))

    def test_a_call_waits_for_the_call_in_flight(self):
        """Deterministic: while one thread is inside fit (its callback pauses there), another thread's predict
        and close must wait for fit to return (unserialised, predict ran in the middle of it)."""
        model, optimizer = classifier()
        inside, events = threading.Event(), []

        def pause(record):
            inside.set()
            threading.Event().wait(0.3)
            events.append("fit ends")
        trainer = threading.Thread(target=lambda: model.fit(optimizer, FEATURES, LABELS, callback=pause))
        trainer.start()
        inside.wait(60)
        model.predict(FEATURES)
        events.append("predict ends")
        model.close()
        trainer.join()
        self.assertEqual(events, ["fit ends", "predict ends"])

    def test_training_threads_and_a_close_from_another_thread(self):
        model, optimizer = classifier(max_batch=16)
        x = np.random.RandomState(3).randn(320, 4).astype(np.float32)
        y = (np.arange(320) % 3).astype(np.int32)
        failures, trained = [], threading.Event()

        def work():
            try:
                for _ in range(50):
                    model.fit(optimizer, x, y, batch_size=16)
                    trained.set()
                    model.predict(x)
            except bptrain.StateError:
                pass  # closed by the main thread: fine
            except Exception as failure:  # noqa: BLE001
                failures.append(failure)
        threads = [threading.Thread(target=work) for _ in range(3)]
        for thread in threads:
            thread.start()
        trained.wait(60)
        model.context.close()  # waits for the step in flight instead of freeing the graph under it
        for thread in threads:
            thread.join()
        self.assertEqual(failures, [])
        expect(bptrain.StateError, model.predict, x)


    def test_a_close_waits_for_a_constructor_in_flight(self):
        """Deterministic: a close() from another thread while Optimizer(model) is converting its arguments must
        wait for the constructor (which then returns an optimiser that the close closes too); constructors took
        no lock, so the close ran in the middle and the constructor carried on with a closed model."""
        model, _ = classifier()
        inside, events = threading.Event(), []

        class Slow(float):
            def __float__(self):
                inside.set()
                threading.Event().wait(0.3)
                return 0.1

        def make():
            try:
                made = bptrain.Optimizer(model, "adam", learning_rate=Slow(0.1))
                events.append("made")
                made.close()
            except bptrain.StateError:
                events.append("refused: the model was closed in the middle")
        thread = threading.Thread(target=make)
        thread.start()
        inside.wait(60)
        model.close()
        events.append("closed")
        thread.join()
        self.assertEqual(events, ["made", "closed"])

    def test_optimizers_made_while_another_thread_closes_the_model(self):
        """The reproduction: one thread makes optimisers while another closes the model (SIGSEGV before)."""
        script = """if True:
            import random, sys, threading, time
            import bptrain
            context, made = bptrain.Context(seed=1, threads=1), [0]
            for _ in range(100):
                model = bptrain.Model(context)
                x, y = model.input("x", (256,)), model.input("y", (), "i32")
                for _ in range(4):
                    x = model.relu(model.linear(x, 256))
                model.compile(model.softmax_cross_entropy(model.linear(x, 3), y), 8)
                start = threading.Barrier(2)

                def build():
                    start.wait()
                    try:
                        for _ in range(1000):
                            bptrain.Optimizer(model, "adam")
                            made[0] += 1
                    except bptrain.StateError:
                        pass
                thread = threading.Thread(target=build)
                thread.start()
                start.wait()
                time.sleep(random.random() * 0.002)
                model.close()
                thread.join()
            print("made", made[0])
        """
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        self.assertIn("made", run.stdout)


class Lifetimes(unittest.TestCase):
    def test_with_blocks_close_what_they_made(self):
        with context() as ctx:
            with bptrain.Model(ctx) as model:
                x = model.input("x", (4,))
                model.compile(model.mse_loss(model.linear(x, 2), model.input("t", (2,))), 4)
                with bptrain.Optimizer(model) as optimizer:
                    model.train_step(optimizer, FEATURES[:4], np.zeros((4, 2)))
                expect(bptrain.StateError, optimizer.step)  # closed by its block, the model still open
                self.assertEqual(model.predict(FEATURES[:2]).shape, (2, 2))
            expect(bptrain.StateError, model.predict, FEATURES[:2])
            expect(bptrain.StateError, lambda: x.shape)
        expect(bptrain.StateError, lambda: ctx.backend)
        model.close()  # closing again, in any order, is harmless
        ctx.close()

    def test_use_after_close_in_any_order(self):
        model, optimizer = classifier()
        node = model.logits
        model.context.close()
        for call in (lambda: model.predict(FEATURES), lambda: optimizer.step(), lambda: node.shape,
                     lambda: model.fit(optimizer, FEATURES, LABELS), lambda: model.save("unused.ckpt"),
                     lambda: bptrain.Model(model.context), lambda: optimizer.learning_rate):
            expect(bptrain.StateError, call)

    def test_an_exception_out_of_a_callback_leaves_the_model_usable(self):
        model, optimizer = classifier()
        epochs = []

        def interrupt(record):
            epochs.append(record["epoch"])
            raise KeyboardInterrupt
        with tempfile.TemporaryDirectory() as directory:
            metrics = os.path.join(directory, "m.csv")
            with self.assertRaises(KeyboardInterrupt):
                model.fit(optimizer, FEATURES, LABELS, epochs=3, callback=interrupt, metrics=metrics)
            with open(metrics) as file:  # closed and complete up to the interrupt
                self.assertEqual(sum(line.startswith("epoch,") for line in file), 1)
        self.assertEqual((epochs, optimizer.steps), ([1], 1))
        self.assertEqual(len(model.fit(optimizer, FEATURES, LABELS, epochs=2)), 2)
        self.assertEqual(model.predict(FEATURES).shape, (8, 3))

        def close(record):
            model.close()
        expect(bptrain.StateError, model.fit, optimizer, FEATURES, LABELS, epochs=2, callback=close)

    def test_ctrl_c_during_fit_leaves_the_model_usable(self):
        import _thread
        model, optimizer = classifier(max_batch=16)
        x = np.random.RandomState(1).randn(1600, 4).astype(np.float32)
        y = (np.arange(1600) % 3).astype(np.int32)
        for delay in (0.02, 0.07):  # lands wherever fit is: in C, in NumPy, between batches
            threading.Timer(delay, _thread.interrupt_main).start()
            with self.assertRaises(KeyboardInterrupt):
                model.fit(optimizer, x, y, epochs=10 ** 6, batch_size=16)
            self.assertEqual(model.evaluate(x, y)["samples"], 1600)
            self.assertEqual(model.predict(x[:3]).shape, (3, 3))
        steps = optimizer.steps
        model.fit(optimizer, x[:32], y[:32], batch_size=16)
        self.assertEqual(optimizer.steps, steps + 2)


class Examples(unittest.TestCase):
    def test_bad_arguments_are_one_line_errors(self):
        examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")
        for example in ("mnist_mlp.py", "mnist_cnn.py"):
            for arguments in (["--backend", "no-such-backend"], ["--threads", "-1"], ["--data", "/no/such/dir"]):
                run = subprocess.run([sys.executable, os.path.join(examples, example)] + arguments,
                                     capture_output=True, text=True, timeout=120)
                self.assertEqual(run.returncode, 1, run.stderr)
                self.assertNotIn("Traceback", run.stderr)
                self.assertIn("error: ", run.stderr)


if __name__ == "__main__":
    sys.argv[1:1] = ["-v"] if "-v" not in sys.argv else []
    unittest.main()
