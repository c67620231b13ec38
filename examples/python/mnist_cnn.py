#!/usr/bin/env python3
"""Trains LeNet-5 (the graph of examples/mnist_cnn.c, node for node) on Fashion-MNIST from Python, with a
cosine learning-rate schedule, and saves or evaluates a checkpoint that the C example reads and writes too:

    PYTHONPATH=python python3 examples/python/mnist_cnn.py --epochs 3 --save lenet.ckpt
    build/mnist_cnn --eval lenet.ckpt          # the C example evaluates the Python model
    PYTHONPATH=python python3 examples/python/mnist_cnn.py --eval lenet.ckpt

Predictions come back as NumPy arrays: the last lines print the confusion of the first test images.
"""
import sys

import bptrain
import example_arguments  # beside this file: what both Python examples share

LENET = [("conv2d", {"units": 6, "kernel": 5, "padding": 2}), "relu", ("max_pool", {"kernel": 2}),
         ("conv2d", {"units": 16, "kernel": 5}), "relu", ("max_pool", {"kernel": 2}), "flatten",
         ("linear", {"units": 120}), "relu", ("linear", {"units": 84}), "relu", ("linear", {"units": 10})]
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel mean and standard deviation


def main():
    parser = example_arguments.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="IDX directory")
    parser.add_argument("--epochs", type=example_arguments.positive, default=3)
    parser.add_argument("--batch", type=example_arguments.positive, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--backend", default="cpu", help='"cpu", "cuda", "fpga-sim" or "auto"')
    parser.add_argument("--threads", type=int, default=0, help="CPU threads, 0 for all cores")
    parser.add_argument("--save", help="save the trained model to this checkpoint file")
    parser.add_argument("--eval", help="skip training: load this checkpoint and report the test accuracy")
    parser.add_argument("--onnx", help="export the model to this ONNX file (it takes raw pixels in [0, 1])")
    outputs = example_arguments.Outputs()
    outputs.add(parser)
    arguments = parser.parse_args()
    if arguments.eval and arguments.save:
        parser.error("--save and --eval exclude each other: --eval only evaluates, so nothing would be saved")
    example_arguments.check_creatable(parser, "--save", arguments.save)
    example_arguments.check_creatable(parser, "--onnx", arguments.onnx)
    outputs.check(parser, arguments)

    with bptrain.Context(backend=arguments.backend, threads=arguments.threads, seed=arguments.seed) as context:
        train = bptrain.Dataset(context, arguments.data, "train", mean=MEAN, std=STD)
        test = bptrain.Dataset(context, arguments.data, "t10k", mean=MEAN, std=STD)
        classes = train.check_classes(test)
        model = bptrain.Model(context)
        images = model.input("images", (1, 28, 28))
        labels = model.input("labels", (), dtype="i32")
        logits = model.sequential(images, LENET[:-1] + [("linear", {"units": classes})], prefix="lenet")
        model.compile(model.softmax_cross_entropy(logits, labels, name="loss"), max_batch=arguments.batch)
        print("libbptrain %s, backend %s: LeNet-5, %d parameters" %
              (bptrain.version(), context.backend, len(model.parameters())), flush=True)
        outputs.start(bptrain, context)
        if arguments.eval:
            report = model.load(arguments.eval)
            result = model.evaluate(test)
            print("%s (%d parameters loaded): test accuracy %.2f%%, test loss %.4f" %
                  (arguments.eval, len(report.loaded), 100 * result["accuracy"], result["loss"]))
        else:
            steps = arguments.epochs * train.batch_count(arguments.batch)
            schedule = bptrain.Schedule("cosine", base_learning_rate=arguments.lr, total_steps=steps,
                                        minimum_learning_rate=arguments.lr / 100)
            optimizer = bptrain.Optimizer(model, "sgd", momentum=arguments.momentum, schedule=schedule)
            example_arguments.fit_and_save(model, optimizer, train, test, arguments, outputs)
        if arguments.onnx:
            model.export_onnx(arguments.onnx, input_mean=MEAN, input_std=STD)
            print("ONNX model written to %s" % arguments.onnx)
        # NumPy out: class scores of the first 1000 test images, compared with their labels.
        test_images, test_labels = test.arrays()
        predicted = model.predict(test_images[:1000]).argmax(axis=1)
        print("first 1000 test images: %.1f%% right" % (100.0 * (predicted == test_labels[:1000]).mean()))
        return outputs.finish(bptrain, context, "mnist_cnn (Python)")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bptrain.Error as failure:  # the library's message names what and where; a traceback adds nothing
        print("error: %s" % failure, file=sys.stderr)
        sys.exit(1)
