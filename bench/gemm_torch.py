"""The PyTorch side of bench/gemm.sh: torch.mm GFLOP/s on the shapes of bench/gemm_shapes.c (same order, same
transposes as views, so MKL sees the layouts libbptrain's OpenBLAS sees). Prints one line per shape:
"torch_mm shape=MxNxK transpose=TT gflops=G", best of five blocks, like gemm_shapes_bench.

    gemm_torch.py [--threads 2] [--seconds 0.5]
"""
import argparse
import time

import torch

SHAPES = [  # (transpose_a, transpose_b, m, n, k): keep in step with bench/gemm_shapes.c
    (0, 0, 128, 512, 784), (0, 0, 784, 512, 128), (0, 1, 128, 512, 784), (1, 0, 512, 784, 128),
    (0, 0, 128, 784, 512), (0, 1, 128, 256, 512), (1, 0, 256, 512, 128), (0, 1, 512, 512, 784),
    (1, 0, 512, 784, 512), (0, 0, 512, 784, 512),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("torch %s, %d threads, BLAS: %s" % (torch.__version__, torch.get_num_threads(),
                                             "MKL" if torch.backends.mkl.is_available() else "not MKL"))
    for ta, tb, m, n, k in SHAPES:
        a = torch.rand(k, m) if ta else torch.rand(m, k)
        b = torch.rand(n, k) if tb else torch.rand(k, n)
        a, b = (a.t() if ta else a), (b.t() if tb else b)
        c = torch.empty(m, n)
        for _ in range(5):
            torch.mm(a, b, out=c)
        best = 0.0
        for _ in range(5):
            calls, start = 0, time.perf_counter()
            while True:
                torch.mm(a, b, out=c)
                calls += 1
                elapsed = time.perf_counter() - start
                if elapsed >= args.seconds / 5:
                    break
            best = max(best, 2.0 * m * n * k * calls / elapsed / 1e9)
        print("torch_mm shape=%dx%dx%d transpose=%s%s gflops=%.1f" % (m, n, k, "T" if ta else "N", "T" if tb else "N",
                                                                    best))


if __name__ == "__main__":
    main()
