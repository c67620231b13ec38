#!/usr/bin/env python3
"""The loss/accuracy/learning-rate plot of --plot (C, examples/common/example_metrics.c) and of
bptrain.plot_metrics (Python), on the same metrics files (issue 29): three panels, the learning rate among
them; every axis padded, so no point sits on the frame (the accuracy axis clipped a 100% point); and no
gnuplot warning, also for one epoch of one step ("empty x range"), no accuracy, NaN losses or no rows at all.

Usage: check_plot.py PLOT_TOOL [--c-only] (PLOT_TOOL: tests/examples/plot_metrics_tool.c). gnuplot runs
through a wrapper that keeps its script and its standard error. Python's half needs the binding to import
(BPTRAIN_LIBRARY, PYTHONPATH); --c-only leaves it out. Exits 77 without gnuplot.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HEADER = "kind,epoch,step,train_loss,train_accuracy,test_loss,test_accuracy,learning_rate,seconds\n"


def step(epoch, number, loss, rate):
    return "step,%d,%d,%s,,,,%s,0.1\n" % (epoch, number, loss, rate)


def epoch(number, at, train_loss, train_accuracy, test_loss, test_accuracy, rate):
    return "epoch,%d,%d,%s,%s,%s,%s,%s,1.0\n" % (number, at, train_loss, train_accuracy, test_loss, test_accuracy,
                                                  rate)


# name: (CSV rows, the accuracies (%) and learning rates the panels must show inside their frames)
CASES = {
    "one_step": ([step(1, 1, "2.3", "0.05"), epoch(1, 1, "2.3", "", "2.2", "0.5", "0.05")], [50.0], [0.05]),
    "cosine": ([step(e, 10 * (e - 1) + k, "%.3f" % (2.0 / (e + k)), "%.4f" % (0.1 * (1 - (10 * (e - 1) + k) / 31)))
                for e in (1, 2, 3) for k in range(1, 11)] +
               [epoch(e, 10 * e, "%.3f" % (1.0 / e), "%.2f" % (0.5 + 0.2 * e), "%.3f" % (1.1 / e),
                      "%.2f" % (0.6 + 0.2 * e), "0.05") for e in (1, 2)] +
               [epoch(3, 30, "0.3", "1", "0.35", "1", "0.0032")],
               [70.0, 80.0, 90.0, 100.0], [0.0968, 0.0032]),
    "no_accuracy": ([step(1, k, "%.3f" % (1.0 / k), "0.01") for k in range(1, 6)] +
                    [epoch(1, 5, "0.5", "", "0.6", "", "0.01")], [], [0.01]),
    "nan_loss": ([step(1, 1, "nan", "0.1"), step(1, 2, "nan", "0.1"), epoch(1, 2, "nan", "", "nan", "0.1", "0.1")],
                 [10.0], [0.1]),
    "empty": ([], [], []),
}
WARNING = re.compile(r"warning|error", re.IGNORECASE)


def ranges(script):
    """The (low, high) of every "set xrange"/"set yrange" in order: x and y of each panel."""
    return [(float(a), float(b)) for a, b in re.findall(r"set [xy]range \[([^:\]]+):([^\]]+)\]", script)]


def check(name, label, script, errors, png):
    rows, accuracies, rates = CASES[name]
    problems = []
    if not os.path.getsize(png):
        problems.append("no PNG")
    # (Font configuration notes are the machine's, not the script's.)
    warnings = [line for line in errors.splitlines() if WARNING.search(line) and not line.startswith("Fontconfig")]
    if warnings:
        problems.append("gnuplot said: " + "; ".join(warnings))
    if "layout 1,3" not in script or "ylabel 'learning rate'" not in script:
        problems.append("not three panels with a learning-rate one")
    # A one-point series drawn "with lines" shows nothing: one step must be drawn as a point.
    if name == "one_step" and re.search(r"\$steps using 1:[23] with lines", script):
        problems.append("a one-step series is drawn as a line, which shows nothing")
    found = ranges(script)
    if len(found) != 6:
        problems.append("%d axis ranges, not 6" % len(found))
    else:
        for axis, (low, high) in zip(("loss x", "loss y", "epoch x", "accuracy y", "rate x", "rate y"), found):
            if not low < high:
                problems.append("%s range [%g:%g] is empty" % (axis, low, high))
        for values, (low, high), what in ((accuracies, found[3], "accuracy"), (rates, found[5], "learning rate")):
            for value in values:
                if not low < value < high:
                    problems.append("%s %g is not inside its axis [%g:%g]" % (what, value, low, high))
    for problem in problems:
        print("FAIL: %s, %s: %s" % (label, name, problem))
    if not problems:
        print("ok: %s, %s" % (label, name))
    return len(problems)


def python_run(plot, csv_path, png):
    try:
        plot(csv_path, png, "plot check")
        return True
    except Exception as failure:  # gnuplot's failure is the finding: report it with the others
        print("Python plot_metrics raised %s: %s" % (type(failure).__name__, failure))
        return False


def main():
    tool = sys.argv[1]
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("skipped: gnuplot is not installed (apt-get install gnuplot-nox)")
        return 77
    python_plot = None
    if "--c-only" in sys.argv:
        print("note: C only (--c-only)")
    else:
        import bptrain
        python_plot = bptrain.plot_metrics
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        wrapper = os.path.join(work, "gnuplot")
        with open(wrapper, "w") as file:
            file.write('#!/bin/sh\ntee "$PLOT_CAPTURE.gp" | "%s" 2> "$PLOT_CAPTURE.err"\n' % gnuplot)
        os.chmod(wrapper, 0o755)
        os.environ["BPT_GNUPLOT"] = wrapper
        for name, (rows, _, _) in CASES.items():
            csv_path = os.path.join(work, name + ".csv")
            with open(csv_path, "w") as file:
                file.write(HEADER + "".join(rows))
            runs = [("C", lambda png: subprocess.run([tool, csv_path, png]).returncode == 0)]
            if python_plot:
                runs.append(("Python", lambda png: python_run(python_plot, csv_path, png)))
            for label, run in runs:
                capture = os.path.join(work, "%s-%s" % (name, label))
                os.environ["PLOT_CAPTURE"] = capture
                png = capture + ".png"
                if not run(png):
                    print("FAIL: %s, %s: the plot failed" % (label, name))
                    failures += 1
                    continue
                with open(capture + ".gp") as file:
                    script = file.read()
                with open(capture + ".err") as file:
                    errors = file.read()
                failures += check(name, label, script, errors, png)
    print("%d failures" % failures if failures else "plots OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
