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

How it runs. Parameters and optimizer slots live in `ParameterShard` actors, at most one
per worker, holding whole variables or row blocks of large ones (`row_block_bytes`). The
client freezes the model's gradient step, ships it as graph-file bytes and launches one
long-running replica task per shard position and epoch; replicas talk to the shards and
to a `StepLog` actor directly, while the client follows the log to drive callbacks and
metrics (so a batch callback runs once its step is done: replicas never wait for the
client). The client's model is the master copy between epochs: its weights, optimizer
slots, step counter and learning rate are sent to the shards at the start of each epoch
and read back at its end, before validation and `on_epoch_end` (so checkpoints and
callbacks that change the learning rate work as in single-process training). An epoch
that fails leaves the model at the last completed epoch.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow import optimizers
from tapeflow.distributed.epoch_plan import EpochPlan
from tapeflow.distributed.gradient_graph import freeze_gradient_step
from tapeflow.distributed.parameter_server import ParameterShard
from tapeflow.distributed.placement import join_blocks, place_variables
from tapeflow.distributed.replica import ReplicaJob, run_replica
from tapeflow.distributed.step_log import StepLog
from tapeflow.ops.registry import as_tensor

_MEAN_REDUCTIONS = ("sum_over_batch_size", "mean_with_sample_weight")
_POLL_INTERVAL = 0.02  # seconds between the client's looks at the step log


@dataclass(frozen=True)
class StepRecord:
    """One synchronous step: the replicas whose shard gradients it applied, those whose
    launched shards it dropped, and the loss over the applied rows."""

    step: int
    applied: tuple[int, ...]
    dropped: tuple[int, ...]
    loss: float


class DataParallel:
    """Synchronous data-parallel training over `replicas` replicas plus `backup_workers`
    backups, one per worker of `cluster`; pass it to `model.fit(..., distribute=...)`.

    `timeout` (seconds) bounds every wait; variables larger than `row_block_bytes` are
    split by rows over the parameter shards; `straggler_delay` ({replica: seconds})
    delays a replica's every step, to simulate a slow worker. After `fit`, `steps` holds
    a `StepRecord` per step, and with backup workers the epoch logs (and so the
    History) carry `shards_applied` and `shards_dropped`, the epoch's totals.
    See the module docstring for what each step computes.
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
    ):
        _count("replicas", replicas, minimum=1)
        _count("backup_workers", backup_workers, minimum=0)
        _count("row_block_bytes", row_block_bytes, minimum=1)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"DataParallel: timeout must be a number of seconds > 0, got {timeout!r}")
        self.cluster = cluster
        self.replicas = replicas
        self.backup_workers = backup_workers
        self.timeout = float(timeout)
        self.row_block_bytes = row_block_bytes
        self.straggler_delay = _delays(straggler_delay or {}, replicas + backup_workers)
        self.steps: list[StepRecord] = []
        self.workers()

    def workers(self) -> list[str]:
        """The workers that run the replicas and parameter shards, or a ValueError if
        the cluster has too few."""
        workers = self.cluster.workers
        parts = self.replicas + self.backup_workers
        if parts > len(workers):
            raise ValueError(
                f"DataParallel: {self.replicas} replicas + {self.backup_workers} backup workers need {parts} "
                f"workers, but the cluster has {len(workers)}"
            )
        return workers

    def start(self, model, x, y, batch_size: int) -> TrainingSession:
        """Set up training of `model` on arrays `x` (or a tuple of arrays) and `y`:
        `Model.fit` calls this, then `run_epoch` per epoch and `close` at the end."""
        return TrainingSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"DataParallel(replicas={self.replicas}, backup_workers={self.backup_workers})"


class TrainingSession:
    """One `fit` on the cluster: the parameter shards, step log and scattered data, kept
    across epochs and released by `close`."""

    def __init__(self, strategy: DataParallel, model, x, y, batch_size: int):
        self.strategy = strategy
        self.model = model
        self.y = y
        strategy.steps = []
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
        graphs, self.layout, self.variables = freeze_gradient_step(
            model, x, y, _shard_sizes(len(y), batch_size, parts), self.with_predictions
        )
        if not self.layout.n_trainable:
            raise ValueError(f"fit: the loss of model '{model.name}' depends on none of its trainable variables")
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables[: self.layout.n_trainable])
        blocks = place_variables([v.shape for v in self.variables], len(workers), strategy.row_block_bytes)
        by_shard = [(w, tuple(b for b in blocks if b.shard == j)) for j, w in enumerate(workers)]
        self.shard_workers = [w for w, held in by_shard if held]  # a worker with no block gets no shard
        self.blocks = tuple(held for _, held in by_shard if held)
        self.replica_workers = workers[:parts]
        self.client = strategy.cluster.client
        self._held = []
        try:
            self._launch_services(graphs, [*x, y] if isinstance(x, tuple) else [x, y])
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ set-up
    def _launch_services(self, graphs, data) -> None:
        client, timeout = self.client, self.strategy.timeout
        self.data = self._scatter(data)
        (self.graphs,) = self._scatter([graphs])
        self._held += [*self.data, self.graphs]
        config = optimizers.serialize(self.optimizer)
        if not isinstance(config["config"]["learning_rate"], dict):
            config["config"]["learning_rate"] = float(self.optimizer.learning_rate)
        n_trainable = self.layout.n_trainable
        shard_futures = [
            client.submit(
                ParameterShard,
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
            StepLog, actor=True, workers=[self.replica_workers[0]], allow_other_workers=False, pure=False
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
        """Train one epoch on `batches` (arrays of row numbers, in step order), calling the
        batch callbacks as steps complete; returns the epoch's logs."""
        strategy, client = self.strategy, self.client
        rows = [np.asarray(b) for b in batches]
        plan = EpochPlan(
            self.optimizer.iterations, tuple(len(b) for b in rows), strategy.replicas, strategy.backup_workers
        )
        order = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self._begin_epoch(plan)
        (order_future,) = self._scatter([order])
        replicas = [
            client.submit(
                run_replica,
                ReplicaJob(r, plan, self.layout, self.blocks, strategy.straggler_delay.get(r, 0.0), strategy.timeout),
                self.graphs,
                self.data,
                order_future,
                self.shards,
                self.log,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for r, worker in enumerate(self.replica_workers)
        ]
        try:
            logs = self._follow(plan, order, callbacks, replicas)
            self._wait(replicas)
            self._end_epoch()
        except BaseException:
            self._stop()
            client.cancel(replicas, force=True)
            raise
        return logs

    def _begin_epoch(self, plan: EpochPlan) -> None:
        """Send the client's parameters, slots, step counter and learning rate to the shards."""
        optimizer, n_trainable = self.optimizer, self.layout.n_trainable
        values = [v.numpy() for v in self.variables]
        slots = [
            {name: s.numpy() for name, s in optimizer.slots(v).items()} if i < n_trainable else {}
            for i, v in enumerate(self.variables)
        ]
        schedule = isinstance(optimizers.serialize(optimizer)["config"]["learning_rate"], dict)
        learning_rate = None if schedule else float(optimizer.learning_rate)
        calls = [
            shard.begin_epoch(
                plan,
                [b.take(values[b.variable]) for b in blocks],
                [{name: b.take(a) for name, a in slots[b.variable].items()} for b in blocks],
                optimizer.iterations,
                learning_rate,
            )
            for shard, blocks in zip(self.shards, self.blocks, strict=True)
        ]
        calls.append(self.log.begin_epoch(plan))
        for call in calls:
            call.result(timeout=self.strategy.timeout)

    def _follow(self, plan: EpochPlan, order: np.ndarray, callbacks, replicas) -> dict:
        """Report each completed step to the callbacks and metrics, in step order."""
        timeout = self.strategy.timeout
        logs, step, applied, dropped, waiting = {}, plan.first_step, 0, 0, {}
        deadline, polled = time.monotonic() + timeout, 0.0
        while step < plan.end:
            time.sleep(max(0.0, polled + _POLL_INTERVAL - time.monotonic()))  # fewer calls on the log's worker
            polled = time.monotonic()
            records = self.log.wait(step, 0.5).result(timeout=timeout)
            waiting.update((r["step"], r) for r in records)
            if step not in waiting:
                _raise_failed(replicas)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fit: step {step} did not complete within {timeout:g}s")
                continue
            while step in waiting:
                callbacks.on_train_batch_begin(step - plan.first_step)
                logs, entry = self._report(waiting.pop(step), plan, order)
                applied, dropped = applied + len(entry.applied), dropped + len(entry.dropped)
                callbacks.on_train_batch_end(step - plan.first_step, logs)
                step += 1
            deadline = time.monotonic() + timeout
        logs = dict(logs)
        if self.strategy.backup_workers:
            logs.update(shards_applied=float(applied), shards_dropped=float(dropped))
        return logs

    def _report(self, record: dict, plan: EpochPlan, order: np.ndarray):
        step, shards = record["step"], record["shards"]
        total = sum(rows for _, _, rows, _ in shards)
        loss = sum(rows * loss for _, _, rows, loss in shards) / total
        applied = tuple(sorted(replica for _, replica, _, _ in shards))
        launched = {plan.replica_of(s, step) for s in range(plan.launched(step))}
        entry = StepRecord(step, applied, tuple(sorted(launched - set(applied))), float(loss))
        self.strategy.steps.append(entry)
        y_true = y_pred = None
        if self.with_predictions:
            rows = np.concatenate([plan.shard_rows(order, step, s) for s, _, _, _ in shards])
            y_true, y_pred = as_tensor(self.y[rows]), as_tensor(np.concatenate(record["predictions"]))
        return self.model._update_metrics(y_true, y_pred, as_tensor(np.float32(loss))), entry

    def _wait(self, replicas) -> None:
        deadline = time.monotonic() + self.strategy.timeout
        for future in replicas:
            future.result(timeout=max(deadline - time.monotonic(), 0.1))

    def _end_epoch(self) -> None:
        """Read the parameters, slots and step counter back into the client's model."""
        timeout = self.strategy.timeout
        answers = [c.result(timeout=timeout) for c in [shard.state() for shard in self.shards]]
        values, slots = {}, {}
        for blocks, (shard_values, shard_slots, _) in zip(self.blocks, answers, strict=True):
            values.update(zip(blocks, shard_values, strict=True))
            slots.update(zip(blocks, shard_slots, strict=True))
        for var, value in zip(self.variables, join_blocks(values), strict=True):
            var.assign(value)
        for var in self.variables[: self.layout.n_trainable]:
            for name, slot in self.optimizer.slots(var).items():
                slot_parts = {b: s[name] for b, s in slots.items() if self.variables[b.variable] is var}
                slot.assign(join_blocks(slot_parts)[0])
        self.optimizer.iterations = int(answers[0][2])

    # ------------------------------------------------------------ teardown
    def _stop(self) -> None:
        """Release every replica waiting on a shard or the log (best effort)."""
        for actor in [*getattr(self, "shards", []), getattr(self, "log", None)]:
            if actor is not None:
                try:
                    actor.stop().result(timeout=5)
                except Exception:  # noqa: BLE001 - a shard already gone has nothing to release
                    pass

    def close(self) -> None:
        """Release the shards, the log and the scattered data on the cluster."""
        if self._held:
            self.client.cancel(self._held, force=True)
        self._held = []


def _raise_failed(futures) -> None:
    """Re-raise the error of a failed replica task, or say which was lost."""
    for future in futures:
        if future.status == "error":
            future.result()
        if future.status in ("cancelled", "lost"):
            raise RuntimeError(f"fit: replica task {future.key} was {future.status} (its worker may have died)")


def _shard_sizes(n: int, batch_size: int, parts: int) -> set[int]:
    """Every non-empty shard size an epoch of `n` rows in batches of `batch_size` has."""
    sizes = set()
    for size in {batch_size, n % batch_size} - {0}:
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
            f"fit: the loss's reduction {reduction!r} does not split over replicas; use a loss that averages "
            f"over the batch ({', '.join(map(repr, _MEAN_REDUCTIONS))}) with distribute="
        )


def _count(label: str, value, minimum: int, owner: str = "DataParallel") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}: {label} must be an integer >= {minimum}, got {value!r}")


def _delays(delays: dict, parts: int, owner: str = "DataParallel") -> dict[int, float]:
    for replica, seconds in delays.items():
        if not (isinstance(replica, int) and 0 <= replica < parts):
            raise ValueError(f"{owner}: straggler_delay keys must be replica numbers 0..{parts - 1}, got {replica!r}")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"{owner}: straggler_delay[{replica}] must be seconds >= 0, got {seconds!r}")
    return {int(r): float(s) for r, s in delays.items()}
