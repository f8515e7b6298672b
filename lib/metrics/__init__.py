"""Metrics, Keras style: stateful objects that accumulate over batches.

`update_state(y_true, y_pred, sample_weight=None)` adds a batch,
`result()` gives the value so far as a float, `reset_state()` starts over.
They run in NumPy float64 and never join a tape.

>>> import tapeflow as tp
>>> m = tp.metrics.SparseCategoricalAccuracy()
>>> m.update_state([0, 1], [[0.9, 0.1], [0.8, 0.2]])
>>> m.update_state([1], [[0.3, 0.7]])
>>> round(m.result(), 4), m.name
(0.6667, 'sparse_categorical_accuracy')

The string "accuracy" (or "acc") gets an `AutoAccuracy`, which picks the
accuracy that fits the data on its first update, as Keras's `compile` does:
binary accuracy when predictions have one column (or the loss is a binary
cross-entropy), sparse categorical accuracy when labels are integer class ids
of shape [batch] (or [batch, 1]) against predictions [batch, classes], and
categorical accuracy (argmax against argmax) otherwise.

>>> acc = tp.metrics.get("accuracy")
>>> acc.update_state([2, 0], [[0.1, 0.2, 0.7], [0.5, 0.4, 0.1]])
>>> acc.result(), acc.resolved
(1.0, 'sparse_categorical_accuracy')
"""

from tapeflow.metrics.accuracy_metrics import (
    Accuracy,
    AutoAccuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
)
from tapeflow.metrics.auc import AUC
from tapeflow.metrics.confusion_metrics import (
    FalseNegatives,
    FalsePositives,
    Precision,
    Recall,
    TrueNegatives,
    TruePositives,
)
from tapeflow.metrics.constrained_metrics import (
    PrecisionAtRecall,
    RecallAtPrecision,
    SensitivityAtSpecificity,
    SpecificityAtSensitivity,
)
from tapeflow.metrics.correlation_metrics import (
    ConcordanceCorrelation,
    PearsonCorrelation,
    concordance_correlation,
    pearson_correlation,
)
from tapeflow.metrics.error_metrics import (
    CosineSimilarity,
    LogCoshError,
    MeanSquaredLogarithmicError,
    R2Score,
    RootMeanSquaredError,
    Sum,
)
from tapeflow.metrics.f_score_metrics import F1Score, FBetaScore
from tapeflow.metrics.functions import (
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    sparse_categorical_accuracy,
    sparse_top_k_categorical_accuracy,
    top_k_categorical_accuracy,
)
from tapeflow.metrics.hinge_metrics import CategoricalHinge, Hinge, SquaredHinge
from tapeflow.metrics.iou_metrics import BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU
from tapeflow.metrics.lookup import deserialize, get, serialize
from tapeflow.metrics.loss_functions import (
    binary_crossentropy,
    binary_focal_crossentropy,
    categorical_crossentropy,
    categorical_focal_crossentropy,
    categorical_hinge,
    hinge,
    huber,
    kl_divergence,
    log_cosh,
    mean_squared_logarithmic_error,
    poisson,
    sparse_categorical_crossentropy,
    squared_hinge,
)
from tapeflow.metrics.metric import Metric
from tapeflow.metrics.probabilistic_metrics import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    KLDivergence,
    Poisson,
    SparseCategoricalCrossentropy,
)
from tapeflow.metrics.reduction_metrics import Mean, MeanMetricWrapper
from tapeflow.metrics.regression_metrics import MeanAbsoluteError, MeanAbsolutePercentageError, MeanSquaredError

__all__ = [
    "AUC",
    "Accuracy",
    "AutoAccuracy",
    "BinaryAccuracy",
    "BinaryCrossentropy",
    "BinaryIoU",
    "CategoricalAccuracy",
    "CategoricalCrossentropy",
    "CategoricalHinge",
    "ConcordanceCorrelation",
    "CosineSimilarity",
    "F1Score",
    "FBetaScore",
    "FalseNegatives",
    "FalsePositives",
    "Hinge",
    "IoU",
    "KLDivergence",
    "LogCoshError",
    "Mean",
    "MeanAbsoluteError",
    "MeanAbsolutePercentageError",
    "MeanIoU",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "MeanSquaredLogarithmicError",
    "Metric",
    "OneHotIoU",
    "OneHotMeanIoU",
    "PearsonCorrelation",
    "Poisson",
    "Precision",
    "PrecisionAtRecall",
    "R2Score",
    "Recall",
    "RecallAtPrecision",
    "RootMeanSquaredError",
    "SensitivityAtSpecificity",
    "SparseCategoricalAccuracy",
    "SparseCategoricalCrossentropy",
    "SparseTopKCategoricalAccuracy",
    "SpecificityAtSensitivity",
    "SquaredHinge",
    "Sum",
    "TopKCategoricalAccuracy",
    "TrueNegatives",
    "TruePositives",
    "accuracy",
    "binary_accuracy",
    "binary_crossentropy",
    "binary_focal_crossentropy",
    "categorical_accuracy",
    "categorical_crossentropy",
    "categorical_focal_crossentropy",
    "categorical_hinge",
    "concordance_correlation",
    "deserialize",
    "get",
    "hinge",
    "huber",
    "kl_divergence",
    "log_cosh",
    "mean_absolute_error",
    "mean_absolute_percentage_error",
    "mean_squared_error",
    "mean_squared_logarithmic_error",
    "pearson_correlation",
    "poisson",
    "serialize",
    "sparse_categorical_accuracy",
    "sparse_categorical_crossentropy",
    "sparse_top_k_categorical_accuracy",
    "squared_hinge",
    "top_k_categorical_accuracy",
]
