"""Training metrics as CSV (the format of the C examples' --metrics) and their plot through gnuplot."""
import csv
import os
import shutil
import subprocess

from ._errors import IO, error


class MetricsWriter:
    """Writes the metrics CSV shared with the C examples (examples/common/example_metrics.h)."""

    COLUMNS = ["kind", "epoch", "step", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
               "learning_rate", "seconds"]

    def __init__(self, path):
        try:
            self.file = open(path, "w", newline="")
        except (OSError, TypeError) as failure:  # a bptrain.FileError, like every other file the binding writes
            raise error(IO, "bptrain: metrics file %r: cannot create: %s" %
                        (path, getattr(failure, "strerror", None) or failure)) from None
        self.writer = csv.writer(self.file)
        self.writer.writerow(self.COLUMNS)

    def step(self, epoch, step, loss, learning_rate, seconds):
        self.writer.writerow(["step", epoch, step, "%.6g" % loss, "", "", "", "%.6g" % learning_rate,
                              "%.3f" % seconds])

    def epoch(self, epoch, step, record, learning_rate, seconds):
        def field(name):
            return "%.6g" % record[name] if name in record else ""
        self.writer.writerow(["epoch", epoch, step, field("train_loss"), field("train_accuracy"),
                              field("test_loss"), field("test_accuracy"), "%.6g" % learning_rate,
                              "%.3f" % seconds])

    def close(self):
        self.file.close()


def plot_metrics(csv_path, png_path, title="training"):
    """Draws loss and accuracy curves from a metrics CSV into a PNG with gnuplot (Debian: gnuplot-nox).

    Same picture as the C examples' --plot: batch and epoch loss against the step, accuracy per epoch.
    """
    gnuplot = os.environ.get("BPT_GNUPLOT") or shutil.which("gnuplot")
    if not gnuplot or not os.access(gnuplot, os.X_OK):
        raise RuntimeError("bptrain: gnuplot not found; install it (Debian: apt-get install gnuplot-nox) or plot "
                           "%s with another tool" % csv_path)
    with open(csv_path, newline="") as file:
        rows = list(csv.DictReader(file))
    steps = ["%s %s" % (row["step"], row["train_loss"]) for row in rows if row["kind"] == "step" and row["train_loss"]]
    columns = ["epoch", "step", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    epochs = [" ".join(row[c] or "NaN" for c in columns) for row in rows if row["kind"] == "epoch"]
    has = {c: any(row["kind"] == "epoch" and row[c] for row in rows) for c in columns}

    def quote(text):
        return "'" + text.replace("'", "''") + "'"

    lines = ["$steps << EOD"] + steps + ["EOD", "$epochs << EOD"] + epochs + ["EOD",
             "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1000,420 noenhanced } "
             "else { set terminal png size 1000,420 noenhanced }",
             "set output " + quote(png_path), "set multiplot layout 1,2 title " + quote(title),
             "set grid", "set key top right", "set xlabel 'step'", "set ylabel 'loss'"]
    curves = ["$steps using 1:2 with lines lc rgb '#9fb7df' title 'train (batch)'"]
    if has["train_loss"]:
        curves.append("$epochs using 2:3 with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train (epoch)'")
    if has["test_loss"]:
        curves.append("$epochs using 2:5 with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'")
    lines.append("plot " + ", ".join(curves))
    lines += ["set xlabel 'epoch'", "set ylabel 'accuracy (%)'", "set key bottom right", "set xtics 1"]
    curves = []
    if has["test_accuracy"]:
        curves.append("$epochs using 1:(100 * $6) with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'")
    if has["train_accuracy"]:
        curves.append("$epochs using 1:(100 * $4) with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train'")
    if curves:
        lines.append("plot " + ", ".join(curves))
    else:
        lines += ["set label 'no accuracy recorded' at graph 0.5, 0.5 center", "plot [0:1] NaN notitle"]
    lines.append("unset multiplot")
    subprocess.run([gnuplot], input=("\n".join(lines) + "\n").encode(), check=True)
