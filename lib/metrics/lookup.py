"""`metrics.get`: a metric from a name, a config or a function."""

from __future__ import annotations

from tapeflow import serialization
from tapeflow.metrics import (
    constrained_metrics,
    correlation_metrics,
    error_metrics,
    f_score_metrics,
    hinge_metrics,
    iou_metrics,
    loss_functions,
    probabilistic_metrics,
)
from tapeflow.metrics.accuracy_metrics import (
    Accuracy,
    AutoAccuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
)
from tapeflow.metrics.auc import AUC
from tapeflow.metrics.confusion_metrics import (
    FalseNegatives,
    FalsePositives,
    Precision,
    Recall,
    TrueNegatives,
    TruePositives,
)
from tapeflow.metrics.metric import Metric, _snake
from tapeflow.metrics.reduction_metrics import Mean, MeanMetricWrapper
from tapeflow.metrics.regression_metrics import MeanAbsoluteError, MeanAbsolutePercentageError, MeanSquaredError

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
    MeanAbsolutePercentageError,
    Precision,
    Recall,
    TruePositives,
    TrueNegatives,
    FalsePositives,
    FalseNegatives,
    AUC,
    *probabilistic_metrics.CLASSES,
    *hinge_metrics.CLASSES,
    *error_metrics.CLASSES,
    *correlation_metrics.CLASSES,
    *f_score_metrics.CLASSES,
    *iou_metrics.CLASSES,
    *constrained_metrics.CLASSES,
)

# Keras's metric functions with no metric class of their own: averaged by a MeanMetricWrapper.
_WRAPPED_FUNCTIONS = {
    f.__name__: f
    for f in (
        loss_functions.binary_focal_crossentropy,
        loss_functions.categorical_focal_crossentropy,
        loss_functions.huber,
    )
}


_BY_CLASS_NAME = {cls.__name__: cls for cls in (*_CLASSES, AutoAccuracy, MeanMetricWrapper)}


def _key(name: str) -> str:
    return name.lower().replace("_", "")


_BY_KEY = {_key(cls.__name__): cls for cls in _CLASSES if cls is not Accuracy} | {
    "mse": MeanSquaredError,
    "mae": MeanAbsoluteError,
    "mape": MeanAbsolutePercentageError,
    "msle": error_metrics.MeanSquaredLogarithmicError,
    "logcosh": error_metrics.LogCoshError,
    "kld": probabilistic_metrics.KLDivergence,
    "kullbackleiblerdivergence": probabilistic_metrics.KLDivergence,
}


_KNOWN = sorted(
    {"accuracy", "acc", "mse", "mae", "mape", "msle", "logcosh", "kld", *_WRAPPED_FUNCTIONS}
    | {_snake(c.__name__).replace("top_k", "top_k_") for c in _CLASSES}
)


def _lookup(name: str, loss=None):
    """The class (or factory) that `name` stands for."""
    if name in _BY_CLASS_NAME:
        return _BY_CLASS_NAME[name]
    if _key(name) in ("accuracy", "acc"):
        return lambda **config: AutoAccuracy(loss=loss, **config)
    cls = _BY_KEY.get(_key(name))
    if cls is not None:
        return cls
    if name in _WRAPPED_FUNCTIONS:
        fn = _WRAPPED_FUNCTIONS[name]
        return lambda **config: MeanMetricWrapper(fn, **{"name": name, **config})
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


def serialize(metric: Metric) -> dict:
    """{"class_name": ..., "config": ...} for a metric, which `deserialize` (and `get`)
    turn back into one.

    >>> serialize(AUC(curve="PR"))["config"]["curve"]
    'PR'
    """
    if not isinstance(metric, Metric):
        raise TypeError(f"metrics.serialize: expected a Metric, got {metric!r}")
    return serialization.serialize(metric)


def deserialize(config, custom_objects: dict | None = None) -> Metric:
    """The metric a `serialize` dict (or a name) describes.

    >>> deserialize(serialize(AUC(num_thresholds=50))).num_thresholds
    50
    """
    if not isinstance(config, dict | str):
        raise TypeError(f"metrics.deserialize: expected a config dict or a name, got {config!r}")
    with serialization.custom_object_scope(custom_objects):
        return get(config)
