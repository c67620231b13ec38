"""Training metrics as CSV (the format of the C examples' --metrics) and their plot through gnuplot."""
import csv
import math
import os
import shutil
import stat
import subprocess

from . import _arguments
from ._errors import IO, Error, error

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _what_is(mode):
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open_regular(path):
    """`path` opened for writing as a new or truncated regular file, like the library's own files
    (src/core/file_io.c): O_NONBLOCK until fstat has said what it is, so a FIFO without a reader cannot block
    the open forever (Python's open() did), and a FIFO, device, socket or directory is refused, never written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        descriptor = os.open(path, flags, 0o666)  # (the umask decides, as for any new file)
    except OSError as failure:
        try:  # a FIFO without a reader says ENXIO: name what is there instead
            kind = _what_is(os.stat(path).st_mode)
        except OSError:
            kind = None
        raise error(IO, "bptrain: metrics file %r: cannot create: %s" %
                    (path, "it is %s" % kind if kind else failure.strerror or failure)) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise error(IO, "bptrain: metrics file %r: it is %s, not a regular file" % (path, _what_is(mode)))
        os.set_blocking(descriptor, True)
        os.ftruncate(descriptor, 0)  # only now that it is known to be a regular file
        return os.fdopen(descriptor, "w", newline="")
    except BaseException as failure:
        os.close(descriptor)
        if isinstance(failure, OSError) and not isinstance(failure, Error):
            raise error(IO, "bptrain: metrics file %r: cannot create: %s" % (path, failure.strerror or failure)) \
                from None
        raise


class MetricsWriter:
    """Writes the metrics CSV shared with the C examples (examples/common/example_metrics.h)."""

    COLUMNS = ["kind", "epoch", "step", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
               "learning_rate", "seconds"]

    def __init__(self, path):
        self.path = os.fsdecode(_arguments.path(path, "metrics file"))
        self.file = _open_regular(self.path)
        self.writer = csv.writer(self.file)
        self._write(self.COLUMNS)

    def _write(self, row):
        try:
            self.writer.writerow(row)
        except OSError as failure:  # a full disk, a file size limit: FileError, not a bare OSError
            raise error(IO, "bptrain: metrics file %r: cannot write: %s" % (self.path, failure.strerror or failure)) \
                from None

    def step(self, epoch, step, loss, learning_rate, seconds):
        self._write(["step", epoch, step, "%.6g" % loss, "", "", "", "%.6g" % learning_rate, "%.3f" % seconds])

    def epoch(self, epoch, step, record, learning_rate, seconds):
        def field(name):
            return "%.6g" % record[name] if name in record else ""
        self._write(["epoch", epoch, step, field("train_loss"), field("train_accuracy"), field("test_loss"),
                     field("test_accuracy"), "%.6g" % learning_rate, "%.3f" % seconds])

    def close(self):
        try:
            self.file.close()  # (closes the descriptor even when the last flush fails)
        except OSError as failure:
            raise error(IO, "bptrain: metrics file %r: cannot write: %s" % (self.path, failure.strerror or failure)) \
                from None


def _number(text, scale=1.0):
    """The CSV field as a finite float, or None (empty, not a number, inf or NaN)."""
    try:
        value = float(text) * scale
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _range(axis, values):
    """gnuplot's "set xrange"/"set yrange" for values with 5% room each side (no point on the frame), a single
    value 10% of itself (one epoch made gnuplot warn "empty x range"), no values [0:1]; as the C examples."""
    values = [v for v in values if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    room = 0.05 * (high - low) if high > low else 0.1 * abs(low) if low != 0.0 else 1.0
    return "set %srange [%.9g:%.9g]" % (axis, low - room, high + room)


def plot_metrics(csv_path, png_path, title="training"):
    """Draws loss, accuracy and learning-rate curves from a metrics CSV into a PNG with gnuplot (Debian:
    gnuplot-nox).

    Same picture as the C examples' --plot: batch and epoch loss against the step, accuracy per epoch, the
    learning rate against the step; every axis padded, and a panel without values says so.
    """
    gnuplot = os.environ.get("BPT_GNUPLOT") or shutil.which("gnuplot")
    if not gnuplot or not os.access(gnuplot, os.X_OK):
        raise RuntimeError("bptrain: gnuplot not found; install it (Debian: apt-get install gnuplot-nox) or plot "
                           "%s with another tool" % csv_path)
    with open(csv_path, newline="") as file:
        rows = list(csv.DictReader(file))
    step_rows = [row for row in rows if row["kind"] == "step" and (row["train_loss"] or row["learning_rate"])]
    epoch_rows = [row for row in rows if row["kind"] == "epoch"]
    steps = ["%s %s %s" % (row["step"], row["train_loss"] or "NaN", row["learning_rate"] or "NaN")
             for row in step_rows]
    columns = ["epoch", "step", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]
    epochs = [" ".join(row[c] or "NaN" for c in columns) for row in epoch_rows]
    # A series is drawn when it has a finite point: gnuplot warns about one without.
    has = {c: any(_number(row[c]) is not None for row in epoch_rows) for c in columns}
    batch_losses = sum(_number(row["train_loss"]) is not None for row in step_rows)
    step_axis = [_number(row["step"]) for row in step_rows] + \
        [_number(row["step"]) for row in epoch_rows
         if _number(row["train_loss"]) is not None or _number(row["test_loss"]) is not None]
    losses = [_number(row["train_loss"]) for row in step_rows + epoch_rows] + \
        [_number(row["test_loss"]) for row in epoch_rows]
    accuracies = [_number(row[c], 100.0) for row in epoch_rows for c in ("train_accuracy", "test_accuracy")]
    rates = [_number(row["learning_rate"]) for row in step_rows]

    def quote(text):
        return "'" + text.replace("'", "''") + "'"

    def step_style(points):  # a single point, which a line would not show, is drawn as one
        return "lines" if points > 1 else "points pt 7"

    def empty(what):
        return ["set label 'no %s recorded' at graph 0.5, 0.5 center" % what, "plot NaN notitle"]

    lines = ["$steps << EOD"] + steps + ["EOD", "$epochs << EOD"] + epochs + ["EOD",
             "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1400,420 noenhanced } "
             "else { set terminal png size 1400,420 noenhanced }",
             "set output " + quote(png_path), "set multiplot layout 1,3 title " + quote(title),
             "set grid", "set key top right", "set xlabel 'step'", "set ylabel 'loss'",
             _range("x", step_axis), _range("y", losses)]
    curves = []
    if batch_losses:
        curves.append("$steps using 1:2 with %s lc rgb '#9fb7df' title 'train (batch)'" % step_style(batch_losses))
    if has["train_loss"]:
        curves.append("$epochs using 2:3 with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train (epoch)'")
    if has["test_loss"]:
        curves.append("$epochs using 2:5 with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'")
    lines += ["plot " + ", ".join(curves)] if curves else empty("loss" if step_rows or epoch_rows else "data")
    lines += ["unset label", "set xlabel 'epoch'", "set ylabel 'accuracy (%)'", "set key bottom right", "set xtics 1",
              _range("x", [_number(row["epoch"]) for row in epoch_rows]), _range("y", accuracies)]
    curves = []
    if has["test_accuracy"]:
        curves.append("$epochs using 1:(100 * $6) with linespoints lw 2 pt 7 lc rgb '#cf4f1f' title 'test'")
    if has["train_accuracy"]:
        curves.append("$epochs using 1:(100 * $4) with linespoints lw 2 pt 7 lc rgb '#1f4f9f' title 'train'")
    lines += ["plot " + ", ".join(curves)] if curves else empty("accuracy")
    lines += ["unset label", "set xlabel 'step'", "set ylabel 'learning rate'", "set key top right",
              "set xtics autofreq", _range("x", step_axis), _range("y", rates)]
    rate_points = sum(r is not None for r in rates)
    if rate_points:
        lines.append("plot $steps using 1:3 with %s lw 2 lc rgb '#3f8f3f' title 'learning rate'"
                     % step_style(rate_points))
    else:
        lines += empty("learning rate")
    lines.append("unset multiplot")
    subprocess.run([gnuplot], input=("\n".join(lines) + "\n").encode(), check=True)
