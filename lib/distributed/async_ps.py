"""`AsyncParameterServer`: asynchronous data-parallel training on a Dask cluster, the
parameter-server scheme of DistBelief (TensorFlow white paper, section 7).

What an update computes. `fit`'s batches, in the order single-process `fit` would use,
are handed out one at a time to whichever replica asks next; a replica asks again once
it has pushed its previous batch. For batch b the replica computes g_b, the gradient of
the model's loss (data loss plus regularization losses) on b's rows, at the parameters
it last received from each parameter shard. The update log numbers the update: step t,
the order in which every shard applies updates. Its staleness is

    s = t - min over shards of the version the replica pulled,

where a shard's version counts the updates it had applied: s is the number of other
updates that landed between the replica's pull and its own (0 when it saw them all).
Each shard applies the update with the model's own optimizer, in step order:

    theta_(t+1) = optimizer step t (theta_t, g_b(parameters pulled))

An update waits only for the updates numbered before it to reach the shard (pushes
already on their way), never for another replica's gradient: there is no barrier.

- `fit(dataset, distribute=...)` takes a `tp.data.Dataset` of (x, y) batches: every
  replica runs each epoch's pipeline and reads the batches it is handed, in increasing
  order (see `epoch_data`).
- With `replicas=1` every staleness is 0, so training equals single-process `fit` on
  the same batches (to float32 rounding).
- With `staleness_bound=k`, an update with s > k is dropped: it is never pushed, and its
  batch is skipped for the epoch. One batch gives one update, applied or dropped; the
  epoch ends when every batch has been.
- Variables the forward pass writes (batch-normalization statistics) take the values the
  update's replica computed.
- The epoch's loss and metrics are those of the applied updates' batches, computed by
  their replicas at the parameters they pulled; `staleness_mean` and `staleness_max`
  cover every update, `updates_dropped` counts the dropped ones.

What an update costs. Besides the gradient, a replica makes one call to the update log
and one push per shard, whose answer brings the shard's newest parameters (a dropped
update costs a pull instead).

How it runs. As `DataParallel`: `AsyncParameterShard` actors (at most one per worker)
hold the variables or row blocks of large ones with their optimizer slots, an
`UpdateLog` actor hands out the batches, and one long-running task per replica and epoch
runs the frozen gradient step, shipped as graph-file bytes. The client follows the log to
drive callbacks and metrics, one batch callback per update in commit order. The client's
model is the master copy between epochs: weights, slots, step counter and learning rate go
out at an epoch's start and come back at its end, before validation and `on_epoch_end`.

Checkpoints and failures. The state at each epoch's end is a checkpoint, written with
`checkpoint_dir` atomically to `ckpt-<step>.h5` (the newest `keep_checkpoints` kept). When
a worker holding a replica, a parameter shard or the update log dies, the epoch is
abandoned and run again from that checkpoint (the client's model still holds it) on the
workers alive, with fewer replicas if fewer workers remain: the updates of the lost
attempt are forgotten, the callbacks see each batch once, and `strategy.recoveries`
records what happened. Updates are asynchronous, so the re-run is another run of the
same epoch, not a replay (with one replica it equals the uninterrupted run). Three
failures in a row, or an error no lost worker explains, end `fit` with the model at the
last checkpoint.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     strategy = tp.distributed.AsyncParameterServer(cluster, replicas=2)
...     history = model.fit(x, y, batch_size=64, distribute=strategy)
...     history.history["staleness_mean"], strategy.steps[-1].staleness
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.distributed import master_copy
from tapeflow.distributed.async_replica import AsyncReplicaJob, run_async_replica
from tapeflow.distributed.async_shard import AsyncParameterShard
from tapeflow.distributed.checkpoints import CheckpointFiles
from tapeflow.distributed.data_parallel import (
    _MAX_RECOVERIES,
    _WATCH_INTERVAL,
    Recovery,
    _check_optimizer,
    _count,
    _raise_failed,
)
from tapeflow.distributed.deployment import PerWorker, futures_of, launch_replicas, scatter_to_each, stop_actors
from tapeflow.distributed.epoch_data import EpochStream, first_batch
from tapeflow.distributed.gradient_graph import freeze_gradient_step
from tapeflow.distributed.inference import ClusterInference
from tapeflow.distributed.liveness import WorkerLost, find_lost, lost_workers
from tapeflow.distributed.placement import place_variables
from tapeflow.distributed.stragglers import checked_stragglers
from tapeflow.distributed.update_log import UpdateLog
from tapeflow.ops.registry import as_tensor

_NAME = "AsyncParameterServer"
_POLL_INTERVAL = 0.02  # seconds between the client's looks at the update log


@dataclass(frozen=True)
class AsyncStep:
    """One asynchronous update: the epoch's `batch` it was computed on, by `replica`; the
    `step` at which it was applied (None if dropped); the version of each shard's
    parameters it was computed from (`pulled`), its `staleness` and the batch's loss."""

    batch: int
    replica: int
    step: int | None
    pulled: tuple[int, ...]
    staleness: int
    loss: float

    @property
    def applied(self) -> bool:
        return self.step is not None


class AsyncParameterServer(ClusterInference):
    """Asynchronous training over `replicas` replicas, one per worker of `cluster`; pass it
    to `model.fit(..., distribute=...)`.

    `staleness_bound` (None or an integer >= 0) drops updates staler than it; `timeout`
    (seconds) bounds every wait; variables larger than `row_block_bytes` are split by
    rows over the shards; `straggler_delay` ({replica: seconds}) delays a replica after
    each gradient, to simulate a slow worker; `checkpoint_dir` and `keep_checkpoints` say
    where each epoch's checkpoint is written and how many are kept. After `fit`, `steps`
    holds an `AsyncStep` per update, `checkpoints` the files written and `recoveries` the
    failures recovered from; each epoch's logs (so the History) carry `staleness_mean`,
    `staleness_max` and `updates_dropped`. See the module docstring for what an update
    computes and how failures are handled.
    """

    def __init__(
        self,
        cluster,
        replicas: int = 2,
        *,
        staleness_bound: int | None = None,
        timeout: float = 60.0,
        row_block_bytes: int = 1 << 20,
        straggler_delay: dict[int, float] | None = None,
        checkpoint_dir=None,
        keep_checkpoints: int = 3,
    ):
        _count("replicas", replicas, minimum=1, owner=_NAME)
        _count("keep_checkpoints", keep_checkpoints, minimum=1, owner=_NAME)
        if staleness_bound is not None:
            _count("staleness_bound", staleness_bound, minimum=0, owner=_NAME)
        _count("row_block_bytes", row_block_bytes, minimum=1, owner=_NAME)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"{_NAME}: timeout must be a number of seconds > 0, got {timeout!r}")
        self.cluster = cluster
        self.replicas = replicas
        self.staleness_bound = staleness_bound
        self.timeout = float(timeout)
        self.row_block_bytes = row_block_bytes
        self.straggler_delay = checked_stragglers(straggler_delay, 0.0, replicas, _NAME).fixed
        self.checkpoint_dir = checkpoint_dir
        self.keep_checkpoints = keep_checkpoints
        self.steps: list[AsyncStep] = []
        self.checkpoints: list[str] = []
        self.recoveries: list[Recovery] = []
        self.workers()

    def workers(self) -> list[str]:
        """The workers that run the replicas and parameter shards, or a ValueError if the
        cluster has too few."""
        workers = self.cluster.workers
        if self.replicas > len(workers):
            raise ValueError(
                f"{_NAME}: {self.replicas} replicas need {self.replicas} workers, but the cluster has {len(workers)}"
            )
        return workers

    def start(self, model, x, y, batch_size: int) -> AsyncSession:
        """Set up training of `model` on arrays `x` (or a tuple of arrays) and `y`, or on a
        Dataset `x` of (x, y) batches (y None): `Model.fit` calls this, then `run_epoch`
        per epoch and `close` at the end."""
        return AsyncSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"AsyncParameterServer(replicas={self.replicas}, staleness_bound={self.staleness_bound})"


class AsyncSession:
    """One `fit` on the cluster: the parameter shards, update log and scattered data of
    the current placement, made anew after a lost worker, and released by `close`."""

    def __init__(self, strategy: AsyncParameterServer, model, x, y, batch_size: int):
        self.strategy = strategy
        self.model = model
        self.dataset = x if isinstance(x, Dataset) else None
        if self.dataset is not None:
            x, y = first_batch(self.dataset)
            sizes = {len(y)}
            if not model.built:
                model(x, training=False)
        else:
            sizes = {min(batch_size, len(y)), len(y) % batch_size} - {0}
        self.x, self.y = x, y
        strategy.steps, strategy.checkpoints, strategy.recoveries = [], [], []
        workers = strategy.workers()
        _check_optimizer(model.optimizer)
        self.with_predictions = bool(model.compiled_metrics)
        self.graph_bytes, self.layout, self.variables = freeze_gradient_step(model, x, y, sizes, self.with_predictions)
        if not self.layout.n_trainable:
            raise ValueError(f"fit: the loss of model '{model.name}' depends on none of its trainable variables")
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables[: self.layout.n_trainable])
        self.arrays = None if self.dataset is not None else ([*x, y] if isinstance(x, tuple) else [x, y])
        self.files = None
        if strategy.checkpoint_dir is not None:
            self.files = CheckpointFiles(strategy.checkpoint_dir, strategy.keep_checkpoints)
        self.client = strategy.cluster.client
        self._held, self.shards, self.log, self.used = [], [], None, []
        self._place(workers)

    def _place(self, workers: list[str]) -> None:
        """Start the shards, the update log and the data on `workers` (replicas on the first ones)."""
        blocks = place_variables([v.shape for v in self.variables], len(workers), self.strategy.row_block_bytes)
        by_shard = [(w, tuple(b for b in blocks if b.shard == j)) for j, w in enumerate(workers)]
        self.shard_workers = [w for w, held in by_shard if held]
        self.blocks = tuple(held for _, held in by_shard if held)
        self.replica_workers = workers[: self.strategy.replicas]
        self.used = sorted(set(self.shard_workers) | set(self.replica_workers))
        try:
            self._launch_services(self.graph_bytes, self.arrays)
        except BaseException:
            self.close()
            raise

    def _launch_services(self, graphs, data) -> None:
        client, timeout, n_trainable = self.client, self.strategy.timeout, self.layout.n_trainable
        self.data = None if data is None else self._scatter(data)  # a Dataset's epochs go out in `_run`
        (self.graphs,) = self._scatter([graphs])
        self._held += futures_of([self.data, self.graphs])
        config = master_copy.optimizer_config(self.optimizer)
        shard_futures = [
            client.submit(
                AsyncParameterShard,
                list(blocks),
                [self.variables[b.variable].name for b in blocks],
                [b.variable < n_trainable for b in blocks],
                [b.variable >= n_trainable or self.optimizer._decays(self.variables[b.variable]) for b in blocks],
                config,
                timeout,
                actor=True,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for worker, blocks in zip(self.shard_workers, self.blocks, strict=True)
        ]
        log_future = client.submit(
            UpdateLog,
            self.strategy.staleness_bound,
            actor=True,
            workers=[self.replica_workers[0]],
            allow_other_workers=False,
            pure=False,
        )
        self._held += [*shard_futures, log_future]
        self.shards = [f.result(timeout=timeout) for f in shard_futures]
        self.log = log_future.result(timeout=timeout)

    def _scatter(self, items: list) -> list[PerWorker]:
        """`items`, each copied to every replica's worker (see `PerWorker`)."""
        return scatter_to_each(self.client, items, self.replica_workers, self.strategy.timeout)

    # ------------------------------------------------------------ epochs
    def run_epoch(self, batches, callbacks) -> dict:
        """Train one epoch on `batches` (arrays of row numbers, or the Dataset), calling the
        batch callbacks as updates are committed; returns the epoch's logs. Runs the epoch
        again from its start (the last checkpoint) on the workers alive when a worker in use
        dies."""
        if self.dataset is not None:
            batches = self._next_stream()
        rows = [np.asarray(b) for b in batches]
        strategy, first, failures = self.strategy, len(self.strategy.steps), 0
        self.reported = 0  # batch callbacks the epoch has made
        while True:
            try:
                if not self._held:
                    self._place(self._alive_workers())
                logs = self._run(rows, callbacks)
                break
            except Exception as error:
                lost = find_lost(strategy.cluster, self.used, error)
                self._stop()
                self.close()
                if not lost:
                    raise
                failures += 1
                step = self.optimizer.iterations + len(strategy.steps) - first
                strategy.recoveries.append(Recovery(tuple(lost), step, self.optimizer.iterations, repr(error)))
                if failures >= _MAX_RECOVERIES:
                    raise RuntimeError(
                        f"fit: workers died {failures} times in a row during the epoch after the checkpoint of "
                        f"step {self.optimizer.iterations} (last lost: {lost}); giving up"
                    ) from error
                del strategy.steps[first:]
                self.model._reset_metrics()
        if self.files is not None:
            epoch = getattr(self.model, "_fit_epoch", 0)
            strategy.checkpoints.append(self.files.write(self.model, self.optimizer.iterations, epoch, len(rows)))
        return logs

    def _next_stream(self) -> list[np.ndarray]:
        """Scan the Dataset's next epoch; returns its batches of row numbers. Batch sizes not
        seen before get their gradient steps frozen, and a new placement to ship them."""
        self.stream = EpochStream.scan(self.dataset)
        self.y = self.stream.labels
        new_sizes = set(self.stream.sizes) - set(self.graph_bytes)
        if new_sizes:
            graphs, _, _ = freeze_gradient_step(self.model, self.x, self.y, new_sizes, self.with_predictions)
            self.graph_bytes = {**self.graph_bytes, **graphs}
            self.close()
        bounds = np.cumsum((0, *self.stream.sizes))
        return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _alive_workers(self) -> list[str]:
        """The workers alive (at least one, waiting up to `timeout` for it)."""
        deadline = time.monotonic() + self.strategy.timeout
        while not (workers := self.strategy.cluster.workers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"fit: no worker is alive, and none joined within {self.strategy.timeout:g}s")
            time.sleep(0.1)
        return workers

    def _run(self, rows: list[np.ndarray], callbacks) -> dict:
        """One attempt at the epoch on the current placement."""
        strategy, client = self.strategy, self.client
        offsets = tuple(np.cumsum([0, *map(len, rows)]).tolist())
        order = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self._begin_epoch(len(rows))
        if self.dataset is not None:  # every replica runs the epoch's pipeline (see epoch_data)
            (stream,) = self._scatter([self.stream])
            self._held += futures_of([stream])
            data = stream
        else:
            data = self.data
        (order_future,) = self._scatter([order])
        layout, blocks, timeout = self.layout, self.blocks, strategy.timeout
        jobs = [
            AsyncReplicaJob(r, offsets, layout, blocks, strategy.straggler_delay.get(r, 0.0), timeout)
            for r in range(len(self.replica_workers))
        ]
        shared = (self.graphs, data, order_future, self.shards, self.log)
        replicas = launch_replicas(client, run_async_replica, jobs, self.replica_workers, shared)
        self._held += [*futures_of([order_future]), *replicas]
        logs = self._follow(len(rows), order, offsets, callbacks, replicas)
        self._wait(replicas)
        self._end_epoch()
        return logs

    def _begin_epoch(self, n_batches: int) -> None:
        """Send the client's parameters, slots, step counter and learning rate to the shards."""
        optimizer, timeout = self.optimizer, self.strategy.timeout
        parts = master_copy.shard_parts(self.variables, optimizer, self.layout.n_trainable, self.blocks)
        rate = master_copy.learning_rate(optimizer)
        calls = [
            shard.begin_epoch(values, slots, optimizer.iterations, rate)
            for shard, (values, slots) in zip(self.shards, parts, strict=True)
        ]
        calls.append(self.log.begin_epoch(optimizer.iterations, n_batches))
        for call in calls:
            call.result(timeout=timeout)

    def _follow(self, n_batches: int, order: np.ndarray, offsets, callbacks, replicas) -> dict:
        """Report each committed update to the callbacks and metrics, in commit order."""
        timeout = self.strategy.timeout
        logs, done, staleness, dropped = {}, 0, [], 0
        deadline, polled, watched = time.monotonic() + timeout, 0.0, time.monotonic()
        while done < n_batches:
            time.sleep(max(0.0, polled + _POLL_INTERVAL - time.monotonic()))
            polled = time.monotonic()
            if polled - watched > _WATCH_INTERVAL:
                watched = polled
                lost = lost_workers(self.used, self.strategy.cluster.workers)
                if lost:
                    raise WorkerLost(lost)
            records = self.log.wait(0.5).result(timeout=timeout)
            if not records:
                _raise_failed(replicas)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"fit: no update was committed within {timeout:g}s ({done} of {n_batches} batches done)"
                    )
                continue
            for record in records:
                report = done >= self.reported  # an attempt after a recovery skips what callbacks saw
                if report:
                    callbacks.on_train_batch_begin(done)
                entry = AsyncStep(*(record[k] for k in ("batch", "replica", "step", "pulled", "staleness", "loss")))
                self.strategy.steps.append(entry)
                staleness.append(entry.staleness)
                if entry.applied:
                    logs = self._update_metrics(record, order, offsets)
                else:
                    dropped += 1
                    logs = logs or self.model._metric_results()
                if report:
                    callbacks.on_train_batch_end(done, logs)
                    self.reported = done + 1
                done += 1
            deadline = time.monotonic() + timeout
        logs = dict(logs)
        logs.update(
            staleness_mean=float(np.mean(staleness)) if staleness else 0.0,
            staleness_max=float(max(staleness, default=0)),
            updates_dropped=float(dropped),
        )
        return logs

    def _update_metrics(self, record: dict, order: np.ndarray, offsets) -> dict:
        y_true = y_pred = None
        if self.with_predictions:
            batch = record["batch"]
            y_true = as_tensor(self.y[order[offsets[batch] : offsets[batch + 1]]])
            y_pred = as_tensor(np.asarray(record["predictions"]))
        rows = int(offsets[record["batch"] + 1] - offsets[record["batch"]])
        return self.model._update_metrics(y_true, y_pred, as_tensor(np.float32(record["loss"])), batch_size=rows)

    def _wait(self, replicas) -> None:
        deadline = time.monotonic() + self.strategy.timeout
        for future in replicas:
            future.result(timeout=max(deadline - time.monotonic(), 0.1))

    def _end_epoch(self) -> None:
        """Read the parameters, slots and step counter back into the client's model."""
        timeout = self.strategy.timeout
        states = [c.result(timeout=timeout) for c in [shard.state() for shard in self.shards]]
        master_copy.restore(self.variables, self.optimizer, self.layout.n_trainable, self.blocks, states)

    # ------------------------------------------------------------ teardown
    def _stop(self) -> None:
        """Release every replica waiting on a shard or the log (best effort; actors on workers
        that left are skipped, since their calls could only time out)."""
        try:
            alive = self.strategy.cluster.workers
        except Exception:  # noqa: BLE001 - a scheduler that does not answer: nothing to release
            return
        actors = list(zip(self.shards, self.shard_workers, strict=False))
        if self.log is not None:
            actors.append((self.log, self.replica_workers[0]))
        stop_actors(actors, alive)

    def close(self) -> None:
        """Release the replicas, the shards, the log and the scattered data on the cluster
        (safe to call twice)."""
        if self._held:
            self.client.cancel(self._held, force=True)
        self._held, self.shards, self.log = [], [], None
