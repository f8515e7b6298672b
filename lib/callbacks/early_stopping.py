"""EarlyStopping: stops training when a monitored value stops improving."""

from __future__ import annotations

from tapeflow.callbacks.callback import Callback
from tapeflow.callbacks.monitor import _Monitor


class EarlyStopping(Callback):
    """Stops training once `monitor` has not improved by more than `min_delta` for `patience` epochs.

    With `baseline`, epochs that do not beat the baseline count as not improving. Epochs
    before `start_from_epoch` are ignored. With `restore_best_weights`, the weights of the
    best epoch are restored when training ends, whether it stopped early or ran all
    its epochs (Keras 2 restored only on an early stop).

    >>> EarlyStopping(monitor="val_accuracy", patience=3).mode
    'max'
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        verbose: int = 0,
        mode: str = "auto",
        baseline: float | None = None,
        restore_best_weights: bool = False,
        start_from_epoch: int = 0,
    ):
        super().__init__()
        if patience < 0 or start_from_epoch < 0:
            raise ValueError(
                f"EarlyStopping: patience and start_from_epoch must be >= 0, got {patience} and {start_from_epoch}"
            )
        self.monitor = _Monitor("EarlyStopping", monitor, mode, min_delta)
        self.mode = self.monitor.mode
        self.patience = int(patience)
        self.verbose = verbose
        self.baseline = None if baseline is None else float(baseline)
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = int(start_from_epoch)

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = self.monitor.worst
        self.best_epoch = 0
        self.best_weights = None

    def on_epoch_end(self, epoch, logs=None):
        if epoch < self.start_from_epoch:
            return
        current = self.monitor.read(logs)
        if current is None:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights, self.best_epoch = self.model.get_weights(), epoch  # something to restore
        self.wait += 1
        if self.monitor.improved(current, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self.monitor.improved(current, self.baseline):
                self.wait = 0
                return
        if self.wait >= self.patience and epoch > 0:  # also when improving but still short of the baseline
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose:
                print(f"Restoring the weights from the end of the best epoch: {self.best_epoch + 1}")
            self.model.set_weights(self.best_weights)
