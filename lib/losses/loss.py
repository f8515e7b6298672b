"""The Loss base class and the reduction of weighted per-sample losses."""

from __future__ import annotations

from tapeflow.ops.array import expand_dims, squeeze
from tapeflow.ops.core import ones_like
from tapeflow.ops.math import cast
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

EPSILON = 1e-7  # Keras's backend.epsilon(): how far probabilities are kept from 0 and 1


REDUCTIONS = ("sum_over_batch_size", "sum", "mean_with_sample_weight", "none")


def _predictions(name: str, y_pred) -> Tensor:
    """Predictions as floats of at least 32 bits: losses compute in float32 under mixed precision."""
    y_pred = as_tensor(y_pred, name=name)
    return y_pred if y_pred.dtype.kind == "f" and y_pred.dtype.bits >= 32 else cast(y_pred, "float32")


# ----------------------------------------------------------------- classes
def _weighted(owner: str, losses: Tensor, sample_weight) -> tuple[Tensor, Tensor | None]:
    if sample_weight is None:
        return losses, None
    w = as_tensor(sample_weight, name=owner)
    w = cast(w, losses.dtype)
    if w.ndim == losses.ndim + 1 and w.shape[-1:] == (1,):
        w = squeeze(w, -1)
    while w.ndim < losses.ndim:
        w = expand_dims(w, -1)
    fits = _fits(w.shape, losses.shape)
    if not fits:
        raise ValueError(
            f"{owner}: sample_weight shape {as_tensor(sample_weight).shape} does not fit the per-sample "
            f"loss shape {losses.shape}"
        )
    return losses * w, w


def _fits(weights: tuple, losses: tuple) -> bool:
    """Whether weights of this shape broadcast to the losses' shape; None (a size known only
    when the graph runs, in a functional model's definition) fits any size."""
    if len(weights) > len(losses):
        return False
    return all(w in (1, None) or n is None or w == n for w, n in zip(weights[::-1], losses[::-1], strict=False))


def reduce_weighted(losses: Tensor, sample_weight=None, reduction: str = "sum_over_batch_size", owner: str = "loss"):
    """Weight per-sample losses and reduce them.

    "sum_over_batch_size" divides the weighted sum by the number of losses,
    "mean_with_sample_weight" by the sum of the weights, "sum" keeps the sum
    and "none" returns the weighted losses.

    >>> import tapeflow as tp
    >>> float(reduce_weighted(tp.tensor([1.0, 3.0]), [1.0, 0.0]))
    0.5
    """
    losses, w = _weighted(owner, losses, sample_weight)
    if reduction in (None, "none"):
        return losses
    total = reduce_sum(losses)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and w is not None:
        return total / reduce_sum(w * ones_like(losses))
    if any(d is None for d in losses.shape):  # sizes known when the graph runs
        return total / reduce_sum(ones_like(losses))
    return total / max(losses.size, 1)


class Loss:
    """Base class: subclasses give per-sample losses in `call(y_true, y_pred)`."""

    def __init__(self, name: str | None = None, reduction: str = "sum_over_batch_size"):
        if reduction not in REDUCTIONS and reduction is not None:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.name = name or type(self).__name__
        self.reduction = reduction

    def call(self, y_true, y_pred) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement call(y_true, y_pred)")

    def __call__(self, y_true, y_pred, sample_weight=None) -> Tensor:
        owner = type(self).__name__
        y_true, y_pred = as_tensor(y_true, name=owner), _predictions(owner, y_pred)
        return reduce_weighted(self.call(y_true, y_pred), sample_weight, self.reduction, owner)

    def get_config(self) -> dict:
        return {"name": self.name, "reduction": self.reduction}

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"
