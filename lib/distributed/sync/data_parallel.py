"""`DataParallel`: synchronous data-parallel training on a Dask cluster, with optional
backup workers (the TensorFlow paper's synchronous replication, OSDI 2016 section 4.4).

Each step's global batch is cut into one shard per replica (and backup worker); the
step applies, with the model's own optimizer, the rows-weighted mean of the first
`replicas` shard gradients to arrive, clipped by norm as one process would clip them
(the parameter shards add up their sums of squares where a norm spans shards), so without
backups training equals single-process `fit` on the same batches. Parameters live in parameter shards; after a
worker dies, training goes on from the last checkpoint. docs/distributed.md says what
a step computes, how checkpoints are taken and what a recovery equals.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow.distributed.checkpoints import CheckpointPolicy
from tapeflow.distributed.checks import check_count, check_loss, check_seconds, split_sizes
from tapeflow.distributed.parameters.deployment import shard_spec
from tapeflow.distributed.runtime.stragglers import checked_stragglers
from tapeflow.distributed.runtime.tasks import raise_failed
from tapeflow.distributed.strategy import POLL_INTERVAL, WATCH_INTERVAL, Epoch, PlaceAnew, Strategy, TrainingSession
from tapeflow.distributed.sync.deployment import Deployment
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.ops.registry import as_tensor

_PROBE_WAIT = 2.0  # seconds the parameter shards and the step log get to answer when a step is late


@dataclass(frozen=True)
class StepRecord:
    """One synchronous step: the replicas whose shard gradients it applied, those whose
    launched shards it dropped, and the loss over the applied rows."""

    step: int
    applied: tuple[int, ...]
    dropped: tuple[int, ...]
    loss: float


@dataclass(frozen=True)
class WorkerAssignment:
    """Which workers ran the steps from `first_step` on: the replicas' (backups last) and
    the parameter shards'; `strategy.placements` lists one per placement of training."""

    first_step: int
    replica_workers: tuple[str, ...]
    shard_workers: tuple[str, ...]
    replicas: int
    backup_workers: int


class DataParallel(Strategy):
    """Synchronous data-parallel training over `replicas` replicas plus `backup_workers`
    backups, one per worker of `cluster`; pass it to `model.fit(..., distribute=...)`.

    `timeout` (seconds) bounds every wait; variables larger than `row_block_bytes` are
    split by rows over the parameter shards; `straggler_delay` ({replica: seconds})
    delays a replica's every step, to simulate a slow worker, and
    `random_straggler_delay` (seconds) delays one replica a step, drawn at random (see
    `tapeflow.distributed.runtime.stragglers`). After `fit`, `steps` holds a
    `StepRecord` per step, and with backup workers the epoch logs (and so the History)
    carry `shards_applied` and `shards_dropped`, the epoch's totals.

    Checkpoints and failures: `checkpoint_every_steps` and/or `checkpoint_every_seconds`
    set how often the state of a step is checkpointed (besides each epoch's end), and
    `checkpoint_dir` where the newest `keep_checkpoints` are written; after a worker
    dies, training restarts from the last checkpoint, on `replicas + backup_workers`
    workers, or on as few as `min_replicas` when that is given. After `fit`,
    `checkpoints` lists the files written, `recoveries` the failures recovered from and
    `placements` where the steps ran (a `WorkerAssignment` each).
    """

    def __init__(
        self,
        cluster,
        replicas: int = 2,
        backup_workers: int = 0,
        *,
        timeout: float = 60.0,
        row_block_bytes: int = 1 << 20,
        straggler_delay: dict[int, float] | None = None,
        random_straggler_delay: float = 0.0,
        checkpoint_dir=None,
        checkpoint_every_steps: int | None = None,
        checkpoint_every_seconds: float | None = None,
        keep_checkpoints: int = 3,
        min_replicas: int | None = None,
    ):
        check_count("replicas", replicas, minimum=1, owner=self.name)
        check_count("backup_workers", backup_workers, minimum=0, owner=self.name)
        check_count("row_block_bytes", row_block_bytes, minimum=1, owner=self.name)
        if min_replicas is not None:
            check_count("min_replicas", min_replicas, minimum=1, owner=self.name)
            if min_replicas > replicas:
                raise ValueError(f"DataParallel: min_replicas ({min_replicas}) must not exceed replicas ({replicas})")
        if checkpoint_every_steps is not None:
            check_count("checkpoint_every_steps", checkpoint_every_steps, minimum=1, owner=self.name)
        if checkpoint_every_seconds is not None:
            check_seconds("checkpoint_every_seconds", checkpoint_every_seconds, owner=self.name)
        super().__init__(
            cluster, replicas, timeout=timeout, checkpoint_dir=checkpoint_dir, keep_checkpoints=keep_checkpoints
        )
        self.backup_workers = backup_workers
        self.row_block_bytes = row_block_bytes
        self.stragglers = checked_stragglers(
            straggler_delay, random_straggler_delay, replicas + backup_workers, self.name
        )
        self.checkpoint_every_steps = checkpoint_every_steps
        self.checkpoint_every_seconds = None if checkpoint_every_seconds is None else float(checkpoint_every_seconds)
        self.min_replicas = min_replicas
        self.placements: list[WorkerAssignment] = []
        self.workers()

    @property
    def needed_workers(self) -> int:
        """The fewest workers training runs on: `min_replicas`, or all replicas and backups."""
        return self.replicas + self.backup_workers if self.min_replicas is None else self.min_replicas

    def _needs(self) -> str:
        if self.min_replicas:
            return f"min_replicas={self.min_replicas} needs"
        return f"{self.replicas} replicas + {self.backup_workers} backup workers need"

    def start(self, model, x, y, batch_size: int) -> SyncSession:
        return SyncSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"DataParallel(replicas={self.replicas}, backup_workers={self.backup_workers})"


class SyncSession(TrainingSession):
    """One `fit` with `DataParallel`: the current `Deployment`, the checkpoints of steps
    taken on the way, and the recovery from lost workers; released by `close`."""

    sparse_gradients = True

    def __init__(self, strategy: DataParallel, model, x, y, batch_size: int):
        super().__init__(strategy, model, x, y, batch_size)
        strategy.placements = []
        parts = strategy.replicas + strategy.backup_workers
        workers = strategy.workers()
        if self.batch_size < parts:
            raise ValueError(
                f"fit: a global batch of {self.batch_size} does not split over {strategy.replicas} replicas + "
                f"{strategy.backup_workers} backup workers: each of the {parts} shards needs at least one sample; "
                f"use batch_size >= {parts}"
            )
        check_loss(model.loss)
        self.freeze(parts)
        self.open_checkpoints()
        self.policy = CheckpointPolicy(strategy.checkpoint_every_steps, strategy.checkpoint_every_seconds)
        self.state_step = self.optimizer.iterations  # the step whose state the client's model holds
        self.place(workers)

    def graph_sizes(self, parts: int | None = None) -> set[int]:
        """Shard sizes: each batch is cut into `parts` shards."""
        strategy = self.strategy
        return split_sizes(self.batch_sizes, parts or strategy.replicas + strategy.backup_workers)

    # ------------------------------------------------------------ placement
    def place(self, workers: list[str]) -> None:
        """Make the deployment that trains from `state_step` on `workers`."""
        strategy = self.strategy
        replicas = min(strategy.replicas, len(workers))
        backups = min(strategy.backup_workers, len(workers) - replicas)
        self.freeze(replicas + backups)
        spec = shard_spec(self.variables, self.layout.n_trainable, self.optimizer, strategy.row_block_bytes)
        self.used = list(workers)
        self.deployment = Deployment(
            strategy.cluster.client,
            workers,
            replicas,
            backups,
            spec,
            self.layout,
            {size: self.graphs[size] for size in self.graph_sizes(replicas + backups)},
            self.arrays,
            strategy.stragglers.among(replicas + backups),
            strategy.timeout,
            self.watch,
        )
        self.used = self.deployment.used
        strategy.placements.append(
            WorkerAssignment(
                self.state_step,
                tuple(self.deployment.replica_workers),
                tuple(self.deployment.shard_workers),
                replicas,
                backups,
            )
        )

    def abandon(self) -> None:
        """Release the deployment and forget the steps after `state_step`, which the
        client's model holds."""
        super().abandon()
        self.strategy.steps = [s for s in self.strategy.steps if s.step < self.state_step]

    def restored_step(self) -> int:
        return self.state_step

    # ------------------------------------------------------------ epochs
    def run_epoch(self, batches, callbacks) -> dict:
        self.state_step = self.optimizer.iterations  # callbacks may have restored a checkpoint
        return super().run_epoch(batches, callbacks)

    def begin_epoch(self, rows: list[np.ndarray]) -> Epoch:
        if self.deployment is not None and set(self.strategy.cluster.workers) != set(self.deployment.workers):
            self.abandon()  # workers joined or left since the last epoch
        return super().begin_epoch(rows)

    def run_steps(self, epoch: Epoch, callbacks) -> dict:
        """Run the epoch's steps from `state_step` on the current deployment."""
        deployment, start = self.deployment, self.state_step
        sizes = tuple(len(b) for b in epoch.rows[start - epoch.first_step :])
        plan = EpochPlan(start, sizes, deployment.replicas, deployment.backup_workers)
        armed = self.policy.steps_between(start, plan.end)
        order = epoch.order(start)
        deployment.begin(plan, *self.client_state(), armed)
        futures = deployment.launch_epoch(plan, order, self.stream)
        self._follow(epoch, plan, order, callbacks, futures, armed)
        deployment.wait(futures)
        self.take_state(*deployment.state())
        self.state_step = plan.end
        self._write(epoch, plan.end)
        logs = dict(epoch.logs)
        if self.strategy.backup_workers:
            done = [s for s in self.strategy.steps if epoch.first_step <= s.step < epoch.end]
            applied, dropped = sum(len(s.applied) for s in done), sum(len(s.dropped) for s in done)
            logs.update(shards_applied=float(applied), shards_dropped=float(dropped))
        return logs

    def _follow(self, epoch: Epoch, plan: EpochPlan, order: np.ndarray, callbacks, futures, armed: set[int]) -> None:
        """Report each completed step to the callbacks and metrics, in step order, and take
        the checkpoints on the way."""
        timeout = self.strategy.timeout
        step, waiting = plan.first_step, {}
        deadline, polled, watched, grow = time.monotonic() + timeout, 0.0, time.monotonic(), False
        while step < plan.end:
            time.sleep(max(0.0, polled + POLL_INTERVAL - time.monotonic()))  # fewer calls on the log's worker
            polled = time.monotonic()
            waiting.update((r["step"], r) for r in self.deployment.records(step, 0.5))
            if time.monotonic() - watched > WATCH_INTERVAL:
                self.watch()
                raise_failed(futures)
                watched, grow = time.monotonic(), self._can_grow()
            if step not in waiting:
                if time.monotonic() > deadline:
                    silent = self.deployment.silent(_PROBE_WAIT)
                    raise TimeoutError(f"fit: step {step} did not complete within {timeout:g}s ({silent})")
                continue
            while step in waiting:
                self._report(waiting.pop(step), epoch, plan, order, callbacks)
                step += 1
                if step < plan.end and (grow or self.policy.due()) and not any(s >= step for s in armed):
                    self._arm_soon(step, plan, armed)
                if step in armed:
                    armed.discard(step)
                    self._checkpoint(epoch, step)
            deadline = time.monotonic() + timeout

    def _can_grow(self) -> bool:
        """Whether fewer replicas run than asked for while workers that could take them joined."""
        deployment, strategy = self.deployment, self.strategy
        if deployment.replicas + deployment.backup_workers >= strategy.replicas + strategy.backup_workers:
            return False
        return bool(set(strategy.cluster.workers) - set(deployment.workers))

    def _report(self, record: dict, epoch: Epoch, plan: EpochPlan, order: np.ndarray, callbacks) -> None:
        step, shards = record["step"], record["shards"]
        total = sum(rows for _, _, rows, _ in shards)
        loss = sum(rows * loss for _, _, rows, loss in shards) / total
        applied = tuple(sorted(replica for _, replica, _, _ in shards))
        launched = {plan.replica_of(s, step) for s in range(plan.launched(step))}
        self.strategy.steps.append(StepRecord(step, applied, tuple(sorted(launched - set(applied))), float(loss)))
        if step < epoch.reported:
            return  # run again after a recovery: the callbacks and metrics saw its first run
        y_true = y_pred = None
        if self.with_predictions:
            rows = np.concatenate([plan.shard_rows(order, step, s) for s, _, _, _ in shards])
            y_true, y_pred = as_tensor(self.y[rows]), as_tensor(np.concatenate(record["predictions"]))
        callbacks.on_train_batch_begin(step - epoch.first_step)
        epoch.logs = self.model.update_metrics(y_true, y_pred, as_tensor(np.float32(loss)), batch_size=total)
        epoch.reported = step + 1
        callbacks.on_train_batch_end(step - epoch.first_step, epoch.logs)

    # ------------------------------------------------------------ checkpoints
    def _arm_soon(self, step: int, plan: EpochPlan, armed: set[int]) -> None:
        """Arm a snapshot of the first step from `step` on that no shard has passed yet."""
        target = step
        for _ in range(3):
            if target >= plan.end:
                return  # the end of the epoch is a checkpoint anyway
            ok, newest = self.deployment.arm(target)
            if ok:
                armed.add(target)
                return
            target = newest + 1

    def _checkpoint(self, epoch: Epoch, step: int) -> None:
        """Make the shards' snapshot of `step` the client's state and write it; then grow
        onto workers that joined if fewer replicas run than asked for."""
        state = self.deployment.snapshot(step)
        if state is None:
            raise RuntimeError(f"fit: the parameter shards were stopped before step {step}")
        self.take_state(*state)
        self.state_step = step
        self._write(epoch, step)
        if self._can_grow():
            raise PlaceAnew

    def _write(self, epoch: Epoch, step: int) -> None:
        self.policy.written()
        self.write_checkpoint(step, epoch, step - epoch.first_step)
