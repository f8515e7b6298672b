"""The built-in losses: per-sample functions, the classes that reduce them, and `losses.get`."""

from __future__ import annotations

import numpy as np

from tapeflow import serialization
from tapeflow.losses.loss import EPSILON, Loss, _predictions
from tapeflow.ops.array import expand_dims, one_hot, squeeze, transpose
from tapeflow.ops.math import abs as tabs
from tapeflow.ops.math import cast, clip, log, square, where
from tapeflow.ops.nn import (
    sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits,
)
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

# ------------------------------------------------------------------ inputs


def _matched(name: str, y_true, y_pred) -> tuple[Tensor, Tensor]:
    """y_true and y_pred of one shape and float dtype, at least [batch, 1].

    A trailing axis of size 1 on one side only is added to the other (so labels
    [batch] meet predictions [batch, 1]); any other difference is an error.
    """
    y_pred = _predictions(name, y_pred)
    y_true = as_tensor(y_true, name=name)
    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1:] == (1,):
        y_pred = expand_dims(y_pred, -1)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1:] == (1,):
        y_true = expand_dims(y_true, -1)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{name}: y_true shape {y_true.shape} and y_pred shape {y_pred.shape} do not match")
    while y_pred.ndim < 2:
        y_true, y_pred = expand_dims(y_true, -1), expand_dims(y_pred, -1)
    return cast(y_true, y_pred.dtype), y_pred


def _concrete(t: Tensor) -> np.ndarray | None:
    """The values of `t`, or None for a symbolic tensor (nothing to check while tracing)."""
    values = getattr(t, "_value", None)
    return values if isinstance(values, np.ndarray) else None


def _check_unit_interval(name: str, y_true: Tensor) -> None:
    values = _concrete(y_true)
    if values is not None and values.size and not (values.min() >= 0 and values.max() <= 1):
        bad = values[~((values >= 0) & (values <= 1))].flat[0]
        raise ValueError(f"{name}: labels must lie in [0, 1], got {bad}")


def _class_ids(name: str, labels: Tensor, num_classes: int) -> Tensor:
    """Integer class ids in [0, num_classes); whole-number floats are accepted."""
    if labels.dtype.kind not in "if":
        raise ValueError(f"{name}: labels must be integer class ids, got dtype {labels.dtype}")
    values = _concrete(labels)
    if labels.dtype.kind == "f":
        if values is not None and values.size and not np.all(values == np.floor(values)):
            raise ValueError(f"{name}: labels must be integer class ids, got {values[values != np.floor(values)][0]}")
        labels = cast(labels, "int64")
        values = _concrete(labels)
    if values is not None and values.size and (values.min() < 0 or values.max() >= num_classes):
        bad = values[(values < 0) | (values >= num_classes)].flat[0]
        raise ValueError(f"{name}: label {bad} is out of range [0, {num_classes})")
    return labels


def _last_axis(name: str, x: Tensor, axis: int) -> Tensor:
    """`x` with `axis` moved to the end."""
    if x.ndim == 0:
        raise ValueError(f"{name}: y_pred must have a class axis, got a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for y_pred of shape {x.shape}")
    axis %= x.ndim
    if axis == x.ndim - 1:
        return x
    return transpose(x, [a for a in range(x.ndim) if a != axis] + [axis])


def _log_normalized(y_pred: Tensor, axis: int) -> Tensor:
    """log of probabilities renormalized along `axis` and clipped, as Keras does."""
    probs = y_pred / reduce_sum(y_pred, axis, keepdims=True)
    return log(clip(probs, EPSILON, 1.0 - EPSILON))


# ------------------------------------------------------- per-sample losses
def mean_squared_error(y_true, y_pred) -> Tensor:
    """mean((y_pred - y_true)^2) over the last axis, one value per sample.

    >>> mean_squared_error([[0.0, 1.0]], [[1.0, 1.0]]).numpy().tolist()
    [0.5]
    """
    y_true, y_pred = _matched("mean_squared_error", y_true, y_pred)
    return mean(square(y_pred - y_true), -1)


def mean_absolute_error(y_true, y_pred) -> Tensor:
    """mean(|y_pred - y_true|) over the last axis, one value per sample.

    >>> mean_absolute_error([[0.0, 1.0]], [[2.0, 1.0]]).numpy().tolist()
    [1.0]
    """
    y_true, y_pred = _matched("mean_absolute_error", y_true, y_pred)
    return mean(tabs(y_pred - y_true), -1)


def huber(y_true, y_pred, delta: float = 1.0) -> Tensor:
    """Squared error for |error| <= delta, linear beyond it, averaged over the last axis.

    >>> huber([[0.0, 0.0]], [[0.5, 3.0]]).numpy().tolist()
    [1.3125]
    """
    if not delta >= 0:
        raise ValueError(f"huber: delta must be >= 0, got {delta!r}")
    y_true, y_pred = _matched("huber", y_true, y_pred)
    error = y_pred - y_true
    size = tabs(error)
    quadratic = square(error) * 0.5
    linear = size * delta - 0.5 * delta * delta
    return mean(where(size <= delta, quadratic, linear), -1)


def binary_crossentropy(y_true, y_pred, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1):
    """Elementwise binary cross-entropy averaged over `axis`; labels lie in [0, 1].

    >>> [round(x, 4) for x in binary_crossentropy([[1.0, 0.0]], [[0.5, 0.5]]).numpy().tolist()]
    [0.6931]
    """
    name = "binary_crossentropy"
    y_true, y_pred = _matched(name, y_true, y_pred)
    _check_unit_interval(name, y_true)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        elementwise = sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    else:
        p = clip(y_pred, EPSILON, 1.0 - EPSILON)
        elementwise = -(y_true * log(p) + (1.0 - y_true) * log(1.0 - p))
    return mean(elementwise, axis)


def categorical_crossentropy(y_true, y_pred, from_logits: bool = False, label_smoothing: float = 0.0, axis: int = -1):
    """Cross-entropy of one-hot (or probability) rows `y_true` against `y_pred`
    along `axis`; probabilities are renormalized to sum to one first.

    >>> [round(x, 4) for x in categorical_crossentropy([[0.0, 1.0]], [[0.5, 0.5]]).numpy().tolist()]
    [0.6931]
    """
    name = "categorical_crossentropy"
    y_pred = _predictions(name, y_pred)
    y_true = as_tensor(y_true, name=name)
    if y_true.shape != y_pred.shape:
        hint = ""
        if y_true.shape == y_pred.shape[:-1] or y_true.shape == y_pred.shape[:-1] + (1,):
            hint = "; for integer class ids use sparse_categorical_crossentropy"
        raise ValueError(f"{name}: y_true shape {y_true.shape} and y_pred shape {y_pred.shape} do not match{hint}")
    _last_axis(name, y_pred, axis)  # validates the axis
    y_true = cast(y_true, y_pred.dtype)
    _check_unit_interval(name, y_true)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / y_pred.shape[axis]
    if from_logits:
        return softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred, axis=axis)
    return -reduce_sum(y_true * _log_normalized(y_pred, axis), axis)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits: bool = False, axis: int = -1) -> Tensor:
    """Cross-entropy of integer class ids `y_true` (shape of y_pred without `axis`,
    or with it of size 1) against `y_pred`.

    >>> [round(x, 4) for x in sparse_categorical_crossentropy([1], [[0.5, 0.5]]).numpy().tolist()]
    [0.6931]
    """
    name = "sparse_categorical_crossentropy"
    y_pred = _last_axis(name, _predictions(name, y_pred), axis)
    labels = as_tensor(y_true, name=name)
    if labels.ndim == y_pred.ndim and labels.shape[-1:] == (1,):
        labels = squeeze(labels, -1)
    if labels.shape != y_pred.shape[:-1]:
        hint = "; for one-hot labels use categorical_crossentropy" if labels.shape == y_pred.shape else ""
        raise ValueError(
            f"{name}: y_true shape {as_tensor(y_true).shape} does not match y_pred shape {y_pred.shape}: "
            f"expected class ids of shape {y_pred.shape[:-1]}{hint}"
        )
    num_classes = y_pred.shape[-1]
    labels = _class_ids(name, labels, num_classes)
    if from_logits:
        return sparse_softmax_cross_entropy_with_logits(labels=labels, logits=y_pred)
    picked = one_hot(labels, num_classes, dtype=y_pred.dtype.name) * _log_normalized(y_pred, -1)
    return -reduce_sum(picked, -1)


class LossFunctionWrapper(Loss):
    """A Loss from a per-sample function `fn(y_true, y_pred, **kwargs)`.

    >>> import tapeflow as tp
    >>> loss = LossFunctionWrapper(lambda t, p: tp.abs(p - t), name="l1")
    >>> float(loss([1.0, 1.0], [2.0, 4.0]))
    2.0
    """

    def __init__(self, fn, name: str | None = None, reduction: str = "sum_over_batch_size", **kwargs):
        super().__init__(name or getattr(fn, "__name__", None), reduction)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true, y_pred) -> Tensor:
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self) -> dict:
        """The wrapped function appears (as its name) only for a plain wrapper: subclasses fix it."""
        config = {**super().get_config(), **self._fn_kwargs}
        if type(self) is LossFunctionWrapper:
            config["fn"] = function_name(self.fn)
        return config

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        config = dict(config)
        if cls is LossFunctionWrapper:
            config["fn"] = loss_function(config.get("fn"))
        return cls(**config)


class MeanSquaredError(LossFunctionWrapper):
    """Mean of squared errors.

    >>> round(float(MeanSquaredError()([[0.0, 1.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]])), 4)
    0.5
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "mean_squared_error"):
        super().__init__(mean_squared_error, name, reduction)


class MeanAbsoluteError(LossFunctionWrapper):
    """Mean of absolute errors.

    >>> float(MeanAbsoluteError()([[0.0], [0.0]], [[1.0], [-3.0]]))
    2.0
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "mean_absolute_error"):
        super().__init__(mean_absolute_error, name, reduction)


class Huber(LossFunctionWrapper):
    """Huber loss: quadratic within `delta` of the target, linear outside.

    >>> float(Huber(delta=1.0)([[0.0]], [[3.0]]))
    2.5
    """

    def __init__(self, delta: float = 1.0, reduction: str = "sum_over_batch_size", name: str = "huber_loss"):
        if not delta >= 0:
            raise ValueError(f"Huber: delta must be >= 0, got {delta!r}")
        super().__init__(huber, name, reduction, delta=float(delta))


class BinaryCrossentropy(LossFunctionWrapper):
    """Binary cross-entropy for labels in [0, 1] against probabilities (or logits).

    >>> round(float(BinaryCrossentropy(from_logits=True)([[1.0]], [[0.0]])), 4)
    0.6931
    """

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "binary_crossentropy",
    ):
        kwargs = {"from_logits": bool(from_logits), "label_smoothing": float(label_smoothing), "axis": axis}
        super().__init__(binary_crossentropy, name, reduction, **kwargs)


class CategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy for one-hot (or soft) labels against probabilities (or logits).

    >>> round(float(CategoricalCrossentropy(from_logits=True)([[0.0, 1.0]], [[0.0, 0.0]])), 4)
    0.6931
    """

    def __init__(
        self,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "categorical_crossentropy",
    ):
        kwargs = {"from_logits": bool(from_logits), "label_smoothing": float(label_smoothing), "axis": axis}
        super().__init__(categorical_crossentropy, name, reduction, **kwargs)


class SparseCategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy for integer class ids against probabilities (or logits).

    >>> import tapeflow as tp
    >>> round(float(SparseCategoricalCrossentropy()([0, 1], tp.tensor([[0.5, 0.5], [0.5, 0.5]]))), 4)
    0.6931
    """

    def __init__(
        self,
        from_logits: bool = False,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "sparse_categorical_crossentropy",
    ):
        super().__init__(sparse_categorical_crossentropy, name, reduction, from_logits=bool(from_logits), axis=axis)


_CLASSES = (
    MeanSquaredError,
    MeanAbsoluteError,
    Huber,
    BinaryCrossentropy,
    CategoricalCrossentropy,
    SparseCategoricalCrossentropy,
)


_ALIASES = {"mse": MeanSquaredError, "mae": MeanAbsoluteError, "huberloss": Huber}


def _key(name: str) -> str:
    return name.lower().replace("_", "")


_BY_NAME = {_key(cls.__name__): cls for cls in _CLASSES} | _ALIASES


_KNOWN_NAMES = sorted(
    {f.__name__ for f in (mean_squared_error, mean_absolute_error, huber)}
    | {f.__name__ for f in (binary_crossentropy, categorical_crossentropy, sparse_categorical_crossentropy)}
    | {"mse", "mae", "huber_loss"}
)


def _builtin(name: str):
    return _BY_NAME.get(_key(name)) or serialization.builtin_class({"LossFunctionWrapper": LossFunctionWrapper}, name)


_FUNCTIONS = {
    f.__name__: f
    for f in (
        mean_squared_error,
        mean_absolute_error,
        huber,
        binary_crossentropy,
        categorical_crossentropy,
        sparse_categorical_crossentropy,
    )
}


def register(classes=(), functions=(), aliases=None) -> None:
    """Make more built-in loss classes and per-sample functions known to `get`,
    `function_name` and `loss_function` (the other loss modules register theirs)."""
    for cls in classes:
        _BY_NAME[_key(cls.__name__)] = cls
    for fn in functions:
        _FUNCTIONS[fn.__name__] = fn
    for alias, cls in (aliases or {}).items():
        _BY_NAME[_key(alias)] = cls
    _KNOWN_NAMES[:] = sorted({*_KNOWN_NAMES, *(fn.__name__ for fn in functions), *(aliases or {})})


def function_name(fn):
    """The name a per-sample loss function is saved under: its own for tapeflow's, the
    registered name for one registered with `tp.saving.register_serializable`; any
    other function is returned as is (it cannot be saved).

    >>> function_name(huber)
    'huber'
    """
    if _FUNCTIONS.get(getattr(fn, "__name__", None)) is fn:
        return fn.__name__
    return serialization.registered_name(fn) or fn


def loss_function(name):
    """The function `function_name` named."""
    fn = serialization.lookup(name, builtin=_FUNCTIONS.get) if isinstance(name, str) else None
    if fn is None or not callable(fn):
        raise ValueError(
            f"losses: unknown loss function {name!r}; known: {sorted(_FUNCTIONS)} and registered functions"
        )
    return fn


def get(identifier) -> Loss | None:
    """A Loss from a Loss (returned as is), a Keras name or class name
    ("sparse_categorical_crossentropy", "mse", "Huber"...; default arguments),
    a {"class_name", "config"} dict, or a per-sample function (wrapped).

    >>> get("mse")
    MeanSquaredError(name='mean_squared_error', reduction='sum_over_batch_size')
    """
    if identifier is None or isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        found = _BY_NAME.get(_key(identifier)) or serialization.lookup(identifier)
        if isinstance(found, type) and issubclass(found, Loss):
            return found()
        if callable(found) and not isinstance(found, type):  # a registered per-sample function
            return LossFunctionWrapper(found)
        raise ValueError(f"losses.get: unknown loss {identifier!r}; known names: {_KNOWN_NAMES}")
    if isinstance(identifier, dict):
        return serialization.deserialize(identifier, Loss, _builtin, "losses.get")
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise TypeError(f"losses.get: expected a Loss, a name, a config dict or a function, got {identifier!r}")


def serialize(loss) -> dict | str:
    """A config for a loss, as `keras.losses.serialize`: a {"class_name", "config"} dict
    for a Loss, the name of a built-in or registered per-sample function.

    >>> serialize(Huber(delta=2.0))["config"]["delta"]
    2.0
    >>> serialize(huber)
    'huber'
    """
    if isinstance(loss, Loss):
        return serialization.serialize(loss)
    name = function_name(loss) if callable(loss) else None
    if not isinstance(name, str):
        raise ValueError(f"losses.serialize: {loss!r} is neither a Loss nor a built-in or registered loss function")
    return name


def deserialize(config, custom_objects: dict | None = None):
    """What `serialize` wrote: a Loss from a config dict, the per-sample function
    from a function name (a class name gives that Loss with default arguments).

    >>> deserialize("huber") is huber, deserialize(serialize(Huber(delta=2.0)))
    (True, Huber(name='huber_loss', reduction='sum_over_batch_size', delta=2.0))
    """
    with serialization.custom_object_scope(custom_objects):
        if isinstance(config, str):
            fn = serialization.lookup(config, builtin=_FUNCTIONS.get)
            if callable(fn) and not isinstance(fn, type):
                return fn
            return get(config)
        if isinstance(config, dict):
            return get(config)
    raise TypeError(f"losses.deserialize: expected a config dict or a name, got {config!r}")
