"""The best value of one rate while another meets a target: sensitivity at a
specificity, precision at a recall, and their mirrors, over a grid of thresholds."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics.auc import _divide, threshold_counts
from tapeflow.metrics.metric import Metric


class _AtTarget(Metric):
    """Counts kept at `num_thresholds` thresholds spread evenly over [0, 1] (one threshold,
    0.5, when num_thresholds is 1), optionally for column `class_id` only."""

    _target = ""

    def __init__(self, value, num_thresholds: int = 200, class_id: int | None = None, name: str | None = None):
        owner = type(self).__name__
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{owner}: {self._target} must be in [0, 1], got {value!r}")
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int) or num_thresholds <= 0:
            raise ValueError(f"{owner}: num_thresholds must be an integer > 0, got {num_thresholds!r}")
        self.value = value
        self.num_thresholds = num_thresholds
        self.class_id = class_id
        if num_thresholds == 1:
            self.thresholds = np.array([0.5])
        else:
            inner = [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)]
            self.thresholds = np.array([0.0, *inner, 1.0])
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        zeros = np.zeros(len(self.thresholds))
        self.true_positives = self.false_positives = self.true_negatives = self.false_negatives = zeros

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        counts = threshold_counts(self.name, y_true, y_pred, self.thresholds, sample_weight, class_id=self.class_id)
        self.true_positives = self.true_positives + counts["tp"]
        self.false_positives = self.false_positives + counts["fp"]
        self.true_negatives = self.true_negatives + counts["tn"]
        self.false_negatives = self.false_negatives + counts["fn"]

    def _rates(self) -> dict[str, np.ndarray]:
        tp, fp, tn, fn = self.true_positives, self.false_positives, self.true_negatives, self.false_negatives
        return {
            "sensitivity": _divide(tp, tp + fn),
            "specificity": _divide(tn, tn + fp),
            "precision": _divide(tp, tp + fp),
        }

    def _best(self, constrained: np.ndarray, dependent: np.ndarray) -> float:
        return float(np.max(np.where(constrained >= self.value, dependent, 0.0), initial=0.0))

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "class_id": self.class_id,
            "num_thresholds": self.num_thresholds,
            self._target: self.value,
        }


class SensitivityAtSpecificity(_AtTarget):
    """The best sensitivity (recall) among thresholds whose specificity is at least
    `specificity`.

    >>> SensitivityAtSpecificity(0.5)([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    1.0
    """

    _target = "specificity"

    def __init__(self, specificity, num_thresholds: int = 200, class_id=None, name: str | None = None):
        super().__init__(specificity, num_thresholds, class_id, name)

    def result(self) -> float:
        rates = self._rates()
        return self._best(rates["specificity"], rates["sensitivity"])


class SpecificityAtSensitivity(_AtTarget):
    """The best specificity among thresholds whose sensitivity is at least `sensitivity`.

    >>> SpecificityAtSensitivity(0.5)([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    1.0
    """

    _target = "sensitivity"

    def __init__(self, sensitivity, num_thresholds: int = 200, class_id=None, name: str | None = None):
        super().__init__(sensitivity, num_thresholds, class_id, name)

    def result(self) -> float:
        rates = self._rates()
        return self._best(rates["sensitivity"], rates["specificity"])


class PrecisionAtRecall(_AtTarget):
    """The best precision among thresholds whose recall is at least `recall`.

    >>> PrecisionAtRecall(1.0)([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.6666666666666666
    """

    _target = "recall"

    def __init__(self, recall, num_thresholds: int = 200, class_id=None, name: str | None = None):
        super().__init__(recall, num_thresholds, class_id, name)

    def result(self) -> float:
        rates = self._rates()
        return self._best(rates["sensitivity"], rates["precision"])


class RecallAtPrecision(_AtTarget):
    """The best recall among thresholds whose precision is at least `precision`.

    >>> RecallAtPrecision(1.0)([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.5
    """

    _target = "precision"

    def __init__(self, precision, num_thresholds: int = 200, class_id=None, name: str | None = None):
        super().__init__(precision, num_thresholds, class_id, name)

    def result(self) -> float:
        rates = self._rates()
        return self._best(rates["precision"], rates["sensitivity"])


CLASSES = (SensitivityAtSpecificity, SpecificityAtSensitivity, PrecisionAtRecall, RecallAtPrecision)
