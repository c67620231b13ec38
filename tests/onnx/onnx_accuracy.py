#!/usr/bin/env python3
"""Prints the test accuracy (percent) of an exported classifier in ONNX Runtime on raw IDX test images.

Usage: onnx_accuracy.py MODEL.onnx DATA_DIR (t10k-*-idx*-ubyte, gzip-compressed or not). The images are fed as pixels in [0, 1] (byte / 255), shaped as
the model's input asks (N x 784 or N x 1 x 28 x 28): any normalisation must be inside the model. Exits 77
without onnxruntime.
"""
import gzip
import os
import sys

try:
    import numpy as np
    import onnxruntime
except ImportError as error:
    print(f"skipped: {error.name} is not installed for {sys.executable} (see scripts/onnx_env.sh)")
    sys.exit(77)


def read_idx(path):
    """An IDX file as an array; the file may be gzip-compressed under PATH.gz (as Debian ships Fashion-MNIST)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rb") as file:
            data = file.read()
    else:
        with open(path, "rb") as file:
            data = file.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    model, directory = sys.argv[1], sys.argv[2]
    images = read_idx(os.path.join(directory, "t10k-images-idx3-ubyte"))
    labels = read_idx(os.path.join(directory, "t10k-labels-idx1-ubyte"))
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    (model_input,) = session.get_inputs()
    pixels = (images.astype(np.float32) / 255.0).reshape([len(images)] + [int(d) for d in model_input.shape[1:]])
    (outputs,) = session.run(None, {model_input.name: pixels})
    print(f"{100.0 * float(np.mean(np.argmax(outputs, axis=1) == labels)):.2f}")


if __name__ == "__main__":
    main()
