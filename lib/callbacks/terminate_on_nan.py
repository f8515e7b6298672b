"""TerminateOnNaN: stop training when the loss stops being a finite number."""

from __future__ import annotations

import math

from tapeflow.callbacks.callback import Callback


class TerminateOnNaN(Callback):
    """After each training batch, stop training if the loss is NaN or infinite: sets
    `model.stop_training` (fit stops after this batch, as Keras's does), or with
    `raise_error` raises a RuntimeError at once.

    >>> class Model:
    ...     stop_training = False
    >>> cb = TerminateOnNaN()
    >>> cb.set_model(Model())
    >>> cb.on_train_batch_end(3, {"loss": float("nan")})
    TerminateOnNaN: the loss is nan at batch 3; training stops after this batch
    >>> cb.model.stop_training
    True
    """

    def __init__(self, raise_error: bool = False):
        super().__init__()
        self.raise_error = bool(raise_error)

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        if self.raise_error:
            raise RuntimeError(f"TerminateOnNaN: the loss is {loss} (NaN or Inf) at batch {batch}; training stops here")
        print(f"TerminateOnNaN: the loss is {loss} at batch {batch}; training stops after this batch")
        self.model.stop_training = True

    def on_batch_end(self, batch, logs=None):
        """Keras's older name of `on_train_batch_end`."""
        self.on_train_batch_end(batch, logs)
