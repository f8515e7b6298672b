"""ProgbarLogger: the progress bar and epoch lines `fit` prints."""

from __future__ import annotations

import sys
import time

from tapeflow.callbacks.callback import Callback


def _format_logs(logs: dict) -> str:
    return " - ".join(f"{key}: {value:.4f}" for key, value in logs.items())


def _format_seconds(seconds: float) -> str:
    if seconds >= 3600:
        return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"
    if seconds >= 60:
        return f"{int(seconds // 60)}:{int(seconds % 60):02d}"
    return f"{seconds:.0f}s"


class ProgbarLogger(Callback):
    """The progress bar: step, ETA, loss and metrics, redrawn in place on a terminal.

    When the output is not a terminal (CI, a log file) it prints one plain line per
    epoch instead. `verbose`: 0 silent, 1 bar, 2 one line per epoch.
    """

    def __init__(self, verbose="auto", stream=None, width: int = 30, interval: float = 0.1):
        super().__init__()
        self.stream = stream or sys.stdout
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.verbose = (1 if tty else 2) if verbose == "auto" else int(verbose)
        if self.verbose == 1 and not tty:
            self.verbose = 2
        self.width = width
        self.interval = interval

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self._last_draw = time.perf_counter()
        self._epoch = epoch
        if self.verbose == 1:
            self._write(f"Epoch {epoch + 1}/{self.params.get('epochs', '?')}\n")

    def on_train_batch_end(self, batch, logs=None):
        if self.verbose != 1:
            return
        now = time.perf_counter()
        steps = self.params.get("steps")
        if now - self._last_draw < self.interval and (steps is None or batch + 1 < steps):
            return
        self._last_draw = now
        elapsed = now - self._epoch_start
        if steps:
            done = int(self.width * (batch + 1) / steps)
            bar = "=" * max(done - 1, 0) + (">" if done < self.width else "=") + "." * (self.width - done)
            eta = elapsed / (batch + 1) * (steps - batch - 1)
            head = f"{batch + 1}/{steps} [{bar}] - ETA: {_format_seconds(eta)}"
        else:
            head = f"{batch + 1}/unknown - {_format_seconds(elapsed)}"
        self._write(f"\r{head} - {_format_logs(logs or {})}\x1b[K")

    def on_epoch_end(self, epoch, logs=None):
        elapsed = time.perf_counter() - self._epoch_start
        if self.verbose == 1:
            self._write(
                f"\r{self.params.get('steps', '?')}/{self.params.get('steps', '?')} - "
                f"{_format_seconds(elapsed)} - {_format_logs(logs or {})}\x1b[K\n"
            )
        elif self.verbose == 2:
            self._write(
                f"Epoch {epoch + 1}/{self.params.get('epochs', '?')} - {_format_seconds(elapsed)} - "
                f"{_format_logs(logs or {})}\n"
            )

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
