#!/usr/bin/env python3
"""The ring all-reduce cost model fitted to bench/comm-netns.sh output, and its predictions for more ranks.

Cost of a ring all-reduce of n bytes on p ranks (Thakur, Rabenseifner & Gropp 2005):
    T(p, n) = 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma
alpha: per-message latency, beta: seconds per byte on a link, gamma: seconds per byte of the reduction.
beta and gamma only ever enter as 2 beta + gamma, so gamma comes from its own measurement (--gamma, from
build/reduce_rate_bench) and the fit gives alpha and beta per link rate, by least squares on the relative
error (the sizes span 1000x, so absolute error would fit only the largest). The fit uses the 2-rank runs;
runs with more ranks are checked against it, not fitted.

    bench/ring_model.py --gamma 4.0e-10 [--compute-ms 100] run1.txt [run2.txt ...]
The files are comm-netns.sh's output, or docs/comm.md itself, which quotes the measured runs.
Everything it prints past the per-point errors is a prediction of the model, not a measurement.
"""
import argparse
import re
import sys

HEADER = re.compile(r"^=== (\d+) ranks, links shaped to: (\S+)")
ROW = re.compile(r"^\s+(\d+)\s+([\d.]+) /\s+([\d.]+)\s+([\d.]+) /\s+([\d.]+)")


def parse(paths):
    """{(ranks, rate): [(bytes, mpi_fastest_s, ours_fastest_s), ...]} from comm_bench's all-reduce table."""
    runs, key = {}, None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):  # a table quoted in docs/comm.md ends with its code block
                    key = None
                m = HEADER.match(line)
                if m:
                    key = (int(m.group(1)), m.group(2))
                    continue
                m = ROW.match(line)
                if m and key:
                    runs.setdefault(key, []).append(
                        (int(m.group(1)), float(m.group(2)) * 1e-3, float(m.group(4)) * 1e-3))
    return runs


def model(p, n, alpha, beta, gamma):
    return 2 * (p - 1) * alpha + (p - 1) / p * n * (2 * beta + gamma)


def fit(points, gamma):
    """alpha, beta minimising sum(((x1 alpha + x2 b) - t) / t)^2 with b = 2 beta + gamma; alpha >= 0."""
    s11 = s12 = s22 = r1 = r2 = 0.0
    for p, n, t in points:
        x1, x2 = 2 * (p - 1) / t, (p - 1) / p * n / t
        s11 += x1 * x1
        s12 += x1 * x2
        s22 += x2 * x2
        r1 += x1
        r2 += x2
    det = s11 * s22 - s12 * s12
    alpha, b = (r1 * s22 - r2 * s12) / det, (s11 * r2 - s12 * r1) / det
    if alpha < 0:  # a negative latency is meaningless: refit the slope alone
        alpha, b = 0.0, r2 / s22
    return alpha, (b - gamma) / 2


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gamma", type=float, required=True, help="seconds per byte of the f32 sum")
    parser.add_argument("--compute-ms", type=float, default=0.0,
                        help="measured step time without communication, for the efficiency predictions")
    parser.add_argument("--gradient-bytes", type=float, default=4 * 6858250, help="the model's gradient (MLP)")
    parser.add_argument("--alpha-us", type=float, default=None,
                        help="latency for the predictions in place of the fitted one (the fit's alpha on a loaded "
                             "machine is mostly scheduling delay, not the wire)")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    try:
        runs = parse(args.files)
    except OSError as error:
        sys.exit("ring_model: cannot read %s: %s" % (error.filename, error.strerror))
    if not runs:
        sys.exit("ring_model: no comm_bench all-reduce tables with '=== N ranks' headers in the files")
    fitted = {}
    for (p, rate), rows in sorted(runs.items()):
        if p != 2:
            continue
        alpha, beta = fit([(p, n, ours) for n, _, ours in rows], args.gamma)
        fitted[rate] = (alpha, beta)
        link = "%.2f Gbit/s" % (8 / beta / 1e9) if beta > 0 else "beta <= 0 (reduction-bound)"
        print("fit, rate %-7s alpha = %8.1f us, beta = %.4g s/byte (%s), gamma = %.4g s/byte"
              % (rate, alpha * 1e6, beta, link, args.gamma))
    print("\nper point: measured (ours, fastest round) vs the model; [fit] = used in the fit, [check] = not")
    print("%6s %7s %10s %12s %12s %8s" % ("ranks", "rate", "bytes", "measured ms", "model ms", "error"))
    for (p, rate), rows in sorted(runs.items()):
        if rate not in fitted:
            continue
        for n, _, ours in rows:
            predicted = model(p, n, *fitted[rate], args.gamma)
            print("%6d %7s %10d %12.3f %12.3f %+7.1f%% %s" % (p, rate, n, ours * 1e3, predicted * 1e3,
                  100 * (predicted / ours - 1), "[fit]" if p == 2 else "[check]"))
    n = args.gradient_bytes
    print("\nPREDICTIONS (model, not measured): one all-reduce of %.1f MB, and the step's efficiency"
          " c/(c+T) without overlap, c/max(c,T) with perfect overlap, c = %.1f ms, alpha %s" % (n / 1e6, args.compute_ms,
          "%g us (given)" % args.alpha_us if args.alpha_us is not None else "as fitted"))
    print("%7s %7s %12s %14s %14s" % ("rate", "ranks", "all-reduce ms", "eff. no overlap", "eff. overlap"))
    for rate, (alpha, beta) in sorted(fitted.items()):
        if args.alpha_us is not None:
            alpha = args.alpha_us * 1e-6
        for p in (8, 64, 256, 1024):
            t = model(p, n, alpha, beta, args.gamma)
            c = args.compute_ms * 1e-3
            effs = ("%13.0f%%" % (100 * c / (c + t)), "%13.0f%%" % (100 * c / max(c, t))) if c else ("n/a",) * 2
            print("%7s %7d %12.1f %14s %14s" % (rate, p, t * 1e3, *effs))


if __name__ == "__main__":
    main()
