"""The PyTorch side of bench/cnn.sh: the same LeNet-5 and ResNet as bench/cnn_bench.c, trained with SGD and
momentum on random 1x28x28 batches; prints samples/s after warm-up and peak RSS. Runs on any PyTorch (Debian's
1.13 or PyPI's 2.x, see bench/torch_env.sh); --compile (2.x only) uses torch.compile, --bf16 torch.autocast.

    cnn_torch.py lenet|resnet8|resnet14|resnet20 [--batch 128] [--threads 2] [--steps 30] [--channels-last]
                 [--compile] [--bf16]
"""
import argparse
import re
import resource
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def resnet(depth):
    layers = [nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for stage, width in enumerate((16, 32, 64)):
        for block in range((depth - 2) // 6):
            layers.append(Block(cin, width, 2 if stage > 0 and block == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def cpu_capability():
    """The vector ISA PyTorch dispatches its kernels to (AVX2, AVX512, ...); 1.13 cannot say."""
    backend = getattr(torch.backends, "cpu", None)
    return backend.get_cpu_capability() if backend is not None else "?"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = lenet() if args.model == "lenet" else resnet(int(args.model[6:]))
    x = torch.rand(args.batch, 1, 28, 28) - 0.5
    labels = torch.arange(args.batch) % 10
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_function = nn.CrossEntropyLoss()
    forward = torch.compile(model) if args.compile else model
    warmup = 5
    for step in range(warmup + args.steps):
        if step == warmup:
            start = time.perf_counter()
            cpu_start = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_function(forward(x), labels)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    cpu_elapsed = time.process_time() - cpu_start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    layout = (" channels-last" if args.channels_last else "") + (" compile" if args.compile else " eager") + \
        (" bf16" if args.bf16 else "")
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config).group(1) if "BLAS_INFO=" in config else "?"
    layout += f" kernel {blas}/{cpu_capability()}"
    print(f"pytorch {torch.__version__}{layout} {args.model} batch {args.batch} threads {args.threads}: "
          f"{args.steps * args.batch / elapsed:.0f} samples/s training, "
          f"{args.steps * args.batch / cpu_elapsed:.0f} samples per CPU-second, peak RSS {rss:.1f} MB")


if __name__ == "__main__":
    main()
