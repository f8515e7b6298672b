"""More regression metrics: cosine similarity, log-cosh and squared logarithmic error,
root mean squared error, the coefficient of determination, and a weighted sum."""

from __future__ import annotations

import warnings

import numpy as np

from tapeflow.metrics import loss_functions
from tapeflow.metrics.metric import Metric, _same_rank
from tapeflow.metrics.reduction_metrics import Mean, MeanMetricWrapper


class CosineSimilarity(MeanMetricWrapper):
    """Mean cosine similarity of labels and predictions along `axis`.

    >>> CosineSimilarity()([[0.0, 1.0]], [[0.0, 2.0]])
    1.0
    """

    def __init__(self, name: str = "cosine_similarity", axis: int = -1):
        super().__init__(loss_functions.cosine_similarity, name, axis=axis)


class LogCoshError(MeanMetricWrapper):
    """Mean log(cosh(error)) over every batch seen.

    >>> round(LogCoshError()([[0.0]], [[1.0]]), 4)
    0.4338
    """

    def __init__(self, name: str = "logcosh"):
        super().__init__(loss_functions.log_cosh, name)


class MeanSquaredLogarithmicError(MeanMetricWrapper):
    """Mean squared logarithmic error over every batch seen.

    >>> round(MeanSquaredLogarithmicError()([[0.0]], [[1.0]]), 4)
    0.4805
    """

    def __init__(self, name: str = "mean_squared_logarithmic_error"):
        super().__init__(loss_functions.mean_squared_logarithmic_error, name)


class RootMeanSquaredError(Mean):
    """The square root of the (weighted) mean squared error over every batch seen.

    >>> round(RootMeanSquaredError()([[0.0], [0.0]], [[3.0], [4.0]]) ** 2, 6)
    12.5
    """

    def __init__(self, name: str = "root_mean_squared_error"):
        super().__init__(name)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        t, p = _same_rank(self.name, y_true, y_pred)
        super().update_state(np.square(p.astype(np.float64) - t), sample_weight)

    def result(self) -> float:
        return float(np.sqrt(super().result()))


class R2Score(Metric):
    """The coefficient of determination 1 - SS_res / SS_tot of [batch, outputs] data, per
    output, aggregated by `class_aggregation` ("uniform_average", "variance_weighted_average"
    or None for one score per output); `num_regressors` > 0 gives the adjusted score.

    >>> R2Score()([[1.0], [2.0], [3.0]], [[1.0], [2.0], [4.0]])
    0.5
    """

    def __init__(self, class_aggregation="uniform_average", num_regressors: int = 0, name: str = "r2_score"):
        choices = (None, "uniform_average", "variance_weighted_average")
        if class_aggregation not in choices:
            raise ValueError(f"R2Score: class_aggregation must be one of {choices}, got {class_aggregation!r}")
        if isinstance(num_regressors, bool) or not isinstance(num_regressors, int) or num_regressors < 0:
            raise ValueError(f"R2Score: num_regressors must be an int >= 0, got {num_regressors!r}")
        self.class_aggregation = class_aggregation
        self.num_regressors = num_regressors
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.sum = self.squared_sum = self.residual = self.count = None
        self.num_samples = 0.0

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        t, p = _same_rank(self.name, y_true, y_pred)
        if t.ndim != 2:
            raise ValueError(f"R2Score: expects inputs of shape (batch_size, output_dim), got {t.shape}")
        t, p = t.astype(np.float64), p.astype(np.float64)
        w = np.ones(()) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w.ndim == 1:
            w = w[:, None]
        w = np.broadcast_to(w, t.shape)
        if self.sum is None:
            self.sum, self.squared_sum, self.residual, self.count = (np.zeros(t.shape[1]) for _ in range(4))
        elif t.shape[1] != self.sum.shape[0]:
            raise ValueError(f"R2Score: expected {self.sum.shape[0]} outputs, got {t.shape[1]}")
        self.sum = self.sum + (t * w).sum(0)
        self.squared_sum = self.squared_sum + (t * t * w).sum(0)
        self.residual = self.residual + ((t - p) ** 2 * w).sum(0)
        self.count = self.count + w.sum(0)
        self.num_samples += t.size

    def result(self):
        if self.sum is None:
            return 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            total = self.squared_sum - self.sum * (self.sum / self.count)
            scores = 1.0 - self.residual / total
        scores = np.where(np.isinf(scores), 0.0, scores)
        if self.class_aggregation == "uniform_average":
            score = scores.mean()
        elif self.class_aggregation == "variance_weighted_average":
            score = (total * scores).sum() / total.sum()
        else:
            score = scores
        n, k = self.num_samples, self.num_regressors
        if k and k > n - 1:
            warnings.warn("R2Score: more regressors than samples; giving the plain R2 score", stacklevel=2)
        elif k and k == n - 1:
            warnings.warn("R2Score: the adjusted score divides by zero; giving the plain R2 score", stacklevel=2)
        elif k:
            score = 1.0 - (1.0 - score) * (n - 1.0) / (n - k - 1.0)
        return float(score) if np.ndim(score) == 0 else np.asarray(score)

    def get_config(self) -> dict:
        return {"name": self.name, "class_aggregation": self.class_aggregation, "num_regressors": self.num_regressors}


class Sum(Metric):
    """The (weighted) sum of every value given.

    >>> s = Sum()
    >>> s.update_state([1.0, 3.0, 5.0], sample_weight=[1.0, 1.0, 0.0])
    >>> s.result()
    4.0
    """

    def __init__(self, name: str = "sum"):
        super().__init__(name)
        self.reset_state()

    def reset_state(self) -> None:
        self.total = 0.0

    def update_state(self, values, sample_weight=None) -> None:
        values = np.asarray(values, dtype=np.float64)
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            if w.ndim == values.ndim + 1 and w.shape[-1:] == (1,):
                w = w[..., 0]
            elif values.ndim == w.ndim + 1 and values.shape[-1:] == (1,):
                values = values[..., 0]
            if values.ndim > w.ndim:
                values = values.sum(axis=tuple(range(w.ndim, values.ndim)))
            try:
                values = values * np.broadcast_to(w, values.shape)
            except ValueError:
                raise ValueError(
                    f"{self.name}: sample_weight shape {w.shape} does not fit values of shape {values.shape}"
                ) from None
        self.total += float(values.sum())

    def result(self) -> float:
        return self.total


CLASSES = (CosineSimilarity, LogCoshError, MeanSquaredLogarithmicError, RootMeanSquaredError, R2Score, Sum)
