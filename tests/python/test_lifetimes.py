"""Lifetimes in the Python binding: closing or dropping contexts, models, optimisers, nodes and data sets in
any order must never touch freed native memory (run under ASan by CTest's sanitizer build, see
tests/checks.cmake), and every use of a closed object must raise bptrain.Error (STATE) naming it.

Run by CTest (check_python_lifetimes) with BPTRAIN_LIBRARY and PYTHONPATH set like test_bptrain.py.
"""
import gc
import itertools
import os
import struct
import subprocess
import sys
import tempfile

import bptrain

FEATURES = 4


def write_idx(directory):
    """A 6-sample IDX data set ("train") of 2x2 images with labels 0..2."""
    with open(os.path.join(directory, "train-images-idx3-ubyte"), "wb") as file:
        file.write(struct.pack(">IIII", 0x803, 6, 2, 2) + bytes(range(24)))
    with open(os.path.join(directory, "train-labels-idx1-ubyte"), "wb") as file:
        file.write(struct.pack(">II", 0x801, 6) + bytes([0, 1, 2, 0, 1, 2]))


def build(directory):
    """A context and everything made from it: {"context", "model", "optimizer", "dataset"} and nodes."""
    context = bptrain.Context(seed=3, threads=1)
    model = bptrain.Model(context)
    x = model.input("x", (FEATURES,))
    labels = model.input("labels", (), dtype="i32")
    hidden = model.relu(model.linear(x, 8, name="fc1"))
    loss = model.softmax_cross_entropy(model.linear(hidden, 3, name="fc2"), labels)
    model.compile(loss, max_batch=4)
    optimizer = bptrain.Optimizer(model, "adam", learning_rate=0.01)
    dataset = bptrain.Dataset(context, directory, "train")
    objects = {"context": context, "model": model, "optimizer": optimizer, "dataset": dataset}
    return objects, [x, labels, hidden, loss]


# What each object depends on: closing one makes it and everything depending on it unusable.
DEPENDS_ON = {"context": set(), "model": {"context"}, "optimizer": {"model", "context"}, "dataset": {"context"},
              "node": {"model", "context"}}


def use(kind, objects, nodes):
    """Touches the native object behind `kind` (reads that dereference its handle)."""
    if kind == "context":
        return objects["context"].backend
    if kind == "model":
        return len(objects["model"].parameters())
    if kind == "optimizer":
        return objects["optimizer"].steps, objects["optimizer"].learning_rate
    if kind == "dataset":
        return len(objects["dataset"]), objects["dataset"].classes
    return [node.name for node in nodes], nodes[0].shape


def expect_closed(function, *arguments):
    try:
        function(*arguments)
    except bptrain.Error as error:
        assert error.status_name == "STATE", error
        assert "closed" in error.message, error.message
        return
    raise AssertionError("%s on a closed object did not raise bptrain.Error" % function)


def check_close_orders(directory):
    """Every order of explicit close() over the four owners; after each close, every object is usable
    exactly when nothing it depends on (nor itself) is closed."""
    kinds = ["context", "model", "optimizer", "dataset"]
    for order in itertools.permutations(kinds):
        objects, nodes = build(directory)
        closed = set()
        for kind in order:
            objects[kind].close()
            closed.add(kind)
            for probe in kinds + ["node"]:
                unusable = probe in closed or DEPENDS_ON[probe] & closed
                if unusable:
                    expect_closed(use, probe, objects, nodes)
                else:
                    use(probe, objects, nodes)
        for kind in order:  # closing twice is harmless
            objects[kind].close()
        del objects, nodes
        gc.collect()


def check_with_block(directory):
    """Leaving `with Context()` closes what was made from it; the survivors raise and die safely."""
    with bptrain.Context(threads=1) as context:
        model = bptrain.Model(context)
        x = model.input("x", (FEATURES,))
        labels = model.input("labels", (), dtype="i32")
        loss = model.softmax_cross_entropy(model.linear(x, 3, name="fc"), labels)
        model.compile(loss, max_batch=4)
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=0.1)
        model.train_step(optimizer, [[0.0] * FEATURES] * 2, [0, 1])
    expect_closed(lambda: x.name)
    expect_closed(lambda: optimizer.steps)
    expect_closed(model.train_step, optimizer, [[0.0] * FEATURES], [0])
    expect_closed(bptrain.Model, context)
    expect_closed(bptrain.Optimizer, model, "sgd")
    expect_closed(bptrain.Dataset, context, directory, "train")
    del optimizer  # its __del__ must not destroy anything twice
    del x, labels, loss, model, context
    gc.collect()


def check_drop_orders(directory):
    """Dropping the Python references in every order (no close()): whatever is still referenced keeps
    working, because it holds what it uses alive."""
    names = ["context", "model", "optimizer", "dataset", "nodes"]
    for order in itertools.permutations(names):
        objects, nodes = build(directory)
        held = dict(objects, nodes=nodes)
        for name in order:
            del held[name]
            objects.pop(name, None)
            gc.collect()
            if "optimizer" in held and "model" in held:
                held["model"].train_step(held["optimizer"], [[1.0] * FEATURES] * 3, [0, 1, 2])
            if "optimizer" in held:
                assert held["optimizer"].steps >= 0
            if "nodes" in held:
                assert held["nodes"][0].name == "x"
            if "dataset" in held:
                assert len(held["dataset"]) == 6
            if "model" in held:
                assert len(held["model"].parameters()) > 0
        del held, objects, nodes
        gc.collect()


def check_cycles(directory):
    """Objects in a reference cycle are finalised by the collector in an arbitrary order."""
    for _ in range(3):
        objects, nodes = build(directory)
        cycle = [objects, nodes]
        cycle.append(cycle)
        objects["model"].cycle = cycle
        objects["optimizer"].cycle = cycle
        del objects, nodes, cycle
        gc.collect()


def check_errors():
    """Messages come from the right slot: a failed context creation has no context (the thread's slot), a
    closed object's error says it is closed rather than repeating an earlier, unrelated failure."""
    try:
        bptrain.Context("no-such-backend")
    except bptrain.Error as error:
        assert "no-such-backend" in error.message, error.message
    else:
        raise AssertionError("an unknown backend was accepted")
    context = bptrain.Context(threads=1)
    model = bptrain.Model(context)
    x = model.input("x", (FEATURES,))
    try:
        model.input("x", (FEATURES,))  # a duplicate name: the context's slot now holds that message
    except bptrain.Error as error:
        assert "x" in error.message, error.message
    else:
        raise AssertionError("a duplicate node name was accepted")
    model.close()
    try:
        x.name
    except bptrain.Error as error:
        assert error.status_name == "STATE" and "closed" in error.message, error.message
        assert "already" not in error.message, "the stale duplicate-name message came back: " + error.message
    else:
        raise AssertionError("a node of a closed model was readable")
    null_node = bptrain.Node(bptrain.Model(context), None)
    try:
        null_node.name
    except bptrain.Error as error:
        assert error.status_name == "INVALID_ARGUMENT" and "NULL" in error.message, error
    else:
        raise AssertionError("a NULL node was readable")
    context.close()


def check_closed_messages(directory):
    """A closed object says what was closed: after context.close() the model's error said only "the model is
    closed", sending the user to look for a model.close() they never made (issue 29)."""
    objects, nodes = build(directory)
    objects["context"].close()
    for kind, function in (("model", lambda: objects["model"].training),
                           ("optimizer", objects["optimizer"].step), ("node", lambda: nodes[0].name)):
        message = _closed_message(function)
        what = "model" if kind == "node" else kind
        assert message == "bptrain: the %s is closed (its context was closed)" % what, (kind, message)
    objects, nodes = build(directory)
    objects["model"].close()
    assert _closed_message(objects["optimizer"].step) == "bptrain: the optimizer is closed (its model was closed)"
    assert _closed_message(lambda: objects["model"].training) == "bptrain: the model is closed"
    objects["context"].close()  # the model was closed first: its message still says so
    assert _closed_message(lambda: objects["model"].training) == "bptrain: the model is closed"


def _closed_message(function):
    try:
        function()
    except bptrain.Error as error:
        assert error.status_name == "STATE", error
        return error.message
    raise AssertionError("%s on a closed object did not raise bptrain.Error" % function)


EXIT_SCRIPT = r"""
import bptrain, sys
sys.path.insert(0, %r)
import test_lifetimes
objects, nodes = test_lifetimes.build(%r)
cycle = [objects, nodes]
cycle.append(cycle)
objects["model"].cycle = cycle
KEEP = (objects["optimizer"], nodes[0])  # module globals, finalised during interpreter shutdown
print("exiting with live objects")
"""


def check_interpreter_exit(directory):
    """Objects alive at interpreter exit (globals and cycles) are finalised without a crash."""
    script = EXIT_SCRIPT % (os.path.dirname(os.path.abspath(__file__)), directory)
    result = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=120)
    output = result.stdout.decode(errors="replace")
    assert result.returncode == 0 and "exiting with live objects" in output, output
    assert "AddressSanitizer" not in output and "runtime error" not in output, output


def main(selected):
    """Runs every check, or those named on the command line."""
    checks = [check_close_orders, check_with_block, check_drop_orders, check_cycles, check_errors,
              check_closed_messages, check_interpreter_exit]
    with tempfile.TemporaryDirectory() as directory:
        write_idx(directory)
        for check in checks:
            if selected and check.__name__ not in selected:
                continue
            if check is check_errors:
                check()
            else:
                check(directory)
            print(check.__name__, "OK", flush=True)
    print("python lifetimes: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
