"""History: the logs of every epoch, returned by `fit`."""

from __future__ import annotations

from tapeflow.callbacks.callback import Callback


class History(Callback):
    """Records the logs of every epoch: `history.history["loss"]` is a list of floats."""

    def on_train_begin(self, logs=None):
        self.history: dict[str, list[float]] = getattr(self, "history", {})
        self.epoch: list[int] = getattr(self, "epoch", [])

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
