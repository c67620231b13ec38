#!/usr/bin/env python3
"""Trains the 784-512-256-10 MLP of examples/mnist_mlp.c on Fashion-MNIST from Python, through the ctypes
binding in python/bptrain (no compiler needed). Run from the repository after building:

    PYTHONPATH=python python3 examples/python/mnist_mlp.py --epochs 2

(the package finds build/libbptrain.so.0 of the checkout; elsewhere set BPTRAIN_LIBRARY), or after
`pip install ./python`. --save writes a checkpoint that `mnist_mlp --eval FILE` (the C example), `mnist_mlp_cpp --eval FILE`
(the C++ one) and this script's --eval read.
"""
import sys

import bptrain
import example_arguments  # beside this file: what both Python examples share


def main():
    parser = example_arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="IDX directory")
    parser.add_argument("--epochs", type=example_arguments.positive, default=2)
    parser.add_argument("--batch", type=example_arguments.positive, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--limit", type=int, default=None, help="train on the first N samples of each epoch")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads, 0 for all cores")
    outputs = example_arguments.Outputs()
    outputs.add(parser)
    parser.add_argument("--save", help="save the trained model to this checkpoint file")
    parser.add_argument("--eval", help="skip training: load this checkpoint's parameters and report the test accuracy")
    arguments = parser.parse_args()
    if arguments.eval and arguments.save:
        parser.error("--save and --eval exclude each other: --eval only evaluates, so nothing would be saved")
    outputs.check(parser, arguments)
    example_arguments.check_creatable(parser, "--save", arguments.save)

    with bptrain.Context(backend=arguments.backend, threads=arguments.threads, seed=arguments.seed) as context:
        train = bptrain.Dataset(context, arguments.data, "train", limit=arguments.limit)
        test = bptrain.Dataset(context, arguments.data, "t10k")
        print("libbptrain %s (ABI %d), backend %s: %d training and %d test samples" %
              (bptrain.version(), bptrain.abi_version(), context.backend, len(train), len(test)), flush=True)

        model = bptrain.Model(context)
        images = model.input("images", (train.sample_size,))
        labels = model.input("labels", (), dtype="i32")
        hidden = model.relu(model.linear(images, 512, name="fc1"), name="relu1")
        hidden = model.relu(model.linear(hidden, 256, name="fc2"), name="relu2")
        # Checked against both label sets: one corrupt label must not silently size the output layer.
        logits = model.linear(hidden, train.check_classes(test), name="fc3")
        model.compile(model.softmax_cross_entropy(logits, labels), max_batch=arguments.batch)
        optimizer = bptrain.Optimizer(model, "sgd", learning_rate=arguments.lr, momentum=arguments.momentum)

        outputs.start(bptrain, context)
        if arguments.eval:
            model.load(arguments.eval)
            tested = model.evaluate(test, batch_size=arguments.batch)
            print("%s: test accuracy %.2f%%, test loss %.4f" %
                  (arguments.eval, 100.0 * tested["accuracy"], tested["loss"]))
        else:
            example_arguments.fit_and_save(model, optimizer, train, test, arguments, outputs)
        return outputs.finish(bptrain, context, "mnist_mlp (Python)")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bptrain.Error as failure:  # the library's message names what and where; a traceback adds nothing
        print("error: %s" % failure, file=sys.stderr)
        sys.exit(1)
