"""Every group of the Python binding against known values: ops (forward against NumPy references), layers,
modes, gradients and clipping, schedules, parameter groups, precision and number formats, anomaly mode, the
profiler, backends, introspection, folding, checkpoints, data sets, fpga-sim, speculative training, and the
mapping of failures to bptrain.Error subclasses.

Run by CTest (check_python_api) with BPTRAIN_LIBRARY and PYTHONPATH set; skips (77) without NumPy.
"""
import json
import math
import os
import pathlib
import sys
import tempfile
import unittest

from support import expect, write_idx

import numpy as np

import bptrain

RNG = np.random.RandomState(5)


def context():
    return bptrain.Context(seed=11, threads=1)


def run_op(build, *inputs):
    """Builds input nodes shaped like the arrays (batch first), applies build(model, *nodes), compiles an
    inference graph and returns (model, output values)."""
    model = bptrain.Model(context())
    nodes = [model.input("in%d" % i, a.shape[1:]) for i, a in enumerate(inputs)]
    out = build(model, *nodes)
    model.compile(None, max_batch=len(inputs[0]))
    for node, values in zip(nodes, inputs):
        model.set_input(node, values)
    model.forward()
    return model, model.read(out)


def conv2d_reference(x, w, b, stride, padding):
    n, c, h, width = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (width + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out + (0 if b is None else b[None, :, None, None])


def pool_reference(x, kernel, stride, reduce):
    n, c, h, w = x.shape
    oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * stride:i * stride + kernel, j * stride:j * stride + kernel],
                                     axis=(2, 3))
    return out


class Ops(unittest.TestCase):
    def test_activations(self):
        x = RNG.randn(4, 7).astype(np.float32) * 3
        erf = np.vectorize(math.erf)
        cases = {"relu": np.maximum(x, 0), "sigmoid": 1 / (1 + np.exp(-x)), "tanh": np.tanh(x),
                 "gelu": 0.5 * x * (1 + erf(x / math.sqrt(2))), "leaky_relu": np.where(x > 0, x, 0.2 * x)}
        for op, expected in cases.items():
            arguments = {"slope": 0.2} if op == "leaky_relu" else {}
            _, y = run_op(lambda m, a: getattr(m, op)(a, **arguments), x)
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6, err_msg=op)

    def test_gated_activations(self):
        """gelu_tanh (F.gelu approximate='tanh') and silu against float64 over [-100, 100], relative error near
        float rounding (2e-6). In gelu_tanh's far tail (|y| < 1e-10) z = 2u reaches -85, and its float rounding
        alone moves e^z by |z| 6e-8 (1e-5). Below z = -87.3 the CPU's own exp clamps its argument, so y is
        x 1.2e-38 there, not smaller (atol). The reference writes 0.5 (1 + tanh(u)) as 1 / (1 + exp(-2u)): in
        float64 too, 1 + tanh(u) cancels to 0 below x = -7."""
        x = np.concatenate([np.linspace(-100, 100, 2001), RNG.randn(999) * 3]).astype(np.float32).reshape(3, 1000)
        v = x.astype(np.float64)
        with np.errstate(over="ignore"):
            u = math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)
            cases = {"gelu_tanh": v / (1 + np.exp(-2 * u)), "silu": v / (1 + np.exp(-v))}
        for op, expected in cases.items():
            _, y = run_op(lambda m, a: getattr(m, op)(a), x)
            body = np.abs(expected) > 1e-10
            np.testing.assert_allclose(y[body], expected[body], rtol=2e-6, err_msg=op)
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-35, err_msg=op)

    def test_linear_op_and_layer(self):
        x = RNG.randn(3, 5).astype(np.float32)
        w, b = RNG.randn(4, 5).astype(np.float32), RNG.randn(4).astype(np.float32)
        model = bptrain.Model(context())
        node = model.input("x", (5,))
        weight, bias = model.parameter("w", (4, 5)), model.parameter("b", (4,), init="zeros")
        out = model.linear_op(node, weight, bias)
        layer = model.linear(node, 2, name="fc")
        model.compile(None, 3)
        state = model.state_dict()
        self.assertEqual(list(state), ["w", "b", "fc.weight", "fc.bias"])
        self.assertEqual(state["fc.weight"].shape, (2, 5))
        self.assertTrue(np.all(state["b"] == 0) and np.all(state["fc.bias"] == 0))
        limit = math.sqrt(6 / 5)  # he_uniform
        self.assertTrue(np.all(np.abs(state["fc.weight"]) <= limit) and np.std(state["w"]) > 0.1)
        model.set_parameters(np.concatenate([w.ravel(), b, state["fc.weight"].ravel(), state["fc.bias"]]))
        model.set_input(node, x)
        model.forward()
        np.testing.assert_allclose(model.read(out), x @ w.T + b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(model.read(layer), x @ state["fc.weight"].T, rtol=1e-5, atol=1e-5)

    def test_conv2d(self):
        x = RNG.randn(2, 3, 7, 6).astype(np.float32)
        w, b = RNG.randn(4, 3, 3, 3).astype(np.float32), RNG.randn(4).astype(np.float32)
        model = bptrain.Model(context())
        node = model.input("x", (3, 7, 6))
        weight, bias = model.parameter("w", (4, 3, 3, 3)), model.parameter("b", (4,))
        out = model.conv2d_op(node, weight, bias, stride=2, padding=1)
        layer = model.conv2d(node, 5, 3, padding=1, bias=False, name="conv")
        model.compile(None, 2)
        self.assertEqual(out.shape, (2, 4, 4, 3))
        self.assertEqual([p.name for p in model.parameter_nodes()], ["w", "b", "conv.weight"])
        rest = model.parameters()[w.size + b.size:]
        model.set_parameters(np.concatenate([w.ravel(), b, rest]))
        model.set_input(node, x)
        model.forward()
        np.testing.assert_allclose(model.read(out), conv2d_reference(x, w, b, 2, 1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(model.read(layer), conv2d_reference(x, rest.reshape(5, 3, 3, 3), None, 1, 1),
                                   rtol=1e-4, atol=1e-4)

    def test_pooling_add_reshape(self):
        x = RNG.randn(2, 3, 6, 6).astype(np.float32)
        y = RNG.randn(2, 3, 6, 6).astype(np.float32)
        expected = {"max_pool2d": pool_reference(x, 2, 2, np.max), "avg_pool2d": pool_reference(x, 3, 1, np.mean),
                    "global_avg_pool": x.mean(axis=(2, 3)), "flatten": x.reshape(2, -1),
                    "reshape": x.reshape(2, 9, 12)}
        builders = {"max_pool2d": lambda m, a: m.max_pool2d(a, 2), "avg_pool2d": lambda m, a: m.avg_pool2d(a, 3, 1),
                    "global_avg_pool": lambda m, a: m.global_avg_pool(a), "flatten": lambda m, a: m.flatten(a),
                    "reshape": lambda m, a: m.reshape(a, (9, 12))}
        for op, build in builders.items():
            _, out = run_op(build, x)
            np.testing.assert_allclose(out, expected[op], rtol=1e-5, atol=1e-6, err_msg=op)
        _, out = run_op(lambda m, a, b: m.add(a, b), x, y)
        np.testing.assert_allclose(out, x + y, rtol=1e-6)
        _, out = run_op(lambda m, a, b: m.add_relu(a, b), x, y)
        np.testing.assert_allclose(out, np.maximum(x + y, 0), rtol=1e-6)

    def test_tensor_model_ops(self):
        a = RNG.randn(2, 3, 4, 5).astype(np.float32)
        b = RNG.randn(2, 3, 5, 2).astype(np.float32)
        _, out = run_op(lambda m, x, y: m.matmul(x, y), a, b)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)
        _, out = run_op(lambda m, x, y: m.matmul(x, y, transpose_b=True), a, a)
        np.testing.assert_allclose(out, a @ a.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-6)
        _, out = run_op(lambda m, x: m.permute(x, (0, 2, 1, 3)), a)
        np.testing.assert_allclose(out, a.transpose(0, 2, 1, 3))
        _, out = run_op(lambda m, x: m.slice(x, 3, 1, 3), a)
        np.testing.assert_array_equal(out, a[:, :, :, 1:4])
        _, out = run_op(lambda m, x: m.slice(x, axis=1, start=2, length=1), a)
        np.testing.assert_array_equal(out, a[:, 2:3])
        c = RNG.randn(2, 3, 4, 2).astype(np.float32)
        _, out = run_op(lambda m, x, y: m.concat([x, y, x], 3), a, c)
        np.testing.assert_array_equal(out, np.concatenate([a, c, a], axis=3))
        scale = RNG.randn(2, 3, 4, 1).astype(np.float32)
        _, out = run_op(lambda m, x, y: m.mul(x, y), a, scale)
        np.testing.assert_allclose(out, a * scale, rtol=1e-6)

    def test_layer_norm(self):
        """Over the last axis of a sequence, biased variance, epsilon inside the square root (F.layer_norm)."""
        x = (RNG.randn(3, 4, 7) * 2 + 1).astype(np.float64)
        gamma, beta = RNG.randn(7), RNG.randn(7)
        normalised = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-3)
        model = bptrain.Model(context())
        tokens = model.input_sequence("tokens", 4, (7,))
        g, b = model.parameter("g", (7,)), model.parameter("b", (7,))
        out = model.layer_norm_op(tokens, g, b, epsilon=1e-3)
        no_shift = model.layer_norm_op(tokens, g)
        layer = model.layer_norm(tokens, name="ln")
        model.compile(None, 3)
        self.assertEqual(out.shape, (3, 4, 7))
        self.assertEqual([p.name for p in model.parameter_nodes()], ["g", "b", "ln.weight", "ln.bias"])
        model.set_parameters(np.concatenate([gamma, beta, np.ones(7), np.zeros(7)]).astype(np.float32))
        model.set_input(tokens, x.astype(np.float32))
        model.forward()
        np.testing.assert_allclose(model.read(out), normalised * gamma + beta, rtol=1e-4, atol=1e-5)
        plain = (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(model.read(no_shift), plain * gamma, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(model.read(layer), plain, rtol=1e-4, atol=1e-5)

    def test_rms_norm(self):
        """x / sqrt(mean(x^2) + epsilon) * gamma over the last axis (F.rms_norm)."""
        x = (RNG.randn(3, 4, 7) * 2 + 1).astype(np.float64)
        gamma = RNG.randn(7)
        rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-2)
        model = bptrain.Model(context())
        tokens = model.input_sequence("tokens", 4, (7,))
        out = model.rms_norm_op(tokens, model.parameter("g", (7,)), epsilon=1e-2)
        layer = model.rms_norm(tokens, name="rms")
        model.compile(None, 3)
        self.assertEqual([p.name for p in model.parameter_nodes()], ["g", "rms.weight"])
        model.set_parameters(np.concatenate([gamma, np.ones(7)]).astype(np.float32))
        model.set_input(tokens, x.astype(np.float32))
        model.forward()
        np.testing.assert_allclose(model.read(out), x / rms * gamma, rtol=1e-4, atol=1e-5)
        rms = np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(model.read(layer), x / rms, rtol=1e-4, atol=1e-5)

    def test_softmax(self):
        x = RNG.randn(2, 3, 6, 4).astype(np.float32)
        _, out = run_op(lambda m, a: m.softmax(a), x)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
        # Causal, bottom-right aligned: row i sees columns j <= i + (4 - 6); rows 0 and 1 see none and are zeros.
        _, out = run_op(lambda m, a: m.softmax(a, causal=True), x)
        visible = np.arange(4)[None, :] <= np.arange(6)[:, None] - 2
        top = np.where(visible, x, -1e30).max(axis=-1, keepdims=True)
        e = np.exp(np.where(visible, x - top, -np.inf))
        expected = e / np.maximum(e.sum(axis=-1, keepdims=True), 1e-30)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
        self.assertTrue(np.all(out[:, :, :2] == 0))
        # A row of -inf is zeros, not NaN; -inf elements of another row are 0 and the rest still sum to 1.
        x[0, 0, 3, :] = -np.inf
        x[0, 0, 4, 1] = -np.inf
        _, out = run_op(lambda m, a: m.softmax(a), x)
        self.assertTrue(np.all(out[0, 0, 3] == 0))
        self.assertEqual(out[0, 0, 4, 1], 0)
        np.testing.assert_allclose(out[0, 0, 4].sum(), 1, rtol=1e-6)

    def test_scaled_dot_product_attention(self):
        q = RNG.randn(2, 5, 6).astype(np.float32)
        k, v = RNG.randn(2, 7, 6).astype(np.float32), RNG.randn(2, 7, 6).astype(np.float32)
        for causal in (False, True):
            _, out = run_op(lambda m, a, b, c: m.scaled_dot_product_attention(a, b, c, heads=3, causal=causal), q, k, v)
            heads = lambda x: x.reshape(2, -1, 3, 2).transpose(0, 2, 1, 3)  # (N, H, T, D)
            scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(2)
            if causal:  # bottom-right aligned: query i sees keys j <= i + 2
                scores = np.where(np.arange(7)[None, :] <= np.arange(5)[:, None] + 2, scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            expected = ((p / p.sum(axis=-1, keepdims=True)) @ heads(v)).transpose(0, 2, 1, 3).reshape(2, 5, 6)
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6, err_msg="causal=%s" % causal)
    def test_embedding(self):
        """Rows of the table by id, N(0, 0.02^2) from the layer, against NumPy's indexing."""
        model = bptrain.Model(context())
        ids = model.input_sequence("ids", 5, (), dtype="i32")
        out = model.embedding(ids, 13, 7, name="tok")
        model.compile(None, 4)
        self.assertEqual(out.shape, (4, 5, 7))
        table = model.state_dict()["tok.weight"]
        self.assertEqual(table.shape, (13, 7))
        self.assertLess(abs(float(table.std()) - 0.02), 0.006)
        values = RNG.randint(0, 13, size=(4, 5)).astype(np.int32)
        model.set_input(ids, values)
        model.forward()
        np.testing.assert_array_equal(model.read(out), table[values])
        values[2, 3] = 13
        model.set_input(ids, values)
        with self.assertRaisesRegex(bptrain.Error, r"embedding 'tok'.*id 13 at sample 2, token 3"):
            model.forward()

    def test_cross_entropy_options(self):
        """ignore_index and label_smoothing as keywords, against F.cross_entropy's formula in NumPy (float64)."""
        x = RNG.randn(3, 4, 6).astype(np.float32)
        y = RNG.randint(0, 6, size=(3, 4)).astype(np.int32)
        y[0, 1] = y[2, 3] = -1

        def loss_of(labels, **options):
            model = bptrain.Model(context())
            logits = model.input_sequence("logits", 4, (6,))
            ids = model.input_sequence("labels", 4, (), dtype="i32")
            model.compile(model.softmax_cross_entropy(logits, ids, **options), 3)
            model.set_input(logits, x)
            model.set_input(ids, labels)
            model.forward()
            return model.loss_value()

        def reference(labels, ignore, eps):
            z = x.astype(np.float64).reshape(-1, 6)
            lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
            keep = labels.reshape(-1) != ignore
            rows = np.arange(len(z))[keep]
            nll = lse[keep] - z[rows, labels.reshape(-1)[keep]]
            smooth = lse[keep] - z[keep].mean(1)
            return float(((1 - eps) * nll + eps * smooth).mean()) if keep.any() else 0.0

        self.assertAlmostEqual(loss_of(y, ignore_index=-1), reference(y, -1, 0.0), places=5)
        self.assertAlmostEqual(loss_of(y, ignore_index=-1, label_smoothing=0.2), reference(y, -1, 0.2), places=5)
        clean = np.where(y < 0, 0, y).astype(np.int32)
        self.assertAlmostEqual(loss_of(clean, label_smoothing=0.1), reference(clean, -100, 0.1), places=5)
        self.assertEqual(loss_of(np.full((3, 4), -1, np.int32), ignore_index=-1), 0.0)
        with self.assertRaisesRegex(bptrain.Error, r"label smoothing 2 is outside \[0, 1\]"):
            loss_of(clean, label_smoothing=2.0)

    def test_sequence_model_fits(self):
        """Per-token linear and cross-entropy over (batch, length) tokens: the loss falls, and no training
        accuracy is invented for per-token logits."""
        model = bptrain.Model(context())
        tokens = model.input_sequence("tokens", 4, (6,))
        labels = model.input_sequence("labels", 4, (), dtype="i32")
        logits = model.linear(tokens, 5)
        model.compile(model.softmax_cross_entropy(logits, labels), 8)
        self.assertEqual(logits.shape, (8, 4, 5))
        x = RNG.randn(32, 4, 6).astype(np.float32)
        y = (np.argmax(x[:, :, :5], axis=2)).astype(np.int32)
        history = model.fit(bptrain.Optimizer(model, learning_rate=0.2), x, y, epochs=4, batch_size=8)
        self.assertLess(history[-1]["train_loss"], history[0]["train_loss"])
        self.assertIsNone(history[-1].get("train_accuracy"))

    def test_transformer_block(self):
        """A tiny GPT from the block helper: predictable parameter names, GPT-style decay groups, and the loss
        falls on a learnable sequence (each token predicts the next of a fixed cycle)."""
        model = bptrain.Model(context())
        tokens = model.input_sequence("tokens", 6, (), dtype="i32")
        labels = model.input_sequence("labels", 6, (), dtype="i32")
        x = model.embedding(tokens, 7, 8, name="tok")
        x = model.add(x, model.parameter("pos.weight", (6, 8), init="normal_small"))
        x = model.transformer_block(x, heads=2, recompute=True, name="block0")
        logits = model.linear(model.layer_norm(x, name="ln_f"), 7, name="head")
        model.compile(model.softmax_cross_entropy(logits, labels), 8)
        names = [p.name for p in model.parameter_nodes()]
        self.assertIn("block0.attn.qkv.weight", names)
        self.assertIn("block0.mlp.proj.bias", names)
        self.assertEqual(model.node("block0.attn.qkv.weight").shape, (24, 8))
        start = RNG.randint(0, 7, size=(64, 1))
        x_ids = ((start + np.arange(6)) % 7).astype(np.int32)
        optimizer = bptrain.Optimizer(model, kind="adamw", learning_rate=0.02, weight_decay=0.1)
        optimizer.decay_only_matrices()
        history = model.fit(optimizer, x_ids, ((x_ids + 1) % 7).astype(np.int32), epochs=8, batch_size=8)
        self.assertLess(history[-1]["train_loss"], 0.5 * history[0]["train_loss"])
        with self.assertRaises(bptrain.Error):
            model_bad = bptrain.Model(context())
            flat = model_bad.input("flat", (8,))
            model_bad.transformer_block(flat, heads=2)

    def test_shorter_sequences(self):
        """A model declared for 6 tokens runs 3: causal, so each position's logits equal the full run's over the
        same prefix; they read back (batch, 3, vocabulary); a length past the declared one is refused."""
        model = bptrain.Model(context())
        tokens = model.input_sequence("tokens", 6, (), dtype="i32")
        positions = model.input_sequence("positions", 6, (), dtype="i32")
        x = model.add(model.embedding(tokens, 7, 8, name="tok"), model.embedding(positions, 6, 8, name="pos"))
        x = model.transformer_block(x, heads=2, name="block0")
        logits = model.linear(x, 7, name="head")
        model.compile(None, 4)
        ids = RNG.randint(0, 7, size=(4, 6)).astype(np.int32)
        where = np.tile(np.arange(6, dtype=np.int32), (4, 1))
        model.set_input(tokens, ids)
        model.set_input(positions, where)
        model.forward()
        full = model.read(logits)
        self.assertEqual(full.shape, (4, 6, 7))
        model.set_input(tokens, ids[:, :3])
        model.set_input(positions, where[:, :3])
        model.forward()
        short = model.read(logits)
        self.assertEqual(short.shape, (4, 3, 7))
        np.testing.assert_allclose(short, full[:, :3], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(model.read(tokens), ids[:, :3])
        model.set_input(tokens, ids)  # full length again, after a read of the input at 3
        model.set_input(positions, where)
        model.forward()
        np.testing.assert_array_equal(model.read(logits), full)
        with self.assertRaises(bptrain.Error):
            model.set_input(tokens, np.zeros((4, 7), np.int32))

    def test_batch_norm(self):
        x = (RNG.randn(8, 3, 4, 4) * 2 + 1).astype(np.float32)
        mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
        normalised = (x - mean) / np.sqrt(var + 1e-5)
        model, out = run_op(lambda m, a: m.batch_norm(a, name="bn"), x)
        self.assertTrue(model.training)
        np.testing.assert_allclose(out, normalised, rtol=1e-3, atol=1e-4)
        state = model.state_dict()
        # running = 0.9 * initial + 0.1 * batch (unbiased variance)
        np.testing.assert_allclose(state["bn.running_mean"], 0.1 * mean.ravel(), rtol=1e-4, atol=1e-5)
        unbiased = var.ravel() * x[:, 0].size / (x[:, 0].size - 1)
        np.testing.assert_allclose(state["bn.running_variance"], 0.9 + 0.1 * unbiased, rtol=1e-4)
        self.assertEqual([p.trainable for p in model.parameter_nodes()], [True, True, False, False])
        _, out = run_op(lambda m, a: m.batch_norm_relu(a), x)
        np.testing.assert_allclose(out, np.maximum(normalised, 0), rtol=1e-3, atol=1e-4)
        # the op with its parameters given: gamma 2, beta 1 (ones / zeros initialisers then written)
        def build(m, a):
            nodes = [m.parameter("g", (3,), "ones"), m.parameter("be", (3,), "ones"), m.buffer("rm", (3,)),
                     m.buffer("rv", (3,), "ones")]
            return m.batch_norm_op(a, *nodes, momentum=0.5)
        model, out = run_op(build, x)
        np.testing.assert_allclose(out, normalised + 1, rtol=1e-3, atol=1e-4)
        model.eval()
        model.forward()  # eval mode: running statistics (mean 0.5 * batch mean)
        running_mean = 0.5 * mean.ravel()
        running_var = 0.5 + 0.5 * unbiased
        expected = (x - running_mean[None, :, None, None]) / np.sqrt(running_var[None, :, None, None] + 1e-5) + 1
        np.testing.assert_allclose(model.read(model.nodes()[-1]), expected, rtol=1e-3, atol=1e-4)

    def test_dropout_and_modes(self):
        x = np.ones((4, 1000), np.float32)
        model, out = run_op(lambda m, a: m.dropout(a, 0.25), x)
        zeros = np.mean(out == 0)
        self.assertTrue(0.2 < zeros < 0.3, zeros)
        np.testing.assert_allclose(out[out != 0], 1 / 0.75, rtol=1e-6)
        model.eval()
        self.assertFalse(model.training)
        model.forward()
        np.testing.assert_array_equal(model.read(model.nodes()[-1]), x)
        model.train()
        self.assertTrue(model.training)

    def test_binary_stochastic(self):
        z = RNG.randn(3, 50).astype(np.float32)
        model, out = run_op(lambda m, a: m.binary_stochastic(a, estimator="sigmoid"), z)
        self.assertTrue(set(np.unique(out)) <= {0.0, 1.0})
        model.set_deterministic(True)
        model.forward()
        np.testing.assert_array_equal(model.read(model.nodes()[-1]), (z > 0).astype(np.float32))

    def test_losses(self):
        logits = RNG.randn(5, 4).astype(np.float32)
        labels = np.array([0, 3, 1, 2, 3], np.int32)
        model = bptrain.Model(context())
        node, label_node = model.input("x", (4,)), model.input("y", (), "i32")
        model.compile(model.softmax_cross_entropy(node, label_node), 5)
        self.assertIs(model.logits, node)
        model.set_input(node, logits)
        model.set_input(label_node, labels)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        self.assertAlmostEqual(model.forward(), -log_softmax[np.arange(5), labels].mean(), places=5)
        target = RNG.randn(5, 4).astype(np.float32)
        model = bptrain.Model(context())
        prediction, target_node = model.input("p", (4,)), model.input("t", (4,))
        model.compile(model.mse_loss(prediction, target_node), 5)
        model.set_input(prediction, logits)
        model.set_input(target_node, target)
        self.assertAlmostEqual(model.forward(), float(np.mean((logits - target) ** 2)), places=5)

    def test_sequential_and_blocks(self):
        model = bptrain.Model(context())
        images = model.input("images", (1, 28, 28))
        logits = model.sequential(images, [("conv2d", {"units": 6, "kernel": 5, "padding": 2}), "relu",
                                           ("max_pool", {"kernel": 2}), ("conv2d", {"units": 16, "kernel": 5}), "relu",
                                           ("max_pool", {"kernel": 2}), "flatten", ("linear", {"units": 120}), "relu",
                                           ("linear", {"units": 84}), "relu", ("linear", {"units": 10})], "lenet")
        model.compile(None, 2)
        self.assertEqual(len(model.parameters()), 61706)  # LeNet-5's parameter count
        self.assertEqual(logits.shape, (2, 10))
        self.assertEqual(logits.name, "lenet11.fc")
        model = bptrain.Model(context())
        x = model.input("x", (8, 8, 8))
        block = model.resnet_block(model.resnet_block(x, 8, name="b1"), 16, stride=2, name="b2")
        model.compile(None, 1)
        self.assertEqual(block.shape, (1, 16, 4, 4))
        names = [node.name for node in model.nodes()]
        self.assertIn("b2.shortcut_bn", names)
        self.assertNotIn("b1.shortcut", names)
        self.assertEqual(model.node("b2.add").op, "add_relu")


def small_classifier(ctx=None, max_batch=8, keep_all_values=False):
    model = bptrain.Model(ctx or context())
    x, y = model.input("x", (4,)), model.input("y", (), "i32")
    if keep_all_values:
        model.set_precision(keep_all_values=True)
    hidden = model.relu(model.linear(x, 8, name="fc1"), name="relu1")
    model.compile(model.softmax_cross_entropy(model.linear(hidden, 3, name="fc2"), y), max_batch)
    return model, x, y


def batch(count=8):
    """count samples of 4 features (the same ones for the same count) and labels 0, 1, 2, 0, ..."""
    return np.random.RandomState(count).randn(count, 4).astype(np.float32), (np.arange(count) % 3).astype(np.int32)


class Training(unittest.TestCase):
    def test_gradients_and_clipping(self):
        model, x, y = small_classifier()
        features, labels = batch()
        model.set_input(x, features)
        model.set_input(y, labels)
        model.forward()
        model.backward()
        gradients = model.gradients()
        self.assertEqual(gradients.shape, model.parameters().shape)
        # central differences agree with the analytic gradient: the loss is smooth in fc2's weight and bias
        # (fc1's would cross ReLU kinks)
        values = model.parameters()
        epsilon = 1e-2
        for index in (40, 51, len(values) - 1):
            shifted = values.copy()
            shifted[index] += epsilon
            model.set_parameters(shifted)
            up = model.forward()
            shifted[index] -= 2 * epsilon
            model.set_parameters(shifted)
            down = model.forward()
            self.assertAlmostEqual((up - down) / (2 * epsilon), gradients[index], delta=2e-3)
        model.set_parameters(values)
        model.forward()
        model.backward()
        norm = model.clip_gradient_norm(1e-3)
        self.assertAlmostEqual(norm, float(np.linalg.norm(gradients)), places=4)
        self.assertAlmostEqual(float(np.linalg.norm(model.gradients())), 1e-3, places=6)
        self.assertAlmostEqual(model.node("fc1.weight").gradient_norm(),
                               float(np.linalg.norm(model.gradients()[:32])), places=6)
        model.backward(accumulate=True)
        np.testing.assert_allclose(model.gradients(), gradients * (1 + 1e-3 / norm), rtol=1e-4, atol=1e-7)
        model.clip_gradient_value(1e-4)
        self.assertLessEqual(float(np.abs(model.gradients()).max()), 1e-4)
        model.zero_gradients()
        self.assertEqual(float(np.abs(model.gradients()).max()), 0.0)

    def test_optimizer_step_matches_sgd(self):
        model, x, y = small_classifier()
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.5)
        features, labels = batch()
        model.set_input(x, features)
        model.set_input(y, labels)
        before = model.parameters()
        model.forward()
        model.backward()
        gradients = model.gradients()
        optimizer.step()
        np.testing.assert_allclose(model.parameters(), before - 0.5 * gradients, rtol=1e-5, atol=1e-7)
        self.assertEqual(optimizer.steps, 1)
        for kind in ("adam", "adamw"):
            bptrain.Optimizer(model, kind, learning_rate=1e-3, weight_decay=0.01)

    def test_schedules(self):
        cosine = bptrain.Schedule("cosine", base_learning_rate=0.1, warmup_steps=10, warmup_start_factor=0.0,
                                  total_steps=100, minimum_learning_rate=0.01)
        self.assertAlmostEqual(cosine.learning_rate(0), 0.0, places=6)
        self.assertAlmostEqual(cosine.learning_rate(5), 0.05, places=6)
        for t in (0, 25, 50, 100):
            expected = 0.01 + 0.09 * (1 + math.cos(math.pi * t / 100)) / 2
            self.assertAlmostEqual(cosine.learning_rate(10 + t), expected, places=6)
        step = bptrain.Schedule("step", base_learning_rate=1.0, step_size=3, gamma=0.5)
        self.assertEqual([step.learning_rate(s) for s in range(7)], [1, 1, 1, 0.5, 0.5, 0.5, 0.25])
        expect(bptrain.InvalidArgumentError, step.learning_rate, -1)
        expect(bptrain.InvalidArgumentError, bptrain.Schedule, "exponential")
        model, x, y = small_classifier()
        optimizer = bptrain.Optimizer(model, "sgd", schedule=step)
        features, labels = batch()
        for _ in range(4):
            model.train_step(optimizer, features, labels)
        self.assertEqual(optimizer.learning_rate, 0.5)

    def test_parameter_groups(self):
        model, x, y = small_classifier()
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1, weight_decay=0.1)
        optimizer.set_group(["fc1.weight", model.node("fc1.bias")], learning_rate_scale=0.0, weight_decay=0.0)
        optimizer.no_decay_on_vectors()
        before = model.state_dict()
        model.train_step(optimizer, *batch())
        after = model.state_dict()
        np.testing.assert_array_equal(after["fc1.weight"], before["fc1.weight"])
        np.testing.assert_array_equal(after["fc1.bias"], before["fc1.bias"])
        self.assertFalse(np.array_equal(after["fc2.weight"], before["fc2.weight"]))

    def test_fit_on_arrays_and_metrics(self):
        model, x, y = small_classifier(max_batch=16)
        features, labels = batch(64)
        features[np.arange(64), labels] += 3  # separable
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1, momentum=0.9)
        seen = []
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "metrics.csv")
            history = model.fit(optimizer, features, labels, epochs=5, metrics=path, evaluation=(features, labels),
                                callback=seen.append, clip_norm=10.0)
            with open(path) as file:
                rows = file.read().splitlines()
        self.assertEqual(len(rows), 1 + 5 * 4 + 5)
        self.assertEqual(seen, history)
        self.assertGreater(history[-1]["test_accuracy"], 0.9)
        self.assertLess(history[-1]["train_loss"], history[0]["train_loss"])
        predictions = model.predict(features)
        self.assertIsInstance(predictions, np.ndarray)
        self.assertEqual(predictions.shape, (64, 3))
        self.assertEqual(np.mean(predictions.argmax(axis=1) == labels), model.evaluate(features, labels)["accuracy"])


class Precision(unittest.TestCase):
    def test_policy(self):
        for dtype, scale in (("bf16", 1.0), ("f16", 65536.0)):
            model = bptrain.Model(context())
            x, y = model.input("x", (4,)), model.input("y", (), "i32")
            model.set_precision(dtype, saved_activation_storage="bf16")
            model.compile(model.softmax_cross_entropy(model.linear(x, 3), y), 8)
            self.assertEqual(model.loss_scale, scale)
            optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1)
            self.assertTrue(math.isfinite(model.train_step(optimizer, *batch())))
            self.assertEqual(model.skipped_steps, 0)
        expect(bptrain.DtypeError, bptrain.Model(context()).set_precision, "f64")

    def test_16bit_storage(self):
        """store_activations_16bit reaches the library: about half the activation bytes, the same losses."""
        losses, memory = {}, {}
        for store in (False, True):
            model = bptrain.Model(context())
            x, y = model.input("x", (4,)), model.input("y", (), "i32")
            model.set_precision("bf16", store_activations_16bit=store)
            model.compile(model.softmax_cross_entropy(model.linear(model.relu(model.linear(x, 16)), 3), y), 8)
            optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1)
            losses[store] = [model.train_step(optimizer, *batch()) for _ in range(3)]
            memory[store] = model.memory()
        self.assertEqual(losses[True], losses[False])
        self.assertLess(memory[True]["activation_bytes"], 0.6 * memory[False]["activation_bytes"])

    def test_option_structs_are_the_library_s(self):
        """Every option struct the binding mirrors is as long as the library's: each default sets its size
        field to the C sizeof, and a shorter mirror let the library write past it (bpt_precision_options lost
        store_activations_16bit that way)."""
        import ctypes
        from bptrain import _native
        checked = 0
        for table in (_native._PROTOTYPES, _native._OPTIONAL_PROTOTYPES):
            for name, (result, arguments) in table.items():
                fields = getattr(result, "_fields_", None)
                if not name.endswith("_default") or not fields or fields[0][0] != "size" or not _native.has(name):
                    continue
                value = getattr(_native.lib, name)(*[0] * len(arguments))
                self.assertEqual(value.size, ctypes.sizeof(result), name)
                checked += 1
        self.assertGreater(checked, 10)

    def test_number_formats(self):
        ctx = context()
        values = np.array([1.0, -2.0, 0.5, 65504.0, 1e6], np.float32)
        bits = ctx.convert(values, "f32", "f16")
        self.assertEqual(bits.dtype, np.uint16)
        self.assertEqual(list(bits[:4]), [0x3C00, 0xC000, 0x3800, 0x7BFF])
        self.assertEqual(bits[4], 0x7C00)  # beyond the range: infinity
        self.assertEqual(ctx.convert(values, "f32", "f16", saturate=True)[4], 0x7BFF)
        np.testing.assert_array_equal(ctx.convert(bits[:4], "f16", "f32"), values[:4])
        self.assertEqual(list(ctx.convert(values[:3], "f32", "bf16")), [0x3F80, 0xC000, 0x3F00])
        self.assertEqual(bptrain.dtype_max_finite("f16"), 65504.0)
        self.assertEqual(bptrain.dtype_max_finite("fp8_e4m3"), 448.0)
        self.assertEqual(bptrain.dtype_size("bf16"), 2)
        self.assertEqual(ctx.fp8_scale([1.0, -3.0]), 128.0)  # 3 * 128 <= 448 < 3 * 256
        expect(bptrain.DtypeError, ctx.convert, values, "f32", "f128")


class Diagnostics(unittest.TestCase):
    def test_anomaly(self):
        model, x, y = small_classifier()
        features, labels = batch()
        features[2, 1] = np.nan
        self.assertFalse(model.anomaly_detection)
        model.anomaly_detection = True
        self.assertTrue(model.anomaly_detection)
        model.set_input(x, features)
        model.set_input(y, labels)
        error = expect(bptrain.NumericError, model.forward)
        self.assertIn("anomaly", error.message)
        self.assertTrue(model.parameter_check)
        model.parameter_check = False
        self.assertFalse(model.parameter_check)

    def test_profiler(self):
        ctx = context()
        model, x, y = small_classifier(ctx)
        optimizer = bptrain.Optimizer(model, "sgd")
        self.assertFalse(ctx.profiling)
        ctx.profile()
        self.assertTrue(ctx.profiling)
        model.train_step(optimizer, *batch())
        self.assertIn("fc1", ctx.profile_summary())
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "trace.json")
            ctx.write_profile_trace(path)
            with open(path) as file:
                trace = json.load(file)
            self.assertTrue(trace)
            expect(bptrain.FileError, ctx.write_profile_trace, os.path.join(directory, "no", "such", "trace.json"))
        ctx.profile_reset()
        self.assertNotIn("fc1", ctx.profile_summary())

    def test_introspection(self):
        model, x, y = small_classifier()
        self.assertEqual([(node.name, node.op) for node in model.nodes()][:4],
                         [("x", "input"), ("y", "input"), ("fc1.weight", "parameter"), ("fc1.bias", "parameter")])
        features, labels = batch()
        model.set_input(x, features)
        model.set_input(y, labels)
        model.forward()
        model.backward()  # the ReLU's output is read by backward, so it is still there
        relu = model.node("relu1")
        statistics = relu.statistics()
        self.assertEqual(statistics["count"], 64)
        hidden = np.maximum(features @ model.state_dict()["fc1.weight"].T, 0)
        self.assertAlmostEqual(statistics["zero_fraction"], float(np.mean(hidden == 0)), places=6)
        self.assertAlmostEqual(statistics["mean"], float(hidden.mean()), places=5)
        memory = model.memory()
        self.assertEqual(memory["max_batch"], 8)
        self.assertGreater(memory["parameter_bytes"], 0)
        expect(bptrain.InvalidArgumentError, model.node, "no-such-node")

    def test_backends(self):
        self.assertIn("cpu", bptrain.backends())
        self.assertEqual(bptrain.backend_available("cpu"), (True, ""))
        available, reason = bptrain.backend_available("cuda") if "cuda" in bptrain.backends() else (False, "x")
        self.assertTrue(available or reason)
        self.assertEqual(bptrain.choose_backend(("no-such-backend", "cpu")), "cpu")
        self.assertIn(bptrain.Context("auto").backend, ("cuda", "cpu"))
        expect(bptrain.InvalidArgumentError, bptrain.backend_available, "no-such-backend")
        expect(bptrain.UnsupportedError, bptrain.choose_backend, ("no-such-backend",))
        self.assertEqual(bptrain.Context(threads=1, cpu_fallback=True).threads, 1)

    def test_compute_info(self):
        info = bptrain.compute_info()
        self.assertIn(info["self_check"].split()[0], ("passed", "failed:", "not"))
        self.assertIn(info["blas_core_choice"], info["summary"]) if info["blas_core_choice"] else None
        self.assertTrue(info["gemm"] and info["bf16_gemm"])
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith("flags")), "").split()
        self.assertEqual(info["avx2"], int("avx2" in flags))
        self.assertEqual(info["avx512_bf16"], int("avx512_bf16" in flags))

    def test_versions(self):
        self.assertEqual(bptrain.__version__, bptrain.version())
        major, minor, patch = (int(part) for part in bptrain.version().split("."))
        self.assertEqual(bptrain.version_number(), major * 10000 + minor * 100 + patch)
        self.assertEqual(bptrain.abi_version(), 0)
        self.assertTrue(os.path.exists(bptrain.library_path()) or "/" not in bptrain.library_path())

    def test_import_error_names_the_documented_install(self):
        # docs/python.md leads with `pip install .` from the checkout's root; the error must say the same.
        import subprocess
        environment = dict(os.environ, BPTRAIN_LIBRARY="/no/such/dir/libbptrain.so.0")
        run = subprocess.run([sys.executable, "-c", "import bptrain"], capture_output=True, text=True,
                             env=environment, timeout=120)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("pip install . in the checkout's root", run.stderr)
        self.assertNotIn("./python", run.stderr)


class Folding(unittest.TestCase):
    def test_fold_batch_norm_keeps_predictions(self):
        model = bptrain.Model(context())
        x = model.input("x", (2, 6, 6))
        out = model.global_avg_pool(model.batch_norm(model.conv2d(x, 4, 3, bias=False, name="conv"), name="bn"))
        model.compile(None, 4)
        images = RNG.randn(4, 2, 6, 6).astype(np.float32)
        for _ in range(3):  # move the running statistics away from their initial values
            model.set_input(x, images)
            model.forward()
        before = model.predict(images, output=out)
        self.assertEqual(model.fold_batch_norm(), 1)
        self.assertFalse(model.training)
        np.testing.assert_allclose(model.predict(images, output=out), before, rtol=1e-4, atol=1e-5)


class Checkpoints(unittest.TestCase):
    def test_round_trip_with_optimizer(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.ckpt")
            model, x, y = small_classifier()
            optimizer = bptrain.Optimizer(model, "adam", learning_rate=0.01)
            features, labels = batch()
            for _ in range(3):
                model.train_step(optimizer, features, labels)
            model.save(path, optimizer=optimizer, epoch=2, step=7)
            expected_next = model.train_step(optimizer, features, labels)
            expected_parameters = model.parameters()
            clone, _, _ = small_classifier()
            clone_optimizer = bptrain.Optimizer(clone, "adam", learning_rate=0.01)
            report = clone.load(path, optimizer=clone_optimizer)
            self.assertEqual((report.epoch, report.step), (2, 7))
            self.assertEqual(report.loaded, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
            self.assertEqual((report.skipped, report.missing), ([], []))
            self.assertEqual(clone_optimizer.steps, 3)
            self.assertEqual(clone.train_step(clone_optimizer, features, labels), expected_next)
            np.testing.assert_array_equal(clone.parameters(), expected_parameters)

    def test_refusals(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.ckpt")
            model, _, _ = small_classifier()
            model.save(path)
            other = bptrain.Model(context())
            x, y = other.input("x", (4,)), other.input("y", (), "i32")
            other.compile(other.softmax_cross_entropy(other.linear(other.linear(x, 9, name="fc1"), 3, name="fc2"),
                                                      y), 8)
            before = other.parameters()
            error = expect(bptrain.Error, other.load, path)
            self.assertIn(error.status_name, ("SHAPE", "INVALID_ARGUMENT"))
            self.assertIn(path, error.message)
            if bptrain.has_load_options():  # a library that matches by name says which parameter differs
                self.assertIn("fc1.weight", error.message)
            np.testing.assert_array_equal(other.parameters(), before)  # a refused file changes nothing
            expect(bptrain.FileError, model.load, os.path.join(directory, "absent.ckpt"))
            with open(path, "r+b") as file:
                file.truncate(40)
            expect(bptrain.FormatError, model.load, path)
            expect(bptrain.StateError, bptrain.Model(context()).save, path)

    @unittest.skipUnless(bptrain.has_load_options(),
                         "this libbptrain has no bpt_checkpoint_load_with_options (non-strict loading)")
    def test_non_strict(self):
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.ckpt")
            model, _, _ = small_classifier()
            model.save(path)
            inference = bptrain.Model(context())
            x = inference.input("x", (4,))
            hidden = inference.relu(inference.linear(x, 8, name="fc1"))
            logits = inference.linear(inference.linear(hidden, 3, name="fc2"), 2, name="extra")
            inference.compile(None, 8)
            expect(bptrain.Error, inference.load, path)
            report = inference.load(path, strict=False)
            self.assertEqual(sorted(report.loaded), ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"])
            self.assertEqual(sorted(report.missing), ["extra.bias", "extra.weight"])
            self.assertEqual(report.skipped, [])
            np.testing.assert_array_equal(inference.state_dict()["fc2.weight"], model.state_dict()["fc2.weight"])
            self.assertEqual(logits.shape, (8, 2))
            wider = bptrain.Model(context())
            x, y = wider.input("x", (4,)), wider.input("y", (), "i32")
            hidden = wider.relu(wider.linear(x, 9, name="fc1"))
            wider.compile(wider.softmax_cross_entropy(wider.linear(hidden, 3, name="fc2"), y), 8)
            report = wider.load(path, strict=False)
            self.assertEqual(report.loaded, ["fc2.bias"])
            self.assertIn("fc1.weight", report.skipped)
            self.assertIn("shape", report.reasons["fc1.weight"])


class Onnx(unittest.TestCase):
    @unittest.skipUnless(bptrain.has_onnx_export(), "this libbptrain has no bpt_graph_export_onnx")
    def test_export(self):
        model, _, _ = small_classifier()
        features, _ = batch()
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.onnx")
            model.export_onnx(path, softmax=True)
            self.assertGreater(os.path.getsize(path), 4 * len(model.parameters()))
            try:
                import onnxruntime
            except ImportError:
                print("SKIP (ONNX Runtime comparison): no onnxruntime in %s (pip install onnxruntime)" %
                      sys.executable)
            else:
                session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
                (probabilities,) = session.run(None, {"x": features})
                logits = model.predict(features)
                expected = np.exp(logits - logits.max(axis=1, keepdims=True))
                np.testing.assert_allclose(probabilities, expected / expected.sum(axis=1, keepdims=True),
                                           rtol=1e-4, atol=1e-6)
            expect(bptrain.FileError, model.export_onnx, os.path.join(directory, "no", "such", "model.onnx"))
        stochastic = bptrain.Model(context())
        stochastic.binary_stochastic(stochastic.input("x", (4,)), name="bsn")
        stochastic.compile(None, 1)
        error = expect(bptrain.UnsupportedError, stochastic.export_onnx, os.path.join(tempfile.gettempdir(), "x"))
        self.assertIn("bsn", error.message)
        expect(bptrain.StateError, bptrain.Model(context()).export_onnx, "never-written.onnx")


class Datasets(unittest.TestCase):
    def test_arrays_order_and_classes(self):
        with tempfile.TemporaryDirectory() as directory:
            write_idx(directory, count=10, height=3, width=2)
            ctx = context()
            data = bptrain.Dataset(ctx, directory, "train", mean=0.5, std=0.25)
            self.assertEqual((len(data), data.sample_size, data.sample_shape, data.classes), (10, 6, (3, 2), 3))
            images, labels = data.arrays(chunk=4)  # chunks of 4: a short last one
            raw = (np.arange(60) % 256).reshape(10, 3, 2).astype(np.float32)
            np.testing.assert_allclose(images, (raw / 255 - 0.5) / 0.25, rtol=1e-6)
            np.testing.assert_array_equal(labels, np.arange(10) % 3)
            data.shuffle(3)
            shuffled_images, shuffled_labels = data.arrays()
            order = np.argsort(shuffled_images[:, 0, 0])
            self.assertFalse(np.array_equal(order, np.arange(10)))
            np.testing.assert_array_equal(shuffled_labels[order], labels)
            data.reset_order()
            np.testing.assert_array_equal(data.labels(), labels)
            self.assertEqual(data.batch_count(4), 3)
            self.assertEqual(data.check_classes(), 3)
            only_images = bptrain.Dataset(ctx, images=os.path.join(directory, "train-images-idx3-ubyte"))
            self.assertIsNone(only_images.labels())
            np.testing.assert_allclose(only_images.images(), raw / 255, rtol=1e-6)
            expect(bptrain.FileError, bptrain.Dataset, ctx, directory, "t10k")
            # The library's evaluation (bpt_evaluate) against NumPy on the predictions of a random classifier.
            model = bptrain.Model(ctx)
            x = model.input("x", (3, 2))
            y = model.input("y", (), dtype="i32")
            logits = model.linear(model.flatten(x), 3, name="head")
            model.compile(model.softmax_cross_entropy(logits, y), max_batch=4)
            self.assertIn("head", model.summary())
            measured = model.evaluate_dataset(data, top_k=2, confusion_matrix=True)
            scores = model.predict(images)
            predicted = scores.argmax(axis=1)
            self.assertEqual(measured["samples"], 10)
            self.assertAlmostEqual(measured["accuracy"], float(np.mean(predicted == labels)))
            top2 = np.argsort(-scores, axis=1, kind="stable")[:, :2]
            self.assertAlmostEqual(measured["top_k_accuracy"], float(np.mean((top2 == labels[:, None]).any(axis=1))))
            expected = np.zeros((3, 3), dtype=np.int64)
            np.add.at(expected, (labels, predicted), 1)
            np.testing.assert_array_equal(measured["confusion_matrix"], expected)
            write_idx(directory, count=4, split="bad", labels=[0, 1, 7, 0])
            bad = bptrain.Dataset(ctx, directory, "bad")
            expect(bptrain.FormatError, bad.check_classes)
            truncated = os.path.join(directory, "truncated-images-idx3-ubyte")
            with open(os.path.join(directory, "train-images-idx3-ubyte"), "rb") as source, \
                    open(truncated, "wb") as file:
                file.write(source.read()[:30])
            expect(bptrain.FormatError, bptrain.Dataset, ctx, images=truncated)


class Backends(unittest.TestCase):
    def test_fpga_sim(self):
        ctx = bptrain.Context("fpga-sim", threads=1)
        ctx.configure_fpga(format="fixed", word_bits=16, integer_bits=6, clock_mhz=250.0)
        model, x, y = small_classifier(ctx)
        model.train_step(bptrain.Optimizer(model, "sgd"), *batch())
        report = ctx.fpga_report()
        self.assertGreater(report["cycles"], 0)
        self.assertAlmostEqual(report["seconds"], report["cycles"] / 250e6, delta=report["seconds"] * 1e-6)
        kernels = ctx.fpga_kernel_reports()
        self.assertIn("gemm", [kernel["name"] for kernel in kernels])
        self.assertIn("gemm", ctx.fpga_report_text())
        ctx.fpga_reset_counters()
        self.assertEqual(ctx.fpga_report()["cycles"], 0)
        expect(bptrain.InvalidArgumentError, ctx.configure_fpga, format="fixed", word_bits=99)
        expect(bptrain.InvalidArgumentError, ctx.configure_fpga, no_such_option=1)
        expect(bptrain.InvalidArgumentError, context().configure_fpga)

    def test_speculative(self):
        model, x, y = small_classifier(keep_all_values=True)  # the trainer reads every value after forward
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1)
        trainer = bptrain.SpeculativeTrainer(model, optimizer, threshold=0.5, threads=1)
        features, labels = batch()
        loss = trainer.train_batch(features, labels)
        self.assertTrue(math.isfinite(loss) and loss > 0)
        counters = trainer.counters()
        self.assertEqual(counters["samples"], 8)
        self.assertEqual(counters["hits"] + counters["fallbacks"], 8)
        self.assertEqual(counters["cold_fallbacks"], 3)  # the first sample of each of the 3 labels
        self.assertEqual(optimizer.steps, 1)
        self.assertAlmostEqual(trainer.threshold, 0.5)
        trainer.reset_counters()
        trainer.clear_cache()
        self.assertEqual(trainer.counters()["samples"], 0)


class Coverage(unittest.TestCase):
    def test_every_public_function_is_declared(self):
        """Each BPT_API function of include/bptrain/*.h (but the multi-process comm.h) has its prototype set:
        an undeclared one would be called with ctypes' int defaults, truncating 64-bit handles."""
        import glob
        import re
        from support import REPOSITORY
        from bptrain._native import lib
        names = set()
        for header in glob.glob(os.path.join(REPOSITORY, "include", "bptrain", "*.h")):
            if os.path.basename(header) in ("comm.h", "comm_mpi.h"):
                continue
            with open(header) as file:
                names |= set(re.findall(r"BPT_API [^;]*?\b(bpt_\w+)\s*\(", file.read(), re.S))
        self.assertGreater(len(names), 150)
        undeclared = sorted(name for name in names if not hasattr(lib, name) or getattr(lib, name).argtypes is None)
        self.assertEqual(undeclared, [])


class Errors(unittest.TestCase):
    def test_misuse_raises_bptrain_errors(self):
        model = bptrain.Model(context())
        x, y = model.input("x", (4,)), model.input("y", (), "i32")
        logits = model.linear(x, 3)
        loss = model.softmax_cross_entropy(logits, y)
        optimizer_error = expect(bptrain.StateError, bptrain.Optimizer, model)
        self.assertIn("compile", optimizer_error.message)
        error = expect(bptrain.StateError, model.fit, None, np.zeros((4, 4)), np.zeros(4))
        self.assertIn("compile", error.message)
        expect(bptrain.StateError, model.predict, np.zeros((1, 4)))
        expect(bptrain.InvalidArgumentError, model.relu, 3)
        expect(bptrain.InvalidArgumentError, model.linear, x)
        expect(bptrain.InvalidArgumentError, model.linear, x, 3, no_such=1)
        expect(bptrain.InvalidArgumentError, model.linear, x, 3, init="uniformish")
        expect(bptrain.InvalidArgumentError, model.conv2d_op, x, logits, stride="wide")
        expect(bptrain.InvalidArgumentError, model.input, "x", (4,))  # duplicate name
        expect(bptrain.DtypeError, model.input, "z", (4,), dtype="f64")
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("conv3d", {})])
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("linear", {"width": 3})])
        model.compile(loss, 4)
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, "rmsprop")
        optimizer = bptrain.Optimizer(model)
        expect(bptrain.InvalidArgumentError, model.fit, "sgd", np.zeros((4, 4)), np.zeros(4))
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, np.zeros((4, 4)))
        expect(bptrain.ShapeError, model.fit, optimizer, np.zeros((4, 5)), np.zeros(4))
        expect(bptrain.ShapeError, model.fit, optimizer, np.zeros((4, 4)), np.zeros(3))
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, np.zeros((4, 4)), np.zeros(4), batch_size=5)
        expect(bptrain.ShapeError, model.train_step, optimizer, np.zeros((5, 4)), np.zeros(5))
        expect(bptrain.InvalidArgumentError, model.train_step, optimizer, [["a"] * 4], [0])
        expect(bptrain.InvalidArgumentError, model.train_step, optimizer, np.zeros((1, 4)), [7])  # label >= 3
        expect(bptrain.InvalidArgumentError, model.set_input, logits, np.zeros((1, 3)))
        expect(bptrain.StateError, model.relu, x)  # after compile
        expect(bptrain.InvalidArgumentError, bptrain.Context, "no-such-backend")
        expect(bptrain.InvalidArgumentError, bptrain.Dataset, model.context)
        expect(bptrain.InvalidArgumentError, optimizer.set_schedule, 0.1)
        expect(bptrain.InvalidArgumentError, optimizer.set_group, ["no-such-parameter"])
        # every status maps to its class, and each class is a bptrain.Error
        classes = [bptrain.InvalidArgumentError, bptrain.OutOfMemoryError, bptrain.FileError, bptrain.FormatError,
                   bptrain.ShapeError, bptrain.DtypeError, bptrain.UnsupportedError, bptrain.DeviceError,
                   bptrain.NumericError, bptrain.StateError, bptrain.CommError, bptrain.InternalError]
        from bptrain._errors import error as make
        for status, error_class in enumerate(classes, start=1):
            made = make(status, "m")
            self.assertIs(type(made), error_class)
            self.assertEqual((made.status, made.message, made.status_name), (status, "m", bptrain.STATUS_NAMES[status]))

    def test_python_arguments_are_checked(self):
        """Arguments ctypes would have truncated, stringified or tripped over raise InvalidArgumentError."""
        ctx = context()
        model = bptrain.Model(ctx)
        x, y = model.input("x", (4,)), model.input("y", (), "i32")
        expect(bptrain.InvalidArgumentError, model.linear, x, 2.5)  # was a 2-unit layer
        expect(bptrain.InvalidArgumentError, model.linear, x, "3")  # was a 3-unit layer
        expect(bptrain.InvalidArgumentError, model.max_pool2d, x, True)
        expect(bptrain.InvalidArgumentError, model.leaky_relu, x, "0.1")
        expect(bptrain.InvalidArgumentError, model.input, "z", (4.7,))
        expect(bptrain.InvalidArgumentError, model.input, None, (4,))  # was an input named "None"
        expect(bptrain.InvalidArgumentError, model.parameter, "", (4,))
        expect(bptrain.InvalidArgumentError, model.node, None)
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("linear", {"units": 2.5})])  # was TypeError
        expect(bptrain.InvalidArgumentError, model.sequential, x, [("dropout", {"rate": "0.5"})])
        self.assertEqual(model.linear(x, np.int64(3), name="ok").shape[-1], 3)  # NumPy integers are integers
        logits = model.linear(model.relu(model.node("ok")), 3)
        expect(bptrain.InvalidArgumentError, model.compile, model.softmax_cross_entropy(logits, y), "4")
        model.compile(model.node("loss"), 4)
        expect(bptrain.InvalidArgumentError, model.read, None)  # was AttributeError
        expect(bptrain.InvalidArgumentError, model.read, "ok")
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, None)
        expect(bptrain.InvalidArgumentError, bptrain.Optimizer, model, "sgd", learning_rate="0.1")  # was TypeError
        optimizer = bptrain.Optimizer(model)
        with self.assertRaises(bptrain.InvalidArgumentError):
            optimizer.learning_rate = "fast"
        features, labels = RNG.randn(6, 4).astype(np.float32), np.arange(6, dtype=np.int32) % 3
        expect(bptrain.InvalidArgumentError, model.predict, features, output="logits")  # was AttributeError
        expect(bptrain.InvalidArgumentError, model.predict, features, batch_size=-1)  # returned np.empty's garbage
        expect(bptrain.InvalidArgumentError, model.predict, features, batch_size=0)
        expect(bptrain.InvalidArgumentError, model.evaluate, features, labels, batch_size=2.5)
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, features, labels, epochs=-1)  # trained nothing
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, features, labels, epochs=1.5)  # was TypeError
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, features, labels, batch_size=0)  # was max_batch
        self.assertEqual(len(model.fit(optimizer, features, labels, epochs=np.int32(2), batch_size=3)), 2)
        # Labels that are not 32-bit integers: NumPy's cast made 0.5 a 0 and 2**32 + 1 a 1, silently.
        # The message says which: "does not fit int32" read as an overflow for 1.5 and NaN too (issue 29).
        for bad, why in ((np.full(6, 0.5), "value 0.5 (index 0) is not an integer"),
                         (np.full(6, 2 ** 32 + 1, np.int64),
                          "value 4294967297 (index 0) is outside int32's range [-2147483648, 2147483647]"),
                         (np.full(6, 1e10), "value 10000000000.0 (index 0) is outside int32's range"),
                         (np.full(6, np.nan), "value nan (index 0) is not a number"),
                         ([0, 1, np.inf, 2, 0, 1], "value inf (index 2) is infinite, not an integer"),
                         ([0, 1, 2, 1.5, 0, 1], "input 'y' is i32: value 1.5 (index 3) is not an integer")):
            error = expect(bptrain.InvalidArgumentError, model.evaluate, features, bad)
            self.assertIn(why, error.message)
        self.assertEqual(model.evaluate(features, labels.astype(np.float64))["samples"], 6)  # 1.0 is an integer
        self.assertEqual(model.evaluate(features, list(labels))["samples"], 6)
        with tempfile.TemporaryDirectory() as directory:
            cwd = os.getcwd()
            os.chdir(directory)
            try:
                for path in (None, 3, b"", "a\0b"):  # None and 3 were saved as files "None" and "3"
                    expect(bptrain.InvalidArgumentError, model.save, path)
                    expect(bptrain.InvalidArgumentError, model.load, path)
                expect(bptrain.InvalidArgumentError, model.save, "m.ckpt", optimizer="sgd")
                expect(bptrain.InvalidArgumentError, model.save, "m.ckpt", epoch=1.5)
                expect(bptrain.InvalidArgumentError, ctx.write_profile_trace, None)
                expect(bptrain.FileError, model.fit, optimizer, features, labels,
                       metrics=os.path.join(directory, "no", "such", "m.csv"))  # was FileNotFoundError
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, ctx, images=features)  # was a path "[[0.1 ..."
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, None, directory, "train")
                write_idx(directory)
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, ctx, directory, "train", limit=0)  # was 1 batch
                expect(bptrain.InvalidArgumentError, bptrain.Dataset, ctx, directory, "train", mean="0.5")
                data = bptrain.Dataset(ctx, directory, "train")
                expect(bptrain.InvalidArgumentError, data.check_classes, "t10k")  # was AttributeError
                expect(bptrain.InvalidArgumentError, data.batch_count, 0)  # was 0 batches
                data.close()
                for name in os.listdir(directory):
                    os.unlink(os.path.join(directory, name))
                self.assertEqual(os.listdir(directory), [])
                model.save(pathlib.Path(directory) / "model.ckpt", optimizer=optimizer, epoch=np.int64(2))
                self.assertEqual(model.load(b"model.ckpt", optimizer=optimizer).epoch, 2)
            finally:
                os.chdir(cwd)
        expect(bptrain.InvalidArgumentError, bptrain.Schedule, "cosine", total_steps=10.5)  # was TypeError
        expect(bptrain.InvalidArgumentError, bptrain.Schedule, "step", gamma="0.5")
        expect(bptrain.InvalidArgumentError, bptrain.Schedule().learning_rate, 1.5)  # was step 1
        expect(bptrain.InvalidArgumentError, model.clip_gradient_norm, "1")  # was ctypes.ArgumentError
        expect(bptrain.InvalidArgumentError, optimizer.set_group, [x], learning_rate_scale="2")
        expect(bptrain.InvalidArgumentError, optimizer.set_group, [3])
        expect(bptrain.InvalidArgumentError, bptrain.SpeculativeTrainer, model, optimizer, threshold="0.1")
        expect(bptrain.InvalidArgumentError, bptrain.SpeculativeTrainer, model, None)  # was AttributeError
        # Narrow formats go in as bit patterns: 1.5 was the f16 pattern 1 (6e-8), 70000 wrapped to 4464.
        expect(bptrain.InvalidArgumentError, ctx.convert, np.array([1.5], np.float32), "f16", "f32")
        expect(bptrain.InvalidArgumentError, ctx.convert, [70000], "f16", "f32")
        expect(bptrain.InvalidArgumentError, ctx.convert, np.ones(2, np.float32), "f32", "f16", scale="2")
        self.assertEqual(ctx.convert([0x3C00], "f16", "f32")[0], 1.0)
        expect(bptrain.InvalidArgumentError, bptrain.Model, None)  # was AttributeError
        expect(bptrain.InvalidArgumentError, bptrain.Context, threads="2")  # was 2 threads
        expect(bptrain.InvalidArgumentError, bptrain.Context, threads=2 ** 32 + 1)  # ctypes wrapped it to 1 thread
        expect(bptrain.InvalidArgumentError, model.fit, optimizer, features, labels, batch_size=2 ** 64 + 2)
        expect(bptrain.InvalidArgumentError, bptrain.Context, seed=-1)
        expect(bptrain.InvalidArgumentError, bptrain.Context, backend=None)

    def test_verbose_fit_draws_a_progress_bar_on_a_terminal(self):
        """fit(verbose=True) on a long epoch shows progress per batch when stderr is a terminal, like the C
        examples' bar, and only the epoch lines when it is not."""
        import pty
        import subprocess
        script = ("import numpy as np, bptrain\n"
                  "m = bptrain.Model(bptrain.Context(threads=1))\n"
                  "x, y = m.input('x', (4,)), m.input('y', (), 'i32')\n"
                  "m.compile(m.softmax_cross_entropy(m.linear(x, 3), y), 8)\n"
                  "m.fit(bptrain.Optimizer(m), np.zeros((40, 4), np.float32), np.zeros(40, np.int32), epochs=2,"
                  " batch_size=8, verbose=True)\n")
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        master, slave = pty.openpty()
        run = subprocess.run([sys.executable, "-c", script], stderr=slave, stdout=subprocess.PIPE, env=environment,
                             timeout=120)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
        os.close(master)
        self.assertEqual(run.returncode, 0)
        self.assertIn(b"epoch 2/2 [==============================] 5/5  loss", shown)
        self.assertIn(b"epoch 2: train_loss", run.stdout)
        piped = subprocess.run([sys.executable, "-c", script], capture_output=True, env=environment, timeout=120)
        self.assertEqual(piped.stderr, b"")  # no bar into a file or a pipe

    def test_arrays_used_in_place(self):
        model, x, y = small_classifier()
        features = RNG.randn(8, 4).astype(np.float32)
        self.assertTrue(np.shares_memory(model._array(features, x), features))  # no conversion copy
        self.assertFalse(np.shares_memory(model._array(features.astype(np.float64), x), features))
        transposed = np.asfortranarray(features)
        np.testing.assert_array_equal(model._array(transposed, x), features)

    def test_mse_model_predicts(self):
        model = bptrain.Model(context())
        x, target = model.input("x", (3,)), model.input("target", (2,))
        prediction = model.linear(x, 2, name="out")
        model.compile(model.mse_loss(prediction, target), 4)
        features = RNG.randn(10, 3).astype(np.float32)
        state = model.state_dict()
        predictions = model.predict(features)
        self.assertEqual(predictions.shape, (10, 2))
        np.testing.assert_allclose(predictions, features @ state["out.weight"].T + state["out.bias"], rtol=1e-5,
                                   atol=1e-6)
        result = model.evaluate(features, np.zeros((10, 2), np.float32))
        self.assertNotIn("accuracy", result)
        self.assertAlmostEqual(result["loss"], float(np.mean(predictions ** 2)), places=5)


if __name__ == "__main__":
    sys.argv[1:1] = ["-v"] if "-v" not in sys.argv else []
    unittest.main()
