"""Counts of true and false positives and negatives, and the precision and recall made of them.

Each metric keeps one count per threshold: a prediction counts as positive when it is
above the threshold. With one threshold `result()` is a float, with several an array of
one value per threshold, as in Keras.
"""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.metric import Metric

_NEG_INF = -1e10  # the threshold that top_k uses: every kept prediction is above it


def _parse_thresholds(owner: str, thresholds, default: float) -> np.ndarray:
    """The thresholds as a float64 vector; each given one must lie in [0, 1]."""
    if thresholds is None:
        return np.asarray([default], dtype=np.float64)
    values = list(thresholds) if isinstance(thresholds, (list, tuple, np.ndarray)) else [thresholds]
    bad = [t for t in values if t is None or not 0 <= float(t) <= 1]
    if bad or not values:
        raise ValueError(f"{owner}: threshold values must be in [0, 1], got {thresholds!r}")
    return np.asarray(values, dtype=np.float64)


def _matched(t: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keras's rank rule: when the ranks differ by one and the longer ends in a size-1
    axis, a rank-1 side gains that axis, any other loses it from the longer."""
    if t.ndim == p.ndim + 1 and t.shape[-1:] == (1,):
        if p.ndim == 1:
            p = p[:, None]
        else:
            t = t[..., 0]
    elif p.ndim == t.ndim + 1 and p.shape[-1:] == (1,):
        if t.ndim == 1:
            t = t[:, None]
        else:
            p = p[..., 0]
    return t, p


def _top_k_only(p: np.ndarray, k: int) -> np.ndarray:
    """`p` with all but the k largest values of its last axis set far below any threshold."""
    order = np.argsort(-p, axis=-1, kind="stable")[..., :k]
    keep = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(keep, order, True, axis=-1)
    return np.where(keep, p, _NEG_INF)


def confusion_counts(
    owner: str, y_true, y_pred, thresholds: np.ndarray, sample_weight=None, top_k=None, class_id=None
) -> dict[str, np.ndarray]:
    """The weighted counts "tp", "fp", "tn", "fn", one per threshold, of a batch."""
    t, p = _matched(np.asarray(y_true), np.asarray(y_pred, dtype=np.float64))
    if t.shape != p.shape:
        raise ValueError(f"{owner}: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)[..., None]
        if w.ndim == t.ndim + 1 and w.shape[-1] == 1:
            w = w[..., 0]
    if top_k is not None:
        p = _top_k_only(p, top_k)
    if class_id is not None:
        if p.ndim < 2:
            raise ValueError(f"{owner}: with class_id, y_pred must have shape (samples, classes), got shape {p.shape}")
        if not -p.shape[-1] <= class_id < p.shape[-1]:
            raise ValueError(f"{owner}: class_id {class_id} is out of range for {p.shape[-1]} classes")
        t, p = t[..., class_id, None], p[..., class_id, None]
    if w is not None:
        try:
            w = np.broadcast_to(w, p.shape)
        except ValueError:
            raise ValueError(
                f"{owner}: sample_weight shape {np.shape(sample_weight)} does not fit predictions of shape {p.shape}"
            ) from None
    truth = t.astype(bool).reshape(1, -1)
    positive = p.reshape(1, -1) > thresholds[:, None]
    weights = np.ones(truth.shape) if w is None else w.reshape(1, -1)
    return {
        "tp": np.where(truth & positive, weights, 0.0).sum(axis=1),
        "fp": np.where(~truth & positive, weights, 0.0).sum(axis=1),
        "tn": np.where(~truth & ~positive, weights, 0.0).sum(axis=1),
        "fn": np.where(truth & ~positive, weights, 0.0).sum(axis=1),
    }


def _per_threshold(values: np.ndarray):
    return float(values[0]) if values.shape == (1,) else values.copy()


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num), where=den != 0)


class _ConditionCount(Metric):
    """The weighted count of one cell of the confusion matrix, per threshold."""

    _cell = ""

    def __init__(self, thresholds=None, name: str | None = None):
        self.init_thresholds = thresholds
        self.thresholds = _parse_thresholds(type(self).__name__, thresholds, 0.5)
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.accumulator = np.zeros(len(self.thresholds))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        self.accumulator = (
            self.accumulator + confusion_counts(self.name, y_true, y_pred, self.thresholds, sample_weight)[self._cell]
        )

    def result(self):
        return _per_threshold(self.accumulator)

    def get_config(self) -> dict:
        return {"name": self.name, "thresholds": self.init_thresholds}


class TruePositives(_ConditionCount):
    """The (weighted) number of positive labels predicted above the threshold (0.5).

    >>> TruePositives()([0, 1, 1, 1], [1, 0, 1, 1])
    2.0
    """

    _cell = "tp"


class FalsePositives(_ConditionCount):
    """The (weighted) number of negative labels predicted above the threshold (0.5).

    >>> FalsePositives(thresholds=[0.3, 0.8])([0, 1, 0, 0], [0.5, 0, 1, 1])
    array([3., 2.])
    """

    _cell = "fp"


class TrueNegatives(_ConditionCount):
    """The (weighted) number of negative labels predicted at or below the threshold (0.5).

    >>> TrueNegatives()([0, 1, 0, 0], [0, 0, 1, 1], sample_weight=[2, 1, 1, 1])
    2.0
    """

    _cell = "tn"


class FalseNegatives(_ConditionCount):
    """The (weighted) number of positive labels predicted at or below the threshold (0.5).

    >>> FalseNegatives()([0, 1, 1, 1], [1, 0, 1, 1])
    1.0
    """

    _cell = "fn"


class _PrecisionRecall(Metric):
    """Counts true positives and one kind of error, per threshold, optionally restricted
    to the top_k predictions of each sample and to the column class_id."""

    _error = ""

    def __init__(self, thresholds=None, top_k: int | None = None, class_id: int | None = None, name=None):
        owner = type(self).__name__
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
            raise ValueError(f"{owner}: top_k must be a positive integer or None, got {top_k!r}")
        if class_id is not None and (isinstance(class_id, bool) or not isinstance(class_id, (int, np.integer))):
            raise ValueError(f"{owner}: class_id must be an integer or None, got {class_id!r}")
        self.init_thresholds = thresholds
        self.top_k = top_k
        self.class_id = class_id
        self.thresholds = _parse_thresholds(owner, thresholds, 0.5 if top_k is None else _NEG_INF)
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.true_positives = np.zeros(len(self.thresholds))
        setattr(self, self._error, np.zeros(len(self.thresholds)))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        counts = confusion_counts(
            self.name, y_true, y_pred, self.thresholds, sample_weight, top_k=self.top_k, class_id=self.class_id
        )
        self.true_positives = self.true_positives + counts["tp"]
        key = "fp" if self._error == "false_positives" else "fn"
        setattr(self, self._error, getattr(self, self._error) + counts[key])

    def result(self):
        return _per_threshold(_ratio(self.true_positives, self.true_positives + getattr(self, self._error)))

    def get_config(self) -> dict:
        return {"name": self.name, "thresholds": self.init_thresholds, "top_k": self.top_k, "class_id": self.class_id}


class Precision(_PrecisionRecall):
    """Of the predictions above the threshold (0.5), the (weighted) fraction truly positive;
    0 while nothing is predicted positive.

    With `top_k`, only the k largest predictions of each sample may count as positive;
    with `class_id`, only that column of labels and predictions is read.

    >>> Precision()([0, 1, 1, 1], [1, 0, 1, 1])
    0.6666666666666666
    >>> Precision(top_k=1, class_id=2)([[0, 0, 1], [0, 1, 0]], [[0.1, 0.2, 0.7], [0.1, 0.3, 0.6]])
    0.5
    """

    _error = "false_positives"

    def __init__(self, thresholds=None, top_k=None, class_id=None, name: str = "precision"):
        super().__init__(thresholds, top_k, class_id, name)


class Recall(_PrecisionRecall):
    """Of the truly positive labels, the (weighted) fraction predicted above the threshold
    (0.5); 0 while no label is positive.

    `top_k` and `class_id` work as in `Precision`.

    >>> Recall()([0, 1, 1, 1], [1, 0, 1, 1])
    0.6666666666666666
    >>> Recall(thresholds=[0.2, 0.9])([1, 1], [0.5, 0.95])
    array([1. , 0.5])
    """

    _error = "false_negatives"

    def __init__(self, thresholds=None, top_k=None, class_id=None, name: str = "recall"):
        super().__init__(thresholds, top_k, class_id, name)
