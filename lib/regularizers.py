"""Weight penalties, Keras style: `regularizer(weight) -> scalar Tensor` to add to a loss.

>>> import tapeflow as tp
>>> w = tp.Variable([[1.0, -2.0]])
>>> round(float(tp.regularizers.L2(0.1)(w)), 4), round(float(tp.regularizers.L1(0.1)(w)), 4)
(0.5, 0.3)
"""

from __future__ import annotations

import math

from tapeflow import serialization
from tapeflow.ops.array import transpose
from tapeflow.ops.creation import eye, zeros
from tapeflow.ops.math import abs as tabs
from tapeflow.ops.math import matmul, maximum, rsqrt, square
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

__all__ = [
    "Regularizer",
    "L1",
    "L2",
    "L1L2",
    "OrthogonalRegularizer",
    "l1",
    "l2",
    "l1_l2",
    "orthogonal_regularizer",
    "get",
    "serialize",
    "deserialize",
]


def _factor(owner: str, label: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}: {label} must be a number >= 0, got {value!r}")
    return float(value)


class Regularizer:
    """Base class: `__call__(weight)` returns a scalar penalty."""

    def __call__(self, weight) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(weight)")

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict) -> Regularizer:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class L1L2(Regularizer):
    """l1 * sum(|w|) + l2 * sum(w^2).

    >>> import tapeflow as tp
    >>> float(L1L2(l1=1.0, l2=1.0)(tp.tensor([1.0, -2.0])))
    8.0
    """

    def __init__(self, l1: float = 0.0, l2: float = 0.0):
        self.l1 = _factor(type(self).__name__, "l1", l1)
        self.l2 = _factor(type(self).__name__, "l2", l2)

    def __call__(self, weight) -> Tensor:
        w = as_tensor(weight, name=type(self).__name__)
        penalty = zeros((), w.dtype)
        if self.l1:
            penalty = penalty + reduce_sum(tabs(w)) * self.l1
        if self.l2:
            penalty = penalty + reduce_sum(square(w)) * self.l2
        return penalty

    def get_config(self) -> dict:
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """l1 * sum(|w|), l1 defaulting to 0.01.

    >>> import tapeflow as tp
    >>> round(float(L1()(tp.tensor([1.0, -2.0]))), 4)
    0.03
    """

    def __init__(self, l1: float = 0.01):
        super().__init__(l1=l1)

    def get_config(self) -> dict:
        return {"l1": self.l1}


class L2(L1L2):
    """l2 * sum(w^2), l2 defaulting to 0.01.

    >>> import tapeflow as tp
    >>> round(float(L2()(tp.tensor([1.0, -2.0]))), 4)
    0.05
    """

    def __init__(self, l2: float = 0.01):
        super().__init__(l2=l2)

    def get_config(self) -> dict:
        return {"l2": self.l2}


class OrthogonalRegularizer(Regularizer):
    """Pushes the rows (`mode="rows"`) or columns (`mode="columns"`) of a 2-D weight
    toward orthogonality: factor * 0.5 * the mean |cosine| over distinct pairs (the sum
    of the off-diagonal absolute cosines divided by n (n - 1) / 2).

    >>> import tapeflow as tp
    >>> float(OrthogonalRegularizer(factor=1.0)(tp.tensor([[1.0, 0.0], [1.0, 0.0]])))
    1.0
    """

    def __init__(self, factor: float = 0.01, mode: str = "rows"):
        self.factor = _factor("OrthogonalRegularizer", "factor", factor)
        if mode not in ("rows", "columns"):
            raise ValueError(f"OrthogonalRegularizer: mode must be 'rows' or 'columns', got {mode!r}")
        self.mode = mode

    def __call__(self, weight) -> Tensor:
        w = as_tensor(weight, name="OrthogonalRegularizer")
        if w.ndim != 2:
            raise ValueError(f"OrthogonalRegularizer: the weight must have rank 2, got shape {w.shape}")
        axis = 1 if self.mode == "rows" else 0
        unit = w * rsqrt(maximum(reduce_sum(square(w), axis, keepdims=True), 1e-12))
        product = matmul(unit, transpose(unit)) if self.mode == "rows" else matmul(transpose(unit), unit)
        size = w.shape[0] if self.mode == "rows" else w.shape[1]
        off_diagonal = product * (1.0 - eye(size, dtype=w.dtype.name))
        pairs = size * (size - 1.0) / 2.0
        return reduce_sum(tabs(off_diagonal)) * (self.factor * 0.5 / pairs)

    def get_config(self) -> dict:
        return {"factor": self.factor, "mode": self.mode}


_BY_KEY = {"l1": L1, "l2": L2, "l1l2": L1L2, "orthogonalregularizer": OrthogonalRegularizer}


def _builtin(name: str):
    return _BY_KEY.get(name.lower().replace("_", ""))


def get(identifier):
    """A regularizer from a name ("l1", "l2", "l1_l2"; defaults), a
    {"class_name", "config"} dict, a Regularizer or callable (returned as is),
    or None (returned as is).

    >>> get("l2")
    L2(l2=0.01)
    """
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, dict):
        return serialization.deserialize(identifier, Regularizer, _builtin, "regularizers.get")
    if isinstance(identifier, str):
        found = serialization.lookup(identifier, builtin=_builtin)
        if found is None:
            raise ValueError(
                f"regularizers.get: unknown regularizer {identifier!r}; "
                "known names: ['l1', 'l2', 'l1_l2', 'orthogonal_regularizer']"
            )
        return found() if isinstance(found, type) else found
    if callable(identifier):
        return identifier
    raise TypeError(
        f"regularizers.get: expected a Regularizer, a name, a config dict or a callable, got {identifier!r}"
    )


def serialize(regularizer) -> dict | str | None:
    """A config for a regularizer, as `keras.regularizers.serialize`: a {"class_name",
    "config"} dict for a Regularizer, a name stays a name, None stays None.

    >>> serialize(l2(0.1))
    {'class_name': 'L2', 'config': {'l2': 0.1}}
    """
    if regularizer is None or isinstance(regularizer, str):
        return regularizer
    if isinstance(regularizer, Regularizer):
        return serialization.serialize(regularizer)
    name = serialization.registered_name(regularizer)
    if name is None:
        raise ValueError(
            f"regularizers.serialize: {regularizer!r} is neither a Regularizer nor a registered function; "
            "subclass tp.regularizers.Regularizer or register it with @tp.saving.register_serializable()"
        )
    return name


def deserialize(config):
    """The regularizer a `serialize` config (a dict or a name) describes.

    >>> deserialize({"class_name": "L1", "config": {"l1": 0.5}})
    L1(l1=0.5)
    """
    if not isinstance(config, dict | str):
        raise TypeError(f"regularizers.deserialize: expected a config dict or a name, got {config!r}")
    return get(config)


# Keras's lowercase spellings of the classes.
l1 = L1
l2 = L2
l1_l2 = L1L2
orthogonal_regularizer = OrthogonalRegularizer
