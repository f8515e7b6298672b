"""Callbacks: hooks the training loop calls at the start and end of training,
epochs and batches. History and the progress bar are always installed by `fit`.

>>> h = History()
>>> h.on_train_begin(); h.on_epoch_end(0, {"loss": 0.5})
>>> h.history
{'loss': [0.5]}
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import sys
import time
import warnings

import numpy as np

from tapeflow.io import tensorboard
from tapeflow.io.checkpoint import load_checkpoint, remove_temp_files, save_checkpoint


class Callback:
    """Base class: every hook does nothing; `model` is set by `fit`."""

    def __init__(self):
        self.model = None
        self.params: dict = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: dict) -> None:
        self.params = params

    def on_train_begin(self, logs=None): ...

    def on_train_end(self, logs=None): ...

    def on_epoch_begin(self, epoch, logs=None): ...

    def on_epoch_end(self, epoch, logs=None): ...

    def on_train_batch_begin(self, batch, logs=None): ...

    def on_train_batch_end(self, batch, logs=None): ...

    def on_test_begin(self, logs=None): ...

    def on_test_end(self, logs=None): ...


class CallbackList:
    """Calls each hook on every callback, in order."""

    def __init__(self, callbacks, model, params: dict):
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            cb.set_model(model)
            cb.set_params(params)

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)

        def call_all(*args, **kwargs):
            for cb in self.callbacks:
                getattr(cb, hook)(*args, **kwargs)

        return call_all


class History(Callback):
    """Records the logs of every epoch: `history.history["loss"]` is a list of floats."""

    def on_train_begin(self, logs=None):
        self.history: dict[str, list[float]] = getattr(self, "history", {})
        self.epoch: list[int] = getattr(self, "epoch", [])

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))


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


# --------------------------------------------------------------- monitored values


def _maximized(monitor: str) -> bool:
    """Whether `mode="auto"` treats `monitor` as a quantity that improves upward (accuracy, AUC, ...)."""
    name = monitor.removeprefix("val_")
    return name.endswith(("acc", "accuracy", "auc", "precision", "recall", "f1_score", "fbeta_score"))


class _Monitor:
    """Reads a logged quantity and says whether a value beats a reference by more than `min_delta`."""

    def __init__(self, owner: str, monitor: str, mode: str, min_delta: float = 0.0):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"{owner}: mode must be 'auto', 'min' or 'max', got {mode!r}")
        if mode == "auto":
            mode = "max" if _maximized(monitor) else "min"
        self.owner, self.name, self.mode = owner, monitor, mode
        self.min_delta = abs(float(min_delta))

    @property
    def worst(self) -> float:
        return math.inf if self.mode == "min" else -math.inf

    def improved(self, current: float, reference: float) -> bool:
        if self.mode == "min":
            return current < reference - self.min_delta
        return current > reference + self.min_delta

    def read(self, logs) -> float | None:
        """The monitored value in `logs`, or None (with a warning naming the logged keys)."""
        logs = logs or {}
        if self.name not in logs:
            warnings.warn(
                f"{self.owner}: monitor {self.name!r} is not in the logs (available: {', '.join(logs) or 'none'}); "
                "pass validation_data to fit for 'val_' quantities, or choose another monitor",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        return float(logs[self.name])


def _settable_learning_rate(owner: str, model) -> float:
    """The optimizer's current learning rate, checking that it is a plain number a callback may replace."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise RuntimeError(f"{owner}: the model has no optimizer; call model.compile(...) first")
    if callable(getattr(optimizer, "_learning_rate", None)):
        raise TypeError(
            f"{owner}: the optimizer's learning rate is a schedule ({optimizer._learning_rate!r}), which sets the "
            "rate itself; create the optimizer with a float learning_rate to let this callback change it"
        )
    return float(optimizer.learning_rate)


# ------------------------------------------------------------------- checkpoints


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


# -------------------------------------------------------------- early stopping


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


# ---------------------------------------------------------------- learning rate


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


# ---------------------------------------------------------------------- logging


class CSVLogger(Callback):
    """Writes one CSV row per epoch: `epoch` then the logged values, columns from the first epoch's keys.

    Each row goes out in one write and is flushed at once, so the file is complete after
    every epoch. With `append`, rows are added to an existing file under its own header.

    >>> CSVLogger("training.log", separator=";").separator
    ';'
    """

    def __init__(self, filename, separator: str = ",", append: bool = False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.separator = separator
        self.append = append
        self.keys: list[str] | None = None
        self._file = None

    def on_train_begin(self, logs=None):
        self.keys = None
        if self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0:
            with open(self.filename, newline="") as f:
                header = next(csv.reader(f, delimiter=self.separator), None)
            if header and header[0] == "epoch":
                self.keys = header[1:]
        self._file = open(self.filename, "a" if self.append else "w", newline="")  # closed in on_train_end
        if self.append and self.keys is None and self._file.tell() > 0:
            warnings.warn(
                f"CSVLogger: {self.filename} has no 'epoch' header; appending a new one", RuntimeWarning, stacklevel=2
            )

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        rows = []
        if self.keys is None:
            self.keys = sorted(logs)
            rows.append(["epoch", *self.keys])
        rows.append([epoch, *(_csv_value(logs[key]) if key in logs else "NA" for key in self.keys)])
        line = io.StringIO()
        csv.writer(line, delimiter=self.separator, lineterminator="\n").writerows(rows)
        self._file.write(line.getvalue())
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None:
            self._file.close()
            self._file = None


def _csv_value(value):
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)


class TensorBoard(Callback):
    """Writes event files for TensorBoard: scalars, weight histograms and the model's layer graph.

    Training values go to `<log_dir>/train` and validation values (the `val_` keys, prefix
    dropped) to `<log_dir>/validation`, tagged `epoch_<name>` at step = epoch; the optimizer's
    rate is logged as `epoch_learning_rate`.

    With `update_freq=N`, the running training values are also written as `batch_<name>` every
    N batches (step = batches seen), but at most once every `min_interval_s` seconds (default
    1 s), so that per-batch logging cannot flood the file or slow training; epoch values are
    never throttled. Pass `min_interval_s=0` to keep every N-th batch.

    Every `histogram_freq` epochs (0: never), each weight's histogram is written under its
    name. `write_graph` writes the model's frozen inference graph (ops, weights and shapes), or,
    for a model that cannot be frozen, one node per layer (op = layer class).

    Writing needs no TensorFlow: see `tapeflow.io.tensorboard`. View with
    `tensorboard --logdir <log_dir>`.

    >>> TensorBoard("logs", update_freq=100).min_interval_s
    1.0
    """

    def __init__(
        self,
        log_dir="logs",
        histogram_freq: int = 0,
        write_graph: bool = True,
        update_freq="epoch",
        min_interval_s: float = 1.0,
    ):
        super().__init__()
        if update_freq != "epoch" and (
            isinstance(update_freq, bool) or not isinstance(update_freq, int) or update_freq < 1
        ):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch' or a positive int, got {update_freq!r}")
        if histogram_freq < 0 or min_interval_s < 0:
            raise ValueError(
                f"TensorBoard: histogram_freq and min_interval_s must be >= 0, got {histogram_freq}, {min_interval_s}"
            )
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = int(histogram_freq)
        self.write_graph = write_graph
        self.update_freq = update_freq
        self.min_interval_s = float(min_interval_s)
        self._writers: dict = {}  # run name -> tapeflow.io.tensorboard.EventFileWriter
        self._train_step = 0
        self._last_batch_write = -math.inf

    def _writer(self, run: str):
        if run not in self._writers:
            self._writers[run] = tensorboard.EventFileWriter(os.path.join(self.log_dir, run))
        return self._writers[run]

    def on_train_begin(self, logs=None):
        self._last_batch_write = -math.inf
        if self.write_graph:
            self._writer("train").add_graph(tensorboard.model_graph_def(self.model, _layer_nodes(self.model)))
            self._writer("train").flush()

    def on_train_batch_end(self, batch, logs=None):
        self._train_step += 1
        if self.update_freq == "epoch" or self._train_step % self.update_freq:
            return
        now = time.monotonic()
        if now - self._last_batch_write < self.min_interval_s:
            return
        self._last_batch_write = now
        writer = self._writer("train")
        for key, value in (logs or {}).items():
            writer.add_scalar(f"batch_{key}", float(value), self._train_step)

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and "learning_rate" not in logs:
            logs["learning_rate"] = optimizer.learning_rate
        for key, value in logs.items():
            run, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            self._writer(run).add_scalar(f"epoch_{name}", float(value), epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            for weight in self.model.weights:
                self._writer("train").add_histogram(weight.name, weight.numpy(), epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def _layer_nodes(model) -> list[tuple[str, str, list[str]]]:
    """(name, op, inputs) per layer: a chain for Sequential, unconnected layers otherwise."""
    if hasattr(model, "layers") and isinstance(model.layers, list):
        layers = model.layers
        return [(layer.name, type(layer).__name__, [layers[i - 1].name] if i else []) for i, layer in enumerate(layers)]
    return [(layer.name, type(layer).__name__, []) for layer in model._flatten_layers() if layer is not model]


class BackupAndRestore(Callback):
    """Resume an interrupted `fit` where it stopped, as Keras' callback of this name does.

    At the end of every epoch it writes `<backup_dir>/checkpoint.h5` atomically (the
    layout is in `tapeflow.io.checkpoint`). When `fit` starts and that file exists, it
    restores the weights, the optimizer state, the random streams and fit's shuffle
    seed, and `fit` goes on from the epoch after the saved one. Given the same data, the
    resumed run ends with exactly the weights of an uninterrupted one, because each
    epoch's shuffle depends on (shuffle seed, epoch) alone. A `tp.data.Dataset` is
    iterated as it is, so it resumes exactly only if its order does not depend on how
    many passes it made before.

    A `fit` that ends normally (early stopping included) deletes the checkpoint unless
    `delete_checkpoint=False`; an exception or a killed process leaves it for the next
    run. Restoring needs a built model: `fit` builds one from array data itself, but with
    a Dataset call the model on a batch first. Layers must keep the names they were saved
    under (pass `name=`).

    >>> import tempfile
    >>> import numpy as np
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(1, name="d")])
    >>> model.compile("sgd", "mse")
    >>> backup = tp.callbacks.BackupAndRestore(tempfile.mkdtemp(), delete_checkpoint=False)
    >>> _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, callbacks=[backup], verbose=0)
    >>> model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=3, callbacks=[backup], verbose=0).epoch
    [2]
    """

    def __init__(self, backup_dir, delete_checkpoint: bool = True):
        super().__init__()
        self.backup_dir = os.fspath(backup_dir)
        self.delete_checkpoint = bool(delete_checkpoint)
        self.path = os.path.join(self.backup_dir, "checkpoint.h5")

    def on_train_begin(self, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        remove_temp_files(self.path)
        if not os.path.exists(self.path):
            return
        if not self.model.built:
            raise ValueError(
                f"BackupAndRestore: {self.model.name} must be built to restore {self.path!r}; "
                "call it on one batch of inputs before fit"
            )
        info = load_checkpoint(self.path, self.model, self.model.optimizer)
        self.model._initial_epoch = info.epoch + 1
        if info.shuffle_seed is not None:
            self.model._fit_seed = info.shuffle_seed

    def on_epoch_end(self, epoch, logs=None):
        seed = getattr(self.model, "_fit_seed", None)
        save_checkpoint(self.path, self.model, self.model.optimizer, epoch, shuffle_seed=seed)

    def on_train_end(self, logs=None):
        if self.delete_checkpoint:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)
