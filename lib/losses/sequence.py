"""The connectionist temporal classification (CTC) loss for unaligned label sequences."""

from __future__ import annotations

from tapeflow.losses.loss import _predictions
from tapeflow.losses.losses import LossFunctionWrapper, register
from tapeflow.ops.creation import ones
from tapeflow.ops.math import cast, not_equal
from tapeflow.ops.nn import ctc_loss
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


def ctc(y_true, y_pred) -> Tensor:
    """CTC loss per sequence: integer labels `y_true` [batch, max_length] (0 pads them and
    is the blank class) against logits `y_pred` [batch, time, classes], every time step used.

    >>> import tapeflow as tp
    >>> [round(x, 4) for x in ctc(tp.tensor([[1]]), tp.zeros((1, 2, 2))).numpy().tolist()]
    [0.2877]
    """
    labels = as_tensor(y_true, name="ctc")
    logits = _predictions("ctc", y_pred)
    if labels.ndim != 2:
        raise ValueError(f"ctc: y_true must have shape (batch_size, max_length), got {labels.shape}")
    if logits.ndim != 3:
        raise ValueError(f"ctc: y_pred must have shape (batch_size, max_length, num_classes), got {logits.shape}")
    labels = cast(labels, "int32")
    label_length = cast(reduce_sum(cast(not_equal(labels, 0), "int32"), -1), "int32")
    input_length = ones((logits.shape[0],), dtype="int32") * logits.shape[1]
    return ctc_loss(labels, logits, label_length, input_length, mask_index=0)


class CTC(LossFunctionWrapper):
    """CTC loss (Graves et al.) averaged over the batch.

    >>> import tapeflow as tp
    >>> round(float(CTC()(tp.tensor([[1]]), tp.zeros((1, 2, 2)))), 4)
    0.2877
    """

    def __init__(self, reduction: str = "sum_over_batch_size", name: str = "ctc"):
        super().__init__(ctc, name, reduction)


register((CTC,), (ctc,))
