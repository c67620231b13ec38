#!/usr/bin/env python3
"""Data-parallel step time and scaling efficiency on GPU clusters, from the ring cost model (ring_model.py).

A step is compute c (backward a fraction of it) plus the all-reduce time the backward pass does not hide,
plus the wait for the slowest rank. Each term is a published or stated hardware figure except one:
  - all-reduce of n bytes on p ranks: the ring, T = 2(p-1) alpha + 2(p-1)/p n / busbw, or NCCL's double
    binary tree, 2 log2(p) alpha + 2 n / busbw, whichever is faster (NCCL picks by size and rank count);
    busbw is NVLink's inside one node and the node's network links once the job spans nodes;
  - overlap: gradients become ready evenly over backward, in buckets of the library's sizes (a 1 MiB first
    bucket, then 25 MiB, the same defaults as PyTorch DDP); buckets go out one after another, each as soon
    as it is ready and the previous one is done. What runs past the end of backward is exposed;
  - stragglers: each rank's compute varies by a few percent step to step, and every rank waits for the
    slowest: for p ranks with relative spread s that costs about c s sqrt(2 ln p) (the expected maximum of
    p normal variables). s is the one fitted number: set so the 8-GPU anchor comes out right, then checked
    against the 16- and 32-GPU anchors.

    bench/cluster_model.py                 the anchors check, then the H200 predictions
    bench/cluster_model.py --self-test     the model's own arithmetic against hand-worked cases
Everything printed is the model's, not a measurement, except the anchors it is checked against.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ring_model import model as ring_time  # noqa: E402  (the same ring formula the 2-rank fit uses)

MIB = 1 << 20

# What each cluster's figures come from; bandwidths are NCCL bus bandwidths (what a ring moves per link).
CLUSTERS = {
    "v100-dgx1": dict(
        about="8 V100 SXM2 per node on NVLink 2 (NCCL all-reduce about 130 GB/s bus bandwidth inside a "
              "DGX-1), nodes on 100 Gbit/s InfiniBand EDR (about 11 GB/s achieved), 5 us latency a hop",
        per_node=8, nvlink=130e9, network=11e9, alpha=5e-6),
    "p100-roce": dict(
        about="4 P100 per server on PCIe (about 10 GB/s), servers on 25 Gbit/s RoCE (about 2.8 GB/s achieved), "
              "5 us latency a hop: the Horovod paper's cluster",
        per_node=4, nvlink=10e9, network=2.8e9, alpha=5e-6),
    "h200-hgx": dict(
        about="8 H200 per node on NVLink 4 (NCCL all-reduce about 450 GB/s bus bandwidth), one 400 Gbit/s "
              "NDR InfiniBand link a GPU (8 a node, about 45 GB/s achieved each), 5 us latency a hop",
        per_node=8, nvlink=450e9, network=8 * 45e9, alpha=5e-6),
}

# Compute per step and gradient size; the gradient is f32, as DDP reduces it under autocast too.
MODELS = {
    "resnet50-v100": dict(about="ResNet-50, batch 32 a GPU, f32, about 360 images/s a V100",
                          compute=32 / 360, gradient=4 * 25.56e6),
    "inception3-p100": dict(about="Inception V3, batch 64 a GPU, f32, about 140 images/s a P100",
                            compute=64 / 140, gradient=4 * 23.8e6),
    "resnet101-p100": dict(about="ResNet-101, batch 64 a GPU, f32, about 110 images/s a P100",
                           compute=64 / 110, gradient=4 * 44.5e6),
    "vgg16-p100": dict(about="VGG-16, batch 64 a GPU, f32, about 180 images/s a P100",
                       compute=64 / 180, gradient=4 * 138.4e6),
    "resnet50-h200": dict(about="ResNet-50, batch 256 a GPU, bf16 autocast, about 3,000 images/s an H200",
                          compute=256 / 3000, gradient=4 * 25.56e6),
    "gpt2small-h200": dict(about="GPT-2 small (124 M parameters), 16 x 1024 tokens a GPU, 6 N flops a token "
                                 "at 40% of the H200's 989 dense bf16 TFLOP/s",
                           compute=6 * 124e6 * 16 * 1024 / (0.4 * 989e12), gradient=4 * 124.4e6),
}

# Published scaling of PyTorch DDP on ResNet-50 with NCCL on V100s (issue 31): GPUs -> speedup.
DDP_ANCHORS = {8: 7.72, 16: 14.81, 32: 28.61}
# Horovod at 512 GPUs over 25 Gbit/s RoCE (issue 31): model -> efficiency.
HOROVOD_ANCHORS = {"inception3-p100": 0.90, "resnet101-p100": 0.90, "vgg16-p100": 0.68}

BACKWARD_SHARE = 2 / 3  # backward is about twice forward's work


def all_reduce_time(cluster, p, n):
    """Seconds to all-reduce n bytes over p ranks: ring or tree, on NVLink or across the network."""
    if p <= 1:
        return 0.0
    busbw = cluster["nvlink"] if p <= cluster["per_node"] else min(cluster["nvlink"], cluster["network"])
    alpha = cluster["alpha"]
    ring = ring_time(p, n, alpha, 1 / busbw, 0.0)  # beta: seconds per byte at the bus bandwidth
    tree = 2 * math.log2(p) * alpha + 2 * n / busbw
    return min(ring, tree)


def buckets(n, first=1 * MIB, size=25 * MIB):
    """Bucket sizes in the order they become ready: a small first bucket, then full ones, the rest last."""
    out, left = [], float(n)
    for cap in [first] + [size] * int(math.ceil(n / size) + 1):
        if left <= 0:
            break
        out.append(min(cap, left))
        left -= cap
    return out


def exposed_time(cluster, p, n, backward):
    """Communication left after backward ends, buckets sent in order, each when ready and the link free."""
    done, ready = 0.0, 0.0
    for size in buckets(n):
        ready += backward * size / n
        done = max(done, ready) + all_reduce_time(cluster, p, size)
    return max(0.0, done - backward)


def straggler_time(compute, spread, p):
    """The expected wait for the slowest of p ranks whose step times spread by `spread` (relative)."""
    return compute * spread * math.sqrt(2 * math.log(p)) if p > 1 else 0.0


def efficiency(cluster, work, p, spread):
    """Speedup over one GPU divided by p: c / (c + stragglers + exposed communication)."""
    c = work["compute"]
    step = c + straggler_time(c, spread, p) + exposed_time(cluster, p, work["gradient"], BACKWARD_SHARE * c)
    return c / step


def fit_spread(cluster, work, p, target):
    """The relative spread that makes the model's efficiency at p ranks equal target (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if efficiency(cluster, work, p, mid) > target else (low, mid)
    return (low + high) / 2


def report_checks(program, checks, tolerance=1e-9):
    """Prints each (name, got, want) check off by more than tolerance (relative, at least absolute) and a count;
    returns the exit status, 1 when any failed."""
    failed = [(name, got, want) for name, got, want in checks if abs(got - want) > tolerance * max(1.0, abs(want))]
    for name, got, want in failed:
        print("%s self-test: %s: got %.9g, want %.9g" % (program, name, got, want))
    print("%s self-test: %d of %d checks passed" % (program, len(checks) - len(failed), len(checks)))
    return 1 if failed else 0


def self_test():
    """The arithmetic against cases worked by hand; exits non-zero on the first that is off."""
    cluster = dict(per_node=8, nvlink=100e9, network=10e9, alpha=0.0)
    checks = [
        # ring, no latency, inside a node: 2 (p-1)/p n / busbw
        ("ring on NVLink", all_reduce_time(cluster, 4, 1e9), 2 * 3 / 4 * 1e9 / 100e9),
        # across nodes the network bounds it; the tree's 2 n / busbw is slower than the ring's 2 (p-1)/p n
        ("ring across nodes", all_reduce_time(cluster, 16, 1e9), 2 * 15 / 16 * 1e9 / 10e9),
        ("one rank sends nothing", all_reduce_time(cluster, 1, 1e9), 0.0),
        ("buckets: 1 MiB first, 25 MiB next, the rest", sum(buckets(30 * MIB)), 30 * MIB),
        ("buckets: count", len(buckets(30 * MIB)), 3),
        # one bucket ready at the end of backward: all of its time shows
        ("exposed: one bucket", exposed_time(cluster, 4, 1 * MIB, 1.0), all_reduce_time(cluster, 4, 1 * MIB)),
        # a link far faster than backward hides all but the last bucket
        ("exposed: last bucket only", exposed_time(cluster, 4, 51 * MIB, 10.0),
         all_reduce_time(cluster, 4, 25 * MIB)),
        ("stragglers: sqrt(2 ln p)", straggler_time(1.0, 0.01, 8), 0.01 * math.sqrt(2 * math.log(8))),
    ]
    tree_cluster = dict(per_node=8, nvlink=100e9, network=10e9, alpha=1e-3)
    checks.append(("tree when latency dominates", all_reduce_time(tree_cluster, 1024, 1.0),
                   2 * math.log2(1024) * 1e-3 + 2 / 10e9))
    return report_checks("cluster_model", checks)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", help="check the model's arithmetic and exit")
    args = parser.parse_args()
    if args.self_test:
        return self_test()

    v100, resnet_v100 = CLUSTERS["v100-dgx1"], MODELS["resnet50-v100"]
    spread = fit_spread(v100, resnet_v100, 8, DDP_ANCHORS[8] / 8)
    print("Checked against PyTorch DDP, ResNet-50 on V100s (%s; %s)" % (v100["about"], resnet_v100["about"]))
    print("stragglers' spread fitted at 8 GPUs: %.2f%% of a step\n" % (100 * spread))
    print("%6s %12s %12s %8s %s" % ("GPUs", "published", "model", "points", ""))
    for p, speedup in sorted(DDP_ANCHORS.items()):
        published, predicted = 100 * speedup / p, 100 * efficiency(v100, resnet_v100, p, spread)
        print("%6d %11.1f%% %11.1f%% %+8.1f %s" % (p, published, predicted, predicted - published,
                                                     "[fitted]" if p == 8 else "[check]"))

    p100 = CLUSTERS["p100-roce"]
    print("\nChecked against Horovod at 512 GPUs (%s); spread as fitted above" % p100["about"])
    print("%-16s %12s %12s %8s" % ("model", "published", "model", "points"))
    for name, published in HOROVOD_ANCHORS.items():
        predicted = 100 * efficiency(p100, MODELS[name], 512, spread)
        print("%-16s %11.1f%% %11.1f%% %+8.1f   %s" % (name, 100 * published, predicted,
                                                       predicted - 100 * published, MODELS[name]["about"]))

    h200 = CLUSTERS["h200-hgx"]
    print("\nPREDICTIONS (model, not measured): %s; stragglers' spread as fitted above" % h200["about"])
    print("%-15s %6s %14s %12s %12s %11s" % ("model", "GPUs", "all-reduce ms", "exposed ms", "straggle ms",
                                             "efficiency"))
    for name in ("resnet50-h200", "gpt2small-h200"):
        work = MODELS[name]
        for p in (8, 64, 256, 1024):
            c = work["compute"]
            print("%-15s %6d %14.2f %12.2f %12.2f %10.1f%%" % (
                name, p, 1e3 * all_reduce_time(h200, p, work["gradient"]),
                1e3 * exposed_time(h200, p, work["gradient"], BACKWARD_SHARE * c),
                1e3 * straggler_time(c, spread, p), 100 * efficiency(h200, work, p, spread)))
        print("%-15s %s, compute %.1f ms a step, %.0f MB of f32 gradients" % (
            "", work["about"], 1e3 * work["compute"], work["gradient"] / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
