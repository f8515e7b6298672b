"""The compiled loss of a model with one or several outputs: which loss applies to each
output and with which weight, and the per-output values Keras 3 logs as "<output>_loss".

The total is sum(loss_weight_i * loss_i(y_true_i, y_pred_i, sample_weight_i)); each logged
"<output>_loss" is the unweighted loss_i, averaged over the epoch's samples. A model with
one output (or one loss among its outputs) logs only "loss".

>>> import tapeflow as tp
>>> losses = OutputLosses(["mse", "mae"], loss_weights=[1.0, 0.5], output_names=["a", "b"])
>>> y_true, y_pred = [tp.tensor([[1.0]]), tp.tensor([[2.0]])], [tp.zeros((1, 1)), tp.zeros((1, 1))]
>>> total, values = losses(y_true, y_pred)
>>> float(total), [float(v) for v in values], losses.log_names
(2.0, [1.0, 2.0], ['a_loss', 'b_loss'])
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import losses as losses_module
from tapeflow import metrics as metrics_module
from tapeflow.ops.math import add, multiply
from tapeflow.tensor import Tensor


def per_output(value, names: list[str], argument: str, where: str, shared: bool = False) -> list:
    """`value` split into one entry per output: a list or tuple in output order, a dict by
    output name (None for a name it lacks), or, for one output (or with `shared`, for
    every output), the value itself.

    >>> per_output({"b": 2}, ["a", "b"], "y", "fit"), per_output(7, ["a", "b"], "loss", "compile", shared=True)
    ([None, 2], [7, 7])
    """
    n = len(names)
    if isinstance(value, dict) and (n > 1 or set(value) <= set(names)):
        unknown = sorted(map(str, set(value) - set(names)))
        if unknown:
            raise ValueError(f"{where}: {argument} has keys {unknown} that name no output; the outputs are {names}")
        return [value.get(name) for name in names]
    if n == 1:
        return [value[0] if isinstance(value, list | tuple) and len(value) == 1 and argument != "y" else value]
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(
                f"{where}: {argument} has {len(value)} entries but the model has {n} outputs {names}; give one "
                "per output (or a dict by output name)"
            )
        return list(value)
    if shared:
        return [value] * n
    raise ValueError(
        f"{where}: the model has {n} outputs {names}, so {argument} must be a list of {n} entries or a dict by "
        f"output name, got {type(value).__name__}"
    )


def _weight(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{where}: loss_weights entries must be numbers, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: loss_weights entries must be finite, got {value!r}")
    return float(value)


class OutputLosses:
    """The losses of `compile(loss=..., loss_weights=...)`, one per output (None for an
    output left without a loss), and the trackers of their per-output values.

    Args:
        loss: one loss for every output, or a list (output order) or dict (by output name)
            of them; entries are Loss objects, Keras names or functions, or None (None
            alone: no compiled loss, the model's `add_loss` or `compute_loss` gives it).
        loss_weights: None (all 1), a number (one output), or a list or dict like `loss`.
        output_names: the outputs' names, in the order the model returns them.
    """

    def __init__(self, loss, loss_weights=None, output_names=None, where: str = "compile"):
        self.output_names = list(output_names or ["output"])
        names = self.output_names
        specs = [None] * len(names) if loss is None else per_output(loss, names, "loss", where, shared=True)
        self.losses = [None if spec is None else losses_module.get(spec) for spec in specs]
        if loss_weights is None:
            weights = [1.0] * len(names)
        elif len(names) == 1 or isinstance(loss_weights, list | tuple | dict):
            weights = per_output(loss_weights, names, "loss_weights", where)
            weights = [1.0 if w is None else _weight(w, where) for w in weights]
        else:
            raise ValueError(
                f"{where}: the model has {len(names)} outputs {names}, so loss_weights must be a list or a dict "
                f"by output name, got {loss_weights!r}"
            )
        self.weights = weights
        self.active = [i for i, loss in enumerate(self.losses) if loss is not None]
        self.log_names = [f"{names[i]}_loss" for i in self.active] if len(self.active) > 1 else []
        self.trackers = [metrics_module.Mean(name=name) for name in self.log_names]

    def __call__(self, y_true: list, y_pred: list, sample_weight: list | None = None) -> tuple[Tensor, list]:
        """(weighted total, the unweighted loss of each output that has one)."""
        if len(y_pred) != len(self.output_names):
            raise ValueError(
                f"compile: the loss was set up for {len(self.output_names)} outputs {self.output_names}, but the "
                f"model returned {len(y_pred)}; give compile one loss per output, as a list or a dict"
            )
        total, values = None, []
        for i in self.active:
            if y_true[i] is None:
                raise ValueError(f"fit: no target (y) given for output '{self.output_names[i]}', which has a loss")
            weights = None if sample_weight is None else sample_weight[i]
            value = self.losses[i](y_true[i], y_pred[i], sample_weight=weights)
            values.append(value)
            term = value if self.weights[i] == 1.0 else multiply(value, self.weights[i])
            total = term if total is None else add(total, term)
        return total, values

    # ------------------------------------------------------------- tracking
    def update(self, values: list, batch_size: int | None) -> None:
        """Add one batch's per-output values (weighted by its size, as Keras does)."""
        for tracker, value in zip(self.trackers, values, strict=False):
            tracker.update_state(value, sample_weight=batch_size)

    def results(self) -> dict[str, float]:
        return {tracker.name: tracker.result() for tracker in self.trackers}

    def reset(self) -> None:
        for tracker in self.trackers:
            tracker.reset_state()
