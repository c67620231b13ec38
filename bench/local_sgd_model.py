#!/usr/bin/env python3
"""The cost model extended to local SGD (periodic parameter averaging every H steps), checked against measured
step times and carried to GPU clusters.

Synchronous data parallel (H = 1) all-reduces the gradients every step, overlapped with backward; local SGD
steps alone and all-reduces the f32 parameters after every H-th step, not overlapped (the library's
bpt_data_parallel with average_every = H blocks in that step's update). Per step, with the ring cost
T(p, n) = 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma (ring_model.py):
    synchronous:  c + exposed(T)                     (exposed: what backward does not hide)
    local SGD:    c + T(p, n) / H + stragglers / sqrt(H)
    bounded staleness S (the averaging runs beside the next S steps, folded in after them):
                  c + max(0, T(p, n) + stragglers sqrt(H) - eta S c) / H
                  (each averaging waits only for what eta S steps of compute did not cover; the slowest rank's
                  lag over the H steps is part of what it waits for). eta, the share of those steps that moves
                  data, is 1 where the network moves it on its own (NCCL, RDMA); --check fits it to the
                  measured staleness rows, since on a CPU whose cores also run the TCP stack it is far less.
Stragglers: every rank waits at each averaging for the slowest; over H steps the ranks' times add up, so
their spread relative to the H steps' total shrinks as 1/sqrt(H): the slowest of p costs
c s sqrt(2 ln p) / sqrt(H) a step (cluster_model.py's term, which is H = 1).

    bench/local_sgd_model.py --check FILE    the measured rows in FILE (see below) against the model
    bench/local_sgd_model.py                 the GPU-cluster predictions
    bench/local_sgd_model.py --self-test     the arithmetic against hand-worked cases

A --check file holds one measurement a line, "ranks p rate R bytes N compute_ms c H h [S s] step_ms t" (what
bench/local-sgd-netns.sh prints), the link's fitted alpha (s) and beta (s/byte) as "link R alpha A beta B"
lines, "gamma G" once, and optionally the measured all-reduce on the link as "allreduce R bytes N ms T" lines
(comm_bench's fastest rounds). Each row is predicted twice: with T from the fitted ring formula, and with T
from the measured all-reduces (log-log interpolation, summed over the reducer's buckets: 1 MiB first, then
the rest), which isolates the local SGD part of the model from the ring fit. Everything printed past the
per-row errors is the model's, not a measurement.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_model  # noqa: E402  (clusters, models, overlap and straggler terms)
from ring_model import model as ring_time  # noqa: E402


def local_step_time(compute, all_reduce, every, p, spread, staleness=0, eta=1.0):
    """Seconds a step of local SGD averaging every `every` steps (every = 1: synchronous without overlap),
    the averaging folded in `staleness` steps after it starts (0: it blocks its step), eta of those steps
    hiding communication."""
    lag = cluster_model.straggler_time(compute, spread, p) * math.sqrt(every)  # the slowest rank, over H steps
    return compute + max(0.0, all_reduce + lag - eta * staleness * compute) / every


def cluster_efficiency(cluster, work, p, spread, every, staleness=0):
    """Step rate per GPU against no communication: synchronous (every 1, overlapped) or local SGD."""
    c = work["compute"]
    if every == 1:
        return cluster_model.efficiency(cluster, work, p, spread)
    t = cluster_model.all_reduce_time(cluster, p, work["gradient"])  # f32 parameters, the gradient's size
    return c / local_step_time(c, t, every, p, spread, staleness)


def parse_check(path):
    """Measured rows and the links' fitted constants from a --check file."""
    rows, links, gamma, measured = [], {}, None, {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            try:
                if words[0] == "gamma":
                    gamma = float(words[1])
                elif words[0] == "allreduce":
                    fields = dict(zip(words[2::2], words[3::2]))
                    measured.setdefault(words[1], []).append((float(fields["bytes"]), float(fields["ms"]) * 1e-3))
                elif words[0] == "link":
                    fields = dict(zip(words[2::2], words[3::2]))
                    links[words[1]] = (float(fields["alpha"]), float(fields["beta"]))
                elif words[0] == "ranks":
                    fields = dict(zip(words[0::2], words[1::2]))
                    rows.append(dict(ranks=int(fields["ranks"]), rate=fields["rate"], bytes=float(fields["bytes"]),
                                     compute=float(fields["compute_ms"]) * 1e-3, every=int(fields["H"]),
                                     staleness=int(fields.get("S", 0)), step=float(fields["step_ms"]) * 1e-3))
                else:
                    raise ValueError("unknown line kind '%s'" % words[0])
            except (KeyError, IndexError, ValueError) as error:
                sys.exit("local_sgd_model: %s:%d: cannot read '%s' (%s)" % (path, number, line.strip(), error))
    if gamma is None:
        sys.exit("local_sgd_model: %s has no 'gamma' line" % path)
    return rows, links, gamma, {rate: sorted(points) for rate, points in measured.items()}


def interpolated(points, n):
    """Seconds for n bytes from measured (bytes, seconds) points: log-log between neighbours, extended at the
    ends by the nearest pair's slope."""
    if len(points) == 1:
        return points[0][1] * n / points[0][0]
    i = 1
    while i < len(points) - 1 and points[i][0] < n:
        i += 1
    (n0, t0), (n1, t1) = points[i - 1], points[i]
    slope = math.log(t1 / t0) / math.log(n1 / n0)
    return t0 * (n / n0) ** slope


def measured_all_reduce(points, n, first=1 << 20, size=25 << 20):
    """The reducer's buckets of n bytes, one after another, each at its measured time."""
    return sum(interpolated(points, bucket) for bucket in cluster_model.buckets(n, first, size))


def check(path):
    """Prints each measured row beside the model: T from the ring fit, and T from the measured all-reduces (eta
    1, then eta fitted to the staleness rows); returns the largest relative error of the fitted model."""
    rows, links, gamma, measured = parse_check(path)
    for row in rows:
        if row["rate"] not in links:
            sys.exit("local_sgd_model: no 'link %s' line for the row at H = %d" % (row["rate"], row["every"]))

    def predict(row, t, eta):
        return local_step_time(row["compute"], t, row["every"], row["ranks"], 0.0, row["staleness"], eta)

    def measured_t(row):
        return measured_all_reduce(measured[row["rate"]], row["bytes"]) if row["rate"] in measured else None

    stale = [row for row in rows if row["staleness"] and measured_t(row) is not None]
    eta = 1.0
    if stale:  # least squares on the relative error over a grid: one number, bounded to [0, 1]
        eta = min((sum((predict(r, measured_t(r), e / 100) / r["step"] - 1) ** 2 for r in stale), e / 100)
                  for e in range(101))[1]
    print("%6s %7s %3s %3s %8s %9s | %-18s | %-18s | %-18s" % ("ranks", "rate", "H", "S", "c ms", "measured",
          "ring fit, eta 1", "measured T, eta 1", "measured T, eta %.2f" % eta))
    worst = 0.0
    for row in rows:
        alpha, beta = links[row["rate"]]
        cells = []
        for t, e in ((ring_time(row["ranks"], row["bytes"], alpha, beta, gamma), 1.0), (measured_t(row), 1.0),
                     (measured_t(row), eta)):
            if t is None:
                cells.append("%-18s" % "n/a")
                continue
            predicted = predict(row, t, e)
            cells.append("%8.2f ms %+6.1f%%" % (predicted * 1e3, 100 * (predicted / row["step"] - 1)))
        if measured_t(row) is not None:
            worst = max(worst, abs(predict(row, measured_t(row), eta) / row["step"] - 1))
        print("%6d %7s %3d %3d %8.2f %6.2f ms | %s | %s | %s" % (row["ranks"], row["rate"], row["every"],
              row["staleness"], row["compute"] * 1e3, row["step"] * 1e3, *cells))
    if measured:
        print("largest error with the measured all-reduce and eta %.2f: %.1f%%" % (eta, 100 * worst))
    return worst


def self_test():
    checks = [
        ("H = 1 is compute plus the all-reduce", local_step_time(1.0, 0.5, 1, 2, 0.0), 1.5),
        ("H = 4 pays a quarter of it", local_step_time(1.0, 0.5, 4, 2, 0.0), 1.125),
        ("stragglers shrink as 1/sqrt(H)", local_step_time(1.0, 0.0, 4, 8, 0.01),
         1.0 + 0.01 * math.sqrt(2 * math.log(8)) / 2),
        ("one rank waits for nobody", local_step_time(1.0, 0.0, 8, 1, 0.5), 1.0),
        ("staleness hides S steps of it", local_step_time(1.0, 3.0, 4, 2, 0.0, 2), 1.25),
        ("and all of a short one", local_step_time(1.0, 1.5, 4, 2, 0.0, 2), 1.0),
        ("interpolation: a measured point", interpolated([(1.0, 2.0), (4.0, 8.0)], 4.0), 8.0),
        ("interpolation: log-log between", interpolated([(1.0, 1.0), (4.0, 16.0)], 2.0), 4.0),
        ("measured buckets: 1 MiB, then the rest", measured_all_reduce([(1 << 20, 1.0), (4 << 20, 4.0)], 3 << 20),
         3.0),
    ]
    return cluster_model.report_checks("local_sgd_model", checks, 1e-12)


def predictions():
    v100, resnet_v100 = cluster_model.CLUSTERS["v100-dgx1"], cluster_model.MODELS["resnet50-v100"]
    spread = cluster_model.fit_spread(v100, resnet_v100, 8, cluster_model.DDP_ANCHORS[8] / 8)
    clusters = [("h200-hgx", "resnet50-h200"), ("h200-hgx", "gpt2small-h200"), ("p100-roce", "vgg16-p100")]
    print("PREDICTIONS (model, not measured): step rate per GPU against no communication, stragglers' spread "
          "%.2f%% (fitted to the 8-GPU DDP anchor, cluster_model.py)" % (100 * spread))
    print("%-16s %-10s %6s %12s %12s %12s %12s" % ("model", "cluster", "GPUs", "synchronous", "local H=4",
                                                    "local H=8", "H=8, S=2"))
    for cluster_name, model_name in clusters:
        cluster, work = cluster_model.CLUSTERS[cluster_name], cluster_model.MODELS[model_name]
        for p in (8, 64, 256, 1024):
            effs = [100 * cluster_efficiency(cluster, work, p, spread, every, staleness)
                    for every, staleness in ((1, 0), (4, 0), (8, 0), (8, 2))]
            print("%-16s %-10s %6d %11.1f%% %11.1f%% %11.1f%% %11.1f%%" % (model_name, cluster_name, p, *effs))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--self-test", action="store_true", help="check the model's arithmetic and exit")
    parser.add_argument("--check", metavar="FILE", help="measured rows to set beside the model")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.check:
        check(args.check)
        print()
    return predictions()


if __name__ == "__main__":
    sys.exit(main())
