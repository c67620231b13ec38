"""Command-line checks shared by the Python examples (mnist_mlp.py, mnist_cnn.py), imported from beside them:
Python puts a script's own directory first on sys.path. The C examples share theirs in examples/common/."""
import argparse
import os


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
