"""The C library's messages as a Python user should read them: a message that starts with the C function that
failed ("bpt_optimizer_create: ...") starts with the call the user made instead ("bptrain: Optimizer: ..."),
and the few phrases that spell a C call or a C flag get their Python spelling. The C library keeps its own
wording (C users need it); only what reaches Python is rewritten, and only when a call has failed.
"""
import os
import re
import sys

# "bpt_name: ..." and, where the C function names a node or a file, "bpt_name 'fc1': ..." (the quoted part stays).
_C_FUNCTION = re.compile(r"bpt_[a-z0-9_]+(?=(?: '[^']*')?: )")

# C spellings inside messages that a Python call can reach, and what the Python user writes instead (found by
# grepping src/ for "with bpt_", "call bpt_" and "= 0"; the C file is named so the two stay in step).
_PHRASES = (
    ("a load with strict = 0", "a load with strict=False"),  # checkpoint_match.c, via Model.load
    ("create one with bpt_optimizer_create on this graph",  # optimizer.c
     "create one with bptrain.Optimizer(model) for this model"),
    ("call bpt_graph_set_training(graph, 1) first", "call model.train() first"),  # ops/batch_norm.c
    ("made with bpt_graph_nontrainable_parameter()", "made with model.buffer()"),  # ops/batch_norm.c
    ("declare it with bpt_graph_input_sequence", "declare it with model.input_sequence()"),  # layers_transformer.c
    ("call bpt_profiler_enable first", "call context.profile() first"),  # profiler_report.c
    ("num_threads is", "threads is"), ("(num_threads ", "(threads="),  # context.c, thread_guard.c: Context
)

_PACKAGE = os.path.dirname(__file__)  # as the package's code objects spell their files


def python_message(message):
    """`message` from the C library, worded for the Python call that led to it."""
    function = _C_FUNCTION.match(message)
    if function:
        call = user_call()
        if call:
            message = "bptrain: " + call + message[function.end():]
    for c_phrase, python_phrase in _PHRASES:
        message = message.replace(c_phrase, python_phrase)
    return message


def user_call():
    """How the user wrote the bptrain call that is failing ("Optimizer", "Model.load"), or None.

    It is the outermost public frame of the innermost run of frames in this package: outermost, because the
    user called Model.load, not the load_checkpoint it delegates to; innermost run, because a call made by a
    callback of fit is the one that failed, not fit."""
    found, inside = None, False
    frame = sys._getframe(1)
    while frame is not None:
        if os.path.dirname(frame.f_code.co_filename) == _PACKAGE:
            inside = True
            found = _public_name(frame) or found
        elif inside:
            break
        frame = frame.f_back
    return found


def _public_name(frame):
    """The name a user calls `frame`'s function by, or None for a private helper, a locking wrapper or a
    closure. The class comes from `self`, not the code's qualified name, so fit (defined on TrainingLoop) reads
    Model.fit, as the user wrote it."""
    name = frame.f_code.co_name
    if name.startswith("_") and name != "__init__":
        return None
    owner = frame.f_locals.get("self")
    if owner is None:  # a module function: public when the package exports it
        return "bptrain." + name if name in getattr(sys.modules[__package__], "__all__", ()) else None
    kind = type(owner)
    if name == "__init__":
        return kind.__name__
    return "%s.%s" % (kind.__name__, name) if hasattr(kind, name) else None
