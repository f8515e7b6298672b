"""The area under the ROC or precision-recall curve, from confusion counts kept at a
grid of thresholds, and the counts themselves (which the constrained metrics share)."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.confusion_metrics import _matched
from tapeflow.metrics.metric import Metric

_EPSILON = 1e-7
_CURVES = ("ROC", "PR")
_SUMMATIONS = ("interpolation", "minoring", "majoring")


def _divide(a, b) -> np.ndarray:
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return np.divide(a, b, out=np.zeros(a.shape), where=b != 0)


def threshold_counts(
    owner: str,
    y_true,
    y_pred,
    thresholds: np.ndarray,
    sample_weight=None,
    class_id=None,
    multi_label: bool = False,
    label_weights=None,
) -> dict[str, np.ndarray]:
    """The weighted counts "tp", "fp", "tn", "fn" of a batch at each threshold (a
    prediction is positive above it): one per threshold, or [thresholds, labels] with
    `multi_label` (y_pred of rank 2)."""
    t, p = _matched(np.asarray(y_true), np.asarray(y_pred, dtype=np.float64))
    if t.shape != p.shape:
        raise ValueError(f"{owner}: y_true shape {t.shape} and y_pred shape {p.shape} do not match")
    w = np.ones(p.shape)
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.ndim == p.ndim + 1 and w.shape[-1:] == (1,):
            w = w[..., 0]
        w = w.reshape(w.shape + (1,) * (p.ndim - w.ndim))
        try:
            w = np.broadcast_to(w, p.shape)
        except ValueError:
            raise ValueError(
                f"{owner}: sample_weight shape {np.shape(sample_weight)} does not fit predictions of shape {p.shape}"
            ) from None
    if class_id is not None:
        if p.ndim < 2:
            raise ValueError(f"{owner}: with class_id, y_pred must have shape (samples, classes), got shape {p.shape}")
        t, p, w = t[..., class_id, None], p[..., class_id, None], w[..., class_id, None]
    if label_weights is not None and not multi_label:
        w = w * np.broadcast_to(np.asarray(label_weights, dtype=np.float64), p.shape)
    if multi_label:
        if p.ndim != 2:
            raise ValueError(f"{owner}: with multi_label, y_pred must have rank 2, got shape {p.shape}")
        t, p, w = t[None], p[None], w[None]
        sum_axes = 1
    else:
        t, p, w = t.reshape(1, -1), p.reshape(1, -1), w.reshape(1, -1)
        sum_axes = 1
    truth = t.astype(bool)
    positive = p > thresholds.reshape((-1,) + (1,) * (p.ndim - 1))
    return {
        "tp": np.where(truth & positive, w, 0.0).sum(sum_axes),
        "fp": np.where(~truth & positive, w, 0.0).sum(sum_axes),
        "tn": np.where(~truth & ~positive, w, 0.0).sum(sum_axes),
        "fn": np.where(truth & ~positive, w, 0.0).sum(sum_axes),
    }


class AUC(Metric):
    """The area under the ROC curve (`curve="ROC"`) or the precision-recall curve
    (`curve="PR"`), by a Riemann sum over `num_thresholds` thresholds spread evenly over
    [0, 1] (or the given `thresholds`, with 0 and 1 added). `summation_method`
    "interpolation" uses trapezoids (for PR, the interpolation of Davis and Goadrich),
    "minoring" and "majoring" the lower or upper step. `multi_label` keeps one curve per
    label column and averages their areas (weighted by `label_weights`); otherwise all
    labels are pooled, each weighted by `label_weights`. `from_logits` applies a sigmoid.

    >>> round(AUC()([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 4)
    0.75
    """

    def __init__(
        self,
        num_thresholds: int = 200,
        curve: str = "ROC",
        summation_method: str = "interpolation",
        name: str | None = None,
        thresholds=None,
        multi_label: bool = False,
        num_labels: int | None = None,
        label_weights=None,
        from_logits: bool = False,
    ):
        curve_key = str(curve).upper()
        if curve_key not in _CURVES:
            raise ValueError(f"AUC: curve must be one of {_CURVES}, got {curve!r}")
        method = str(summation_method).lower()
        if method not in _SUMMATIONS:
            raise ValueError(f"AUC: summation_method must be one of {_SUMMATIONS}, got {summation_method!r}")
        self._init_from_thresholds = thresholds is not None
        if thresholds is not None:
            inner = sorted(float(x) for x in thresholds)
            if any(not 0.0 <= x <= 1.0 for x in inner):
                raise ValueError(f"AUC: thresholds must lie in [0, 1], got {thresholds!r}")
            self.num_thresholds = len(inner) + 2
        else:
            if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int) or num_thresholds <= 1:
                raise ValueError(f"AUC: num_thresholds must be an integer > 1, got {num_thresholds!r}")
            self.num_thresholds = num_thresholds
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        self._thresholds = np.array([0.0 - _EPSILON, *inner, 1.0 + _EPSILON])
        if num_labels and not multi_label:
            raise ValueError("AUC: num_labels is needed only when multi_label is True")
        self.curve = curve_key
        self.summation_method = method
        self.multi_label = bool(multi_label)
        self.num_labels = num_labels
        self.label_weights = None if label_weights is None else np.asarray(label_weights, dtype=np.float64)
        self.from_logits = bool(from_logits)
        super().__init__(name)
        self.reset_state()

    @property
    def thresholds(self) -> list[float]:
        return self._thresholds.tolist()

    def reset_state(self) -> None:
        shape = (self.num_thresholds, self.num_labels) if self.multi_label and self.num_labels else None
        if not self.multi_label:
            shape = (self.num_thresholds,)
        zeros = None if shape is None else np.zeros(shape)
        self.true_positives = self.false_positives = self.true_negatives = self.false_negatives = zeros

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        p = np.asarray(y_pred, dtype=np.float64)
        if self.from_logits:
            p = 1.0 / (1.0 + np.exp(-p))
        counts = threshold_counts(
            self.name,
            y_true,
            p,
            self._thresholds,
            sample_weight,
            multi_label=self.multi_label,
            label_weights=None if self.multi_label else self.label_weights,
        )
        if self.true_positives is None or self.true_positives.shape != counts["tp"].shape:
            if self.true_positives is not None:
                raise ValueError(
                    f"{self.name}: expected {self.true_positives.shape[-1]} labels, got {counts['tp'].shape[-1]}"
                )
            self.true_positives = self.false_positives = self.true_negatives = self.false_negatives = 0.0
        self.true_positives = self.true_positives + counts["tp"]
        self.false_positives = self.false_positives + counts["fp"]
        self.true_negatives = self.true_negatives + counts["tn"]
        self.false_negatives = self.false_negatives + counts["fn"]

    def _by_label(self, terms: np.ndarray) -> float:
        if not self.multi_label:
            return float(terms.sum())
        per_label = terms.sum(0)
        if self.label_weights is None:
            return float(per_label.mean())
        total = self.label_weights.sum()
        return float((per_label * self.label_weights).sum() / total) if total else 0.0

    def _interpolated_pr(self) -> float:
        tp, fp, fn = self.true_positives, self.false_positives, self.false_negatives
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = _divide(dtp, np.maximum(dp, 0.0))
        intercept = tp[1:] - slope * p[1:]
        ratio = np.where((p[:-1] > 0) & (p[1:] > 0), _divide(p[:-1], np.maximum(p[1:], 0.0)), 1.0)
        with np.errstate(divide="ignore"):
            log_ratio = np.log(np.where(ratio > 0, ratio, 1.0))
        terms = _divide(slope * (dtp + intercept * log_ratio), np.maximum(tp[1:] + fn[1:], 0.0))
        return self._by_label(terms)

    def result(self) -> float:
        if self.true_positives is None:
            return 0.0
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._interpolated_pr()
        tp, fp, tn, fn = self.true_positives, self.false_positives, self.true_negatives, self.false_negatives
        recall = _divide(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide(fp, fp + tn), recall
        else:
            x, y = recall, _divide(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = np.minimum(y[:-1], y[1:])
        else:
            heights = np.maximum(y[:-1], y[1:])
        return self._by_label((x[:-1] - x[1:]) * heights)

    def get_config(self) -> dict:
        config = {
            "name": self.name,
            "num_thresholds": self.num_thresholds,
            "curve": self.curve,
            "summation_method": self.summation_method,
            "multi_label": self.multi_label,
            "num_labels": self.num_labels,
            "label_weights": None if self.label_weights is None else self.label_weights.tolist(),
            "from_logits": self.from_logits,
        }
        if self._init_from_thresholds:
            config["thresholds"] = self.thresholds[1:-1]
        return config
