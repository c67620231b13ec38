"""Ownership of native handles: each Python object holds its handle in a _Native, which destroys it exactly
once and never while a native object made from it is alive, whatever the order of close() and collection.
"""
import functools
import inspect
import threading
import weakref

from ._errors import STATE, error


class _Native:
    """Owns one native handle and destroys it exactly once, never while a native object that uses it exists.

    Each holder keeps its parent (what it was made from: model -> context, optimiser -> model) alive with a
    strong reference and counts its own users. close() closes the users first (newest first), then the handle;
    dropped without close() (garbage, a reference cycle, interpreter exit) a holder that still has users waits
    for the last one to go. So any order of close() and of destruction is safe, and use after close raises
    bptrain.Error instead of reaching freed memory. The destroy function is kept on the holder so that it is
    still callable while the interpreter tears the module down.
    """

    __slots__ = ("handle", "what", "parent", "_destroy", "_users", "_children", "_orphaned", "_closed_by",
                 "__weakref__")

    def __init__(self, handle, destroy, parent, what):
        self.handle = handle
        self.what = what
        self.parent = parent
        self._destroy = destroy
        self._users = 0
        self._children = []
        self._orphaned = False
        self._closed_by = None  # what the user closed ("context") when that closed this one, for get()
        if parent is not None:
            parent._users += 1
            children = parent._children
            if len(children) >= 32 and len(children) & (len(children) - 1) == 0:  # drop the dead now and then
                children[:] = [reference for reference in children if reference() is not None]
            children.append(weakref.ref(self))

    def get(self):
        """The native handle; bptrain.Error (STATE) once it (or what it was made from) is closed."""
        if self.handle is None:
            # "the model is closed" after context.close() sent users looking for a model.close() they never made
            why = " (its %s was closed)" % self._closed_by if self._closed_by else ""
            raise error(STATE, "bptrain: the %s is closed%s" % (self.what, why))
        return self.handle

    @property
    def open(self):
        return self.handle is not None

    def close(self, by=None):
        """Closes the users, then this handle; `by` is what the user closed, when that was an ancestor."""
        if self.handle is not None and by is not None:
            self._closed_by = by
        children, self._children = self._children, []
        for reference in reversed(children):
            child = reference()
            if child is not None:
                child.close(by or self.what)
        self._release()

    def _release(self):
        if self.handle is None:
            return
        if self._users > 0:  # only while the collector finalises a cycle: the last user's release frees us
            self._orphaned = True
            return
        handle, self.handle = self.handle, None
        if self._destroy is not None:
            self._destroy(handle)
        parent = self.parent
        if parent is not None:
            parent._users -= 1
            if parent._orphaned and parent._users == 0:
                parent._release()

    def __del__(self):
        self._release()


class Closing:
    """`with` support for the objects that have close(): leaving the block closes the object (and what was
    made from it), like leaving `with Context()`."""

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()


def serialised(cls):
    """Makes every public method and property of `cls` (and of the classes it derives from) run holding the
    object's `_lock`, its context's re-entrant lock.

    ctypes releases the GIL around each C call, and a context, its graphs and their buffers are not
    thread-safe (context.h: one context per thread): two Python threads predicting with one model returned
    each other's scores, and a close() from another thread freed a graph in the middle of a step. Holding
    the lock for a whole call (fit, predict, close...) serialises the threads of one context instead; those
    of different contexts still run in parallel. fit's callback runs with the lock held, so it may use the
    model, but must not wait for another thread that does.

    The constructor holds the lock of what it is made from (its first argument: Optimizer(model) the model's,
    Model(context) the context's): unlocked, Optimizer(model) on one thread while another closed the model
    handed bpt_optimizer_create a graph being freed (SIGSEGV).
    """
    if "__init__" in vars(cls):
        cls.__init__ = _locked_constructor(cls.__init__)
    for base in reversed(cls.__mro__[:-1]):
        for name, value in list(vars(base).items()):
            if name.startswith("_") and name not in ("__enter__", "__exit__", "__len__"):
                continue
            if isinstance(value, property):
                setattr(cls, name, property(_locked(value.fget), value.fset and _locked(value.fset), value.fdel,
                                            value.__doc__))
            elif callable(value) and not isinstance(value, (type, staticmethod, classmethod)):
                setattr(cls, name, _locked(value))
    return cls


_RLOCK = type(threading.RLock())


def _locked_constructor(function):
    if getattr(function, "_bptrain_locked", False):
        return function
    parameters = list(inspect.signature(function).parameters)
    first = parameters[1] if len(parameters) > 1 else None  # after self: the parent, or Context's backend

    @functools.wraps(function)
    def construct(self, *arguments, **keywords):
        parent = arguments[0] if arguments else keywords.get(first)
        try:
            lock = getattr(parent, "_lock", None)
        except Exception:  # noqa: BLE001 (not a bptrain object: the constructor's own check refuses it)
            lock = None
        if not isinstance(lock, _RLOCK):  # Context(...), or a parent of the wrong kind
            return function(self, *arguments, **keywords)
        with lock:
            return function(self, *arguments, **keywords)
    construct._bptrain_locked = True
    return construct


def _locked(function):
    if getattr(function, "_bptrain_locked", False):
        return function

    @functools.wraps(function)
    def call(self, *arguments, **keywords):
        with self._lock:
            return function(self, *arguments, **keywords)
    call._bptrain_locked = True
    return call
