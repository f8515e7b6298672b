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
    deserialize,
    get,
    huber,
    mean_absolute_error,
    mean_squared_error,
    serialize,
    sparse_categorical_crossentropy,
)
from tapeflow.losses.overlap import Circle, Dice, Tversky, circle, dice, tversky
from tapeflow.losses.probabilistic import (
    BinaryFocalCrossentropy,
    CategoricalFocalCrossentropy,
    CategoricalGeneralizedCrossEntropy,
    KLDivergence,
    Poisson,
    binary_focal_crossentropy,
    categorical_focal_crossentropy,
    categorical_generalized_cross_entropy,
    kl_divergence,
    poisson,
)
from tapeflow.losses.regression import (
    CategoricalHinge,
    CosineSimilarity,
    Hinge,
    LogCosh,
    MeanAbsolutePercentageError,
    MeanSquaredLogarithmicError,
    SquaredHinge,
    categorical_hinge,
    cosine_similarity,
    hinge,
    log_cosh,
    mean_absolute_percentage_error,
    mean_squared_logarithmic_error,
    squared_hinge,
)
from tapeflow.losses.sequence import CTC, ctc

__all__ = [
    "BinaryCrossentropy",
    "BinaryFocalCrossentropy",
    "CTC",
    "CategoricalCrossentropy",
    "CategoricalFocalCrossentropy",
    "CategoricalGeneralizedCrossEntropy",
    "CategoricalHinge",
    "Circle",
    "CosineSimilarity",
    "Dice",
    "Hinge",
    "Huber",
    "KLDivergence",
    "LogCosh",
    "Loss",
    "LossFunctionWrapper",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanSquaredError",
    "MeanSquaredLogarithmicError",
    "Poisson",
    "SparseCategoricalCrossentropy",
    "SquaredHinge",
    "Tversky",
    "binary_crossentropy",
    "binary_focal_crossentropy",
    "categorical_crossentropy",
    "categorical_focal_crossentropy",
    "categorical_generalized_cross_entropy",
    "categorical_hinge",
    "circle",
    "cosine_similarity",
    "ctc",
    "deserialize",
    "dice",
    "get",
    "hinge",
    "huber",
    "kl_divergence",
    "log_cosh",
    "mean_absolute_error",
    "mean_absolute_percentage_error",
    "mean_squared_error",
    "mean_squared_logarithmic_error",
    "poisson",
    "reduce_weighted",
    "serialize",
    "sparse_categorical_crossentropy",
    "squared_hinge",
    "tversky",
]
