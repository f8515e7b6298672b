"""Mean squared, mean absolute and mean absolute percentage error as metrics."""

from __future__ import annotations

from tapeflow.metrics.functions import mean_absolute_error, mean_absolute_percentage_error, mean_squared_error
from tapeflow.metrics.reduction_metrics import MeanMetricWrapper


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error over every batch seen.

    >>> MeanSquaredError()([[0.0, 1.0]], [[1.0, 1.0]])
    0.5
    """

    def __init__(self, name: str = "mean_squared_error"):
        super().__init__(mean_squared_error, name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error over every batch seen.

    >>> MeanAbsoluteError()([[0.0, 1.0]], [[2.0, 1.0]])
    1.0
    """

    def __init__(self, name: str = "mean_absolute_error"):
        super().__init__(mean_absolute_error, name)


class MeanAbsolutePercentageError(MeanMetricWrapper):
    """Mean absolute percentage error over every batch seen, as Keras's metric.

    >>> MeanAbsolutePercentageError()([[2.0, 4.0]], [[1.0, 5.0]])
    37.5
    """

    def __init__(self, name: str = "mean_absolute_percentage_error"):
        super().__init__(mean_absolute_percentage_error, name)
