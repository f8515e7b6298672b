"""Pearson's and the concordance correlation coefficient, per sample along an axis, as
metrics averaged over the batches seen."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.metric import _same_rank
from tapeflow.metrics.reduction_metrics import MeanMetricWrapper

_EPSILON = 1e-7


def _pair(owner: str, y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t, p = _same_rank(owner, y_true, y_pred)
    return t.astype(np.float64), p.astype(np.float64)


def pearson_correlation(y_true, y_pred, axis: int = -1) -> np.ndarray:
    """Pearson's correlation of y_true and y_pred along `axis`.

    >>> pearson_correlation([[1.0, 2.0, 3.0]], [[2.0, 4.0, 7.0]]).round(4).tolist()
    [0.9934]
    """
    t, p = _pair("pearson_correlation", y_true, y_pred)
    t = t - t.mean(axis=axis, keepdims=True)
    p = p - p.mean(axis=axis, keepdims=True)
    t = t / t.std(axis=axis, keepdims=True)
    p = p / p.std(axis=axis, keepdims=True)
    return (t * p).mean(axis=axis)


def concordance_correlation(y_true, y_pred, axis: int = -1) -> np.ndarray:
    """The concordance correlation of y_true and y_pred along `axis`, computed as Keras
    does (its covariance term centres y_true on the mean of y_pred).

    >>> concordance_correlation([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]]).round(4).tolist()
    [1.0]
    """
    t, p = _pair("concordance_correlation", y_true, y_pred)
    t_mean, p_mean = t.mean(axis=axis, keepdims=True), p.mean(axis=axis, keepdims=True)
    t_var, p_var = t.var(axis=axis, keepdims=True), p.var(axis=axis, keepdims=True)
    covariance = (t - p_mean) * (p - p_mean)
    norm = t_var + p_var + np.square(t_mean - p_mean)
    return (2.0 * covariance / (norm + _EPSILON)).mean(axis=axis)


class PearsonCorrelation(MeanMetricWrapper):
    """Mean Pearson correlation (along `axis`, per sample) over every batch seen.

    >>> round(PearsonCorrelation()([[1.0, 2.0, 3.0]], [[2.0, 4.0, 7.0]]), 4)
    0.9934
    """

    def __init__(self, name: str = "pearson_correlation", axis: int = -1):
        super().__init__(pearson_correlation, name, axis=axis)


class ConcordanceCorrelation(MeanMetricWrapper):
    """Mean concordance correlation (along `axis`, per sample) over every batch seen.

    >>> round(ConcordanceCorrelation()([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]]), 4)
    1.0
    """

    def __init__(self, name: str = "concordance_correlation", axis: int = -1):
        super().__init__(concordance_correlation, name, axis=axis)


CLASSES = (PearsonCorrelation, ConcordanceCorrelation)
