"""TensorBoard: writes scalars, histograms and the model graph as event files."""

from __future__ import annotations

import math
import os
import time

from tapeflow import profiler
from tapeflow.callbacks.callback import Callback
from tapeflow.io import tensorboard


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

    `profile_batch=(start, stop)` (or one batch number, or "start,stop"; batches count from 1
    over the whole fit; 0 never) records a timeline of those training batches with
    `tapeflow.profiler` and writes its Chrome trace under `<log_dir>/train/plugins/profile/`.

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
        profile_batch=0,
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
        self.profile_batch = profile_batch
        self._profile_range = _profile_range(profile_batch)
        self._profiling = False
        self._batches_begun = 0

    def _writer(self, run: str):
        if run not in self._writers:
            self._writers[run] = tensorboard.EventFileWriter(os.path.join(self.log_dir, run))
        return self._writers[run]

    def on_train_begin(self, logs=None):
        self._last_batch_write = -math.inf
        if self.write_graph:
            self._writer("train").add_graph(tensorboard.model_graph_def(self.model, _layer_nodes(self.model)))
            self._writer("train").flush()

    def on_train_batch_begin(self, batch, logs=None):
        self._batches_begun += 1
        if self._profile_range is not None and self._batches_begun == self._profile_range[0]:
            if profiler.active() is None:  # a profile the user records already holds these batches
                profiler.start()
                self._profiling = True

    def on_train_batch_end(self, batch, logs=None):
        if self._profiling and self._batches_begun >= self._profile_range[1]:
            self._stop_profiling()
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

    def _stop_profiling(self) -> None:
        self._profiling = False
        profile = profiler.stop()
        stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(profile.wall_started))
        profiler.write_chrome_trace(profile, os.path.join(self.log_dir, "train", "plugins", "profile", stamp))

    def on_train_end(self, logs=None):
        if self._profiling:  # training stopped inside the range
            self._stop_profiling()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def _profile_range(profile_batch) -> tuple[int, int] | None:
    """(first, last) training batch to profile, counted from 1, or None for no profiling."""
    value = profile_batch
    if isinstance(value, str):
        try:
            value = tuple(int(part) for part in value.split(","))
        except ValueError:
            value = profile_batch
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return None if value == 0 else (value, value)
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and 0 < value[0] <= value[1]
    ):
        return (value[0], value[1])
    raise ValueError(
        "TensorBoard: profile_batch must be a batch number >= 0 or a pair (start, stop) of batch numbers "
        f"with 0 < start <= stop, got {profile_batch!r}"
    )


def _layer_nodes(model) -> list[tuple[str, str, list[str]]]:
    """(name, op, inputs) per layer: a chain for Sequential, unconnected layers otherwise."""
    if hasattr(model, "layers") and isinstance(model.layers, list):
        layers = model.layers
        return [(layer.name, type(layer).__name__, [layers[i - 1].name] if i else []) for i, layer in enumerate(layers)]
    return [(layer.name, type(layer).__name__, []) for layer in model._flatten_layers() if layer is not model]
