"""Command-line checks, outputs and the training run shared by the Python examples (mnist_mlp.py, mnist_cnn.py),
imported from beside them: Python puts a script's own directory first on sys.path. The C examples share theirs
in examples/common/."""
import argparse
import difflib
import os
import sys
import time


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the C examples' answer to a misspelt option (examples/common/example_util.c): "unknown
    argument '--epcohs'; did you mean --epochs?" instead of a bare "unrecognized arguments"."""

    def parse_args(self, args=None, namespace=None):
        arguments, unknown = self.parse_known_args(args, namespace)
        for word in unknown:
            if word.startswith("--"):
                self.error(self._unknown(word))
        if unknown:
            self.error("unrecognized arguments: %s" % " ".join(unknown))
        return arguments

    def _unknown(self, word):
        # Compared without the dashes, which every option shares: with them "--x" would look like "--onnx".
        names = {option.lstrip("-"): option for option in self._option_string_actions if option.startswith("--")}
        nearest = difflib.get_close_matches(word.split("=", 1)[0].lstrip("-"), list(names), n=1)
        if nearest:
            return "unknown argument '%s'; did you mean %s?" % (word, names[nearest[0]])
        return "unknown argument '%s'" % word


def positive(text):
    """argparse type: an integer >= 1 (0 epochs would leave no accuracy to report)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer, got %s" % text)
    return value


def check_creatable(parser, option, path):
    """Ends the run now, not after training, when `path` cannot be written: creates and removes a file beside
    it, as the library's atomic writers do."""
    if path is None:
        return
    if path and os.path.exists(path) and not os.path.isdir(path) and not os.path.isfile(path):
        # /dev/null, a FIFO: the library writes regular files only, and would refuse it after the run. The
        # metrics CSV is opened by Python itself, so /dev/stdout works there.
        if option == "--metrics":
            return
        parser.error("%s '%s': is not a regular file (a device or FIFO), which the library does not write; "
                     "nothing was run" % (option, path))
    probe = "%s.probe-%d" % (path, os.getpid())
    try:
        if not path or os.path.isdir(path):
            raise IsADirectoryError("is empty" if not path else "is a directory")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as failure:
        parser.error("%s '%s': cannot create a file there (%s); nothing was run" % (option, path,
                                                                                    failure.strerror or failure))


class Outputs:
    """--metrics FILE.csv, --plot FILE.png and --profile FILE.json, as the C examples take them
    (examples/common/example_metrics.h): add() declares them, check() refuses paths that cannot be written
    before anything runs, start() turns the profiler on, csv is the path for Model.fit(metrics=...), and
    finish() draws the plot, prints the profile summary and writes the trace, returning 1 when an output
    could not be produced (the message is on stderr) and 0 otherwise. Call finish() after saving the model,
    so that a failed output never costs the trained one."""

    OPTIONS = ("--metrics", "--plot", "--profile")

    def add(self, parser):
        parser.add_argument("--metrics", help="write per-step and per-epoch metrics to this CSV file")
        parser.add_argument("--plot", help="draw loss and accuracy curves to this PNG (needs gnuplot)")
        parser.add_argument("--profile", help="profile and write a Chrome trace to this JSON file")

    def check(self, parser, arguments):
        for option in self.OPTIONS:
            check_creatable(parser, option, getattr(arguments, option[2:]))
        self.arguments = arguments
        # --plot alone still needs the data: beside the PNG, as the C examples keep it.
        self.csv = arguments.metrics or (arguments.plot + ".csv" if arguments.plot else None)

    def start(self, bptrain, context):
        if self.arguments.profile:
            bptrain.profile(context)

    def finish(self, bptrain, context, title):
        status = 0
        if self.arguments.plot:
            try:
                bptrain.plot_metrics(self.csv, self.arguments.plot, title)
                print("plot: %s (data in %s)" % (self.arguments.plot, self.csv))
            except RuntimeError as error:
                print("warning: --plot: %s" % error, file=sys.stderr)
                status = 1
        if self.arguments.profile:
            print(bptrain.profile_summary(context), end="")
            try:
                bptrain.write_profile_trace(context, self.arguments.profile)
                print("profile: Chrome trace in %s" % self.arguments.profile)
            except bptrain.Error as error:
                print("error: --profile: %s" % error, file=sys.stderr)
                status = 1
        return status


def fit_and_save(model, optimizer, train, test, arguments, outputs):
    """The training both examples run: fit for --epochs with the test set as evaluation and the metrics CSV,
    report the time and the final accuracy, then write --save (with the optimiser's state)."""
    start = time.monotonic()
    history = model.fit(optimizer, train, epochs=arguments.epochs, batch_size=arguments.batch, seed=arguments.seed,
                        evaluation=test, metrics=outputs.csv, verbose=True)
    print("trained in %.1f s; final test accuracy: %.2f%%" %
          (time.monotonic() - start, 100.0 * history[-1]["test_accuracy"]))
    if arguments.save:
        model.save(arguments.save, optimizer=optimizer, epoch=arguments.epochs)
        print("checkpoint saved to %s" % arguments.save)
