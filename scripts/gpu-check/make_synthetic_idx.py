"""Writes a synthetic Fashion-MNIST-shaped IDX data set (gzip) for machines without the real one:
60000 training and 10000 test 28x28 images in 10 classes, each class a fixed random template plus noise,
so a network can learn it and accuracy means something. Usage: make_synthetic_idx.py DIRECTORY"""
import gzip
import os
import struct
import sys

import numpy as np


def write_idx(path, array):
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + array.astype(np.uint8).tobytes())


def main(directory):
    os.makedirs(directory, exist_ok=True)
    random = np.random.default_rng(2026)
    templates = random.uniform(0, 255, size=(10, 28, 28))
    for split, count in (("train", 60000), ("t10k", 10000)):
        labels = random.integers(0, 10, size=count)
        images = 0.6 * templates[labels] + random.uniform(0, 102, size=(count, 28, 28))
        write_idx(os.path.join(directory, f"{split}-images-idx3-ubyte.gz"), np.clip(images, 0, 255))
        write_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte.gz"), labels)
    print(f"synthetic IDX data set written to {directory}")


if __name__ == "__main__":
    main(sys.argv[1])
