"""Regression losses beyond squared and absolute error: percentage and logarithmic
errors, log-cosh, cosine similarity, and the hinge family."""

from __future__ import annotations

import math

from tapeflow.losses.loss import EPSILON
from tapeflow.losses.losses import LossFunctionWrapper, _matched, register
from tapeflow.ops.math import abs as tabs
from tapeflow.ops.math import cast, equal, log, logical_or, maximum, rsqrt, square
from tapeflow.ops.nn import softplus
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import min as reduce_min
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.tensor import Tensor


# ------------------------------------------------------- per-sample losses
def mean_absolute_percentage_error(y_true, y_pred) -> Tensor:
    """100 * mean(|y_true - y_pred| / max(|y_true|, 1e-7)) over the last axis.

    >>> mean_absolute_percentage_error([[2.0, 4.0]], [[1.0, 5.0]]).numpy().tolist()
    [37.5]
    """
    y_true, y_pred = _matched("mean_absolute_percentage_error", y_true, y_pred)
    return 100.0 * mean(tabs((y_true - y_pred) / maximum(tabs(y_true), EPSILON)), -1)


def mean_squared_logarithmic_error(y_true, y_pred) -> Tensor:
    """mean((log(1 + y_pred) - log(1 + y_true))^2) over the last axis (values below
    1e-7 count as 1e-7).

    >>> [round(x, 4) for x in mean_squared_logarithmic_error([[0.0]], [[1.0]]).numpy().tolist()]
    [0.4805]
    """
    y_true, y_pred = _matched("mean_squared_logarithmic_error", y_true, y_pred)
    return mean(square(log(maximum(y_pred, EPSILON) + 1.0) - log(maximum(y_true, EPSILON) + 1.0)), -1)


def log_cosh(y_true, y_pred) -> Tensor:
    """mean(log(cosh(y_pred - y_true))) over the last axis, computed without overflow.

    >>> [round(x, 4) for x in log_cosh([[0.0, 0.0]], [[1.0, -1.0]]).numpy().tolist()]
    [0.4338]
    """
    y_true, y_pred = _matched("log_cosh", y_true, y_pred)
    x = y_pred - y_true
    return mean(x + softplus(x * -2.0) - math.log(2.0), -1)


def _unit(x: Tensor, axis: int) -> Tensor:
    return x * rsqrt(maximum(reduce_sum(square(x), axis, keepdims=True), 1e-12))


def cosine_similarity(y_true, y_pred, axis: int = -1) -> Tensor:
    """The negated cosine similarity of y_true and y_pred along `axis` (-1 for
    identical directions, 1 for opposite ones).

    >>> cosine_similarity([[0.0, 2.0]], [[0.0, 3.0]]).numpy().tolist()
    [-1.0]
    """
    y_true, y_pred = _matched("cosine_similarity", y_true, y_pred)
    return -reduce_sum(_unit(y_true, axis) * _unit(y_pred, axis), axis)


def _signed_labels(y_true: Tensor) -> Tensor:
    """Labels that are all 0 or 1 become -1 or 1; any other labels are kept."""
    binary = reduce_min(cast(logical_or(equal(y_true, 0.0), equal(y_true, 1.0)), y_true.dtype))
    return y_true + binary * (y_true - 1.0)


def hinge(y_true, y_pred) -> Tensor:
    """mean(max(1 - y_true * y_pred, 0)) over the last axis; labels of 0 and 1 are
    read as -1 and 1.

    >>> hinge([[1.0, 0.0]], [[0.5, 0.5]]).numpy().tolist()
    [1.0]
    """
    y_true, y_pred = _matched("hinge", y_true, y_pred)
    return mean(maximum(1.0 - _signed_labels(y_true) * y_pred, 0.0), -1)


def squared_hinge(y_true, y_pred) -> Tensor:
    """mean(max(1 - y_true * y_pred, 0)^2) over the last axis; labels of 0 and 1 are
    read as -1 and 1.

    >>> squared_hinge([[1.0, 0.0]], [[0.5, 0.5]]).numpy().tolist()
    [1.25]
    """
    y_true, y_pred = _matched("squared_hinge", y_true, y_pred)
    return mean(square(maximum(1.0 - _signed_labels(y_true) * y_pred, 0.0)), -1)


def categorical_hinge(y_true, y_pred) -> Tensor:
    """max(0, 1 + max((1 - y_true) * y_pred) - sum(y_true * y_pred)) over the last axis,
    for one-hot labels.

    >>> categorical_hinge([[0.0, 1.0]], [[0.3, 0.8]]).numpy().tolist()
    [0.5]
    """
    y_true, y_pred = _matched("categorical_hinge", y_true, y_pred)
    positive = reduce_sum(y_true * y_pred, -1)
    negative = reduce_max((1.0 - y_true) * y_pred, -1)
    return maximum(negative - positive + 1.0, 0.0)


# ----------------------------------------------------------------- classes
class MeanAbsolutePercentageError(LossFunctionWrapper):
    """Mean absolute percentage error.

    >>> MeanAbsolutePercentageError()([[2.0, 4.0]], [[1.0, 5.0]]).numpy().item()
    37.5
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "mean_absolute_percentage_error"):
        super().__init__(mean_absolute_percentage_error, name, reduction)


class MeanSquaredLogarithmicError(LossFunctionWrapper):
    """Mean squared logarithmic error.

    >>> round(float(MeanSquaredLogarithmicError()([[0.0]], [[1.0]])), 4)
    0.4805
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "mean_squared_logarithmic_error"):
        super().__init__(mean_squared_logarithmic_error, name, reduction)


class LogCosh(LossFunctionWrapper):
    """Mean of log(cosh(error)): about squared error / 2 for small errors, |error| for large.

    >>> round(float(LogCosh()([[0.0]], [[1.0]])), 4)
    0.4338
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "log_cosh"):
        super().__init__(log_cosh, name, reduction)


class CosineSimilarity(LossFunctionWrapper):
    """The negated cosine similarity between labels and predictions along `axis`.

    >>> float(CosineSimilarity()([[1.0, 0.0]], [[2.0, 0.0]]))
    -1.0
    """

    def __init__(self, axis: int = -1, reduction: str = "sum_over_batch_size", name: str = "cosine_similarity"):
        super().__init__(cosine_similarity, name, reduction, axis=axis)


class Hinge(LossFunctionWrapper):
    """Hinge loss for labels in {-1, 1} (or {0, 1}).

    >>> float(Hinge()([[1.0, 0.0]], [[0.5, 0.5]]))
    1.0
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "hinge"):
        super().__init__(hinge, name, reduction)


class SquaredHinge(LossFunctionWrapper):
    """Squared hinge loss for labels in {-1, 1} (or {0, 1}).

    >>> float(SquaredHinge()([[1.0, 0.0]], [[0.5, 0.5]]))
    1.25
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "squared_hinge"):
        super().__init__(squared_hinge, name, reduction)


class CategoricalHinge(LossFunctionWrapper):
    """Categorical hinge loss for one-hot labels.

    >>> float(CategoricalHinge()([[0.0, 1.0]], [[0.3, 0.8]]))
    0.5
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "categorical_hinge"):
        super().__init__(categorical_hinge, name, reduction)


CLASSES = (
    MeanAbsolutePercentageError,
    MeanSquaredLogarithmicError,
    LogCosh,
    CosineSimilarity,
    Hinge,
    SquaredHinge,
    CategoricalHinge,
)
FUNCTIONS = (
    mean_absolute_percentage_error,
    mean_squared_logarithmic_error,
    log_cosh,
    cosine_similarity,
    hinge,
    squared_hinge,
    categorical_hinge,
)
register(
    CLASSES,
    FUNCTIONS,
    {"mape": MeanAbsolutePercentageError, "msle": MeanSquaredLogarithmicError, "logcosh": LogCosh},
)
