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
An epoch that fails leaves the model at the last completed epoch.

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
from tapeflow.distributed.data_parallel import _check_optimizer, _count, _raise_failed
from tapeflow.distributed.deployment import launch_replicas
from tapeflow.distributed.gradient_graph import freeze_gradient_step
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


class AsyncParameterServer:
    """Asynchronous training over `replicas` replicas, one per worker of `cluster`; pass it
    to `model.fit(..., distribute=...)`.

    `staleness_bound` (None or an integer >= 0) drops updates staler than it; `timeout`
    (seconds) bounds every wait; variables larger than `row_block_bytes` are split by
    rows over the shards; `straggler_delay` ({replica: seconds}) delays a replica after
    each gradient, to simulate a slow worker. After `fit`, `steps` holds an `AsyncStep`
    per update, and each epoch's logs (so the History) carry `staleness_mean`,
    `staleness_max` and `updates_dropped`. See the module docstring for what an update
    computes.
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
    ):
        _count("replicas", replicas, minimum=1, owner=_NAME)
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
        self.steps: list[AsyncStep] = []
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
        """Set up training of `model` on arrays `x` (or a tuple of arrays) and `y`:
        `Model.fit` calls this, then `run_epoch` per epoch and `close` at the end."""
        if isinstance(x, Dataset):
            raise ValueError(
                f"fit: {_NAME} trains on arrays; for a tp.data.Dataset use tp.distributed.DataParallel, "
                "or pass the arrays"
            )
        return AsyncSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"AsyncParameterServer(replicas={self.replicas}, staleness_bound={self.staleness_bound})"


class AsyncSession:
    """One `fit` on the cluster: the parameter shards, update log and scattered data, kept
    across epochs and released by `close`."""

    def __init__(self, strategy: AsyncParameterServer, model, x, y, batch_size: int):
        self.strategy = strategy
        self.model = model
        self.y = y
        strategy.steps = []
        workers = strategy.workers()
        _check_optimizer(model.optimizer)
        self.with_predictions = bool(model.compiled_metrics)
        sizes = {min(batch_size, len(y)), len(y) % batch_size} - {0}
        graphs, self.layout, self.variables = freeze_gradient_step(model, x, y, sizes, self.with_predictions)
        if not self.layout.n_trainable:
            raise ValueError(f"fit: the loss of model '{model.name}' depends on none of its trainable variables")
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables[: self.layout.n_trainable])
        blocks = place_variables([v.shape for v in self.variables], len(workers), strategy.row_block_bytes)
        by_shard = [(w, tuple(b for b in blocks if b.shard == j)) for j, w in enumerate(workers)]
        self.shard_workers = [w for w, held in by_shard if held]
        self.blocks = tuple(held for _, held in by_shard if held)
        self.replica_workers = workers[: strategy.replicas]
        self.client = strategy.cluster.client
        self._held = []
        try:
            self._launch_services(graphs, [*x, y] if isinstance(x, tuple) else [x, y])
        except BaseException:
            self.close()
            raise

    def _launch_services(self, graphs, data) -> None:
        client, timeout, n_trainable = self.client, self.strategy.timeout, self.layout.n_trainable
        self.data = self._scatter(data)
        (self.graphs,) = self._scatter([graphs])
        self._held += [*self.data, self.graphs]
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

    def _scatter(self, items: list) -> list:
        """Futures of `items`, each copied to every replica's worker."""
        return self.client.scatter(
            items, workers=self.replica_workers, broadcast=True, hash=False, timeout=self.strategy.timeout
        )

    # ------------------------------------------------------------ epochs
    def run_epoch(self, batches, callbacks) -> dict:
        """Train one epoch on `batches` (arrays of row numbers), calling the batch callbacks
        as updates are committed; returns the epoch's logs."""
        strategy, client = self.strategy, self.client
        rows = [np.asarray(b) for b in batches]
        offsets = tuple(np.cumsum([0, *map(len, rows)]).tolist())
        order = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self._begin_epoch(len(rows))
        (order_future,) = self._scatter([order])
        layout, blocks, timeout = self.layout, self.blocks, strategy.timeout
        jobs = [
            AsyncReplicaJob(r, offsets, layout, blocks, strategy.straggler_delay.get(r, 0.0), timeout)
            for r in range(len(self.replica_workers))
        ]
        shared = (self.graphs, self.data, order_future, self.shards, self.log)
        replicas = launch_replicas(client, run_async_replica, jobs, self.replica_workers, shared)
        try:
            logs = self._follow(len(rows), order, offsets, callbacks, replicas)
            self._wait(replicas)
            self._end_epoch()
        except BaseException:
            self._stop()
            client.cancel(replicas, force=True)
            raise
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
        deadline, polled = time.monotonic() + timeout, 0.0
        while done < n_batches:
            time.sleep(max(0.0, polled + _POLL_INTERVAL - time.monotonic()))
            polled = time.monotonic()
            records = self.log.wait(0.5).result(timeout=timeout)
            if not records:
                _raise_failed(replicas)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"fit: no update was committed within {timeout:g}s ({done} of {n_batches} batches done)"
                    )
                continue
            for record in records:
                callbacks.on_train_batch_begin(done)
                entry = AsyncStep(*(record[k] for k in ("batch", "replica", "step", "pulled", "staleness", "loss")))
                self.strategy.steps.append(entry)
                staleness.append(entry.staleness)
                if entry.applied:
                    logs = self._update_metrics(record, order, offsets)
                else:
                    dropped += 1
                    logs = logs or self.model._metric_results()
                callbacks.on_train_batch_end(done, logs)
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
        return self.model._update_metrics(y_true, y_pred, as_tensor(np.float32(record["loss"])))

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
        """Release every replica waiting on a shard or the log (best effort)."""
        for actor in [*getattr(self, "shards", []), getattr(self, "log", None)]:
            if actor is not None:
                try:
                    actor.stop().result(timeout=5)
                except Exception:  # noqa: BLE001 - an actor already gone has nothing to release
                    pass

    def close(self) -> None:
        """Release the shards, the log and the scattered data on the cluster."""
        if self._held:
            self.client.cancel(self._held, force=True)
        self._held = []
