"""Losses of overlap and similarity: Dice and Tversky for segmentation masks, and
Circle for metric learning on embeddings."""

from __future__ import annotations

from tapeflow.losses.loss import EPSILON, _predictions, reduce_weighted
from tapeflow.losses.losses import LossFunctionWrapper, register
from tapeflow.ops.array import reshape, transpose
from tapeflow.ops.creation import eye
from tapeflow.ops.math import cast, equal, logical_and, logical_not, matmul, maximum, where
from tapeflow.ops.nn import softplus
from tapeflow.ops.reduce import logsumexp
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


def _axes(axis):
    return tuple(axis) if isinstance(axis, list) else axis


# ------------------------------------------------------- per-sample losses
def dice(y_true, y_pred, axis=None) -> Tensor:
    """1 - 2 * sum(y_true * y_pred) / (sum(y_true) + sum(y_pred)), the sums over `axis`
    (every axis when None).

    >>> round(float(dice([[1.0, 0.0]], [[1.0, 1.0]])), 4)
    0.3333
    """
    y_pred = _predictions("dice", y_pred)
    y_true = cast(as_tensor(y_true, name="dice"), y_pred.dtype)
    axis = _axes(axis)
    intersection = reduce_sum(y_true * y_pred, axis)
    return 1.0 - 2.0 * intersection / (reduce_sum(y_true, axis) + reduce_sum(y_pred, axis) + EPSILON)


def tversky(y_true, y_pred, alpha: float = 0.5, beta: float = 0.5, axis=None) -> Tensor:
    """1 - TP / (TP + alpha * FP + beta * FN) with soft counts summed over `axis`
    (every axis when None); alpha = beta = 0.5 is the Dice loss.

    >>> round(float(tversky([[1.0, 0.0]], [[1.0, 1.0]], alpha=0.5, beta=0.5)), 4)
    0.3333
    """
    y_pred = _predictions("tversky", y_pred)
    y_true = cast(as_tensor(y_true, name="tversky"), y_pred.dtype)
    axis = _axes(axis)
    intersection = reduce_sum(y_true * y_pred, axis)
    fp = reduce_sum((1.0 - y_pred) * y_true, axis)
    fn = reduce_sum(y_pred * (1.0 - y_true), axis)
    return 1.0 - intersection / (intersection + fp * alpha + fn * beta + EPSILON)


def circle(
    y_true, y_pred, ref_labels=None, ref_embeddings=None, remove_diagonal: bool = True, gamma=80, margin=0.4
) -> Tensor:
    """Circle loss (Sun et al.) of unit-norm embeddings `y_pred` [batch, dim] with integer
    labels `y_true` [batch], against `ref_embeddings` and `ref_labels` (the batch itself
    by default): positives are pulled within `margin`, negatives pushed beyond it.

    >>> import tapeflow as tp
    >>> [round(x, 3) for x in circle([0, 0, 1], tp.eye(3)).numpy().tolist()]
    [54.4, 54.4, 0.0]
    """
    y_pred = _predictions("circle", y_pred)
    labels = cast(as_tensor(y_true, name="circle"), "int32")
    refs = y_pred if ref_embeddings is None else _predictions("circle", ref_embeddings)
    ref_labels = labels if ref_labels is None else cast(as_tensor(ref_labels, name="circle"), "int32")
    if y_pred.ndim != 2 or refs.ndim != 2:
        raise ValueError(f"circle: embeddings must have shape [batch, dim], got {y_pred.shape} and {refs.shape}")
    distances = maximum(1.0 - matmul(y_pred, transpose(refs)), 0.0)
    positive = equal(reshape(labels, (-1, 1)), reshape(ref_labels, (1, -1)))
    negative = logical_not(positive)
    if remove_diagonal:
        positive = logical_and(positive, logical_not(cast(eye(labels.size, ref_labels.size), "bool")))
    pos_weights = maximum((margin + distances) * cast(positive, distances.dtype), 0.0)
    neg_weights = maximum((1.0 + margin - distances) * cast(negative, distances.dtype), 0.0)
    pos_terms = -gamma * pos_weights * (margin - distances)
    neg_terms = gamma * neg_weights * ((1.0 - margin) - distances)
    p_loss = logsumexp(where(positive, pos_terms, float("-inf")), 1)
    n_loss = logsumexp(where(negative, neg_terms, float("-inf")), 1)
    return softplus(p_loss + n_loss)


# ----------------------------------------------------------------- classes
class Dice(LossFunctionWrapper):
    """Dice loss: one minus the soft Dice coefficient over `axis` (all axes when None).

    >>> round(float(Dice()([[1.0, 0.0]], [[1.0, 1.0]])), 4)
    0.3333
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "dice", axis=None):
        super().__init__(dice, name, reduction, axis=axis)


class Tversky(LossFunctionWrapper):
    """Tversky loss: alpha weighs false positives and beta false negatives.

    >>> round(float(Tversky(alpha=0.5, beta=0.5)([[1.0, 0.0]], [[1.0, 1.0]])), 4)
    0.3333
    """

    def __init__(
        self,
        alpha: float = 0.5,
        beta: float = 0.5,
        reduction: str = "sum_over_batch_size",
        name: str = "tversky",
        axis=None,
    ):
        super().__init__(tversky, name, reduction, alpha=alpha, beta=beta, axis=axis)


class Circle(LossFunctionWrapper):
    """Circle loss over a batch of unit-norm embeddings and their integer labels. As in
    Keras, only the samples with a positive loss count in the mean.

    >>> import tapeflow as tp
    >>> round(float(Circle()([0, 0, 1], tp.eye(3))), 3)
    54.4
    """

    def __init__(
        self,
        gamma: float = 80.0,
        margin: float = 0.4,
        remove_diagonal: bool = True,
        reduction: str = "sum_over_batch_size",
        name: str = "circle",
    ):
        super().__init__(circle, name, reduction, gamma=gamma, margin=margin, remove_diagonal=remove_diagonal)

    def __call__(self, y_true, y_pred, sample_weight=None) -> Tensor:
        losses = self.call(as_tensor(y_true, name="Circle"), _predictions("Circle", y_pred))
        kept = cast(losses > 0.0, losses.dtype)
        if self.reduction == "sum_over_batch_size":
            count = reduce_sum(kept)
            kept = kept * (float(losses.size) / where(count > 0.0, count, 1.0))
        weights = kept if sample_weight is None else kept * cast(as_tensor(sample_weight), losses.dtype)
        return reduce_weighted(losses, weights, self.reduction, "Circle")


CLASSES = (Dice, Tversky, Circle)
FUNCTIONS = (dice, tversky, circle)
register(CLASSES, FUNCTIONS)
