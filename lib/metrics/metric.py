"""The Metric base class, and the label checks metrics share."""

from __future__ import annotations

import re

import numpy as np

from tapeflow import dtypes, initializers
from tapeflow.backends import backend
from tapeflow.mixed_precision.policy import global_policy
from tapeflow.tensor import Tensor, Variable


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def device_array(value):
    """The array of a tensor held by an accelerator whose arrays take NumPy's functions (the
    GPU's), else None: a metric computes there, and nothing is read to the host per batch.

    >>> import tapeflow as tp
    >>> device_array(tp.ones((2,))) is None
    True
    """
    if not isinstance(value, Tensor) or value._value is None:
        return None
    kernels = backend(value.device.family)
    return None if kernels.HOLDS_NUMPY or not kernels.FALLS_BACK_TO_REFERENCE else value._value


def _array(value):
    """A NumPy array of `value`, or the device array itself (`device_array`'s, never read)."""
    return value if not isinstance(value, np.ndarray | np.generic) and hasattr(value, "get") else np.asarray(value)


def _same_rank(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Arrays whose ranks agree: a trailing size-1 axis on one side only is dropped."""
    t, p = _array(y_true), _array(y_pred)
    if t.ndim == p.ndim + 1 and t.shape[-1:] == (1,):
        t = t[..., 0]
    elif p.ndim == t.ndim + 1 and p.shape[-1:] == (1,):
        p = p[..., 0]
    if t.shape != p.shape:
        raise ValueError(f"{owner}: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    return t, p


def _class_ids(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Integer labels of shape y_pred.shape[:-1] (a trailing size-1 axis is dropped)."""
    t, p = _array(y_true), _array(y_pred)
    if p.ndim < 1:
        raise ValueError(f"{owner}: y_pred must have a class axis, got shape {p.shape}")
    if t.ndim == p.ndim and t.shape[-1:] == (1,):
        t = t[..., 0]
    if t.shape != p.shape[:-1]:
        raise ValueError(
            f"{owner}: y_true shape {np.shape(y_true)} does not match y_pred shape {p.shape}: "
            f"expected class ids of shape {p.shape[:-1]}"
        )
    return t, p


# ------------------------------------------------------------------ classes
class Metric:
    """Base class, as Keras 3's `keras.metrics.Metric`.

    A subclass keeps its state either in Variables made with `add_variable` in its
    `__init__` (Keras's way: `update_state` computes with tapeflow ops and assigns to
    them; the default `reset_state` sets them back to their initial values), or in
    Python floats that its own `reset_state` sets (tapeflow's built-in metrics, which
    call `reset_state()` at the end of their `__init__`).

    >>> import tapeflow as tp
    >>> class Total(tp.metrics.Metric):
    ...     def __init__(self, name="total"):
    ...         super().__init__(name=name)
    ...         self.total = self.add_variable(shape=(), initializer="zeros", name="total")
    ...     def update_state(self, values):
    ...         self.total.assign_add(tp.ops.sum(values))
    ...     def result(self):
    ...         return self.total
    >>> m = Total()
    >>> m.update_state([1.0, 2.0]); float(m.result())
    3.0
    >>> m.reset_state(); float(m.result())
    0.0
    """

    def __init__(self, name: str | None = None, dtype=None):
        self.name = name or _snake(type(self).__name__)
        self._dtype = None if dtype is None else dtypes.as_dtype(dtype)
        self._variables: list = []
        self._initial_values: list = []

    @property
    def dtype(self) -> str:
        """The dtype of the metric's variables (the float default unless given)."""
        return self._dtype.name if self._dtype is not None else global_policy().variable_dtype.name

    @property
    def variables(self) -> list:
        """The Variables made by `add_variable`, in order."""
        return list(self._variables)

    def add_variable(self, shape=(), initializer="zeros", dtype=None, aggregation="sum", name=None):
        """A new state Variable of this metric, as Keras 3's `Metric.add_variable`
        (`aggregation` is Keras's annotation for distributed reduction: "sum", "mean",
        "only_first_replica" or "none"; tapeflow's strategies reduce metrics on the host)."""
        if aggregation not in ("sum", "mean", "only_first_replica", "none", None):
            raise ValueError(
                f"{self.name}.add_variable: aggregation must be 'sum', 'mean', 'only_first_replica' or 'none', "
                f"got {aggregation!r}"
            )
        dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.as_dtype(self.dtype)
        shape = tuple(int(d) for d in shape)
        value = initializers.get(initializer)(shape, dtype=dtype.name)
        variable = Variable(value, name=f"{self.name}/{name or f'variable_{len(self._variables)}'}", trainable=False)
        self._variables.append(variable)
        self._initial_values.append(np.array(variable.numpy(), copy=True))
        return variable

    def add_weight(self, shape=(), initializer="zeros", dtype=None, aggregation="sum", name=None):
        """Keras's other name for `add_variable`."""
        return self.add_variable(shape, initializer, dtype, aggregation, name)

    def reset_state(self) -> None:
        """Set every variable back to its initial value (override for other state)."""
        for variable, initial in zip(self._variables, self._initial_values, strict=True):
            variable.assign(initial)

    def update_state(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define update_state")

    def result(self):
        raise NotImplementedError(f"{type(self).__name__} must define result")

    def __call__(self, *args, **kwargs):
        """Add a batch and return the result so far."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict:
        config = {"name": self.name}
        if self._dtype is not None:
            config["dtype"] = self._dtype.name
        return config

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
