"""Accuracy metrics: exact, binary, categorical, sparse and top-k, and the `AutoAccuracy` that `"accuracy"` names."""

from __future__ import annotations

import numpy as np

from tapeflow import losses, serialization
from tapeflow.metrics.functions import (
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
    sparse_top_k_categorical_accuracy,
    top_k_categorical_accuracy,
)
from tapeflow.metrics.metric import Metric, _snake
from tapeflow.metrics.reduction_metrics import Mean, MeanMetricWrapper, per_sample


class Accuracy(MeanMetricWrapper):
    """How often y_pred equals y_true exactly (for class ids already decided).

    >>> Accuracy()([1, 2, 3, 4], [0, 2, 3, 4])
    0.75
    """

    def __init__(self, name: str = "accuracy"):
        super().__init__(accuracy, name)


class BinaryAccuracy(MeanMetricWrapper):
    """How often (y_pred > threshold) matches the 0/1 labels.

    >>> BinaryAccuracy()([[1], [1], [0], [0]], [[0.98], [1], [0], [0.6]])
    0.75
    """

    def __init__(self, name: str = "binary_accuracy", threshold: float = 0.5):
        super().__init__(binary_accuracy, name, threshold=float(threshold))


class CategoricalAccuracy(MeanMetricWrapper):
    """How often argmax(y_pred) matches argmax of the one-hot labels.

    >>> CategoricalAccuracy()([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, name: str = "categorical_accuracy"):
        super().__init__(categorical_accuracy, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often argmax(y_pred) matches the integer class ids.

    >>> SparseCategoricalAccuracy()([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, name: str = "sparse_categorical_accuracy"):
        super().__init__(sparse_categorical_accuracy, name)


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the one-hot label's class is among the k highest predictions.

    >>> TopKCategoricalAccuracy(k=1)([[0, 0, 1], [0, 1, 0]], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, k: int = 5, name: str = "top_k_categorical_accuracy"):
        super().__init__(top_k_categorical_accuracy, name, k=int(k))


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the integer class id is among the k highest predictions.

    >>> SparseTopKCategoricalAccuracy(k=1)([2, 1], [[0.1, 0.9, 0.8], [0.05, 0.95, 0]])
    0.5
    """

    def __init__(self, k: int = 5, name: str = "sparse_top_k_categorical_accuracy"):
        super().__init__(sparse_top_k_categorical_accuracy, name, k=int(k))


_ACCURACY_FNS = {
    "binary_accuracy": binary_accuracy,
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
}


class AutoAccuracy(Mean):
    """The accuracy that fits the labels and predictions, chosen on the first
    update (see the module docstring); `resolved` names the choice.

    `loss`, if given (a tp.losses Loss or its Keras name), decides instead:
    binary cross-entropy gives binary accuracy (threshold 0 for logits, so
    multi-label outputs are scored per label), sparse categorical
    cross-entropy gives sparse categorical accuracy, and categorical
    cross-entropy categorical accuracy. The choice survives `reset_state`.

    >>> acc = AutoAccuracy(loss="binary_crossentropy")
    >>> acc([[1, 0], [1, 1]], [[0.9, 0.2], [0.4, 0.8]]), acc.resolved
    (0.75, 'binary_accuracy')
    """

    def __init__(self, name: str = "accuracy", loss=None):
        self.loss = loss
        self.resolved: str | None = None
        self._threshold = 0.5
        super().__init__(name)

    def _from_loss(self) -> str | None:
        loss = self.loss
        if loss is None:
            return None
        cls_name = loss if isinstance(loss, str) else type(loss).__name__
        key = _snake(cls_name).replace("_", "")
        if key in ("binarycrossentropy", "bce"):
            if getattr(loss, "get_config", None) and loss.get_config().get("from_logits"):
                self._threshold = 0.0
            return "binary_accuracy"
        if key == "sparsecategoricalcrossentropy":
            return "sparse_categorical_accuracy"
        if key == "categoricalcrossentropy":
            return "categorical_accuracy"
        return None

    @staticmethod
    def _from_shapes(y_true, y_pred) -> str:
        t, p = np.shape(y_true), np.shape(y_pred)
        if len(p) <= 1 or p[-1] == 1:
            return "binary_accuracy"
        if len(t) < len(p) or t[-1] == 1:
            return "sparse_categorical_accuracy"
        return "categorical_accuracy"

    def get_config(self) -> dict:
        loss = self.loss
        return {
            "name": self.name,
            "loss": loss if loss is None or isinstance(loss, str) else serialization.serialize(loss),
        }

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        if isinstance(config.get("loss"), dict):
            config["loss"] = losses.get(config["loss"])
        return cls(**config)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        if self.resolved is None:
            self.resolved = self._from_loss() or self._from_shapes(y_true, y_pred)
        fn = _ACCURACY_FNS[self.resolved]
        kwargs = {"threshold": self._threshold} if self.resolved == "binary_accuracy" else {}
        super().update_state(per_sample(fn, y_true, y_pred, **kwargs), sample_weight)
