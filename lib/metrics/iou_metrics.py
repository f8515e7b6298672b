"""Intersection-over-union metrics from a confusion matrix accumulated over batches."""

from __future__ import annotations

import numpy as np

from tapeflow.backends.common import ufunc_at
from tapeflow.metrics.metric import Metric

_EPSILON = 1e-7


class IoU(Metric):
    """Intersection over union, TP / (TP + FP + FN), for each class in `target_class_ids`,
    averaged over the classes that occurred. Labels and predictions are class ids
    (`sparse_y_true`/`sparse_y_pred`), or scores whose argmax along `axis` is taken;
    labels equal to `ignore_class` and ids outside [0, num_classes) are left out.

    >>> round(IoU(num_classes=2, target_class_ids=[0])([0, 0, 1, 1], [0, 1, 0, 1]), 4)
    0.3333
    """

    def __init__(
        self,
        num_classes: int,
        target_class_ids,
        name: str | None = None,
        ignore_class: int | None = None,
        sparse_y_true: bool = True,
        sparse_y_pred: bool = True,
        axis: int = -1,
    ):
        owner = type(self).__name__
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"{owner}: num_classes must be a positive int, got {num_classes!r}")
        target_class_ids = [int(i) for i in target_class_ids]
        if not target_class_ids or max(target_class_ids) >= num_classes or min(target_class_ids) < 0:
            raise ValueError(
                f"{owner}: target class ids {target_class_ids} must lie in [0, {num_classes}) and not be empty"
            )
        self.num_classes = num_classes
        self.target_class_ids = target_class_ids
        self.ignore_class = ignore_class
        self.sparse_y_true = bool(sparse_y_true)
        self.sparse_y_pred = bool(sparse_y_pred)
        self.axis = axis
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.total_cm = np.zeros((self.num_classes, self.num_classes))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        t, p = np.asarray(y_true), np.asarray(y_pred)
        if not self.sparse_y_true:
            t = np.argmax(t, axis=self.axis)
        if not self.sparse_y_pred:
            p = np.argmax(p, axis=self.axis)
        t, p = t.reshape(-1).astype(np.int64), p.reshape(-1).astype(np.int64)
        if t.shape != p.shape:
            raise ValueError(f"{self.name}: {t.size} labels and {p.size} predictions do not match")
        w = np.ones(t.shape) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        w = np.broadcast_to(w, t.shape)
        n = self.num_classes
        keep = (t >= 0) & (t < n) & (p >= 0) & (p < n)
        if self.ignore_class is not None:
            keep &= t != self.ignore_class
        cm = np.zeros((n, n))
        ufunc_at(np.add, cm, (t[keep], p[keep]), w[keep])
        self.total_cm = self.total_cm + cm

    def _per_class(self) -> tuple[np.ndarray, np.ndarray]:
        cm = self.total_cm
        tp = np.diag(cm)
        denominator = cm.sum(0) + cm.sum(1) - tp
        ids = self.target_class_ids
        return tp[ids], denominator[ids]

    def result(self) -> float:
        tp, denominator = self._per_class()
        valid = denominator > 1e-9
        iou = np.where(valid, tp / (denominator + _EPSILON), 0.0)
        return float(iou.sum() / (valid.sum() + _EPSILON))

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "num_classes": self.num_classes,
            "target_class_ids": self.target_class_ids,
            "ignore_class": self.ignore_class,
            "sparse_y_true": self.sparse_y_true,
            "sparse_y_pred": self.sparse_y_pred,
            "axis": self.axis,
        }


class BinaryIoU(IoU):
    """IoU of binary labels against probabilities, a prediction counting as 1 at or above
    `threshold`; `target_class_ids` picks class 0, class 1 or both (averaged).

    >>> round(BinaryIoU(target_class_ids=[1])([0, 1, 1, 1], [0.2, 0.6, 0.4, 0.9]), 4)
    0.6667
    """

    def __init__(self, target_class_ids=(0, 1), threshold: float = 0.5, name: str | None = None):
        super().__init__(2, target_class_ids, name=name)
        self.threshold = threshold

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        predicted = (np.asarray(y_pred, dtype=np.float64) >= self.threshold).astype(np.int64)
        super().update_state(y_true, predicted, sample_weight)

    def get_config(self) -> dict:
        return {"name": self.name, "target_class_ids": self.target_class_ids, "threshold": self.threshold}


class MeanIoU(IoU):
    """IoU averaged over every class.

    >>> round(MeanIoU(num_classes=2)([0, 0, 1, 1], [0, 1, 0, 1]), 4)
    0.3333
    """

    def __init__(
        self,
        num_classes: int,
        name: str | None = None,
        ignore_class: int | None = None,
        sparse_y_true: bool = True,
        sparse_y_pred: bool = True,
        axis: int = -1,
    ):
        super().__init__(num_classes, list(range(num_classes)), name, ignore_class, sparse_y_true, sparse_y_pred, axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["target_class_ids"]
        return config


class OneHotIoU(IoU):
    """IoU of one-hot labels against class scores (argmax along `axis`).

    >>> round(OneHotIoU(num_classes=2, target_class_ids=[1])([[1, 0], [0, 1]], [[0.9, 0.1], [0.2, 0.8]]), 4)
    1.0
    """

    def __init__(
        self,
        num_classes: int,
        target_class_ids,
        name: str | None = None,
        ignore_class: int | None = None,
        sparse_y_pred: bool = False,
        axis: int = -1,
    ):
        super().__init__(num_classes, target_class_ids, name, ignore_class, False, sparse_y_pred, axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["sparse_y_true"]
        return config


class OneHotMeanIoU(MeanIoU):
    """Mean IoU of one-hot labels against class scores (argmax along `axis`).

    >>> round(OneHotMeanIoU(num_classes=2)([[1, 0], [0, 1]], [[0.9, 0.1], [0.2, 0.8]]), 4)
    1.0
    """

    def __init__(
        self,
        num_classes: int,
        name: str | None = None,
        ignore_class: int | None = None,
        sparse_y_pred: bool = False,
        axis: int = -1,
    ):
        super().__init__(num_classes, name, ignore_class, False, sparse_y_pred, axis)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["sparse_y_true"]
        return config


CLASSES = (IoU, BinaryIoU, MeanIoU, OneHotIoU, OneHotMeanIoU)
