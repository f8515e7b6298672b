"""Probabilistic losses beyond cross-entropy: Kullback-Leibler divergence, Poisson,
the focal cross-entropies and the generalized cross-entropy."""

from __future__ import annotations

from tapeflow.losses.loss import EPSILON, _predictions
from tapeflow.losses.losses import LossFunctionWrapper, _check_unit_interval, _class_ids, _matched, register
from tapeflow.ops.array import one_hot, squeeze
from tapeflow.ops.math import cast, clip, log
from tapeflow.ops.math import pow as tpow
from tapeflow.ops.nn import sigmoid, softmax
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


def _axis(name: str, axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ValueError(f"{name}: axis must be an int, got {axis!r}")
    return axis


# ------------------------------------------------------- per-sample losses
def kl_divergence(y_true, y_pred) -> Tensor:
    """sum(y_true * log(y_true / y_pred)) over the last axis, both clipped to [1e-7, 1].

    >>> [round(x, 4) for x in kl_divergence([[0.5, 0.5]], [[0.25, 0.75]]).numpy().tolist()]
    [0.1438]
    """
    y_true, y_pred = _matched("kl_divergence", y_true, y_pred)
    y_true, y_pred = clip(y_true, EPSILON, 1.0), clip(y_pred, EPSILON, 1.0)
    return reduce_sum(y_true * log(y_true / y_pred), -1)


def poisson(y_true, y_pred) -> Tensor:
    """mean(y_pred - y_true * log(y_pred + 1e-7)) over the last axis.

    >>> [round(x, 4) for x in poisson([[1.0]], [[1.0]]).numpy().tolist()]
    [1.0]
    """
    y_true, y_pred = _matched("poisson", y_true, y_pred)
    return mean(y_pred - y_true * log(y_pred + EPSILON), -1)


def binary_focal_crossentropy(
    y_true,
    y_pred,
    apply_class_balancing: bool = False,
    alpha: float = 0.25,
    gamma: float = 2.0,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
) -> Tensor:
    """Binary cross-entropy scaled by (1 - p_t)^gamma, so confident hits count less;
    `apply_class_balancing` weighs positives by alpha and negatives by 1 - alpha.

    >>> [round(x, 4) for x in binary_focal_crossentropy([[1.0, 0.0]], [[0.5, 0.5]]).numpy().tolist()]
    [0.1733]
    """
    name = "binary_focal_crossentropy"
    y_true, y_pred = _matched(name, y_true, y_pred)
    _check_unit_interval(name, y_true)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        y_pred = sigmoid(y_pred)
    p = clip(y_pred, EPSILON, 1.0 - EPSILON)
    bce = -(y_true * log(p) + (1.0 - y_true) * log(1.0 - p))
    p_t = y_true * y_pred + (1.0 - y_true) * (1.0 - y_pred)
    focal = tpow(1.0 - p_t, float(gamma)) * bce
    if apply_class_balancing:
        focal = (y_true * alpha + (1.0 - y_true) * (1.0 - alpha)) * focal
    return mean(focal, _axis(name, axis))


def categorical_focal_crossentropy(
    y_true,
    y_pred,
    alpha: float = 0.25,
    gamma: float = 2.0,
    from_logits: bool = False,
    label_smoothing: float = 0.0,
    axis: int = -1,
) -> Tensor:
    """Categorical cross-entropy with each class's term scaled by alpha * (1 - p)^gamma.

    >>> [round(x, 4) for x in categorical_focal_crossentropy([[0.0, 1.0]], [[0.5, 0.5]]).numpy().tolist()]
    [0.0433]
    """
    name = "categorical_focal_crossentropy"
    axis = _axis(name, axis)
    y_pred = _predictions(name, y_pred)
    y_true = cast(as_tensor(y_true, name=name), y_pred.dtype)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{name}: y_true shape {y_true.shape} and y_pred shape {y_pred.shape} do not match")
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / y_true.shape[-1]
    if from_logits:
        y_pred = softmax(y_pred, axis)
    output = clip(y_pred / reduce_sum(y_pred, axis, keepdims=True), EPSILON, 1.0 - EPSILON)
    terms = alpha * tpow(1.0 - output, float(gamma)) * (-y_true * log(output))
    return reduce_sum(terms, axis)


def categorical_generalized_cross_entropy(y_true, y_pred, q: float) -> Tensor:
    """(1 - p^q) / q, where p is the probability y_pred gives the integer class y_true;
    q in (0, 1) moves it from cross-entropy (q near 0) toward absolute error (q near 1).

    >>> categorical_generalized_cross_entropy([1], [[0.75, 0.25]], q=0.5).numpy().tolist()
    [1.0]
    """
    name = "categorical_generalized_cross_entropy"
    y_pred = _predictions(name, y_pred)
    labels = as_tensor(y_true, name=name)
    if labels.ndim == y_pred.ndim and labels.shape[-1:] == (1,):
        labels = squeeze(labels, -1)
    if labels.shape != y_pred.shape[:-1]:
        raise ValueError(
            f"{name}: y_true shape {as_tensor(y_true).shape} does not match y_pred shape {y_pred.shape}: "
            f"expected class ids of shape {y_pred.shape[:-1]}"
        )
    labels = _class_ids(name, labels, y_pred.shape[-1])
    p = reduce_sum(y_pred * one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype.name), -1)
    return (1.0 - tpow(p, float(q))) / q


# ----------------------------------------------------------------- classes
class KLDivergence(LossFunctionWrapper):
    """Kullback-Leibler divergence of y_pred from y_true.

    >>> round(float(KLDivergence()([[0.5, 0.5]], [[0.25, 0.75]])), 4)
    0.1438
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "kl_divergence"):
        super().__init__(kl_divergence, name, reduction)


class Poisson(LossFunctionWrapper):
    """Poisson loss: mean(y_pred - y_true * log(y_pred)).

    >>> round(float(Poisson()([[1.0]], [[1.0]])), 4)
    1.0
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "poisson"):
        super().__init__(poisson, name, reduction)


class BinaryFocalCrossentropy(LossFunctionWrapper):
    """Binary focal cross-entropy (Lin et al.): binary cross-entropy that down-weights
    well-classified examples by (1 - p_t)^gamma.

    >>> round(float(BinaryFocalCrossentropy(gamma=2.0)([[1.0, 0.0]], [[0.5, 0.5]])), 4)
    0.1733
    """

    def __init__(
        self,
        apply_class_balancing: bool = False,
        alpha: float = 0.25,
        gamma: float = 2.0,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "binary_focal_crossentropy",
    ):
        super().__init__(
            binary_focal_crossentropy,
            name,
            reduction,
            apply_class_balancing=bool(apply_class_balancing),
            alpha=alpha,
            gamma=gamma,
            from_logits=bool(from_logits),
            label_smoothing=label_smoothing,
            axis=axis,
        )


class CategoricalFocalCrossentropy(LossFunctionWrapper):
    """Categorical focal cross-entropy for one-hot (or soft) labels.

    >>> round(float(CategoricalFocalCrossentropy()([[0.0, 1.0]], [[0.5, 0.5]])), 4)
    0.0433
    """

    def __init__(
        self,
        alpha: float = 0.25,
        gamma: float = 2.0,
        from_logits: bool = False,
        label_smoothing: float = 0.0,
        axis: int = -1,
        reduction: str = "sum_over_batch_size",
        name: str = "categorical_focal_crossentropy",
    ):
        super().__init__(
            categorical_focal_crossentropy,
            name,
            reduction,
            alpha=alpha,
            gamma=gamma,
            from_logits=bool(from_logits),
            label_smoothing=label_smoothing,
            axis=axis,
        )


class CategoricalGeneralizedCrossEntropy(LossFunctionWrapper):
    """Generalized cross-entropy (Zhang and Sabuncu) for integer labels, robust to
    noisy labels; `q` in (0, 1).

    >>> float(CategoricalGeneralizedCrossEntropy(q=0.5)([1], [[0.75, 0.25]]))
    1.0
    """

    def __init__(
        self,
        q: float = 0.5,
        reduction: str = "sum_over_batch_size",
        name: str = "categorical_generalized_cross_entropy",
    ):
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 < q < 1:
            raise ValueError(f"CategoricalGeneralizedCrossEntropy: q must be in (0, 1), got {q!r}")
        super().__init__(categorical_generalized_cross_entropy, name, reduction, q=q)


CLASSES = (
    KLDivergence,
    Poisson,
    BinaryFocalCrossentropy,
    CategoricalFocalCrossentropy,
    CategoricalGeneralizedCrossEntropy,
)
FUNCTIONS = (
    kl_divergence,
    poisson,
    binary_focal_crossentropy,
    categorical_focal_crossentropy,
    categorical_generalized_cross_entropy,
)
register(CLASSES, FUNCTIONS, {"kld": KLDivergence, "kullback_leibler_divergence": KLDivergence})
