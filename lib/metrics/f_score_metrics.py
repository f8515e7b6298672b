"""The F-beta and F1 scores of multi-label (or one-hot) predictions."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.metric import Metric

_EPSILON = 1e-7


class FBetaScore(Metric):
    """(1 + beta^2) * precision * recall / (beta^2 * precision + recall), from counts
    kept per class over [batch, classes] data. A prediction is positive above
    `threshold`, or, without one, where it is its row's largest (and nonzero). `average`:
    None (one score per class), "micro" (counts pooled over classes), "macro" (mean of
    the class scores) or "weighted" (mean weighted by each class's positive labels).

    >>> FBetaScore(beta=2.0, threshold=0.5)([[1, 0], [1, 1]], [[0.9, 0.6], [0.2, 0.8]]).round(4).tolist()
    [0.5556, 0.8333]
    """

    def __init__(self, average=None, beta: float = 1.0, threshold=None, name: str = "fbeta_score"):
        owner = type(self).__name__
        if average not in (None, "micro", "macro", "weighted"):
            raise ValueError(f"{owner}: average must be one of None, 'micro', 'macro', 'weighted', got {average!r}")
        if not isinstance(beta, float) or not beta > 0.0:
            raise ValueError(f"{owner}: beta must be a Python float > 0, got {beta!r}")
        if threshold is not None and (not isinstance(threshold, float) or not 0.0 < threshold <= 1.0):
            raise ValueError(f"{owner}: threshold must be a Python float in (0, 1], got {threshold!r}")
        self.average, self.beta, self.threshold = average, beta, threshold
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.true_positives = self.false_positives = self.false_negatives = self.intermediate_weights = None

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        t, p = np.asarray(y_true, dtype=np.float64), np.asarray(y_pred, dtype=np.float64)
        if t.ndim != 2 or p.ndim != 2 or t.shape != p.shape:
            raise ValueError(
                f"{self.name}: expects y_true and y_pred of one shape (batch_size, output_dim), "
                f"got {t.shape} and {p.shape}"
            )
        if self.threshold is None:
            p = (p >= p.max(axis=-1, keepdims=True)) & (np.abs(p) > 1e-9)
        else:
            p = p > self.threshold
        p = p.astype(np.float64)
        w = np.ones((t.shape[0], 1)) if sample_weight is None else np.asarray(sample_weight, np.float64)[:, None]
        axis = None if self.average == "micro" else 0
        counts = [(p * t * w).sum(axis), (p * (1 - t) * w).sum(axis), ((1 - p) * t * w).sum(axis), (t * w).sum(axis)]
        if self.true_positives is None:
            self.true_positives, self.false_positives, self.false_negatives, self.intermediate_weights = counts
        else:
            self.true_positives = self.true_positives + counts[0]
            self.false_positives = self.false_positives + counts[1]
            self.false_negatives = self.false_negatives + counts[2]
            self.intermediate_weights = self.intermediate_weights + counts[3]

    def result(self):
        if self.true_positives is None:
            return 0.0
        tp = self.true_positives
        precision = tp / (tp + self.false_positives + _EPSILON)
        recall = tp / (tp + self.false_negatives + _EPSILON)
        b2 = self.beta**2
        score = precision * recall / (b2 * precision + recall + _EPSILON) * (1.0 + b2)
        if self.average == "weighted":
            weights = self.intermediate_weights / (self.intermediate_weights.sum() + _EPSILON)
            return float((score * weights).sum())
        if self.average is not None:
            return float(np.mean(score))
        return np.asarray(score)

    def get_config(self) -> dict:
        return {"name": self.name, "average": self.average, "beta": self.beta, "threshold": self.threshold}


class F1Score(FBetaScore):
    """The F-beta score with beta = 1: the harmonic mean of precision and recall.

    >>> round(F1Score(average="micro", threshold=0.5)([[1, 0], [1, 1]], [[0.9, 0.6], [0.2, 0.8]]), 4)
    0.6667
    """

    def __init__(self, average=None, threshold=None, name: str = "f1_score"):
        super().__init__(average=average, beta=1.0, threshold=threshold, name=name)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["beta"]
        return config


CLASSES = (FBetaScore, F1Score)
