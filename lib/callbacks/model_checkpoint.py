"""ModelCheckpoint: saves the model or its weights during training."""

from __future__ import annotations

import os

from tapeflow.callbacks.callback import Callback
from tapeflow.callbacks.monitor import _Monitor


class ModelCheckpoint(Callback):
    """Saves the model's weights (HDF5, via `model.save_weights`), or with `save_weights_only=False`
    the whole model (`model.save`), every epoch or every `save_freq` batches.

    `filepath` may hold `str.format` fields: `{epoch}` and `{batch}` (1-based, as Keras), and any
    logged value such as `{val_loss:.2f}`. With `save_best_only`, a save happens only when
    `monitor` improves on the best value seen so far (or on `initial_value_threshold`).
    Unlike Keras, `save_weights_only` defaults to True.

    >>> ModelCheckpoint("ckpt/weights.{epoch:02d}-{val_loss:.2f}.h5", save_best_only=True).mode
    'min'
    """

    def __init__(
        self,
        filepath,
        monitor: str = "val_loss",
        verbose: int = 0,
        save_best_only: bool = False,
        save_weights_only: bool = True,
        mode: str = "auto",
        save_freq="epoch",
        initial_value_threshold: float | None = None,
    ):
        super().__init__()
        self.save_weights_only = bool(save_weights_only)
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"ModelCheckpoint: save_freq must be 'epoch' or a positive int, got {save_freq!r}")
        self.filepath = os.fspath(filepath)
        self.monitor = _Monitor("ModelCheckpoint", monitor, mode)
        self.mode = self.monitor.mode
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_freq = save_freq
        self.initial_value_threshold = initial_value_threshold
        self.best = self.monitor.worst if initial_value_threshold is None else float(initial_value_threshold)
        self._batches_since_save = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches_since_save += 1
        if self._batches_since_save >= self.save_freq:
            self._batches_since_save = 0
            self._save(self._epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self._save(epoch, None, logs)

    def _save(self, epoch: int, batch: int | None, logs) -> None:
        logs = {key: float(value) for key, value in (logs or {}).items()}
        path = self._path(epoch, batch, logs)
        if self.save_best_only:
            current = self.monitor.read(logs)
            if current is None or not self.monitor.improved(current, self.best):
                return
            if self.verbose:
                print(f"Epoch {epoch + 1}: {self.monitor.name} improved from {self.best:.5f} to {current:.5f}")
            self.best = current
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)
        if self.verbose:
            print(f"Epoch {epoch + 1}: saved {'weights' if self.save_weights_only else 'model'} to {path}")

    def _path(self, epoch: int, batch: int | None, logs: dict) -> str:
        fields = {**logs, "epoch": epoch + 1, "batch": None if batch is None else batch + 1}
        try:
            return self.filepath.format_map(fields)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"ModelCheckpoint: cannot format filepath {self.filepath!r} with epoch, batch and the logged "
                f"values {sorted(logs)}: {err!r}"
            ) from err
