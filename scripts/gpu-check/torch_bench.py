"""PyTorch side of scripts/gpu-check.sh: the same models, data and batch as libbptrain's examples, timed
the same way (wall clock of the second epoch, training plus test evaluation, one loss read per step as the
examples do for their progress line), so samples/s compare side by side on one GPU.

  torch_bench.py mlp|resnet --data DIR --mode eager|amp-bf16|amp-f16 [--epochs 2] [--batch 128]
  torch_bench.py gemm          (cuBLAS TFLOP/s through torch.matmul for gemm_bench.c's shapes)

Prints 'RESULT <model> <mode> samples_per_second=<x> accuracy=<y>' (or 'gemm <dtype> <shape> <TFLOP/s>').
The ResNet here is the CIFAR-style ResNet (He et al. 2016, section 4.2: 3 stages of 16/32/64 channels,
--blocks basic blocks each) on 1x28x28 inputs; keep it in step with examples/resnet.c."""
import argparse
import contextlib
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, rank = struct.unpack(">HBB", data[:4])
    dims = struct.unpack(">" + "I" * rank, data[4 : 4 + 4 * rank])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load_split(directory, split):
    def find(kind):
        for suffix in (".gz", ""):
            path = os.path.join(directory, f"{split}-{kind}{suffix}")
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f"{directory}/{split}-{kind}[.gz]")

    images = read_idx(find("images-idx3-ubyte")).astype(np.float32) / 255.0
    labels = read_idx(find("labels-idx1-ubyte")).astype(np.int64)
    return torch.from_numpy(images), torch.from_numpy(labels)


class BasicBlock(nn.Module):
    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = None
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    def __init__(self, blocks, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        layers, inputs = [], 16
        for stage, width in enumerate((16, 32, 64)):
            for block in range(blocks):
                layers.append(BasicBlock(inputs, width, 2 if stage > 0 and block == 0 else 1))
                inputs = width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(self.stem(x.view(-1, 1, 28, 28)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def mlp(features, classes):
    return nn.Sequential(nn.Linear(features, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, classes))


def train(args):
    torch.backends.cudnn.benchmark = True  # PyTorch's fastest configuration, as the brief asks
    device = torch.device(args.device)
    train_x, train_y = load_split(args.data, "train")
    test_x, test_y = load_split(args.data, "t10k")
    train_x = train_x.reshape(len(train_x), -1)
    if device.type == "cuda":
        train_x, train_y = train_x.pin_memory(), train_y.pin_memory()
    test_x = test_x.reshape(len(test_x), -1)
    classes = int(train_y.max()) + 1
    torch.manual_seed(42)
    model = (mlp(train_x.shape[1], classes) if args.model == "mlp" else ResNet(args.blocks, classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    amp_dtype = {"amp-bf16": torch.bfloat16, "amp-f16": torch.float16}.get(args.mode)
    if hasattr(torch.amp, "GradScaler"):
        scaler = torch.amp.GradScaler(device.type, enabled=args.mode == "amp-f16")
    else:  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=args.mode == "amp-f16")
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    def autocast():
        return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()

    epoch_seconds, accuracy = [], 0.0
    for epoch in range(args.epochs):
        synchronize()
        start = time.perf_counter()
        model.train()
        order = torch.randperm(len(train_x))
        for first in range(0, len(train_x), args.batch):
            index = order[first : first + args.batch]
            x = train_x[index].to(device, non_blocking=True)
            y = train_y[index].to(device, non_blocking=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss.item()  # the examples read the loss every step for their progress line
        model.eval()
        correct = 0
        with torch.no_grad(), autocast():
            for first in range(0, len(test_x), args.batch):
                x = test_x[first : first + args.batch].to(device)
                correct += int((model(x).argmax(1).cpu() == test_y[first : first + args.batch]).sum())
        synchronize()
        epoch_seconds.append(time.perf_counter() - start)
        accuracy = correct / len(test_x)
        print(f"epoch {epoch + 1}: {epoch_seconds[-1]:.2f} s, test accuracy {100 * accuracy:.2f}%", flush=True)
    timed = epoch_seconds[-1]  # the last epoch: warm-up (cudnn.benchmark, allocator) is behind it
    print(f"RESULT {args.model} {args.mode} samples_per_second={len(train_x) / timed:.0f} accuracy={accuracy:.4f}")


def gemm():
    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096), (128, 512, 784), (1024, 512, 784), (8192, 512, 784)]
    for m, n, k in shapes:
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            a = torch.rand(m, k, device="cuda", dtype=dtype) - 0.5
            b = torch.rand(k, n, device="cuda", dtype=dtype) - 0.5
            flops = 2.0 * m * n * k
            per_block = 5 if flops > 1e11 else 50 if flops > 1e9 else 500
            for _ in range(per_block):
                torch.matmul(a, b)
            times = []
            for _ in range(9):
                startEvent, endEvent = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                startEvent.record()
                for _ in range(per_block):
                    torch.matmul(a, b)
                endEvent.record()
                endEvent.synchronize()
                times.append(startEvent.elapsed_time(endEvent) / 1000.0 / per_block)
            times.sort()
            print(f"gemm {name} {m}x{n}x{k} {flops / times[4] / 1e12:.1f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=["mlp", "resnet", "gemm"])
    parser.add_argument("--data")
    parser.add_argument("--mode", default="eager", choices=["eager", "amp-bf16", "amp-f16"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="cpu only to check this script where there is no GPU")
    arguments = parser.parse_args()
    if arguments.model == "gemm":
        gemm()
    else:
        train(arguments)
