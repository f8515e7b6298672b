"""ReduceLROnPlateau: lowers the learning rate when a monitored value stops improving."""

from __future__ import annotations

from tapeflow.callbacks.callback import Callback
from tapeflow.callbacks.monitor import _Monitor, _settable_learning_rate


class ReduceLROnPlateau(Callback):
    """Multiplies the optimizer's learning rate by `factor` after `patience` epochs without improvement.

    After a reduction, the next `cooldown` epochs do not count towards `patience` (Keras counts
    the last cooldown epoch already). The rate never goes below `min_lr`. The optimizer needs a
    float learning rate: a schedule raises a TypeError when training starts.

    >>> ReduceLROnPlateau(factor=0.5, patience=2).factor
    0.5
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        factor: float = 0.1,
        patience: int = 10,
        verbose: int = 0,
        mode: str = "auto",
        min_delta: float = 1e-4,
        cooldown: int = 0,
        min_lr: float = 0.0,
    ):
        super().__init__()
        if not 0.0 < factor < 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be in (0, 1), got {factor!r}")
        if patience < 0 or cooldown < 0 or min_lr < 0:
            raise ValueError(
                f"ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0, got {patience}, {cooldown}, {min_lr}"
            )
        self.monitor = _Monitor("ReduceLROnPlateau", monitor, mode, min_delta)
        self.mode = self.monitor.mode
        self.factor = float(factor)
        self.patience = int(patience)
        self.verbose = verbose
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)

    def on_train_begin(self, logs=None):
        _settable_learning_rate("ReduceLROnPlateau", self.model)
        self.best = self.monitor.worst
        self.wait = 0
        self.cooldown_counter = 0

    def on_epoch_end(self, epoch, logs=None):
        lr = _settable_learning_rate("ReduceLROnPlateau", self.model)
        if logs is not None:
            logs["learning_rate"] = lr
        current = self.monitor.read(logs)
        if current is None:
            return
        improved = self.monitor.improved(current, self.best)
        if improved:
            self.best = current
        if self.cooldown_counter > 0:  # a cooldown epoch: not counted towards patience
            self.cooldown_counter -= 1
            self.wait = 0
            return
        if improved:
            self.wait = 0
            return
        self.wait += 1
        if self.wait >= self.patience and lr > self.min_lr:
            new_lr = max(lr * self.factor, self.min_lr)
            self.model.optimizer.learning_rate = new_lr
            if self.verbose:
                print(f"Epoch {epoch + 1}: ReduceLROnPlateau reducing the learning rate to {new_lr:.6g}")
            self.cooldown_counter = self.cooldown
            self.wait = 0
