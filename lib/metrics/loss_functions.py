"""The loss functions as per-sample metric functions: each gives NumPy float64 values of
tapeflow's loss of the same name (Keras exports them as metrics too)."""

from __future__ import annotations

import numpy as np

from tapeflow import losses


def _values(fn, y_true, y_pred, **kwargs) -> np.ndarray:
    y_pred = np.asarray(y_pred, dtype=np.float64)
    y_true = np.asarray(y_true)
    y_true = y_true.astype(np.float64) if y_true.dtype.kind in "fb" else y_true
    return np.asarray(fn(y_true, y_pred, **kwargs).numpy(), dtype=np.float64)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1) -> np.ndarray:
    """Binary cross-entropy per sample.

    >>> binary_crossentropy([[1.0, 0.0]], [[0.5, 0.5]]).round(4).tolist()
    [0.6931]
    """
    return _values(
        losses.binary_crossentropy, y_true, y_pred, from_logits=from_logits, label_smoothing=label_smoothing, axis=axis
    )


def binary_focal_crossentropy(
    y_true, y_pred, apply_class_balancing=False, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0, axis=-1
) -> np.ndarray:
    """Binary focal cross-entropy per sample.

    >>> binary_focal_crossentropy([[1.0, 0.0]], [[0.5, 0.5]]).round(4).tolist()
    [0.1733]
    """
    kwargs = {"apply_class_balancing": apply_class_balancing, "alpha": alpha, "gamma": gamma}
    kwargs |= {"from_logits": from_logits, "label_smoothing": label_smoothing, "axis": axis}
    return _values(losses.binary_focal_crossentropy, y_true, y_pred, **kwargs)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1) -> np.ndarray:
    """Categorical cross-entropy per sample.

    >>> categorical_crossentropy([[0.0, 1.0]], [[0.5, 0.5]]).round(4).tolist()
    [0.6931]
    """
    return _values(
        losses.categorical_crossentropy,
        y_true,
        y_pred,
        from_logits=from_logits,
        label_smoothing=label_smoothing,
        axis=axis,
    )


def categorical_focal_crossentropy(
    y_true, y_pred, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0, axis=-1
) -> np.ndarray:
    """Categorical focal cross-entropy per sample.

    >>> categorical_focal_crossentropy([[0.0, 1.0]], [[0.5, 0.5]]).round(4).tolist()
    [0.0433]
    """
    kwargs = {"alpha": alpha, "gamma": gamma, "from_logits": from_logits, "label_smoothing": label_smoothing}
    return _values(losses.categorical_focal_crossentropy, y_true, y_pred, axis=axis, **kwargs)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, ignore_class=None, axis=-1) -> np.ndarray:
    """Sparse categorical cross-entropy per sample; labels equal to `ignore_class` give 0.

    >>> sparse_categorical_crossentropy([1, 0], [[0.5, 0.5], [0.9, 0.1]], ignore_class=0).round(4).tolist()
    [0.6931, 0.0]
    """
    labels = np.asarray(y_true)
    if ignore_class is None:
        return _values(losses.sparse_categorical_crossentropy, labels, y_pred, from_logits=from_logits, axis=axis)
    valid = labels != ignore_class
    values = _values(
        losses.sparse_categorical_crossentropy, np.where(valid, labels, 0), y_pred, from_logits=from_logits, axis=axis
    )
    return np.where(valid.reshape(values.shape), values, 0.0)


def hinge(y_true, y_pred) -> np.ndarray:
    """Hinge loss per sample.

    >>> hinge([[1.0, 0.0]], [[0.5, 0.5]]).tolist()
    [1.0]
    """
    return _values(losses.hinge, y_true, y_pred)


def squared_hinge(y_true, y_pred) -> np.ndarray:
    """Squared hinge loss per sample.

    >>> squared_hinge([[1.0, 0.0]], [[0.5, 0.5]]).tolist()
    [1.25]
    """
    return _values(losses.squared_hinge, y_true, y_pred)


def categorical_hinge(y_true, y_pred) -> np.ndarray:
    """Categorical hinge loss per sample.

    >>> categorical_hinge([[0.0, 1.0]], [[0.3, 0.8]]).round(4).tolist()
    [0.5]
    """
    return _values(losses.categorical_hinge, y_true, y_pred)


def huber(y_true, y_pred, delta=1.0) -> np.ndarray:
    """Huber loss per sample.

    >>> huber([[0.0, 0.0]], [[0.5, 3.0]]).tolist()
    [1.3125]
    """
    return _values(losses.huber, y_true, y_pred, delta=delta)


def kl_divergence(y_true, y_pred) -> np.ndarray:
    """Kullback-Leibler divergence per sample.

    >>> kl_divergence([[0.5, 0.5]], [[0.25, 0.75]]).round(4).tolist()
    [0.1438]
    """
    return _values(losses.kl_divergence, y_true, y_pred)


def log_cosh(y_true, y_pred) -> np.ndarray:
    """log(cosh(error)) averaged per sample.

    >>> log_cosh([[0.0]], [[1.0]]).round(4).tolist()
    [0.4338]
    """
    return _values(losses.log_cosh, y_true, y_pred)


def mean_squared_logarithmic_error(y_true, y_pred) -> np.ndarray:
    """Mean squared logarithmic error per sample.

    >>> mean_squared_logarithmic_error([[0.0]], [[1.0]]).round(4).tolist()
    [0.4805]
    """
    return _values(losses.mean_squared_logarithmic_error, y_true, y_pred)


def poisson(y_true, y_pred) -> np.ndarray:
    """Poisson loss per sample.

    >>> poisson([[1.0]], [[1.0]]).round(4).tolist()
    [1.0]
    """
    return _values(losses.poisson, y_true, y_pred)


def cosine_similarity(y_true, y_pred, axis=-1) -> np.ndarray:
    """The cosine similarity of y_true and y_pred along `axis` (1 for one direction).

    >>> cosine_similarity([[0.0, 2.0]], [[0.0, 3.0]]).tolist()
    [1.0]
    """
    return -_values(losses.cosine_similarity, y_true, y_pred, axis=axis)


FUNCTIONS = (
    binary_crossentropy,
    binary_focal_crossentropy,
    categorical_crossentropy,
    categorical_focal_crossentropy,
    sparse_categorical_crossentropy,
    hinge,
    squared_hinge,
    categorical_hinge,
    huber,
    kl_divergence,
    log_cosh,
    mean_squared_logarithmic_error,
    poisson,
    cosine_similarity,
)
