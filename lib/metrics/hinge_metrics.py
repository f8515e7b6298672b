"""The hinge losses as metrics."""

from __future__ import annotations

from tapeflow.metrics import loss_functions
from tapeflow.metrics.reduction_metrics import MeanMetricWrapper


class Hinge(MeanMetricWrapper):
    """Mean hinge loss over every batch seen (labels in {-1, 1} or {0, 1}).

    >>> Hinge()([[1.0, 0.0]], [[0.5, 0.5]])
    1.0
    """

    def __init__(self, name: str = "hinge"):
        super().__init__(loss_functions.hinge, name)


class SquaredHinge(MeanMetricWrapper):
    """Mean squared hinge loss over every batch seen.

    >>> SquaredHinge()([[1.0, 0.0]], [[0.5, 0.5]])
    1.25
    """

    def __init__(self, name: str = "squared_hinge"):
        super().__init__(loss_functions.squared_hinge, name)


class CategoricalHinge(MeanMetricWrapper):
    """Mean categorical hinge loss over every batch seen.

    >>> round(CategoricalHinge()([[0.0, 1.0]], [[0.3, 0.8]]), 4)
    0.5
    """

    def __init__(self, name: str = "categorical_hinge"):
        super().__init__(loss_functions.categorical_hinge, name)


CLASSES = (Hinge, SquaredHinge, CategoricalHinge)
