"""A user's own `train_step(data)`, `test_step(data)` or `predict_step(data)`, frozen into
a graph when it can be, as Keras 3's `jit_compile="auto"` compiles it.

While the step is traced, what must happen on the host is deferred rather than baked
into the graph:

- a metric's `update_state` (and `reset_state`) is recorded with its tensor arguments,
  which become outputs of the graph; after each run the calls are replayed, in order,
  with the values the graph computed;
- a metric's `result()` gives a placeholder that is read after the replay, so the logs
  the step returns hold the metric's value after this batch, as an eager step's would;
- each optimizer of the model applies its gradients at a learning rate and step number
  fed to the graph, and counts its iterations after the run.

A step whose Python reads a tensor's value (or computes with a metric's result) cannot be
frozen: under `jit="auto"` it then runs eagerly, with a warning.

>>> import numpy as np
>>> import tapeflow as tp
>>> class Model(tp.Model):
...     def __init__(self):
...         super().__init__()
...         self.dense = tp.layers.Dense(1, kernel_initializer="ones")
...         self.seen = tp.metrics.Mean(name="seen")
...     def call(self, x):
...         return self.dense(x)
...     def test_step(self, data):
...         self.seen.update_state(self(data))
...         return {"seen": self.seen.result()}
>>> model = Model()
>>> model.compile("sgd", "mse")
>>> model.evaluate(np.ones((4, 2)), batch_size=2, verbose=0)
2.0
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from tapeflow import tree
from tapeflow.graph.function import Function
from tapeflow.metrics.metric import Metric
from tapeflow.ops.math import add
from tapeflow.ops.registry import as_tensor
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.tensor import FreezeError, Tensor


class PendingResult:
    """A metric's `result()` asked for while a step is frozen; read after the graph ran."""

    def __init__(self, metric: Metric):
        self.metric = metric

    def _escape(self, *args, **kwargs):
        raise FreezeError(
            f"the result of metric '{self.metric.name}' is used in a computation inside a frozen step; "
            "return it as it is, or compute with it outside the step"
        )

    __float__ = __int__ = __bool__ = __index__ = _escape
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _escape
    __neg__ = __pow__ = __lt__ = __le__ = __gt__ = __ge__ = _escape


def accepts(method: Callable, argument: str) -> bool:
    """Whether `method` takes `argument` (by that name or through **kwargs).

    >>> accepts(lambda x, training=None: x, "training"), accepts(lambda x: x, "training")
    (True, False)
    """
    parameters = inspect.signature(method).parameters.values()
    return any(p.name == argument or p.kind is p.VAR_KEYWORD for p in parameters)


class _Trace:
    """What one trace recorded: the metric calls, the structure of the logs, and how
    many updates each optimizer made."""

    def __init__(self, optimizers: list[Optimizer]):
        self.calls: list[tuple[Metric, str, object]] = []  # (metric, method, (args, kwargs))
        self.logs = None
        self.updates = dict.fromkeys(map(id, optimizers), 0)


def _record(trace: _Trace, metric: Metric, method: str, *args, **kwargs) -> None:
    trace.calls.append((metric, method, (args, kwargs)))


class _Deferred:
    """Inside the `with`, the metrics record their calls into `trace` and each optimizer
    applies its gradients at the rate and step number given as graph inputs."""

    def __init__(self, trace: _Trace, metrics: list[Metric], optimizers: list[Optimizer], rates, steps):
        self.trace, self.metrics, self.optimizers = trace, metrics, optimizers
        self.rates, self.steps = rates, steps

    def __enter__(self):
        for metric in self.metrics:
            metric.update_state = functools.partial(_record, self.trace, metric, "update_state")
            metric.reset_state = functools.partial(_record, self.trace, metric, "reset_state")
            metric.result = functools.partial(PendingResult, metric)
        for optimizer, rate, step in zip(self.optimizers, self.rates, self.steps, strict=True):
            optimizer.apply_gradients = functools.partial(self._apply, optimizer, rate, step)
        return self

    def _apply(self, optimizer: Optimizer, rate, step, grads_and_vars) -> None:
        count = self.trace.updates[id(optimizer)]
        optimizer.apply_gradients_at(grads_and_vars, rate, step if not count else add(step, float(count)))
        self.trace.updates[id(optimizer)] = count + 1

    def __exit__(self, *exc):
        for metric in self.metrics:
            for name in ("update_state", "reset_state", "result"):
                vars(metric).pop(name, None)
        for optimizer in self.optimizers:
            vars(optimizer).pop("apply_gradients", None)


def _signature(data) -> tuple:
    """The shapes, dtypes and structure of a batch: one trace (and one `_Trace`) each."""
    leaves = tree.flatten(data)
    described = tuple((tuple(v.shape), str(v.dtype)) if isinstance(v, Tensor) else repr(v) for v in leaves)
    return str(tree.map_structure(lambda _: 0, data)), described


class FrozenStep:
    """`step(data)` (a bound train, test or predict step) frozen per batch signature,
    its metric updates and optimizer counts deferred as the module docstring says."""

    def __init__(self, model, step: Callable, expected_traces: int = 2):
        self.model, self.step = model, step
        self.traces: dict = {}
        self._current = None
        self.function = Function(self._traced, expected_traces=expected_traces)

    def _optimizers(self) -> list[Optimizer]:
        found = [getattr(self.model, "optimizer", None), *vars(self.model).values()]
        unique = {id(o): o for o in found if isinstance(o, Optimizer)}
        return list(unique.values())

    def _traced(self, data, rates, steps, trained):
        # `trained` names the trainable variables: a layer made (un)trainable retraces
        optimizers = self._optimizers()
        trace = _Trace(optimizers)
        with _Deferred(trace, list(self.model.metrics), optimizers, rates, steps):
            logs = self.step(data)
        trace.logs = logs
        self.traces[self._current] = trace
        calls = [leaf for *_, arguments in trace.calls for leaf in tree.flatten(arguments) if isinstance(leaf, Tensor)]
        returned = [leaf for leaf in tree.flatten(logs) if isinstance(leaf, Tensor)]
        return returned, calls

    def __call__(self, data):
        optimizers = self._optimizers()
        rates, steps = [], []
        trainable = self.model._trainable_now()
        for optimizer in optimizers:
            dtype = next((v.dtype for v in trainable), "float32")
            rates.append(as_tensor(float(optimizer.learning_rate), dtype=dtype))
            steps.append(as_tensor(float(optimizer.iterations + 1), dtype=dtype))
        trained = hash(tuple(map(id, trainable)))
        self._current = (_signature(data), trained)
        returned, calls = self.function(data, rates, steps, trained)
        trace = self.traces[self._current]
        for optimizer in optimizers:
            optimizer.iterations += trace.updates.get(id(optimizer), 0)
        values = iter(calls)
        for metric, method, arguments in trace.calls:
            args, kwargs = _filled(arguments, values)
            getattr(metric, method)(*args, **kwargs)
        values = iter(returned)
        return tree.map_structure(lambda leaf: _read(leaf, values), trace.logs)


def _filled(structure, values):
    """`structure` with each Tensor leaf replaced by the next of `values`."""
    return tree.map_structure(lambda leaf: next(values) if isinstance(leaf, Tensor) else leaf, structure)


def _read(leaf, values):
    if isinstance(leaf, Tensor):
        return next(values)
    if isinstance(leaf, PendingResult):
        return leaf.metric.result()
    return leaf
