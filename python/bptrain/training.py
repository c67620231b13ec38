"""Optimisers (SGD, Adam, AdamW) with parameter groups, and learning-rate schedules."""
import ctypes

from . import _arguments, _native
from ._errors import INVALID_ARGUMENT, error
from ._handles import Closing, _Native, serialised
from ._native import lib
from .context import check_without_context

_OPTIMIZERS = {"sgd": 0, "adam": 1, "adamw": 2}
_SCHEDULES = {"constant": 0, "step": 1, "cosine": 2}


class Schedule:
    """A learning-rate schedule: kind "constant", "step" (base * gamma^floor(step / step_size)) or "cosine"
    (from base to minimum_learning_rate over total_steps), after an optional linear warm-up.

    Steps are optimiser steps (one per batch in fit, continuing across epochs and fit calls). The warm-up
    takes the first warmup_steps of them; step_size and total_steps count only the steps after the warm-up,
    so a cosine schedule over a whole run of S steps has total_steps = S - warmup_steps, and after
    warmup_steps + total_steps the rate stays at minimum_learning_rate."""

    def __init__(self, kind="constant", base_learning_rate=0.1, warmup_steps=0, warmup_start_factor=0.0,
                 step_size=1, gamma=0.1, total_steps=0, minimum_learning_rate=0.0):
        options = lib.bpt_schedule_options_default()
        options.kind = _arguments.choice(kind, _SCHEDULES, "Schedule", "kind")
        for name, value in (("base_learning_rate", base_learning_rate), ("warmup_start_factor", warmup_start_factor),
                            ("gamma", gamma), ("minimum_learning_rate", minimum_learning_rate)):
            setattr(options, name, _arguments.real(value, "Schedule", name))
        for name, value in (("warmup_steps", warmup_steps), ("step_size", step_size), ("total_steps", total_steps)):
            setattr(options, name, _arguments.integer(value, "Schedule", name))
        self.options = options
        self.kind = kind

    def learning_rate(self, step):
        """The learning rate at optimiser step `step` (>= 0)."""
        value = ctypes.c_float()
        step = _arguments.integer(step, "Schedule.learning_rate", "step")
        check_without_context(lib.bpt_schedule_learning_rate(None, ctypes.byref(self.options), step,
                                                             ctypes.byref(value)))
        return value.value


@serialised
class Optimizer(Closing):
    """SGD (with momentum), Adam or AdamW over a compiled model's parameters."""

    def __init__(self, model, kind="sgd", learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=0.0,
                 beta1=0.9, beta2=0.999, epsilon=1e-8, schedule=None):
        _arguments.choice(kind, _OPTIMIZERS, "Optimizer", "kind")
        from .model import Model
        _arguments.instance(model, Model, "Optimizer", "model")._require_compiled("Optimizer")
        options = lib.bpt_optimizer_options_default()
        options.kind = _OPTIMIZERS[kind]
        for name, value in (("learning_rate", learning_rate), ("momentum", momentum), ("weight_decay", weight_decay),
                            ("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
            setattr(options, name, _arguments.real(value, "Optimizer", name))
        options.nesterov = int(bool(nesterov))
        self.context = model.context
        self._lock = model._lock
        self.model = model
        handle = _native.handle()
        self.context.check(lib.bpt_optimizer_create(model.handle, ctypes.byref(options), ctypes.byref(handle)))
        self._native = _Native(handle.value, lib.bpt_optimizer_destroy, model._native, "optimizer")
        if schedule is not None:
            self.set_schedule(schedule)

    @property
    def handle(self):
        """The native optimiser; StateError once it, its model or its context is closed."""
        return self._native.get()

    @property
    def learning_rate(self):
        return lib.bpt_optimizer_learning_rate(self.handle)

    @learning_rate.setter
    def learning_rate(self, value):
        self.context.check(lib.bpt_optimizer_set_learning_rate(self.handle, _arguments.real(
            value, "Optimizer.learning_rate", "the learning rate")))

    @property
    def steps(self):
        return lib.bpt_optimizer_step_count(self.handle)

    def step(self):
        """One update from the gradients of the last backward pass."""
        self.context.check(lib.bpt_optimizer_step(self.handle))

    def set_schedule(self, schedule):
        """Sets the learning rate from `schedule` (a Schedule) before each step, at the step count."""
        if not isinstance(schedule, Schedule):
            raise error(INVALID_ARGUMENT, "bptrain: Optimizer.set_schedule: expected a bptrain.Schedule")
        self.context.check(lib.bpt_optimizer_set_schedule(self.handle, ctypes.byref(schedule.options)))

    def set_group(self, parameters, learning_rate_scale=1.0, weight_decay=0.0):
        """Gives `parameters` (Nodes or names) their own learning-rate multiplier and weight decay."""
        nodes = [self.model.node(p) if isinstance(p, str) else p for p in parameters]
        from .model import Node
        handles = (ctypes.c_void_p * max(1, len(nodes)))(
            *[_arguments.instance(node, Node, "Optimizer.set_group", "a parameter").handle for node in nodes])
        what = "Optimizer.set_group"
        self.context.check(lib.bpt_optimizer_set_group(self.handle, handles, len(nodes), _arguments.real(
            learning_rate_scale, what, "learning_rate_scale"), _arguments.real(weight_decay, what, "weight_decay")))

    def no_decay_on_vectors(self):
        """Weight decay 0 on every rank-1 parameter (biases, batch-norm scales and shifts)."""
        self.context.check(lib.bpt_optimizer_no_decay_on_vectors(self.handle))

    def decay_only_matrices(self):
        """GPT-style decay groups: weight decay only on the weights of linear, conv2d and matmul nodes, 0 on norms,
        biases, embedding tables and additive position tables."""
        self.context.check(lib.bpt_optimizer_decay_only_matrices(self.handle))

    def close(self):
        self._native.close()
