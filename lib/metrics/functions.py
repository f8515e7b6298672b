"""The per-sample metric functions of (y_true, y_pred), in NumPy, and their table by name."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.metric import _array, _class_ids, _same_rank


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
    t, p = _array(y_true), _array(y_pred)
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


def mean_absolute_percentage_error(y_true, y_pred) -> np.ndarray:
    """100 * mean(|y_true - y_pred| / max(|y_true|, 1e-7)) over the last axis, as Keras.

    >>> mean_absolute_percentage_error([[2.0, 4.0]], [[1.0, 5.0]]).tolist()
    [37.5]
    """
    t, p = _same_rank("mean_absolute_percentage_error", y_true, y_pred)
    t, p = t.astype(np.float64), p.astype(np.float64)
    ratio = np.abs(t - p) / np.maximum(np.abs(t), 1e-7)
    return 100.0 * (np.mean(ratio, axis=-1) if p.ndim > 1 else ratio)


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
        mean_absolute_percentage_error,
    )
}


_FUNCTION_NAMES = {f: name for name, f in _FUNCTIONS.items()}
