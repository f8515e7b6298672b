"""The weight constraints: functions applied to a weight after each optimizer update."""

from __future__ import annotations

import math

from tapeflow import serialization
from tapeflow.ops.math import clip, maximum, sqrt, square
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

_EPSILON = 1e-7


def _norms(w: Tensor, axis) -> Tensor:
    return sqrt(reduce_sum(square(w), _axis(axis), keepdims=True))


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _number(owner: str, label: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{owner}: {label} must be a finite number, got {value!r}")
    return value


class Constraint:
    """Base class: `__call__(w)` returns the constrained weight (here `w` unchanged).

    >>> import tapeflow as tp
    >>> Constraint()(tp.tensor([1.0, -1.0])).numpy().tolist()
    [1.0, -1.0]
    """

    def __call__(self, w) -> Tensor:
        return as_tensor(w)

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict) -> Constraint:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class MaxNorm(Constraint):
    """Scales down the slices of `w` along `axis` whose L2 norm exceeds `max_value`.

    >>> import tapeflow as tp
    >>> [round(x, 4) for x in MaxNorm(max_value=1.0)(tp.tensor([[3.0], [4.0]])).numpy().ravel().tolist()]
    [0.6, 0.8]
    """

    def __init__(self, max_value: float = 2, axis=0):
        self.max_value = _number("MaxNorm", "max_value", max_value)
        self.axis = axis

    def __call__(self, w) -> Tensor:
        w = as_tensor(w)
        norms = _norms(w, self.axis)
        return w * (clip(norms, 0.0, float(self.max_value)) / (norms + _EPSILON))

    def get_config(self) -> dict:
        return {"max_value": self.max_value, "axis": self.axis}


class NonNeg(Constraint):
    """Sets negative weights to zero.

    >>> import tapeflow as tp
    >>> NonNeg()(tp.tensor([1.0, -2.0])).numpy().tolist()
    [1.0, 0.0]
    """

    def __call__(self, w) -> Tensor:
        return maximum(as_tensor(w), 0.0)


class UnitNorm(Constraint):
    """Scales each slice of `w` along `axis` to unit L2 norm.

    >>> import tapeflow as tp
    >>> [round(x, 4) for x in UnitNorm()(tp.tensor([[3.0], [4.0]])).numpy().ravel().tolist()]
    [0.6, 0.8]
    """

    def __init__(self, axis=0):
        self.axis = axis

    def __call__(self, w) -> Tensor:
        w = as_tensor(w)
        return w / (_norms(w, self.axis) + _EPSILON)

    def get_config(self) -> dict:
        return {"axis": self.axis}


class MinMaxNorm(Constraint):
    """Moves the L2 norm of each slice of `w` along `axis` into [min_value, max_value]:
    the new norm is rate * clip(norm) + (1 - rate) * norm.

    >>> import tapeflow as tp
    >>> [round(x, 4) for x in MinMaxNorm(0.0, 2.0, rate=0.5)(tp.tensor([[3.0], [4.0]])).numpy().ravel().tolist()]
    [2.1, 2.8]
    """

    def __init__(self, min_value: float = 0.0, max_value: float = 1.0, rate: float = 1.0, axis=0):
        self.min_value = _number("MinMaxNorm", "min_value", min_value)
        self.max_value = _number("MinMaxNorm", "max_value", max_value)
        if min_value > max_value:
            raise ValueError(f"MinMaxNorm: min_value {min_value!r} exceeds max_value {max_value!r}")
        self.rate = _number("MinMaxNorm", "rate", rate)
        self.axis = axis

    def __call__(self, w) -> Tensor:
        w = as_tensor(w)
        norms = _norms(w, self.axis)
        desired = clip(norms, float(self.min_value), float(self.max_value)) * self.rate + norms * (1.0 - self.rate)
        return w * (desired / (norms + _EPSILON))

    def get_config(self) -> dict:
        return {"min_value": self.min_value, "max_value": self.max_value, "rate": self.rate, "axis": self.axis}


# Keras's lowercase spellings of the classes.
max_norm = MaxNorm
min_max_norm = MinMaxNorm
non_neg = NonNeg
unit_norm = UnitNorm

_CLASSES = (Constraint, MaxNorm, MinMaxNorm, NonNeg, UnitNorm)
_BY_KEY = {cls.__name__.lower(): cls for cls in _CLASSES} | {"maxnorm": MaxNorm, "minmaxnorm": MinMaxNorm}


def _builtin(name: str):
    return _BY_KEY.get(name.lower().replace("_", ""))


def get(identifier):
    """A constraint from a name ("max_norm", "NonNeg"...; default arguments), a
    {"class_name", "config"} dict, a Constraint or callable (returned as is), or None.

    >>> get("unit_norm")
    UnitNorm(axis=0)
    """
    if identifier is None or isinstance(identifier, Constraint):
        return identifier
    if isinstance(identifier, dict):
        return serialization.deserialize(identifier, Constraint, _builtin, "constraints.get")
    if isinstance(identifier, str):
        found = serialization.lookup(identifier, builtin=_builtin)
        if found is None:
            raise ValueError(
                f"constraints.get: unknown constraint {identifier!r}; known names: "
                "['max_norm', 'min_max_norm', 'non_neg', 'unit_norm'] and their class names"
            )
        return found() if isinstance(found, type) else found
    if callable(identifier):
        return identifier
    raise TypeError(f"constraints.get: expected a Constraint, a name, a config dict or a callable, got {identifier!r}")


def serialize(constraint) -> dict | str | None:
    """A config for a constraint, as `keras.constraints.serialize`: a {"class_name",
    "config"} dict for a Constraint, a name stays a name, None stays None.

    >>> serialize(MaxNorm(3.0))
    {'class_name': 'MaxNorm', 'config': {'max_value': 3.0, 'axis': 0}}
    """
    if constraint is None or isinstance(constraint, str):
        return constraint
    if isinstance(constraint, Constraint):
        return serialization.serialize(constraint)
    name = serialization.registered_name(constraint)
    if name is None:
        raise ValueError(
            f"constraints.serialize: {constraint!r} is neither a Constraint nor a registered function; "
            "subclass tp.constraints.Constraint or register it with @tp.saving.register_serializable()"
        )
    return name


def deserialize(config, custom_objects: dict | None = None):
    """The constraint a `serialize` config (a dict or a name) describes.

    >>> deserialize({"class_name": "NonNeg", "config": {}})
    NonNeg()
    """
    if not isinstance(config, dict | str):
        raise TypeError(f"constraints.deserialize: expected a config dict or a name, got {config!r}")
    with serialization.custom_object_scope(custom_objects):
        return get(config)
