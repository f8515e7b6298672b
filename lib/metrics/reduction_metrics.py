"""Mean, and the wrapper that averages any per-sample function."""

from __future__ import annotations

import numpy as np

from tapeflow import serialization
from tapeflow.metrics.functions import _FUNCTION_NAMES, _FUNCTIONS
from tapeflow.metrics.metric import Metric, device_array
from tapeflow.tensor import Tensor

# The per-sample functions that also run on a device's arrays (array functions only, no host reads).
_ON_DEVICE = frozenset(
    _FUNCTIONS[name]
    for name in (
        *("accuracy", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy"),
        *("mean_squared_error", "mean_absolute_error"),
    )
)


def per_sample(fn, y_true, y_pred, **kwargs):
    """`fn(y_true, y_pred)`: computed on the device as a tensor there when both are GPU tensors
    and `fn` is a built-in function that runs on device arrays, else on the host."""
    true, pred = device_array(y_true), device_array(y_pred)
    if fn not in _ON_DEVICE or true is None or pred is None or y_true.device != y_pred.device:
        return fn(y_true, y_pred, **kwargs)
    return Tensor._wrap(fn(true, pred, **kwargs), y_pred.device)


class Mean(Metric):
    """The (weighted) mean of the values given: each sample's values are averaged
    first, then samples are averaged with their weights, as in Keras.

    >>> m = Mean()
    >>> m.update_state([1.0, 3.0, 5.0], sample_weight=[1.0, 1.0, 0.0])
    >>> m.result()
    2.0
    """

    def __init__(self, name: str | None = None, dtype=None):
        super().__init__(name, dtype)
        self.reset_state()

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def update_state(self, values, sample_weight=None) -> None:
        if self._update_on_device(values, sample_weight):
            return
        values = np.asarray(values, dtype=np.float64)
        if sample_weight is None:
            if values.ndim > 1:
                values = values.mean(axis=tuple(range(1, values.ndim)))
            self.total += float(values.sum())
            self.count += float(values.shape[0] if values.ndim else 1)
            return
        weights = np.asarray(sample_weight, dtype=np.float64)
        if weights.ndim == values.ndim + 1 and weights.shape[-1:] == (1,):
            weights = weights[..., 0]
        elif values.ndim == weights.ndim + 1 and values.shape[-1:] == (1,):
            values = values[..., 0]
        if values.ndim > weights.ndim:
            values = values.mean(axis=tuple(range(weights.ndim, values.ndim)))
        try:
            weights = np.broadcast_to(weights, values.shape)
        except ValueError:
            raise ValueError(
                f"{self.name}: sample_weight shape {np.shape(sample_weight)} does not fit values of shape "
                f"{values.shape}"
            ) from None
        if weights.ndim > 1:
            values = (values * weights).mean(axis=tuple(range(1, weights.ndim)))
            weights = weights.mean(axis=tuple(range(1, weights.ndim)))
        else:
            values = values * weights
        self.total += float(values.sum())
        self.count += float(weights.sum())

    def _update_on_device(self, values, sample_weight) -> bool:
        """Add `values` where they live when that is a device (a GPU tensor) and the weight is
        none or one number, as the host update does; the total stays there, read only when a
        result is."""
        array = device_array(values)
        if array is None or not (sample_weight is None or np.ndim(sample_weight) == 0):
            return False
        if isinstance(sample_weight, Tensor):
            return False
        array = array.astype(np.float64)
        if sample_weight is None:
            if array.ndim > 1:
                array = array.mean(axis=tuple(range(1, array.ndim)))
            self.total = self.total + array.sum()
            self.count += float(array.shape[0] if array.ndim else 1)
        else:
            weight = float(sample_weight)
            self.total = self.total + array.mean() * weight
            self.count += weight
        self._device = values.device
        return True

    def result(self) -> float:
        """The mean so far: a float, or a scalar tensor on the device that holds the total
        (reading it waits for the device)."""
        if isinstance(self.total, float):
            return self.total / self.count if self.count else 0.0
        return Tensor._wrap(self.total / self.count if self.count else self.total * 0.0, self._device)


class MeanMetricWrapper(Mean):
    """The mean of `fn(y_true, y_pred, **kwargs)` over every batch seen.

    >>> import numpy as np
    >>> m = MeanMetricWrapper(lambda t, p: np.abs(np.asarray(t) - p), name="l1")
    >>> m([1.0, 2.0], [1.5, 2.5])
    0.5
    """

    def __init__(self, fn, name: str | None = None, **kwargs):
        self._fn = fn
        self._fn_kwargs = kwargs
        super().__init__(name or getattr(fn, "__name__", None))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        super().update_state(per_sample(self._fn, y_true, y_pred, **self._fn_kwargs), sample_weight)

    def get_config(self) -> dict:
        """The wrapped function appears (as its name) only for a plain wrapper: subclasses fix it."""
        config = {"name": self.name, **self._fn_kwargs}
        if type(self) is MeanMetricWrapper:
            config["fn"] = _FUNCTION_NAMES.get(self._fn) or serialization.registered_name(self._fn) or self._fn
        return config

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        if cls is MeanMetricWrapper:
            name = config.get("fn")
            fn = serialization.lookup(name, builtin=_FUNCTIONS.get) if isinstance(name, str) else None
            if fn is None or not callable(fn):
                raise ValueError(f"MeanMetricWrapper.from_config: unknown metric function {name!r}")
            config["fn"] = fn
        return cls(**config)
