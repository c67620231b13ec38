"""PyTorch side of bench/mlp.sh: the same 784-512-256-10 MLP, SGD lr 0.05 momentum 0.9, on Fashion-MNIST,
with data kept as uint8 and normalised per batch exactly like libbptrain. --compile runs the model through
torch.compile (bench/mlp.sh takes the better of eager and compiled), --bf16 under torch.autocast(bfloat16).
Prints one line in the same format as mlp_train_bench, plus the PyTorch version, mode and CPU kernel."""
import argparse
import re
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


def cpu_capability():
    """The vector ISA PyTorch dispatches its kernels to (AVX2, AVX512, ...); 1.13 cannot say."""
    backend = getattr(torch.backends, "cpu", None)
    return backend.get_cpu_capability() if backend is not None else "?"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--samples", type=int, default=60000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--bf16", action="store_true", help="torch.autocast(cpu, bfloat16)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    images = torch.from_numpy(load_idx(f"{args.data}/train-images-idx3-ubyte.gz").reshape(-1, 784).copy())
    labels = torch.from_numpy(load_idx(f"{args.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    order = torch.randperm(images.shape[0])
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    forward = torch.compile(model) if args.compile else model
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_function(forward(x), y)
        loss.backward()
        optimizer.step()
    final_loss = loss.item()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    mode = ("compile" if args.compile else "eager") + ("+bf16" if args.bf16 else "")
    print(f"pytorch batch={args.batch} samples_per_second={steps * args.batch / seconds:.0f} "
          f"peak_rss_mb={peak:.1f} loss={final_loss:.4f} version={torch.__version__} mode={mode} "
          f"kernel={torch_kernel()}")


def torch_kernel():
    """The BLAS and vector ISA this PyTorch runs (MKL/OpenBLAS and AVX2/AVX512), for the benchmark record."""
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config).group(1) if "BLAS_INFO=" in config else "?"
    capability = cpu_capability()
    return f"{blas}/{capability}"


if __name__ == "__main__":
    main()
