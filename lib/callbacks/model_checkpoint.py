"""ModelCheckpoint: saves the model or its weights during training."""

from __future__ import annotations

import os

from tapeflow.callbacks.callback import Callback
from tapeflow.callbacks.monitor import _Monitor


class ModelCheckpoint(Callback):
    """Saves the whole model (`model.save`, which `tp.models.load_model` reads), or its weights
    (`model.save_weights`), every epoch or every `save_freq` batches, as Keras 3 does.

    The file name says what is written: a path ending in ".keras" (or ".h5") gets the whole
    model, one ending in ".weights.h5" the weights; `save_weights_only=True` requires a
    ".weights.h5" path, and any other ending is a ValueError, as in Keras.

    `filepath` may hold `str.format` fields: `{epoch}` and `{batch}` (1-based, as Keras), and any
    logged value such as `{val_loss:.2f}`. With `save_best_only`, a save happens only when
    `monitor` improves on the best value seen so far (or on `initial_value_threshold`).

    >>> ModelCheckpoint("ckpt/model.{epoch:02d}-{val_loss:.2f}.keras", save_best_only=True).mode
    'min'
    >>> ModelCheckpoint("ckpt/best.weights.h5", save_weights_only=True).save_weights_only
    True
    """

    def __init__(
        self,
        filepath,
        monitor: str = "val_loss",
        verbose: int = 0,
        save_best_only: bool = False,
        save_weights_only: bool = False,
        mode: str = "auto",
        save_freq="epoch",
        initial_value_threshold: float | None = None,
    ):
        super().__init__()
        self.save_weights_only = bool(save_weights_only)
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"ModelCheckpoint: save_freq must be 'epoch' or a positive int, got {save_freq!r}")
        self.filepath = os.fspath(filepath)
        if save_weights_only and not self.filepath.endswith(".weights.h5"):
            raise ValueError(
                "ModelCheckpoint: with save_weights_only=True the filepath must end in '.weights.h5', "
                f"got filepath={self.filepath!r}"
            )
        if not self.filepath.endswith((".keras", ".h5")):
            raise ValueError(
                "ModelCheckpoint: the filepath must end in '.keras' (the whole model) or '.weights.h5' "
                f"(the weights), got filepath={self.filepath!r}"
            )
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
        weights_only = self.save_weights_only or path.endswith(".weights.h5")
        if weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)
        if self.verbose:
            print(f"Epoch {epoch + 1}: saved {'weights' if weights_only else 'model'} to {path}")

    def _path(self, epoch: int, batch: int | None, logs: dict) -> str:
        fields = {**logs, "epoch": epoch + 1, "batch": None if batch is None else batch + 1}
        try:
            return self.filepath.format_map(fields)
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"ModelCheckpoint: cannot format filepath {self.filepath!r} with epoch, batch and the logged "
                f"values {sorted(logs)}: {err!r}"
            ) from err
