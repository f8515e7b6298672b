"""`DataParallel`: synchronous data-parallel training on a Dask cluster, with optional
backup workers (the TensorFlow paper's synchronous replication, OSDI 2016 section 4.4).

What a step computes. The global batch of a step (the rows single-process `fit` would
use, in the same shuffled order) is cut into `replicas + backup_workers` shards of
consecutive rows whose sizes differ by at most one. Each shard's gradient g_s is the
gradient of the model's loss (data loss plus regularization losses) on that shard's
rows alone. The step applies, with the model's own optimizer,

    g = sum over applied shards s, in shard order, of (rows_s / rows_applied) * g_s

- With `backup_workers=0` every shard is applied, so g is the gradient of the mean loss
  over the whole global batch: training equals single-process `fit` on the same batches
  (to float32 rounding), for losses that average over the batch (the default
  "sum_over_batch_size" reduction) and layers that treat samples independently and
  deterministically (batch normalization uses each shard's statistics, and dropout
  draws other masks).
- With `backup_workers=b`, `replicas + b` shard computations are launched and the first
  `replicas` to finish are applied: g is then the gradient of the mean loss over the rows
  of those shards only (the other b shards' rows are skipped for that step). A late
  shard is dropped, never applied to a later step. Replica r computes shard
  (r + step) mod (replicas + b), so a slow replica misses different rows each step.
- Variables the forward pass writes (batch-normalization statistics) take the same
  weighted mean of the values each applied shard computed.
- An Embedding's gradient stays sparse (as in one process, where optimizers update only
  the rows a batch names, Adam lazily): each replica pushes a row block only the rows
  its ids fall in, the shard applies them as one IndexedSlices, and its answer carries
  only the rows the step changed, so a table's traffic per step follows the batch's ids,
  not its size (each replica still holds the whole table, as the frozen step reads it).

Data. Arrays are copied to every replica's worker once, and each step's shards are
rows of them. A `tp.data.Dataset` of (x, y) batches (`fit(dataset, distribute=...)`)
is run by every replica itself, which keeps its shard of each batch (tf.data's DATA
auto-sharding: the whole pipeline runs on every worker); the client makes one pass
per epoch for the batch sizes and labels, and the replicas check theirs against it
(`tapeflow.distributed.epoch_data`). The batches must be the same on every pass:
tapeflow's `shuffle` is seeded, so its order is.

How it runs. Parameters and optimizer slots live in `ParameterShard` actors, at most one
per worker, holding whole variables or row blocks of large ones (`row_block_bytes`). The
client freezes the model's gradient step, ships it as graph-file bytes and launches one
long-running replica task per shard position and epoch; replicas talk to the shards and
to a `StepLog` actor directly, while the client follows the log to drive callbacks and
metrics (so a batch callback runs once its step is done: replicas never wait for the
client). The client's model is the master copy between epochs: its weights, optimizer
slots, step counter and learning rate are sent to the shards at the start of each epoch
and read back at its end, before validation and `on_epoch_end` (so checkpoints and
callbacks that change the learning rate work as in single-process training), and at
each checkpoint. An epoch that fails leaves the model at its last checkpoint (or the
start of the epoch).

Checkpoints. With `checkpoint_every_steps=N` the state after every N-th step (steps
numbered by the optimizer's counter), with `checkpoint_every_seconds=T` the state of
the next step once T seconds have passed since the last checkpoint, and in any case
the state at the end of each epoch, is a checkpoint: all shards copy their state as
their step counter reaches that step (replicas never pause), the client joins the
copies into its model and, with `checkpoint_dir`, writes it atomically to
`ckpt-<step>.h5` (`tapeflow.distributed.checkpoints`). Without `checkpoint_dir` the
checkpoints live in the client's memory only.

Fault tolerance (white paper section 3.3). The client asks the scheduler every
half second, and whenever a call fails, whether a worker holding a replica, a
parameter shard or the step log has left the cluster (Dask drops a killed worker
at once). Whatever died there (a replica, a parameter shard, the step log, or all
three on one worker), training restarts from the last checkpoint: the placement is
abandoned, a new one is made on the workers alive (the lost shards' variables go to
surviving or new workers), and the steps after the checkpoint run again on the same
batches. Nothing before the last checkpoint is lost and every step is applied once;
callbacks see each step once (metrics keep a re-run step's first values), and
`strategy.recoveries` and `strategy.placements` record what happened.

- By default (`min_replicas=None`) the size is fixed: training needs
  `replicas + backup_workers` workers, so a lost replica's shards are re-run on a
  surviving spare worker or on a new one (the replacement a Dask nanny starts, or any
  worker that joins within `timeout` seconds). Every step then has the shards of an
  uninterrupted run, and the result equals it exactly.
- With `min_replicas=m` training is elastic: it starts and goes on with as few as m
  workers, re-sharding each global batch over `min(replicas, workers)` replicas
  (backup workers are given up first). With `backup_workers=0` a step's gradient is
  still that of the mean loss over its whole global batch: the result equals an
  uninterrupted run up to float32 rounding.
- Workers that join are used from the next epoch, or, while fewer replicas run than
  asked for, from a step soon after they join: the client arms a snapshot of the next
  step no shard has reached, takes it as a checkpoint and places training anew.
- Too few workers for `timeout` seconds, an error that no lost worker explains (a
  timeout naming what did not answer, a failed checkpoint write), or failures three
  times in a row after the same checkpoint end `fit` with that error, the model left
  at the last checkpoint.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.distributed import master_copy
from tapeflow.distributed.checkpoints import CheckpointFiles, CheckpointPolicy
from tapeflow.distributed.deployment import Deployment, ShardSpec
from tapeflow.distributed.epoch_data import EpochStream, first_batch
from tapeflow.distributed.epoch_plan import EpochPlan
from tapeflow.distributed.gradient_graph import freeze_gradient_step
from tapeflow.distributed.inference import ClusterInference
from tapeflow.distributed.liveness import WorkerLost, find_lost, lost_workers
from tapeflow.distributed.stragglers import checked_stragglers
from tapeflow.ops.registry import as_tensor

_MEAN_REDUCTIONS = ("sum_over_batch_size", "mean_with_sample_weight")
_POLL_INTERVAL = 0.02  # seconds between the client's looks at the step log
_WATCH_INTERVAL = 0.5  # seconds between the client's questions to the scheduler about lost workers
_PROBE_WAIT = 2.0  # seconds the parameter shards and the step log get to answer when a step is late
_MAX_RECOVERIES = 3  # failures in a row restarting from the same checkpoint before fit gives up


@dataclass(frozen=True)
class StepRecord:
    """One synchronous step: the replicas whose shard gradients it applied, those whose
    launched shards it dropped, and the loss over the applied rows."""

    step: int
    applied: tuple[int, ...]
    dropped: tuple[int, ...]
    loss: float


@dataclass(frozen=True)
class Placement:
    """Where the steps from `first_step` on ran: the replicas' workers (backups last) and
    the parameter shards' workers."""

    first_step: int
    replica_workers: tuple[str, ...]
    shard_workers: tuple[str, ...]
    replicas: int
    backup_workers: int


@dataclass(frozen=True)
class Recovery:
    """A failure training recovered from: the workers lost, the first step the client had
    not seen complete when it noticed, the checkpoint step it restarted from, and the error."""

    lost_workers: tuple[str, ...]
    step: int
    restored_step: int
    error: str


class DataParallel(ClusterInference):
    """Synchronous data-parallel training over `replicas` replicas plus `backup_workers`
    backups, one per worker of `cluster`; pass it to `model.fit(..., distribute=...)`.

    `timeout` (seconds) bounds every wait; variables larger than `row_block_bytes` are
    split by rows over the parameter shards; `straggler_delay` ({replica: seconds})
    delays a replica's every step, to simulate a slow worker, and
    `random_straggler_delay` (seconds) delays one replica a step, drawn at random (see
    `tapeflow.distributed.stragglers`). After `fit`, `steps` holds
    a `StepRecord` per step, and with backup workers the epoch logs (and so the
    History) carry `shards_applied` and `shards_dropped`, the epoch's totals.

    Checkpoints and failures: `checkpoint_every_steps` and/or `checkpoint_every_seconds`
    set how often the state of a step is checkpointed (besides each epoch's end), and
    `checkpoint_dir` where the newest `keep_checkpoints` are written; after a worker
    dies, training restarts from the last checkpoint, on `replicas + backup_workers`
    workers, or on as few as `min_replicas` when that is given. After `fit`,
    `checkpoints` lists the files written, `recoveries` the failures recovered from and
    `placements` where the steps ran.
    See the module docstring for what each step computes and what a recovery equals.
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
        _count("replicas", replicas, minimum=1)
        _count("backup_workers", backup_workers, minimum=0)
        _count("row_block_bytes", row_block_bytes, minimum=1)
        _count("keep_checkpoints", keep_checkpoints, minimum=1)
        if min_replicas is not None:
            _count("min_replicas", min_replicas, minimum=1)
            if min_replicas > replicas:
                raise ValueError(f"DataParallel: min_replicas ({min_replicas}) must not exceed replicas ({replicas})")
        if checkpoint_every_steps is not None:
            _count("checkpoint_every_steps", checkpoint_every_steps, minimum=1)
        _seconds("timeout", timeout)
        if checkpoint_every_seconds is not None:
            _seconds("checkpoint_every_seconds", checkpoint_every_seconds)
        self.cluster = cluster
        self.replicas = replicas
        self.backup_workers = backup_workers
        self.timeout = float(timeout)
        self.row_block_bytes = row_block_bytes
        self.stragglers = checked_stragglers(
            straggler_delay, random_straggler_delay, replicas + backup_workers, "DataParallel"
        )
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every_steps = checkpoint_every_steps
        self.checkpoint_every_seconds = None if checkpoint_every_seconds is None else float(checkpoint_every_seconds)
        self.keep_checkpoints = keep_checkpoints
        self.min_replicas = min_replicas
        self.steps: list[StepRecord] = []
        self.checkpoints: list[str] = []
        self.recoveries: list[Recovery] = []
        self.placements: list[Placement] = []
        self.workers()

    @property
    def needed_workers(self) -> int:
        """The fewest workers training runs on: `min_replicas`, or all replicas and backups."""
        return self.replicas + self.backup_workers if self.min_replicas is None else self.min_replicas

    def workers(self) -> list[str]:
        """The workers that run the replicas and parameter shards, or a ValueError if
        the cluster has too few."""
        workers = self.cluster.workers
        if self.needed_workers > len(workers):
            need = (
                f"min_replicas={self.min_replicas} needs"
                if self.min_replicas
                else (f"{self.replicas} replicas + {self.backup_workers} backup workers need")
            )
            raise ValueError(f"DataParallel: {need} {self.needed_workers} workers, but the cluster has {len(workers)}")
        return workers

    def start(self, model, x, y, batch_size: int) -> TrainingSession:
        """Set up training of `model` on arrays `x` (or a tuple of arrays) and `y`, or on a
        Dataset `x` of (x, y) batches (y None): `Model.fit` calls this, then `run_epoch`
        per epoch and `close` at the end."""
        return TrainingSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"DataParallel(replicas={self.replicas}, backup_workers={self.backup_workers})"


class _Grow(Exception):
    """Workers joined while fewer replicas run than asked for: place training anew."""


class _Epoch:
    """The client's view of one epoch: its batches of row numbers, the next step to report
    to the callbacks, and the logs of the last reported step."""

    def __init__(self, first_step: int, rows: list[np.ndarray], index: int):
        self.first_step, self.rows, self.index = first_step, rows, index
        self.end = first_step + len(rows)
        self.reported = first_step
        self.logs: dict = {}

    def plan(self, start: int, replicas: int, backup_workers: int) -> EpochPlan:
        sizes = tuple(len(b) for b in self.rows[start - self.first_step :])
        return EpochPlan(start, sizes, replicas, backup_workers)

    def order(self, start: int) -> np.ndarray:
        """The row numbers of the batches from step `start` on, in step order."""
        rows = self.rows[start - self.first_step :]
        return np.concatenate(rows) if rows else np.zeros(0, np.int64)


class TrainingSession:
    """One `fit` on the cluster: the current `Deployment`, the checkpoints, and the
    recovery from lost workers (see the module docstring); released by `close`."""

    def __init__(self, strategy: DataParallel, model, x, y, batch_size: int):
        self.dataset = x if isinstance(x, Dataset) else None
        self.stream: EpochStream | None = None  # the Dataset's current epoch
        if self.dataset is not None:
            x, y = first_batch(self.dataset)
            batch_size = len(y)
            self.batch_sizes = {batch_size}
            if not model.built:
                model(x, training=False)
        else:
            self.batch_sizes = {batch_size, len(y) % batch_size} - {0}
        self.strategy, self.model, self.x, self.y, self.batch_size = strategy, model, x, y, batch_size
        strategy.steps, strategy.checkpoints, strategy.recoveries, strategy.placements = [], [], [], []
        parts = strategy.replicas + strategy.backup_workers
        workers = strategy.workers()
        if batch_size < parts:
            raise ValueError(
                f"fit: a global batch of {batch_size} does not split over {strategy.replicas} replicas + "
                f"{strategy.backup_workers} backup workers: each of the {parts} shards needs at least one sample; "
                f"use batch_size >= {parts}"
            )
        _check_optimizer(model.optimizer)
        _check_loss(model.loss)
        self.with_predictions = bool(model.compiled_metrics)
        self.graphs, self.layout, self.variables = {}, None, []
        self._freeze(parts)
        if not self.layout.n_trainable:
            raise ValueError(f"fit: the loss of model '{model.name}' depends on none of its trainable variables")
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables[: self.layout.n_trainable])
        self.policy = CheckpointPolicy(strategy.checkpoint_every_steps, strategy.checkpoint_every_seconds)
        self.files = None
        if strategy.checkpoint_dir is not None:
            self.files = CheckpointFiles(strategy.checkpoint_dir, strategy.keep_checkpoints)
        self.state_step = self.optimizer.iterations  # the step whose state the client's model holds
        self.deployment: Deployment | None = None
        self._used: list[str] = []
        self._place(workers)

    # ------------------------------------------------------------ placement
    def _freeze(self, parts: int) -> None:
        """Freeze the gradient steps for the shard sizes of `parts` shards not frozen yet."""
        sizes = _shard_sizes(self.batch_sizes, parts) - set(self.graphs)
        if sizes:
            graphs, self.layout, self.variables = freeze_gradient_step(
                self.model, self.x, self.y, sizes, self.with_predictions, sparse=True
            )
            self.graphs.update(graphs)

    def _place(self, workers: list[str]) -> None:
        """Make the deployment that trains from `state_step` on `workers`."""
        strategy, n_trainable = self.strategy, self.layout.n_trainable
        replicas = min(strategy.replicas, len(workers))
        backups = min(strategy.backup_workers, len(workers) - replicas)
        self._freeze(replicas + backups)
        config = master_copy.optimizer_config(self.optimizer)
        spec = ShardSpec(
            names=tuple(v.name for v in self.variables),
            shapes=tuple(tuple(v.shape) for v in self.variables),
            trainable=tuple(i < n_trainable for i in range(len(self.variables))),
            decays=tuple(i >= n_trainable or self.optimizer._decays(v) for i, v in enumerate(self.variables)),
            optimizer_config=config,
            row_block_bytes=strategy.row_block_bytes,
        )
        sizes = _shard_sizes(self.batch_sizes, replicas + backups)
        self._used = list(workers)
        self.deployment = Deployment(
            self.strategy.cluster.client,
            workers,
            replicas,
            backups,
            spec,
            self.layout,
            {size: self.graphs[size] for size in sizes},
            None if self.dataset is not None else [*self.x, self.y] if isinstance(self.x, tuple) else [self.x, self.y],
            strategy.stragglers.among(replicas + backups),
            strategy.timeout,
            self._watch,
        )
        self._used = self.deployment.used
        strategy.placements.append(
            Placement(
                self.state_step,
                tuple(self.deployment.replica_workers),
                tuple(self.deployment.shard_workers),
                replicas,
                backups,
            )
        )

    def _abandon(self) -> None:
        """Stop and release the deployment; the client's model keeps the state of `state_step`."""
        if self.deployment is not None:
            try:
                alive = self.strategy.cluster.workers
            except Exception:  # noqa: BLE001 - a scheduler that does not answer: release without stopping
                alive = []
            self.deployment.stop(alive)
            self.deployment.close()
            self.deployment = None
        self._used = []
        self.strategy.steps = [s for s in self.strategy.steps if s.step < self.state_step]

    def _enough_workers(self) -> list[str]:
        """The workers alive, once there are enough to train on (waiting up to `timeout`)."""
        strategy = self.strategy
        deadline = time.monotonic() + strategy.timeout
        while True:
            workers = strategy.cluster.workers
            if len(workers) >= strategy.needed_workers:
                return workers
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"fit: training needs {strategy.needed_workers} workers but {len(workers)} are alive "
                    f"({', '.join(workers) or 'none'}), and no more joined within {strategy.timeout:g}s"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------ epochs
    def run_epoch(self, batches, callbacks) -> dict:
        """Train one epoch on `batches` (arrays of row numbers, in step order, or the Dataset),
        calling the batch callbacks as steps complete; returns the epoch's logs. Restarts
        from the last checkpoint when a worker in use dies (see the module docstring)."""
        self.state_step = self.optimizer.iterations  # callbacks may have restored a checkpoint
        if self.dataset is not None:
            batches = self._next_stream()
        epoch = _Epoch(self.state_step, [np.asarray(b) for b in batches], getattr(self.model, "_fit_epoch", 0))
        if self.deployment is not None and set(self.strategy.cluster.workers) != set(self.deployment.workers):
            self._abandon()  # workers joined or left since the last epoch
        failures, failed_at = 0, None
        while True:
            try:
                if self.deployment is None:
                    self._place(self._enough_workers())
                return self._run_segment(epoch, callbacks)
            except _Grow:
                self._abandon()
            except Exception as error:
                lost = find_lost(self.strategy.cluster, self._used, error)
                if not lost:
                    self._abandon()
                    raise
                self._abandon()
                failures = failures + 1 if failed_at == self.state_step else 1
                failed_at = self.state_step
                if failures >= _MAX_RECOVERIES:
                    raise RuntimeError(
                        f"fit: workers died {failures} times in a row after the checkpoint of step {self.state_step} "
                        f"(last lost: {lost}); giving up"
                    ) from error
                self.strategy.recoveries.append(Recovery(tuple(lost), epoch.reported, self.state_step, repr(error)))
            except BaseException:
                self._abandon()
                raise

    def _next_stream(self) -> list[np.ndarray]:
        """Scan the Dataset's next epoch; returns its batches of row numbers. Shard sizes not
        seen before get their gradient steps frozen, and a new placement to ship them."""
        self.stream = EpochStream.scan(self.dataset)
        self.y = self.stream.labels
        self.batch_sizes |= set(self.stream.sizes)
        if _shard_sizes(self.batch_sizes, self.strategy.replicas + self.strategy.backup_workers) - set(self.graphs):
            self._abandon()
        bounds = np.cumsum((0, *self.stream.sizes))
        return [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _run_segment(self, epoch: _Epoch, callbacks) -> dict:
        """Run the epoch's steps from `state_step` on the current deployment."""
        deployment, start = self.deployment, self.state_step
        plan = epoch.plan(start, deployment.replicas, deployment.backup_workers)
        armed = self.policy.steps_between(start, plan.end)
        order = epoch.order(start)
        deployment.begin(plan, *self._client_state(), armed)
        futures = deployment.launch(plan, order, self.stream)
        self._follow(epoch, plan, order, callbacks, futures, armed)
        deployment.wait(futures)
        self._take_state(*deployment.state())
        self.state_step = plan.end
        self._write(epoch, plan.end)
        logs = dict(epoch.logs)
        if self.strategy.backup_workers:
            done = [s for s in self.strategy.steps if epoch.first_step <= s.step < epoch.end]
            applied, dropped = sum(len(s.applied) for s in done), sum(len(s.dropped) for s in done)
            logs.update(shards_applied=float(applied), shards_dropped=float(dropped))
        return logs

    def _follow(self, epoch: _Epoch, plan: EpochPlan, order: np.ndarray, callbacks, futures, armed: set[int]) -> None:
        """Report each completed step to the callbacks and metrics, in step order, and take
        the checkpoints on the way."""
        timeout = self.strategy.timeout
        step, waiting = plan.first_step, {}
        deadline, polled, watched, grow = time.monotonic() + timeout, 0.0, time.monotonic(), False
        while step < plan.end:
            time.sleep(max(0.0, polled + _POLL_INTERVAL - time.monotonic()))  # fewer calls on the log's worker
            polled = time.monotonic()
            waiting.update((r["step"], r) for r in self.deployment.records(step, 0.5))
            if time.monotonic() - watched > _WATCH_INTERVAL:
                self._watch()
                _raise_failed(futures)
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

    def _watch(self) -> None:
        """Raise WorkerLost if a worker in use left the cluster."""
        lost = lost_workers(self._used, self.strategy.cluster.workers)
        if lost:
            raise WorkerLost(lost)

    def _report(self, record: dict, epoch: _Epoch, plan: EpochPlan, order: np.ndarray, callbacks) -> None:
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
        epoch.logs = self.model._update_metrics(y_true, y_pred, as_tensor(np.float32(loss)), batch_size=total)
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

    def _checkpoint(self, epoch: _Epoch, step: int) -> None:
        """Make the shards' snapshot of `step` the client's state and write it; then grow
        onto workers that joined if fewer replicas run than asked for."""
        state = self.deployment.snapshot(step)
        if state is None:
            raise RuntimeError(f"fit: the parameter shards were stopped before step {step}")
        self._take_state(*state)
        self.state_step = step
        self._write(epoch, step)
        if self._can_grow():
            raise _Grow

    def _write(self, epoch: _Epoch, step: int) -> None:
        self.policy.written()
        if self.files is not None:
            path = self.files.write(self.model, step, epoch.index, step - epoch.first_step)
            self.strategy.checkpoints.append(path)

    def _client_state(self):
        """(values, slots, step counter, learning rate or None for a schedule) of the client's model."""
        values, slots = master_copy.whole_state(self.variables, self.optimizer, self.layout.n_trainable)
        return values, slots, self.optimizer.iterations, master_copy.learning_rate(self.optimizer)

    def _take_state(self, values, slots, iterations: int) -> None:
        """Set the client's model and optimizer to whole-variable `values`, `slots` and the step counter."""
        master_copy.take_state(self.variables, self.optimizer, values, slots, iterations)

    # ------------------------------------------------------------ teardown
    def close(self) -> None:
        """Release the shards, the log and the copied data on the cluster."""
        if self.deployment is not None:
            self.deployment.close()
            self.deployment = None


def _raise_failed(futures) -> None:
    """Re-raise the error of a failed replica task, or say which was lost."""
    for future in futures:
        if future.status == "error":
            future.result()
        if future.status in ("cancelled", "lost"):
            raise RuntimeError(f"fit: replica task {future.key} was {future.status} (its worker may have died)")


def _shard_sizes(batch_sizes: set[int], parts: int) -> set[int]:
    """Every non-empty shard size of batches of `batch_sizes` rows cut into `parts` shards."""
    sizes = set()
    for size in batch_sizes:
        sizes |= {size // parts + 1} if size % parts else set()
        sizes |= {size // parts} if size // parts else set()
    return sizes


def _check_optimizer(optimizer) -> None:
    for option in ("clipnorm", "global_clipnorm"):
        if getattr(optimizer, option, None) is not None:
            raise ValueError(
                f"fit: {type(optimizer).__name__}({option}=...) needs whole gradients, but parameter shards hold "
                "parts of them; use clipvalue, or no clipping, with distribute="
            )


def _check_loss(loss) -> None:
    reduction = getattr(loss, "reduction", "sum_over_batch_size")
    if reduction not in _MEAN_REDUCTIONS:
        raise ValueError(
            f"fit: the loss's reduction {reduction!r} does not split over replicas or micro-batches; use a loss "
            f"that averages over the batch ({', '.join(map(repr, _MEAN_REDUCTIONS))}) with distribute="
        )


def _count(label: str, value, minimum: int, owner: str = "DataParallel") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {label} must be an integer >= {minimum}, got {value!r}")


def _seconds(label: str, value, owner: str = "DataParallel") -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{owner}: {label} must be a number of seconds > 0, got {value!r}")
