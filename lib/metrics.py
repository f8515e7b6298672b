"""Metrics, Keras style: stateful objects that accumulate over batches.

`update_state(y_true, y_pred, sample_weight=None)` adds a batch,
`result()` gives the value so far as a float, `reset_state()` starts over.
They run in NumPy float64 and never join a tape.

>>> import tapeflow as tp
>>> m = tp.metrics.SparseCategoricalAccuracy()
>>> m.update_state([0, 1], [[0.9, 0.1], [0.8, 0.2]])
>>> m.update_state([1], [[0.3, 0.7]])
>>> round(m.result(), 4), m.name
(0.6667, 'sparse_categorical_accuracy')

The string "accuracy" (or "acc") gets an `AutoAccuracy`, which picks the
accuracy that fits the data on its first update, as Keras's `compile` does:
binary accuracy when predictions have one column (or the loss is a binary
cross-entropy), sparse categorical accuracy when labels are integer class ids
of shape [batch] (or [batch, 1]) against predictions [batch, classes], and
categorical accuracy (argmax against argmax) otherwise.

>>> acc = tp.metrics.get("accuracy")
>>> acc.update_state([2, 0], [[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]])
>>> acc.result(), acc.resolved
(1.0, 'sparse_categorical_accuracy')
"""

from __future__ import annotations

import re

import numpy as np

from tapeflow import losses, serialization

__all__ = [
    "Metric",
    "Mean",
    "MeanMetricWrapper",
    "Accuracy",
    "AutoAccuracy",
    "BinaryAccuracy",
    "CategoricalAccuracy",
    "SparseCategoricalAccuracy",
    "TopKCategoricalAccuracy",
    "SparseTopKCategoricalAccuracy",
    "MeanSquaredError",
    "MeanAbsoluteError",
    "Precision",
    "Recall",
    "get",
]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _same_rank(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Arrays whose ranks agree: a trailing size-1 axis on one side only is dropped."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.ndim == p.ndim + 1 and t.shape[-1:] == (1,):
        t = t[..., 0]
    elif p.ndim == t.ndim + 1 and p.shape[-1:] == (1,):
        p = p[..., 0]
    if t.shape != p.shape:
        raise ValueError(f"{owner}: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    return t, p


def _class_ids(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Integer labels of shape y_pred.shape[:-1] (a trailing size-1 axis is dropped)."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
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


# ------------------------------------------------- per-sample metric values
def accuracy(y_true, y_pred) -> np.ndarray:
    """1.0 where y_pred equals y_true exactly, else 0.0.

    >>> accuracy([1, 2], [1, 3]).tolist()
    [1.0, 0.0]
    """
    t, p = _same_rank("accuracy", y_true, y_pred)
    return (t == p).astype(np.float64)


def binary_accuracy(y_true, y_pred, threshold: float = 0.5) -> np.ndarray:
    """1.0 where (y_pred > threshold) matches the 0/1 label y_true.

    >>> binary_accuracy([1, 0], [0.7, 0.7]).tolist()
    [1.0, 0.0]
    """
    t, p = _same_rank("binary_accuracy", y_true, y_pred)
    return (t == (p > threshold)).astype(np.float64)


def categorical_accuracy(y_true, y_pred) -> np.ndarray:
    """1.0 where argmax(y_pred) equals argmax(y_true) along the last axis.

    >>> categorical_accuracy([[0, 1], [1, 0]], [[0.2, 0.8], [0.3, 0.7]]).tolist()
    [1.0, 0.0]
    """
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape or p.ndim < 1:
        raise ValueError(f"categorical_accuracy: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    return (np.argmax(t, -1) == np.argmax(p, -1)).astype(np.float64)


def sparse_categorical_accuracy(y_true, y_pred) -> np.ndarray:
    """1.0 where argmax(y_pred) equals the integer class id y_true.

    >>> sparse_categorical_accuracy([1, 0], [[0.2, 0.8], [0.3, 0.7]]).tolist()
    [1.0, 0.0]
    """
    t, p = _class_ids("sparse_categorical_accuracy", y_true, y_pred)
    return (np.argmax(p, -1) == t).astype(np.float64)


def _in_top_k(targets: np.ndarray, predictions: np.ndarray, k: int) -> np.ndarray:
    """Whether each target's score is at least the k-th largest score (ties count as in)."""
    num_classes = predictions.shape[-1]
    if k >= num_classes:
        return np.ones(targets.shape, dtype=np.float64)
    kth = -np.partition(-predictions, k - 1, axis=-1)[..., k - 1]
    ids = np.clip(targets.astype(np.int64), 0, num_classes - 1)
    score = np.take_along_axis(predictions, ids[..., None], axis=-1)[..., 0]
    return (score >= kth).astype(np.float64)


def top_k_categorical_accuracy(y_true, y_pred, k: int = 5) -> np.ndarray:
    """1.0 where the true class (argmax of one-hot y_true) is among the k top predictions.

    >>> top_k_categorical_accuracy([[0, 0, 1]], [[0.5, 0.3, 0.2]], k=2).tolist()
    [0.0]
    """
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape or p.ndim < 1:
        raise ValueError(f"top_k_categorical_accuracy: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    return _in_top_k(np.argmax(t, -1), p, k)


def sparse_top_k_categorical_accuracy(y_true, y_pred, k: int = 5) -> np.ndarray:
    """1.0 where the integer class id y_true is among the k top predictions.

    >>> sparse_top_k_categorical_accuracy([1, 2], [[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]], k=2).tolist()
    [1.0, 0.0]
    """
    t, p = _class_ids("sparse_top_k_categorical_accuracy", y_true, y_pred)
    return _in_top_k(t, p, k)


def mean_squared_error(y_true, y_pred) -> np.ndarray:
    """mean((y_pred - y_true)^2) over the last axis.

    >>> mean_squared_error([[0.0, 0.0]], [[1.0, 3.0]]).tolist()
    [5.0]
    """
    t, p = _same_rank("mean_squared_error", y_true, y_pred)
    return np.mean(np.square(p.astype(np.float64) - t), axis=-1) if p.ndim > 1 else np.square(p - t, dtype=np.float64)


def mean_absolute_error(y_true, y_pred) -> np.ndarray:
    """mean(|y_pred - y_true|) over the last axis.

    >>> mean_absolute_error([[0.0, 0.0]], [[1.0, -3.0]]).tolist()
    [2.0]
    """
    t, p = _same_rank("mean_absolute_error", y_true, y_pred)
    return np.mean(np.abs(p.astype(np.float64) - t), axis=-1) if p.ndim > 1 else np.abs(p - t, dtype=np.float64)


# ------------------------------------------------------------------ classes
class Metric:
    """Base class: subclasses keep their state as floats set in `reset_state`."""

    def __init__(self, name: str | None = None):
        self.name = name or _snake(type(self).__name__)
        self.reset_state()

    def reset_state(self) -> None:
        raise NotImplementedError

    def update_state(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def result(self) -> float:
        raise NotImplementedError

    def __call__(self, *args, **kwargs) -> float:
        """Add a batch and return the result so far."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self) -> dict:
        return {"name": self.name}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Mean(Metric):
    """The (weighted) mean of the values given: each sample's values are averaged
    first, then samples are averaged with their weights, as in Keras.

    >>> m = Mean()
    >>> m.update_state([1.0, 3.0, 5.0], sample_weight=[1.0, 1.0, 0.0])
    >>> m.result()
    2.0
    """

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def update_state(self, values, sample_weight=None) -> None:
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

    def result(self) -> float:
        return self.total / self.count if self.count else 0.0


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
        super().update_state(self._fn(y_true, y_pred, **self._fn_kwargs), sample_weight)

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


class Accuracy(MeanMetricWrapper):
    """How often y_pred equals y_true exactly (for class ids already decided).

    >>> Accuracy()([1, 2, 3, 4], [0, 2, 3, 4])
    0.75
    """

    def __init__(self, name: str = "accuracy"):
        super().__init__(accuracy, name)


class BinaryAccuracy(MeanMetricWrapper):
    """How often (y_pred > threshold) matches the 0/1 labels.

    >>> BinaryAccuracy()([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]])
    0.75
    """

    def __init__(self, name: str = "binary_accuracy", threshold: float = 0.5):
        super().__init__(binary_accuracy, name, threshold=float(threshold))


class CategoricalAccuracy(MeanMetricWrapper):
    """How often argmax(y_pred) matches argmax of the one-hot labels.

    >>> CategoricalAccuracy()([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, name: str = "categorical_accuracy"):
        super().__init__(categorical_accuracy, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often argmax(y_pred) matches the integer class ids.

    >>> SparseCategoricalAccuracy()([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, name: str = "sparse_categorical_accuracy"):
        super().__init__(sparse_categorical_accuracy, name)


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the one-hot label's class is among the k highest predictions.

    >>> TopKCategoricalAccuracy(k=1)([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, k: int = 5, name: str = "top_k_categorical_accuracy"):
        super().__init__(top_k_categorical_accuracy, name, k=int(k))


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the integer class id is among the k highest predictions.

    >>> SparseTopKCategoricalAccuracy(k=1)([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, k: int = 5, name: str = "sparse_top_k_categorical_accuracy"):
        super().__init__(sparse_top_k_categorical_accuracy, name, k=int(k))


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error over every batch seen.

    >>> MeanSquaredError()([[0.0, 1.0]], [[1.0, 1.0]])
    0.5
    """

    def __init__(self, name: str = "mean_squared_error"):
        super().__init__(mean_squared_error, name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error over every batch seen.

    >>> MeanAbsoluteError()([[0.0, 1.0]], [[2.0, 1.0]])
    1.0
    """

    def __init__(self, name: str = "mean_absolute_error"):
        super().__init__(mean_absolute_error, name)


_ACCURACY_FNS = {
    "binary_accuracy": binary_accuracy,
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
}


class AutoAccuracy(Mean):
    """The accuracy that fits the labels and predictions, chosen on the first
    update (see the module docstring); `resolved` names the choice.

    `loss`, if given (a tp.losses Loss or its Keras name), decides instead:
    binary cross-entropy gives binary accuracy (threshold 0 for logits, so
    multi-label outputs are scored per label), sparse categorical
    cross-entropy gives sparse categorical accuracy, and categorical
    cross-entropy categorical accuracy. The choice survives `reset_state`.

    >>> acc = AutoAccuracy(loss="binary_crossentropy")
    >>> acc([[1, 0], [1, 1]], [[0.9, 0.2], [0.4, 0.8]]), acc.resolved
    (0.75, 'binary_accuracy')
    """

    def __init__(self, name: str = "accuracy", loss=None):
        self.loss = loss
        self.resolved: str | None = None
        self._threshold = 0.5
        super().__init__(name)

    def _from_loss(self) -> str | None:
        loss = self.loss
        if loss is None:
            return None
        cls_name = loss if isinstance(loss, str) else type(loss).__name__
        key = _snake(cls_name).replace("_", "")
        if key in ("binarycrossentropy", "bce"):
            if getattr(loss, "get_config", None) and loss.get_config().get("from_logits"):
                self._threshold = 0.0
            return "binary_accuracy"
        if key == "sparsecategoricalcrossentropy":
            return "sparse_categorical_accuracy"
        if key == "categoricalcrossentropy":
            return "categorical_accuracy"
        return None

    @staticmethod
    def _from_shapes(y_true, y_pred) -> str:
        t, p = np.shape(y_true), np.shape(y_pred)
        if len(p) <= 1 or p[-1] == 1:
            return "binary_accuracy"
        if len(t) < len(p) or t[-1] == 1:
            return "sparse_categorical_accuracy"
        return "categorical_accuracy"

    def get_config(self) -> dict:
        loss = self.loss
        return {
            "name": self.name,
            "loss": loss if loss is None or isinstance(loss, str) else serialization.serialize(loss),
        }

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        if isinstance(config.get("loss"), dict):
            config["loss"] = losses.get(config["loss"])
        return cls(**config)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        if self.resolved is None:
            self.resolved = self._from_loss() or self._from_shapes(y_true, y_pred)
        fn = _ACCURACY_FNS[self.resolved]
        kwargs = {"threshold": self._threshold} if self.resolved == "binary_accuracy" else {}
        super().update_state(fn(y_true, y_pred, **kwargs), sample_weight)


class _Confusion(Metric):
    """True/false positive and false negative weights of binary predictions."""

    def __init__(self, thresholds: float | None = None, name: str | None = None):
        self.threshold = 0.5 if thresholds is None else float(thresholds)
        super().__init__(name)

    def reset_state(self) -> None:
        self.true_positives = self.false_positives = self.false_negatives = 0.0

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        t, p = _same_rank(self.name, y_true, y_pred)
        p = p.astype(np.float64)
        if p.size and not (p.min() >= 0 and p.max() <= 1):
            raise ValueError(
                f"{self.name}: predictions must be probabilities in [0, 1], got values in "
                f"[{p.min()}, {p.max()}] (apply a sigmoid to logits first)"
            )
        truth, positive = t.astype(bool), p > self.threshold
        w = np.ones(t.shape) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w.ndim == t.ndim + 1 and w.shape[-1:] == (1,):
            w = w[..., 0]
        w = w.reshape(w.shape + (1,) * (t.ndim - w.ndim))
        try:
            w = np.broadcast_to(w, t.shape)
        except ValueError:
            raise ValueError(
                f"{self.name}: sample_weight shape {np.shape(sample_weight)} does not fit labels of shape {t.shape}"
            ) from None
        self.true_positives += float(w[truth & positive].sum())
        self.false_positives += float(w[~truth & positive].sum())
        self.false_negatives += float(w[truth & ~positive].sum())

    def get_config(self) -> dict:
        return {"name": self.name, "thresholds": self.threshold}


class Precision(_Confusion):
    """Of the predictions above the threshold (0.5), the fraction truly positive.

    >>> Precision()([0, 1, 1, 1], [1, 0, 1, 1])
    0.6666666666666666
    """

    def __init__(self, thresholds: float | None = None, name: str = "precision"):
        super().__init__(thresholds, name)

    def result(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 0.0


class Recall(_Confusion):
    """Of the truly positive labels, the fraction predicted above the threshold (0.5).

    >>> Recall()([0, 1, 1, 1], [1, 0, 1, 1])
    0.6666666666666666
    """

    def __init__(self, thresholds: float | None = None, name: str = "recall"):
        super().__init__(thresholds, name)

    def result(self) -> float:
        actual = self.true_positives + self.false_negatives
        return self.true_positives / actual if actual else 0.0


_CLASSES = (
    Mean,
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    TopKCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    MeanSquaredError,
    MeanAbsoluteError,
    Precision,
    Recall,
)
_BY_CLASS_NAME = {cls.__name__: cls for cls in (*_CLASSES, AutoAccuracy, MeanMetricWrapper)}
_FUNCTIONS = {
    f.__name__: f
    for f in (
        accuracy,
        binary_accuracy,
        categorical_accuracy,
        sparse_categorical_accuracy,
        top_k_categorical_accuracy,
        sparse_top_k_categorical_accuracy,
        mean_squared_error,
        mean_absolute_error,
    )
}
_FUNCTION_NAMES = {f: name for name, f in _FUNCTIONS.items()}


def _key(name: str) -> str:
    return name.lower().replace("_", "")


_BY_KEY = {_key(cls.__name__): cls for cls in _CLASSES if cls is not Accuracy} | {
    "mse": MeanSquaredError,
    "mae": MeanAbsoluteError,
}
_KNOWN = sorted({"accuracy", "acc", "mse", "mae"} | {_snake(c.__name__).replace("top_k", "top_k_") for c in _CLASSES})


def _lookup(name: str, loss=None):
    """The class (or factory) that `name` stands for."""
    if name in _BY_CLASS_NAME:
        return _BY_CLASS_NAME[name]
    if _key(name) in ("accuracy", "acc"):
        return lambda **config: AutoAccuracy(loss=loss, **config)
    cls = _BY_KEY.get(_key(name))
    if cls is not None:
        return cls
    found = serialization.lookup(name)  # a registered class or function
    if isinstance(found, type) and issubclass(found, Metric):
        return found
    if callable(found) and not isinstance(found, type):
        return lambda **config: MeanMetricWrapper(found, **config)
    raise ValueError(f"metrics.get: unknown metric {name!r}; known names: {_KNOWN}")


def _builtin(name: str):
    if _key(name) in ("accuracy", "acc") and name != "Accuracy":
        return AutoAccuracy
    return _BY_CLASS_NAME.get(name) or _BY_KEY.get(_key(name))


def get(identifier, loss=None) -> Metric:
    """A new metric from a name ("accuracy", "sparse_categorical_accuracy",
    "precision", "mse"...; class names work too), a {"class_name", "config"}
    dict, or a function of (y_true, y_pred) (averaged); a Metric is returned as is.

    "accuracy" and "acc" give an AutoAccuracy; pass the model's `loss` to let
    it decide which accuracy applies. The class name "Accuracy" gives the
    exact-match Accuracy.

    >>> get("precision").name, type(get("acc", loss="sparse_categorical_crossentropy")).__name__
    ('precision', 'AutoAccuracy')
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        return _lookup(identifier, loss)()
    if isinstance(identifier, dict):
        metric = serialization.deserialize(identifier, Metric, _builtin, "metrics.get")
        if isinstance(metric, AutoAccuracy) and metric.loss is None:
            metric.loss = loss
        return metric
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise TypeError(f"metrics.get: expected a Metric, a name, a config dict or a function, got {identifier!r}")
