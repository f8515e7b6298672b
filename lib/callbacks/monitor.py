"""What several callbacks share: watching a logged value for improvement, and setting the learning rate."""

from __future__ import annotations

import math
import warnings


def _maximized(monitor: str) -> bool:
    """Whether `mode="auto"` treats `monitor` as a quantity that improves upward (accuracy, AUC, ...)."""
    name = monitor.removeprefix("val_")
    return name.endswith(("acc", "accuracy", "auc", "precision", "recall", "f1_score", "fbeta_score"))


class _Monitor:
    """Reads a logged quantity and says whether a value beats a reference by more than `min_delta`."""

    def __init__(self, owner: str, monitor: str, mode: str, min_delta: float = 0.0):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"{owner}: mode must be 'auto', 'min' or 'max', got {mode!r}")
        if mode == "auto":
            mode = "max" if _maximized(monitor) else "min"
        self.owner, self.name, self.mode = owner, monitor, mode
        self.min_delta = abs(float(min_delta))

    @property
    def worst(self) -> float:
        return math.inf if self.mode == "min" else -math.inf

    def improved(self, current: float, reference: float) -> bool:
        if self.mode == "min":
            return current < reference - self.min_delta
        return current > reference + self.min_delta

    def read(self, logs) -> float | None:
        """The monitored value in `logs`, or None (with a warning naming the logged keys)."""
        logs = logs or {}
        if self.name not in logs:
            warnings.warn(
                f"{self.owner}: monitor {self.name!r} is not in the logs (available: {', '.join(logs) or 'none'}); "
                "pass validation_data to fit for 'val_' quantities, or choose another monitor",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        return float(logs[self.name])


def _settable_learning_rate(owner: str, model) -> float:
    """The optimizer's current learning rate, checking that it is a plain number a callback may replace."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise RuntimeError(f"{owner}: the model has no optimizer; call model.compile(...) first")
    if callable(getattr(optimizer, "_learning_rate", None)):
        raise TypeError(
            f"{owner}: the optimizer's learning rate is a schedule ({optimizer._learning_rate!r}), which sets the "
            "rate itself; create the optimizer with a float learning_rate to let this callback change it"
        )
    return float(optimizer.learning_rate)
