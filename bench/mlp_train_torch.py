"""PyTorch side of bench/mlp.sh: the same 784-512-256-10 MLP, SGD lr 0.05 momentum 0.9, on Fashion-MNIST,
in PyTorch's fastest CPU configuration here (eager, 2 intra-op threads, data kept as uint8 and normalised per
batch exactly like libbptrain). Prints one line in the same format as mlp_train_bench."""
import argparse
import gzip
import resource
import time

import numpy as np
import torch


def load_idx(path):
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    images = torch.from_numpy(load_idx(f"{args.data}/train-images-idx3-ubyte.gz").reshape(-1, 784).copy())
    labels = torch.from_numpy(load_idx(f"{args.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    order = torch.randperm(images.shape[0])
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_function = torch.nn.CrossEntropyLoss()
    full_batches = images.shape[0] // args.batch
    steps, warmup = args.samples // args.batch, 20
    start = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        index = order[(step % full_batches) * args.batch:(step % full_batches + 1) * args.batch]
        x = images[index].float().mul_(1.0 / 255.0)
        y = labels[index]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_function(model(x), y)
        loss.backward()
        optimizer.step()
    final_loss = loss.item()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"pytorch batch={args.batch} samples_per_second={steps * args.batch / seconds:.0f} "
          f"peak_rss_mb={peak:.1f} loss={final_loss:.4f}")


if __name__ == "__main__":
    main()
