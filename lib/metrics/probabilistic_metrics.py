"""Cross-entropies, Kullback-Leibler divergence and Poisson loss as metrics."""

from __future__ import annotations

import numpy as np

from tapeflow.metrics import loss_functions
from tapeflow.metrics.reduction_metrics import MeanMetricWrapper


class BinaryCrossentropy(MeanMetricWrapper):
    """Mean binary cross-entropy over every batch seen.

    >>> round(BinaryCrossentropy()([[1.0, 0.0]], [[0.5, 0.5]]), 4)
    0.6931
    """

    def __init__(self, name: str = "binary_crossentropy", from_logits: bool = False, label_smoothing: float = 0):
        super().__init__(
            loss_functions.binary_crossentropy, name, from_logits=from_logits, label_smoothing=label_smoothing
        )


class CategoricalCrossentropy(MeanMetricWrapper):
    """Mean categorical cross-entropy over every batch seen.

    >>> round(CategoricalCrossentropy()([[0.0, 1.0]], [[0.5, 0.5]]), 4)
    0.6931
    """

    def __init__(
        self,
        name: str = "categorical_crossentropy",
        from_logits: bool = False,
        label_smoothing: float = 0,
        axis: int = -1,
    ):
        super().__init__(
            loss_functions.categorical_crossentropy,
            name,
            from_logits=from_logits,
            label_smoothing=label_smoothing,
            axis=axis,
        )


class SparseCategoricalCrossentropy(MeanMetricWrapper):
    """Mean sparse categorical cross-entropy over every batch seen. Labels equal to
    `ignore_class` count as 0; with sample weights they also drop out of the mean.

    >>> round(SparseCategoricalCrossentropy()([1], [[0.5, 0.5]]), 4)
    0.6931
    """

    def __init__(
        self,
        name: str = "sparse_categorical_crossentropy",
        from_logits: bool = False,
        ignore_class: int | None = None,
        axis: int = -1,
    ):
        super().__init__(
            loss_functions.sparse_categorical_crossentropy,
            name,
            from_logits=from_logits,
            ignore_class=ignore_class,
            axis=axis,
        )

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        ignore = self._fn_kwargs["ignore_class"]
        if ignore is not None and sample_weight is not None:
            labels = np.asarray(y_true)
            values = self._fn(y_true, y_pred, **self._fn_kwargs)
            valid = (labels != ignore).reshape(values.shape).astype(np.float64)
            weights = np.asarray(sample_weight, dtype=np.float64).reshape(values.shape[: np.ndim(sample_weight)])
            weights = np.broadcast_to(weights.reshape(weights.shape + (1,) * (values.ndim - weights.ndim)), valid.shape)
            super(MeanMetricWrapper, self).update_state(values, weights * valid)
            return
        super().update_state(y_true, y_pred, sample_weight)


class KLDivergence(MeanMetricWrapper):
    """Mean Kullback-Leibler divergence over every batch seen.

    >>> round(KLDivergence()([[0.5, 0.5]], [[0.25, 0.75]]), 4)
    0.1438
    """

    def __init__(self, name: str = "kl_divergence"):
        super().__init__(loss_functions.kl_divergence, name)


class Poisson(MeanMetricWrapper):
    """Mean Poisson loss over every batch seen.

    >>> round(Poisson()([[1.0]], [[1.0]]), 4)
    1.0
    """

    def __init__(self, name: str = "poisson"):
        super().__init__(loss_functions.poisson, name)


CLASSES = (BinaryCrossentropy, CategoricalCrossentropy, SparseCategoricalCrossentropy, KLDivergence, Poisson)
