"""`Deployment`: one placement of synchronous training on a set of workers.

Parameter shards go to the workers (at most one each, see `placement`), the step log
and the replicas to the first `replicas + backup_workers` of them, and the frozen
gradient steps and the data are copied to every replica's worker. A deployment runs
any number of segments (consecutive steps of one epoch): `begin` sends the state to
start from, `launch` starts the replicas, `snapshot` and `state` read a consistent
state back. When a worker dies the deployment is abandoned (`stop`, then `close`)
and a new one is made on the workers still alive; each call here waits at most
`timeout` seconds and then raises a TimeoutError naming what did not answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow.distributed.epoch_data import EpochStream
from tapeflow.distributed.epoch_plan import EpochPlan
from tapeflow.distributed.gradient_graph import GradientLayout
from tapeflow.distributed.master_copy import join_state
from tapeflow.distributed.parameter_server import ParameterShard
from tapeflow.distributed.placement import place_variables
from tapeflow.distributed.replica import ReplicaJob, run_replica
from tapeflow.distributed.step_log import StepLog
from tapeflow.distributed.stragglers import Stragglers

_STOP_WAIT = 2.0  # seconds to release the replicas of an abandoned deployment
_WATCH_EVERY = 0.5  # seconds between calls of `watch` while a call waits


class PerWorker:
    """One value scattered to several workers as one future per worker, each under a key of
    its own: no key is held by two workers, so Dask never copies or drops a replica of it
    under a long-running replica task that reads it (its memory manager would try to, and
    a worker told to drop data a seceded task holds dies)."""

    def __init__(self, futures: dict):
        self.futures = futures

    def on(self, worker: str):
        return self.futures[worker]


def scatter_to_each(client, items: list, workers, timeout: float) -> list[PerWorker]:
    """`items`, each scattered to every worker of `workers` separately (see `PerWorker`)."""
    copies = {w: client.scatter(items, workers=[w], hash=False, timeout=timeout) for w in workers}
    return [PerWorker({w: copies[w][i] for w in workers}) for i in range(len(items))]


def futures_of(values) -> list:
    """The Dask futures among `values` (PerWorker copies, lists of them, or futures)."""
    out = []
    for value in values:
        if isinstance(value, PerWorker):
            out += value.futures.values()
        elif isinstance(value, list | tuple):
            out += futures_of(value)
        elif value is not None:
            out.append(value)
    return out


def _on(value, worker: str):
    """`value` as the task on `worker` takes it: its copy there for PerWorker values."""
    if isinstance(value, PerWorker):
        return value.on(worker)
    if isinstance(value, list) and any(isinstance(v, PerWorker) for v in value):
        return [_on(v, worker) for v in value]
    return value


def launch_replicas(client, run, jobs, workers, shared: tuple) -> list:
    """One long-running task per replica, pinned to its worker: `run(job, *shared)`, where
    a `PerWorker` value (or a list of them) is the copy on the replica's worker."""
    return [
        client.submit(
            run, job, *[_on(v, worker) for v in shared], workers=[worker], allow_other_workers=False, pure=False
        )
        for job, worker in zip(jobs, workers, strict=True)
    ]


def stop_actors(actors, alive) -> None:
    """Ask each actor of the (actor, worker) pairs `actors` whose worker is in `alive` to
    stop, waiting at most `_STOP_WAIT` seconds for all of them (best effort: an actor
    already gone has nothing to release)."""
    alive, calls = set(alive), []
    for actor, worker in actors:
        if worker in alive:
            try:
                calls.append(actor.stop())
            except Exception:  # noqa: BLE001 - an actor already gone has nothing to release
                pass
    deadline = time.monotonic() + _STOP_WAIT
    for call in calls:
        try:
            call.result(timeout=max(deadline - time.monotonic(), 0.01))
        except Exception:  # noqa: BLE001 - as above
            pass


def watched_result(future, what: str, timeout: float, watch, deadline: float | None = None):
    """The result of a Dask or actor future, calling `watch` (which may raise, when a
    worker died) every half second; a TimeoutError naming `what` at `deadline`
    (`timeout` seconds from now by default)."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    while True:
        try:
            return future.result(timeout=min(_WATCH_EVERY, max(deadline - time.monotonic(), 0.01)))
        except TimeoutError:
            if future.done():  # it ended as the wait did: its own result, or its own error
                return future.result()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"fit: {what} did not answer within {timeout:g}s")
        watch()


@dataclass(frozen=True)
class ShardSpec:
    """What the parameter shards are made from: per variable its name, shape, whether an
    optimizer updates it and whether weight decay applies; the optimizer's config; the
    size above which a variable is split by rows."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    trainable: tuple[bool, ...]
    decays: tuple[bool, ...]
    optimizer_config: dict
    row_block_bytes: int


class Deployment:
    """Shards, step log, graphs and data placed on `workers` (see the module docstring);
    `used` are those of them that hold something.

    `graphs` are the frozen gradient steps by shard size, `data` the arrays [x..., y]
    (None when each launch brings an epoch of a Dataset),
    `stragglers` the simulated slow replicas; `watch` is called about every half
    second while a call waits, and may raise to end the wait (when a worker died).
    """

    def __init__(
        self,
        client,
        workers: list[str],
        replicas: int,
        backup_workers: int,
        spec: ShardSpec,
        layout: GradientLayout,
        graphs: dict,
        data: list | None,
        stragglers: Stragglers,
        timeout: float,
        watch=None,
    ):
        self.client, self.timeout, self.layout, self.stragglers = client, timeout, layout, stragglers
        self.watch = watch or (lambda: None)
        self.replicas, self.backup_workers = replicas, backup_workers
        self.replica_workers = list(workers[: replicas + backup_workers])
        blocks = place_variables(spec.shapes, len(workers), spec.row_block_bytes)
        by_shard = [(w, tuple(b for b in blocks if b.shard == j)) for j, w in enumerate(workers)]
        self.shard_workers = [w for w, held in by_shard if held]  # a worker with no block gets no shard
        self.blocks = tuple(held for _, held in by_shard if held)
        self.workers = list(workers)
        self.used = sorted(set(self.replica_workers) | set(self.shard_workers))
        self._held, self._running, self.shards, self.log = [], [], [], None
        try:
            self._start(spec, graphs, data)
        except BaseException:
            self.close()
            raise

    def _start(self, spec: ShardSpec, graphs: dict, data: list | None) -> None:
        self.data = self._scatter(data) if data is not None else None
        (self.graphs,) = self._scatter([graphs])
        self._held += futures_of([self.data, self.graphs])
        shard_futures = [
            self.client.submit(
                ParameterShard,
                list(blocks),
                [spec.names[b.variable] for b in blocks],
                [spec.trainable[b.variable] for b in blocks],
                [spec.decays[b.variable] for b in blocks],
                spec.optimizer_config,
                self.timeout,
                actor=True,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            for worker, blocks in zip(self.shard_workers, self.blocks, strict=True)
        ]
        log_future = self.client.submit(
            StepLog, actor=True, workers=[self.replica_workers[0]], allow_other_workers=False, pure=False
        )
        self._held += [*shard_futures, log_future]
        self.shards = self._answers(shard_futures, "start")
        self.log = self._result(log_future, self._log_name)

    def _scatter(self, items: list) -> list[PerWorker]:
        """`items`, each copied to every replica's worker (see `PerWorker`)."""
        return scatter_to_each(self.client, items, self.replica_workers, self.timeout)

    # ------------------------------------------------------------ segments
    def begin(self, plan: EpochPlan, values, slots, iterations: int, learning_rate, snapshot_steps=()) -> None:
        """Give every shard its blocks of the whole-variable `values` and `slots`, the step
        counter and the learning rate, arming snapshots at `snapshot_steps`."""
        calls = [
            shard.begin_epoch(
                plan,
                [b.take(values[b.variable]) for b in blocks],
                [{name: b.take(a) for name, a in slots[b.variable].items()} for b in blocks],
                iterations,
                learning_rate,
                sorted(snapshot_steps),
            )
            for shard, blocks in zip(self.shards, self.blocks, strict=True)
        ]
        self._answers(calls, "begin the steps")
        self._result(self.log.begin_epoch(plan), self._log_name)

    def launch(self, plan: EpochPlan, order: np.ndarray, stream: EpochStream | None = None) -> list:
        """Start one replica task per replica worker over `plan`, reading the rows `order` of
        the deployment's arrays, or of `stream` (copied to each replica's worker for this
        launch, so every replica makes a fresh pass); returns their futures."""
        (order_future,) = self._scatter([order])
        data = self.data if stream is None else self._scatter([stream])[0]
        jobs = [
            ReplicaJob(r, plan, self.layout, self.blocks, self.stragglers, self.timeout)
            for r in range(len(self.replica_workers))
        ]
        shared = (self.graphs, data, order_future, self.shards, self.log)
        futures = launch_replicas(self.client, run_replica, jobs, self.replica_workers, shared)
        self._running = [*futures, *futures_of([order_future] + ([] if stream is None else [data]))]
        return futures

    def wait(self, futures) -> None:
        """Wait for the replica tasks to end (together at most `timeout` seconds)."""
        deadline = time.monotonic() + self.timeout
        for future, worker in zip(futures, self.replica_workers, strict=True):
            self._result(future, f"the replica on {worker}", deadline)

    def records(self, step: int, wait: float) -> list[dict]:
        """The step log's records of `step` and later, waiting up to `wait` seconds for one."""
        return self._result(self.log.wait(step, wait), self._log_name, time.monotonic() + wait + self.timeout)

    def silent(self, wait: float) -> str:
        """Which shards and log do not answer within `wait` seconds, or, when all answer,
        each shard's step and the shards of it received."""
        named = zip(self.shards, self.shard_workers, strict=True)
        calls = [(f"the parameter shard on {worker}", shard.progress()) for shard, worker in named]
        calls.append((self._log_name, self.log.progress()))
        deadline, silent, progress = time.monotonic() + wait, [], []
        for name, call in calls:
            try:
                progress.append(call.result(timeout=max(deadline - time.monotonic(), 0.01)))
            except Exception:  # noqa: BLE001 - whatever the reason, it did not answer
                silent.append(name)
        if silent:
            return f"no answer within {wait:g}s from {', '.join(silent)}"
        return f"parameter shards at (step, shards received) {progress[:-1]}"

    # ------------------------------------------------------------ state
    def arm(self, step: int) -> tuple[bool, int]:
        """(armed, newest shard step): arm a snapshot of `step` on every shard, or on none
        if one has already passed it."""
        answers = self._answers([shard.arm(step) for shard in self.shards], f"arm a snapshot of step {step}")
        if all(ok for ok, _ in answers):
            return True, max(s for _, s in answers)
        self._answers([shard.disarm(step) for shard in self.shards], f"disarm step {step}")
        return False, max(s for _, s in answers)

    def snapshot(self, step: int):
        """(values, slots, iterations) of whole variables as of `step` (armed before), or
        None if the shards were stopped."""
        answers = self._answers([shard.snapshot(step) for shard in self.shards], f"a snapshot of step {step}")
        return None if any(a is None for a in answers) else join_state(self.blocks, answers)

    def state(self):
        """(values, slots, iterations) of whole variables as the shards hold them now."""
        return join_state(self.blocks, self._answers([shard.state() for shard in self.shards], "read the state"))

    def _answers(self, calls, what: str) -> list:
        """The shards' answers to `calls` (together at most `timeout` seconds)."""
        deadline = time.monotonic() + self.timeout
        return [
            self._result(call, f"the parameter shard on {worker} ({what})", deadline)
            for call, worker in zip(calls, self.shard_workers, strict=True)
        ]

    def _result(self, future, what: str, deadline: float | None = None):
        """The result of a Dask or actor future, calling `watch` every half second; a
        TimeoutError naming `what` at `deadline` (`timeout` seconds from now by default)."""
        return watched_result(future, what, self.timeout, self.watch, deadline)

    @property
    def _log_name(self) -> str:
        return f"the step log on {self.replica_workers[0]}"

    # ------------------------------------------------------------ teardown
    def stop(self, alive) -> None:
        """Release every replica waiting on a shard or the log on a worker in `alive`
        (best effort, at most a few seconds)."""
        actors = list(zip(self.shards, self.shard_workers, strict=True))
        if self.log is not None:
            actors.append((self.log, self.replica_workers[0]))
        stop_actors(actors, alive)

    def close(self) -> None:
        """Cancel the replicas and release the shards, the log and the copied data (safe to
        call twice)."""
        if self._held or self._running:
            self.client.cancel([*self._running, *self._held], force=True)
        self._held, self._running = [], []
