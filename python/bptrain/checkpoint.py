"""Model.save / Model.load through the library's checkpoint (bpt_checkpoint_save, bpt_checkpoint_load and,
where the library has it, bpt_checkpoint_load_with_options with its report of loaded, skipped and missing
parameters): the same file the C API and the C examples' --save / --eval use.
"""
import ctypes

from . import _arguments, _native
from ._errors import UNSUPPORTED, error
from ._native import lib

_LOADED, _SKIPPED, _MISSING = 0, 1, 2


class LoadReport:
    """What a load did: `loaded`, `skipped` (in the file, not loaded: absent here or shaped differently)
    and `missing` (here, not in the file) parameter names, `reasons` {name: why} for the skipped and missing
    ones, and the `epoch` and `step` stored with the file."""

    def __init__(self, loaded, skipped, missing, reasons, epoch, step):
        self.loaded, self.skipped, self.missing, self.reasons = loaded, skipped, missing, reasons
        self.epoch, self.step = epoch, step

    def __repr__(self):
        return "LoadReport(loaded=%d, skipped=%r, missing=%r, epoch=%d, step=%d)" % (
            len(self.loaded), self.skipped, self.missing, self.epoch, self.step)


def _contents(optimizer, dataset, what, epoch=0, step=0):
    from .data import Dataset
    from .training import Optimizer
    contents = lib.bpt_checkpoint_contents_default()
    if optimizer is not None:
        contents.optimizer = _arguments.instance(optimizer, Optimizer, what, "optimizer").handle
    if dataset is not None:
        contents.dataset = _arguments.instance(dataset, Dataset, what, "dataset").handle
    contents.epoch = _arguments.integer(epoch, what, "epoch")
    contents.step = _arguments.integer(step, what, "step")
    return contents


def save_checkpoint(model, path, optimizer, dataset, epoch, step):
    contents = _contents(optimizer, dataset, "Model.save", epoch, step)
    path = _arguments.path(path, "Model.save")
    model.context.check(lib.bpt_checkpoint_save(model.handle, path, ctypes.byref(contents)))


def has_load_options():
    """True when the library loads checkpoints non-strictly (bpt_checkpoint_load_with_options)."""
    return _native.has("bpt_checkpoint_load_with_options")


def load_checkpoint(model, path, optimizer, dataset, strict):
    contents = _contents(optimizer, dataset, "Model.load")
    path = _arguments.path(path, "Model.load")
    if not has_load_options():
        if not strict:
            raise error(UNSUPPORTED, "bptrain: Model.load(strict=False) needs bpt_checkpoint_load_with_options, "
                                     "which %s does not have" % lib._name)
        model.context.check(lib.bpt_checkpoint_load(model.handle, path, ctypes.byref(contents)))
        names = [node.name for node in model.parameter_nodes()]
        return LoadReport(names, [], [], {}, contents.epoch, contents.step)
    options = lib.bpt_checkpoint_load_options_default()
    options.strict = int(bool(strict))
    report = _native.handle()
    model.context.check(lib.bpt_checkpoint_load_with_options(model.handle, path, ctypes.byref(contents),
                                                             ctypes.byref(options), ctypes.byref(report)))
    try:
        lists, reasons = [], {}
        for entry in (_LOADED, _SKIPPED, _MISSING):
            names = []
            for index in range(lib.bpt_checkpoint_report_count(report, entry)):
                # The load has already replaced the parameters: a name from the file that is not UTF-8 must
                # not raise now (UnicodeDecodeError after the change); its bad bytes read as \xNN instead.
                name = (lib.bpt_checkpoint_report_name(report, entry, index) or b"").decode(errors="backslashreplace")
                names.append(name)
                reason = lib.bpt_checkpoint_report_reason(report, entry, index)
                if reason:
                    reasons[name] = reason.decode(errors="replace")
            lists.append(names)
    finally:
        lib.bpt_checkpoint_report_destroy(report)
    return LoadReport(lists[0], lists[1], lists[2], reasons, contents.epoch, contents.step)


