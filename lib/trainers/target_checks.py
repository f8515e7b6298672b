"""The compiled losses' checks of target values (integer class ids, labels in [0, 1]),
made in NumPy on each batch before its step: a frozen step sees only symbolic targets,
so the losses cannot make them there. The errors are the losses' own, word for word.

A target whose shape does not fit the predictions is left alone: the loss reports that,
eagerly and while a step is traced alike.

>>> import numpy as np
>>> import tapeflow as tp
>>> from tapeflow.trainers.compile_losses import OutputLosses
>>> checks = TargetChecks(OutputLosses("sparse_categorical_crossentropy"), lambda x: [((3,), np.float32)])
>>> checks(np.zeros((2, 4)), np.array([0, 3]))
Traceback (most recent call last):
ValueError: sparse_categorical_crossentropy: label 3 is out of range [0, 3)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tapeflow.backends.common import check_labels
from tapeflow.losses.losses import binary_crossentropy, categorical_crossentropy, sparse_categorical_crossentropy
from tapeflow.metrics.metric import device_array
from tapeflow.tensor import Tensor
from tapeflow.trainers.compile_losses import OutputLosses, per_output


def _binary_labels(name: str, labels: np.ndarray, prediction: tuple, dtype: np.dtype, axis: int) -> None:
    """binary_crossentropy's labels: in [0, 1] (a trailing axis of 1 on one side only is
    added to the other before the shapes are compared)."""
    shape = labels.shape
    if len(shape) == len(prediction) + 1 and shape[-1:] == (1,):
        shape = shape[:-1]
    elif len(prediction) == len(shape) + 1 and prediction[-1:] == (1,):
        prediction = prediction[:-1]
    if shape == prediction:
        _in_unit_interval(name, labels, dtype)


def _categorical_labels(name: str, labels: np.ndarray, prediction: tuple, dtype: np.dtype, axis: int) -> None:
    """categorical_crossentropy's labels: in [0, 1], shaped like the predictions."""
    if labels.shape == prediction and -len(prediction) <= axis < len(prediction):
        _in_unit_interval(name, labels, dtype)


def _in_unit_interval(name: str, labels: np.ndarray, dtype: np.dtype) -> None:
    values = labels.astype(dtype)  # as the loss casts them to the predictions' dtype
    if values.size and not (values.min() >= 0 and values.max() <= 1):
        bad = values[~((values >= 0) & (values <= 1))].flat[0]
        raise ValueError(f"{name}: labels must lie in [0, 1], got {bad}")


def _class_ids(name: str, labels: np.ndarray, prediction: tuple, dtype: np.dtype, axis: int) -> None:
    """sparse_categorical_crossentropy's labels: whole numbers in [0, the size of the class axis)."""
    ndim = len(prediction)
    if ndim == 0 or not -ndim <= axis < ndim:
        return
    axis %= ndim
    classes = prediction[axis]
    if labels.ndim == ndim and labels.shape[-1:] == (1,):
        labels = labels[..., 0]
    if labels.shape != prediction[:axis] + prediction[axis + 1 :]:
        return
    if labels.dtype.kind not in "iuf":
        raise ValueError(f"{name}: labels must be integer class ids, got dtype {labels.dtype}")
    if labels.dtype.kind == "f":
        if labels.size and not np.all(labels == np.floor(labels)):
            raise ValueError(f"{name}: labels must be integer class ids, got {labels[labels != np.floor(labels)][0]}")
        with np.errstate(invalid="ignore"):
            labels = labels.astype(np.int64)
    check_labels(name, labels, classes)  # on a device: checked there, read at the end of the step


_CHECKS = (
    (binary_crossentropy, _binary_labels),
    (categorical_crossentropy, _categorical_labels),
    (sparse_categorical_crossentropy, _class_ids),
)


class TargetChecks:
    """The target checks of the compiled losses, one output at a time.

    Args:
        output_losses: the compiled losses (`OutputLosses`).
        output_specs: `output_specs(x)` gives each output's (shape without the batch
            axis, dtype) for inputs like `x`; asked only when a loss checks its targets.
    """

    def __init__(self, output_losses: OutputLosses, output_specs: Callable):
        self.output_names = output_losses.output_names
        self._output_specs = output_specs
        self._checks = []
        for i in output_losses.active:
            loss = output_losses.losses[i]
            fn = getattr(loss, "fn", None)
            check = next((check for checked, check in _CHECKS if checked is fn), None)
            if check is not None:
                axis = loss.get_config().get("axis", -1)
                self._checks.append((i, loss.fn.__name__, check, axis))

    def __call__(self, x, y) -> None:
        """Check one batch's targets `y` (a structure of arrays) for inputs `x`."""
        if not self._checks or y is None:
            return
        targets = per_output(y, self.output_names, "y", "fit")
        specs = self._output_specs(x)
        if len(specs) != len(self.output_names):
            return  # the loss reports the count
        for i, name, check, axis in self._checks:
            if targets[i] is None:
                continue
            labels = device_array(targets[i])  # a GPU's targets are checked there
            if labels is None:
                labels = targets[i].numpy() if isinstance(targets[i], Tensor) else np.asarray(targets[i])
            shape, dtype = specs[i]
            dtype = np.dtype(dtype)
            dtype = dtype if dtype.kind == "f" and dtype.itemsize >= 4 else np.dtype(np.float32)
            check(name, labels, (labels.shape[0] if labels.ndim else 1, *shape), dtype, axis)
