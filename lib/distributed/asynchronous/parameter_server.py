"""`AsyncParameterServer`: asynchronous data-parallel training on a Dask cluster, the
parameter-server scheme of DistBelief (TensorFlow white paper, section 7).

Each replica trains on whichever batch it is handed next, at the parameters it last
received, and its update is applied by the parameter shards in the order the update
log gives it, with no barrier between replicas: faster steps, at the price of stale
gradients, which `staleness_bound` can drop. Each update is clipped by norm
(`clipnorm`, `global_clipnorm`) by the replica that computed it, which holds all of it,
as a lone worker's optimizer would clip it. With one replica training equals
single-process `fit`. docs/distributed.md says what an update computes and how a lost
worker is recovered from.

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

from tapeflow.distributed.asynchronous.deployment import AsyncDeployment
from tapeflow.distributed.checks import check_count
from tapeflow.distributed.parameters.deployment import shard_spec
from tapeflow.distributed.runtime.stragglers import checked_stragglers
from tapeflow.distributed.runtime.tasks import raise_failed
from tapeflow.distributed.strategy import POLL_INTERVAL, WATCH_INTERVAL, Epoch, Strategy, TrainingSession
from tapeflow.ops.registry import as_tensor


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


class AsyncParameterServer(Strategy):
    """Asynchronous training over `replicas` replicas, one per worker of `cluster`; pass it
    to `model.fit(..., distribute=...)`.

    `staleness_bound` (None or an integer >= 0) drops updates staler than it; `timeout`
    (seconds) bounds every wait; variables larger than `row_block_bytes` are split by
    rows over the shards; `straggler_delay` ({replica: seconds}) delays a replica after
    each gradient, to simulate a slow worker; `checkpoint_dir` and `keep_checkpoints` say
    where each epoch's checkpoint is written and how many are kept. After `fit`, `steps`
    holds an `AsyncStep` per update, `checkpoints` the files written and `recoveries` the
    failures recovered from; each epoch's logs (so the History) carry `staleness_mean`,
    `staleness_max` and `updates_dropped`.
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
        check_count("replicas", replicas, minimum=1, owner=self.name)
        if staleness_bound is not None:
            check_count("staleness_bound", staleness_bound, minimum=0, owner=self.name)
        check_count("row_block_bytes", row_block_bytes, minimum=1, owner=self.name)
        super().__init__(
            cluster, replicas, timeout=timeout, checkpoint_dir=checkpoint_dir, keep_checkpoints=keep_checkpoints
        )
        self.staleness_bound = staleness_bound
        self.row_block_bytes = row_block_bytes
        self.straggler_delay = checked_stragglers(straggler_delay, 0.0, replicas, self.name).fixed
        self.workers()

    def start(self, model, x, y, batch_size: int) -> AsyncSession:
        return AsyncSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"AsyncParameterServer(replicas={self.replicas}, staleness_bound={self.staleness_bound})"


class AsyncSession(TrainingSession):
    """One `fit` with `AsyncParameterServer`. A failed epoch runs again from its start
    (its checkpoint) on the workers alive, with fewer replicas if fewer remain."""

    min_workers = 1

    def __init__(self, strategy: AsyncParameterServer, model, x, y, batch_size: int):
        super().__init__(strategy, model, x, y, batch_size)
        workers = strategy.workers()
        self.freeze()
        self.open_checkpoints()
        self.place(workers)

    def place(self, workers: list[str]) -> None:
        """Start the shards, the update log and the data on `workers` (replicas on the first ones)."""
        strategy = self.strategy
        self.freeze()  # batch sizes a Dataset's epoch brought
        spec = shard_spec(self.variables, self.layout.n_trainable, self.optimizer, strategy.row_block_bytes)
        self.used = list(workers)
        self.deployment = AsyncDeployment(
            strategy.cluster.client,
            workers,
            min(strategy.replicas, len(workers)),
            spec,
            self.layout,
            dict(self.graphs),
            self.arrays,
            strategy.staleness_bound,
            strategy.straggler_delay,
            strategy.timeout,
            self.watch,
        )
        self.used = self.deployment.used

    # ------------------------------------------------------------ epochs
    def begin_epoch(self, rows: list[np.ndarray]) -> Epoch:
        epoch = super().begin_epoch(rows)
        self.first_record = len(self.strategy.steps)
        return epoch

    def failed_step(self, epoch: Epoch) -> int:
        return epoch.first_step + len(self.strategy.steps) - self.first_record

    def rewind(self, epoch: Epoch) -> None:
        """The updates of the lost attempt are forgotten: the epoch runs again from its start."""
        del self.strategy.steps[self.first_record :]
        self.model.reset_metrics()

    def run_steps(self, epoch: Epoch, callbacks) -> dict:
        """One attempt at the epoch on the current placement; the epoch's end is a checkpoint."""
        deployment = self.deployment
        offsets = tuple(np.cumsum([0, *map(len, epoch.rows)]).tolist())
        order = epoch.order()
        deployment.begin(*self.client_state(), len(epoch.rows))
        replicas = deployment.launch_epoch(offsets, order, self.stream)
        logs = self._follow(epoch, order, offsets, callbacks, replicas)
        deployment.wait(replicas)
        self.take_state(*deployment.state())
        self.write_checkpoint(self.optimizer.iterations, epoch, len(epoch.rows))
        return logs

    def _follow(self, epoch: Epoch, order: np.ndarray, offsets, callbacks, replicas) -> dict:
        """Report each committed update to the callbacks and metrics, in commit order."""
        timeout, n_batches = self.strategy.timeout, len(epoch.rows)
        logs, done, staleness, dropped = {}, 0, [], 0
        deadline, polled, watched = time.monotonic() + timeout, 0.0, time.monotonic()
        while done < n_batches:
            time.sleep(max(0.0, polled + POLL_INTERVAL - time.monotonic()))
            polled = time.monotonic()
            if polled - watched > WATCH_INTERVAL:
                watched = polled
                self.watch()
            records = self.deployment.records(0.5)
            if not records:
                raise_failed(replicas)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"fit: no update was committed within {timeout:g}s ({done} of {n_batches} batches done)"
                    )
                continue
            for record in records:
                report = epoch.first_step + done >= epoch.reported  # a re-run skips what callbacks saw
                if report:
                    callbacks.on_train_batch_begin(done)
                entry = AsyncStep(*(record[k] for k in ("batch", "replica", "step", "pulled", "staleness", "loss")))
                self.strategy.steps.append(entry)
                staleness.append(entry.staleness)
                if entry.applied:
                    logs = self._update_metrics(record, order, offsets)
                else:
                    dropped += 1
                    logs = logs or self.model.get_metrics_result()
                if report:
                    callbacks.on_train_batch_end(done, logs)
                    epoch.reported = epoch.first_step + done + 1
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
        batch = record["batch"]
        y_true = y_pred = None
        if self.with_predictions:
            y_true = as_tensor(self.y[order[offsets[batch] : offsets[batch + 1]]])
            y_pred = as_tensor(np.asarray(record["predictions"]))
        rows = int(offsets[batch + 1] - offsets[batch])
        return self.model.update_metrics(y_true, y_pred, as_tensor(np.float32(record["loss"])), batch_size=rows)
