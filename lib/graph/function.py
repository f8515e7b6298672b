"""`@tp.function`: trace on the first call per input signature, then run the graph.

A signature is the shape and dtype of every tensor argument (None where an
`input_signature` TensorSpec leaves a dimension dynamic) plus the value of
every other argument. A call with a new signature traces again, and the
retrace is logged with the argument that changed. Python side effects in the
function (print, appending to a list) happen only while tracing.

>>> import tapeflow as tp
>>> @tp.function
... def scale(x, factor):
...     return x * factor
>>> scale(tp.ones((2,)), 3.0).numpy().tolist(), scale.trace_count
([3.0, 3.0], 1)
>>> _ = scale(tp.ones((2,)), 3.0); _ = scale(tp.ones((5,)), 3.0); scale.trace_count
2
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref

import numpy as np

from tapeflow import tree
from tapeflow.graph import passes
from tapeflow.graph.passes.rewrite import attr_key
from tapeflow.graph.structure import TensorSpec, flatten_structure, rebuild_structure
from tapeflow.graph.trace import trace
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor, Variable

logger = logging.getLogger("tapeflow.function")


class _Config(threading.local):
    def __init__(self):
        self.run_eagerly = False


_CONFIG = _Config()


def run_functions_eagerly(enabled: bool) -> None:
    """Make every `tp.function` run its Python body eagerly (for debugging)."""
    _CONFIG.run_eagerly = bool(enabled)


def functions_run_eagerly() -> bool:
    return _CONFIG.run_eagerly


class Function:
    """A Python function whose calls run as frozen, optimized graphs.

    `graphs` maps each traced signature to its Graph; `trace_count` counts
    traces; `retrace_reasons` lists why each retrace happened. Retraces are logged as
    warnings, except the first `expected_traces` traces, logged at INFO (`fit`'s steps
    expect more traces for an epoch's short last batch and evaluation's batch size).
    """

    def __init__(self, fn, input_signature=None, optimize: bool = True, expected_traces: int = 1):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._signature = inspect.signature(fn)
        self.input_signature = None if input_signature is None else list(input_signature)
        self.optimize = optimize
        self.graphs: dict = {}
        self.trace_count = 0
        self.retrace_reasons: list[str] = []
        self._last_key = None
        self._lock = threading.Lock()
        self._tracing = threading.local()  # set while this thread traces the function
        self._expected_traces = expected_traces

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return _BOUND.get(self, instance)

    def _key(self, args, kwargs):
        """(signature key, per-argument descriptions, args with TensorSpecs for tensors)."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        names, parts, specs = [], [], {}
        fixed = None if self.input_signature is None else iter(self.input_signature)
        for name, value in bound.arguments.items():
            leaves, structure = flatten_structure(value, leaf=_is_leaf)
            desc, spec_leaves = [], []
            for leaf in leaves:
                if _is_tensor(leaf) and not isinstance(leaf, Variable):
                    spec = next(fixed, None) if fixed is not None else None
                    if spec is None:
                        spec = TensorSpec.from_tensor(_as_spec_source(leaf))
                    else:
                        _check_matches(self.__name__, name, spec, leaf)
                    desc.append(("tensor", spec.shape, spec.dtype.name))
                    spec_leaves.append(spec)
                elif isinstance(leaf, Variable):
                    desc.append(("variable", id(leaf)))
                    spec_leaves.append(leaf)
                else:
                    desc.append(("python", _hashable(leaf), repr(leaf)))
                    spec_leaves.append(leaf)
            names.append(name)
            parts.append((str(structure), tuple(desc)))
            specs[name] = (structure, spec_leaves)
        return tuple(parts), names, specs, bound

    def __call__(self, *args, **kwargs):
        if _CONFIG.run_eagerly or getattr(self._tracing, "active", False):
            return self._fn(*args, **kwargs)  # a call from inside its own trace inlines into it
        key, names, specs, bound = self._key(args, kwargs)
        graph = self.graphs.get(key)
        if graph is None:
            with self._lock:
                graph = self.graphs.get(key)
                if graph is None:
                    graph = self._trace(key, names, specs, bound)
        feeds = []
        for name, value in bound.arguments.items():
            if self._signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                value = tuple(value.values())  # traced one keyword at a time, in the order given
            feeds.extend(leaf for leaf in tree.flatten(value) if _is_tensor(leaf) and not isinstance(leaf, Variable))
        return graph(*feeds)

    def _trace(self, key, names, specs, bound):
        if self._last_key is not None:
            reason = _difference(self._last_key, key, names)
            self.retrace_reasons.append(reason)
            level = logging.INFO if self.trace_count < self._expected_traces else logging.WARNING
            logger.log(
                level, "tp.function %s: retracing (trace %d) because %s", self.__name__, self.trace_count + 1, reason
            )
        else:
            logger.info("tp.function %s: tracing", self.__name__)
        call_args = {}
        for name in bound.arguments:
            structure, leaves = specs[name]
            call_args[name] = rebuild_structure(structure, leaves)
        positional, keyword = [], {}
        for name, param in self._signature.parameters.items():
            if param.kind is param.VAR_POSITIONAL:
                positional.extend(call_args.get(name, ()))
            elif param.kind is param.VAR_KEYWORD:
                keyword.update(call_args.get(name, {}))
            elif param.kind is param.KEYWORD_ONLY:
                keyword[name] = call_args[name]
            else:
                positional.append(call_args[name])
        self._tracing.active = True
        try:
            graph = trace(self._fn, tuple(positional), keyword, name=self.__name__)
        finally:
            self._tracing.active = False
        if self.optimize:
            passes.optimize(graph)
        self.graphs[key] = graph
        self.trace_count += 1
        self._last_key = key
        return graph


class _BoundCache:
    """One Function per (function, instance), so methods trace per object."""

    def __init__(self):
        self._cache: dict = {}

    def get(self, function: Function, instance) -> Function:
        key = (id(function), id(instance))
        hit = self._cache.get(key)
        if hit is None or hit[0]() is None:
            method = function._fn.__get__(instance, type(instance))
            bound = Function(method, function.input_signature, function.optimize)
            try:
                ref = weakref.ref(instance)
            except TypeError:
                ref = lambda: instance  # noqa: E731 - objects without weakref support stay alive
            self._cache[key] = (ref, bound)
            return bound
        return hit[1]


_BOUND = _BoundCache()


def _is_leaf(x) -> bool:
    return not isinstance(x, list | tuple | dict)


def _is_tensor(x) -> bool:
    return isinstance(x, Tensor | TensorSpec | np.ndarray)


def _as_spec_source(x):
    return as_tensor(x) if isinstance(x, np.ndarray) else x


def _check_matches(fname: str, arg: str, spec: TensorSpec, value) -> None:
    value = _as_spec_source(value)
    shape = tuple(value.shape)
    ok = len(shape) == len(spec.shape) and all(d is None or d == s for d, s in zip(spec.shape, shape, strict=True))
    if not ok or value.dtype is not spec.dtype:
        raise ValueError(
            f"tp.function {fname}: argument '{arg}' has shape {shape} and dtype {value.dtype.name}, "
            f"which does not match the input_signature {spec}"
        )


def _hashable(x):
    """x as a retrace key: numbers by type and bits (1, 1.0 and True, or 0.0 and -0.0, trace
    different graphs)."""
    if isinstance(x, bool | int | float | np.generic):
        return attr_key(x)
    if isinstance(x, list | tuple):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    try:
        hash(x)
        return x
    except TypeError:
        return ("object", id(x))


def _difference(old, new, names) -> str:
    for name, (a_struct, a), (b_struct, b) in zip(names, old, new, strict=False):
        if a_struct != b_struct or a != b:
            return f"argument '{name}' changed from {_describe(a)} to {_describe(b)}"
    return "the arguments changed"


def _describe(desc) -> str:
    parts = []
    for d in desc:
        if d[0] == "tensor":
            dims = ",".join("?" if x is None else str(x) for x in d[1])
            parts.append(f"{d[2]}[{dims}]")
        elif d[0] == "variable":
            parts.append("a different Variable")
        else:
            parts.append(d[2])
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def function(fn=None, *, input_signature=None, optimize: bool = True):
    """Decorator: freeze `fn` per input signature and run it as a graph.

    `input_signature` (a list of TensorSpecs, one per tensor argument) fixes
    the signature, so one graph serves every batch size.
    """
    if fn is None:
        return lambda f: Function(f, input_signature, optimize)
    return Function(fn, input_signature, optimize)
