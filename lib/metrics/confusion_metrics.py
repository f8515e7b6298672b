"""Precision and recall, from counts of true and false positives."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.metric import Metric, _same_rank


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
