"""`Strategy`: the base of every way to train on a Dask cluster, the object that
`model.fit`, `model.evaluate` and `model.predict` take as `distribute=`.

`DataParallel`, `AsyncParameterServer` and `Pipeline` differ in how a step runs; what
they share is written here once: the workers they need, the arrays or Dataset they
train on, the model's state sent out and taken back between epochs, checkpoint files,
and going on from the last checkpoint after a worker dies. docs/distributed.md tells
the whole design.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     strategy = tp.distributed.DataParallel(cluster, replicas=2)
...     model.fit(x, y, batch_size=64, distribute=strategy)
...     model.evaluate(x, y, distribute=strategy)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.distributed.checkpoints import CheckpointFiles
from tapeflow.distributed.checks import check_count, check_seconds
from tapeflow.distributed.epoch_data import EpochStream, first_batch
from tapeflow.distributed.gradient_graph import freeze_gradient_step
from tapeflow.distributed.inference import evaluate_on_cluster, predict_on_cluster
from tapeflow.distributed.parameters import master_copy
from tapeflow.distributed.queue_input import queue_sample
from tapeflow.distributed.runtime.liveness import WorkerLost, find_lost, lost_workers, wait_for_workers
from tapeflow.queue.queues import QueueBase

MAX_RECOVERIES = 3  # failures in a row restarting from the same checkpoint before fit gives up
POLL_INTERVAL = 0.02  # seconds between the client's looks at a log of steps
WATCH_INTERVAL = 0.5  # seconds between the client's questions to the scheduler about lost workers


@dataclass(frozen=True)
class Recovery:
    """A failure training recovered from: the workers lost, the first step the client had
    not seen complete when it noticed, the checkpoint step it restarted from, and the error."""

    lost_workers: tuple[str, ...]
    step: int
    restored_step: int
    error: str


class Strategy:
    """What a distribution strategy is to `Model`: `start(model, x, y, batch_size)` sets
    up a `fit` and returns its `TrainingSession`; `predict` and `evaluate` run the model
    over rows split between the first `replicas` workers of `cluster`. It plays the part
    of Keras 3's `keras.distribution.Distribution` (and TensorFlow's
    `tf.distribute.Strategy`).

    `timeout` (seconds) bounds every wait; with `checkpoint_dir` the newest
    `keep_checkpoints` checkpoints are written there. After `fit`, `steps` holds a
    record per step, `checkpoints` the files written and `recoveries` the failures
    recovered from.
    """

    def __init__(self, cluster, replicas: int, *, timeout: float, checkpoint_dir=None, keep_checkpoints: int = 3):
        check_count("keep_checkpoints", keep_checkpoints, minimum=1, owner=self.name)
        check_seconds("timeout", timeout, owner=self.name)
        self.cluster = cluster
        self.replicas = replicas
        self.timeout = float(timeout)
        self.checkpoint_dir = checkpoint_dir
        self.keep_checkpoints = keep_checkpoints
        self.steps: list = []
        self.checkpoints: list[str] = []
        self.recoveries: list[Recovery] = []

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def needed_workers(self) -> int:
        """The fewest workers training starts on."""
        return self.replicas

    def _needs(self) -> str:
        """Who needs `needed_workers`, for the error when the cluster has fewer."""
        return f"{self.replicas} replicas need"

    def workers(self) -> list[str]:
        """The cluster's workers, or a ValueError if it has fewer than `needed_workers`."""
        workers = self.cluster.workers
        if self.needed_workers > len(workers):
            raise ValueError(
                f"{self.name}: {self._needs()} {self.needed_workers} workers, but the cluster has {len(workers)}"
            )
        return workers

    def start(self, model, x, y, batch_size: int) -> TrainingSession:
        """Set up training of `model` on arrays `x` (or a tuple of arrays) and `y`, or on a
        Dataset `x` of (x, y) batches (y None): `Model.fit` calls this, then `run_epoch`
        per epoch and `close` at the end."""
        raise NotImplementedError

    def predict(self, model, x, batch_size: int):
        """`model.predict(x, distribute=self)`: the inference graph runs over `replicas`
        parts of the rows, one per worker; a part whose worker dies runs again on a worker
        alive once the cluster has `needed_workers` again (waiting up to `timeout`, as `fit`)."""
        return predict_on_cluster(model, x, batch_size, self.cluster, self.replicas, self.needed_workers, self.timeout)

    def evaluate(self, model, x, y, batch_size: int) -> dict:
        """`model.evaluate(x, y, distribute=self)`: the workers compute the loss and predictions
        of their parts' batches (as `predict` runs its parts), and the metrics are updated here
        in batch order."""
        parts, need = self.replicas, self.needed_workers
        return evaluate_on_cluster(model, x, y, batch_size, self.cluster, parts, need, self.timeout)


class PlaceAnew(Exception):
    """Raised inside an epoch to abandon the current placement and make a new one on the
    workers alive, going on from the state the client's model holds."""


class Epoch:
    """One epoch as the client follows it: its batches of row numbers (in step order),
    its first step, the next step to report to the callbacks, and the last logs."""

    def __init__(self, first_step: int, rows: list[np.ndarray], index: int):
        self.first_step, self.rows, self.index = first_step, rows, index
        self.end = first_step + len(rows)
        self.reported = first_step
        self.logs: dict = {}

    def order(self, start: int | None = None) -> np.ndarray:
        """The row numbers of the batches from step `start` (the first by default) on."""
        rows = self.rows[0 if start is None else start - self.first_step :]
        return np.concatenate(rows) if rows else np.zeros(0, np.int64)


class TrainingSession:
    """One `fit` of `model` by `strategy`, from `Strategy.start` to `close`.

    The base keeps the data (arrays, or a Dataset scanned anew each epoch), the frozen
    gradient steps by batch size, the checkpoint files, and the loop that goes on from
    the last checkpoint when a worker in use dies. A subclass says how the work is
    placed on workers (`place`, which sets `deployment` and `used`), how an epoch's steps
    run there (`run_steps`), and where a re-run starts (`restored_step`, `rewind`).
    """

    sparse_gradients = False  # whether an Embedding's gradient leaves the replicas as rows

    def __init__(self, strategy: Strategy, model, x, y, batch_size: int):
        self.strategy, self.model, self.optimizer = strategy, model, model.optimizer
        if getattr(model.optimizer, "use_ema", False):
            raise ValueError(
                f"fit: {type(model.optimizer).__name__}(use_ema=True) keeps weight averages in one optimizer, "
                f"which the replicas of {strategy.name} do not share; train with use_ema=False under distribute="
            )
        self.dataset = x if isinstance(x, Dataset) else None
        self.stream: EpochStream | None = None  # the Dataset's current epoch
        queue = x if isinstance(x, QueueBase) else None  # the replicas dequeue their rows: see queue_input
        if self.dataset is not None or queue is not None:
            x, y = first_batch(self.dataset) if queue is None else queue_sample(queue, batch_size, model, strategy.name)
            batch_size = len(y)
            self.batch_sizes = {batch_size}
            if not model.built:
                model(x, training=False)
        else:
            self.batch_sizes = {min(batch_size, len(y)), len(y) % batch_size} - {0}
        self.x, self.y, self.batch_size = x, y, batch_size
        self.arrays = None if self.dataset is not None else [*x, y] if isinstance(x, tuple) else [x, y]
        if queue is not None:
            self.arrays = [queue]
        strategy.steps, strategy.checkpoints, strategy.recoveries = [], [], []
        self.with_predictions = bool(model.compiled_metrics)
        self.files: CheckpointFiles | None = None
        self.graphs: dict = {}
        self.layout, self.variables = None, []
        self.deployment = None
        self.used: list[str] = []

    # ------------------------------------------------------------ gradient steps
    def graph_sizes(self, parts: int | None = None) -> set[int]:
        """The batch sizes the replicas' gradient steps take when `parts` replicas (all the
        strategy's by default) share a batch."""
        return set(self.batch_sizes)

    def freeze(self, parts: int | None = None) -> None:
        """Freeze the gradient steps for the sizes of `graph_sizes(parts)` not frozen yet;
        the first time, check the loss reaches a trainable variable and build the optimizer."""
        sizes = self.graph_sizes(parts) - set(self.graphs)
        if not sizes:
            return
        first = self.layout is None
        graphs, self.layout, self.variables = freeze_gradient_step(
            self.model, self.x, self.y, sizes, self.with_predictions, sparse=self.sparse_gradients
        )
        self.graphs.update(graphs)
        if first:
            if not self.layout.n_trainable:
                raise ValueError(
                    f"fit: the loss of model '{self.model.name}' depends on none of its trainable variables"
                )
            self.optimizer.build(self.variables[: self.layout.n_trainable])

    # ------------------------------------------------------------ the master copy
    def client_state(self):
        """(values, slots, step counter, learning rate or None for a schedule) of the client's model."""
        values, slots = master_copy.whole_state(self.variables, self.optimizer, self.layout.n_trainable)
        return values, slots, self.optimizer.iterations, master_copy.learning_rate(self.optimizer)

    def take_state(self, values, slots, iterations: int) -> None:
        """Set the client's model and optimizer to whole-variable `values`, `slots` and the step counter."""
        master_copy.take_state(self.variables, self.optimizer, values, slots, iterations)

    def open_checkpoints(self) -> None:
        """Open the strategy's checkpoint directory, once the session's checks have passed
        (an error leaves the user's files as they were)."""
        if self.strategy.checkpoint_dir is not None:
            self.files = CheckpointFiles(self.strategy.checkpoint_dir, self.strategy.keep_checkpoints)

    def write_checkpoint(self, step: int, epoch: Epoch, batch: int) -> None:
        """With a checkpoint directory, write the client's model as the checkpoint of `step`
        (`batch` batches of `epoch` done)."""
        if self.files is not None:
            self.strategy.checkpoints.append(self.files.write(self.model, step, epoch.index, batch))

    # ------------------------------------------------------------ epochs
    def run_epoch(self, batches, callbacks) -> dict:
        """Train one epoch on `batches` (arrays of row numbers, in step order, or the Dataset),
        calling the batch callbacks as steps complete; returns the epoch's logs. When a
        worker in use dies, the work is placed anew on the workers alive and goes on from
        the last checkpoint; `fit` gives up after `MAX_RECOVERIES` failures in a row."""
        if self.dataset is not None:
            batches = self._next_stream()
        epoch = self.begin_epoch([np.asarray(b) for b in batches])
        failures, failed_at = 0, None
        while True:
            try:
                if self.deployment is None:
                    self.place(self._enough_workers())
                return self.run_steps(epoch, callbacks)
            except PlaceAnew:
                self.abandon()
            except Exception as error:
                lost = find_lost(self.strategy.cluster, self.used, error)
                self.abandon()
                if not lost:
                    raise
                restored = self.restored_step()
                failures = failures + 1 if failed_at == restored else 1
                failed_at = restored
                if failures >= MAX_RECOVERIES:
                    raise RuntimeError(
                        f"fit: workers died {failures} times in a row after the checkpoint of step {restored} "
                        f"(last lost: {lost}); giving up"
                    ) from error
                self.strategy.recoveries.append(Recovery(tuple(lost), self.failed_step(epoch), restored, repr(error)))
                self.rewind(epoch)
            except BaseException:
                self.abandon()
                raise

    def begin_epoch(self, rows: list[np.ndarray]) -> Epoch:
        """The client's view of the epoch about to run on the batches `rows`."""
        return Epoch(self.optimizer.iterations, rows, getattr(self.model, "_fit_epoch", 0))

    def _next_stream(self) -> list[np.ndarray]:
        """Scan the Dataset's next epoch; returns its batches of row numbers. Batch sizes not
        seen before need gradient steps of their own, and so a new placement to ship them."""
        self.stream = EpochStream.scan(self.dataset)
        self.y = self.stream.labels
        self.batch_sizes |= set(self.stream.sizes)
        if self.graph_sizes() - set(self.graphs):
            self.abandon()
        bounds = np.cumsum((0, *self.stream.sizes))
        return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    @property
    def min_workers(self) -> int:
        """The fewest workers training goes on with."""
        return self.strategy.needed_workers

    def _enough_workers(self) -> list[str]:
        """The workers alive, once there are `min_workers` of them (waiting up to `timeout`)."""
        return wait_for_workers(self.strategy.cluster, self.min_workers, self.strategy.timeout, "fit", "training")

    def watch(self) -> None:
        """Raise WorkerLost if a worker in use left the cluster."""
        lost = lost_workers(self.used, self.strategy.cluster.workers)
        if lost:
            raise WorkerLost(lost)

    # ------------------------------------------------------------ what a strategy says
    def place(self, workers: list[str]) -> None:
        """Place the work on `workers`: set `deployment` and `used`."""
        raise NotImplementedError

    def run_steps(self, epoch: Epoch, callbacks) -> dict:
        """Run the epoch's steps on the current deployment; returns the epoch's logs."""
        raise NotImplementedError

    def restored_step(self) -> int:
        """The step of the checkpoint a re-run after a failure starts from."""
        return self.optimizer.iterations

    def failed_step(self, epoch: Epoch) -> int:
        """The first step the client had not seen complete when a failure struck."""
        return epoch.reported

    def rewind(self, epoch: Epoch) -> None:
        """Forget what the failed attempt did after `restored_step`."""

    # ------------------------------------------------------------ teardown
    def abandon(self) -> None:
        """Stop and release the deployment; the client's model keeps its state."""
        if self.deployment is not None:
            try:
                alive = self.strategy.cluster.workers
            except Exception:  # noqa: BLE001 - a scheduler that does not answer: release without stopping
                alive = []
            self.deployment.stop(alive)
            self.deployment.close()
            self.deployment = None
        self.used = []

    def close(self) -> None:
        """Release what the deployment holds on the cluster (safe to call twice)."""
        if self.deployment is not None:
            self.deployment.close()
            self.deployment = None
