"""Losses, Keras style: functions give one loss per sample, classes reduce them.

A loss class called as `loss(y_true, y_pred, sample_weight=None)` returns the
weighted per-sample losses summed and divided by their count (the reduction
"sum_over_batch_size"). Probabilities are clipped to [1e-7, 1 - 1e-7] before
their log is taken; with `from_logits=True` the stable logit forms are used.

>>> import tapeflow as tp
>>> loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
>>> round(float(loss([0, 1], tp.tensor([[0.0, 0.0], [0.0, 0.0]]))), 4)
0.6931
>>> tp.losses.mean_squared_error([[1.0, 2.0]], [[1.0, 4.0]]).numpy().tolist()
[2.0]
"""

from tapeflow.losses.loss import Loss, reduce_weighted
from tapeflow.losses.losses import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    Huber,
    LossFunctionWrapper,
    MeanAbsoluteError,
    MeanSquaredError,
    SparseCategoricalCrossentropy,
    binary_crossentropy,
    categorical_crossentropy,
    get,
    huber,
    mean_absolute_error,
    mean_squared_error,
    sparse_categorical_crossentropy,
)

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "Huber",
    "Loss",
    "LossFunctionWrapper",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "binary_crossentropy",
    "categorical_crossentropy",
    "get",
    "huber",
    "mean_absolute_error",
    "mean_squared_error",
    "reduce_weighted",
    "sparse_categorical_crossentropy",
]
