"""LearningRateScheduler: sets the learning rate from a function of the epoch."""

from __future__ import annotations

import math

import numpy as np

from tapeflow.callbacks.callback import Callback
from tapeflow.callbacks.monitor import _settable_learning_rate


class LearningRateScheduler(Callback):
    """Sets the learning rate before each epoch to `schedule(epoch, lr)` (epoch 0-based, lr the current rate).

    >>> halve_after_two = LearningRateScheduler(lambda epoch, lr: lr if epoch < 2 else lr / 2)
    """

    def __init__(self, schedule, verbose: int = 0):
        super().__init__()
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: schedule must be callable (epoch, lr) -> lr, got {schedule!r}")
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = _settable_learning_rate("LearningRateScheduler", self.model)
        new_lr = self.schedule(epoch, lr)
        if isinstance(new_lr, bool) or not isinstance(new_lr, int | float | np.floating | np.integer):
            raise TypeError(f"LearningRateScheduler: the schedule must return a number, got {new_lr!r}")
        if not math.isfinite(new_lr) or new_lr < 0:
            raise ValueError(f"LearningRateScheduler: the schedule returned {new_lr!r} for epoch {epoch}")
        self.model.optimizer.learning_rate = float(new_lr)
        if self.verbose:
            print(f"Epoch {epoch + 1}: LearningRateScheduler setting the learning rate to {float(new_lr):.6g}")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)
