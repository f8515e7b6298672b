"""`ParameterDeployment`: parameter shards, a log actor, and the replicas' graphs and data,
placed on a set of workers for as long as training runs there undisturbed.

Both data-parallel strategies deploy this way; each subclass names its shard and log
actors and how an epoch begins. When a worker dies the deployment is abandoned (`stop`,
then `close`) and a new one is made on the workers alive; every call here waits at
most `timeout` seconds and then raises a TimeoutError naming what did not answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tapeflow.distributed.parameters.master_copy import join_state, optimizer_config, weight_decays
from tapeflow.distributed.parameters.variable_blocks import split_variables
from tapeflow.distributed.runtime.tasks import (
    futures_of,
    launch_replicas,
    scatter_to_each,
    start_actor,
    stop_actors,
    watched_result,
)


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


def shard_spec(variables, n_trainable: int, optimizer, row_block_bytes: int) -> ShardSpec:
    """The ShardSpec of `variables`, of which the first `n_trainable` are trained by `optimizer`."""
    decays = weight_decays(optimizer, variables[:n_trainable])
    return ShardSpec(
        names=tuple(v.name for v in variables),
        shapes=tuple(tuple(v.shape) for v in variables),
        trainable=tuple(i < n_trainable for i in range(len(variables))),
        decays=decays + (True,) * (len(variables) - n_trainable),
        optimizer_config=optimizer_config(optimizer),
        row_block_bytes=row_block_bytes,
    )


class ParameterDeployment:
    """Shards (one `shard_actor` per worker holding blocks), the log (`log_actor(*log_args)`
    on the first replica's worker), and `graphs` and `data` copied to each of the first
    `n_replicas` workers; `used` are the workers that hold something.

    `data` is the arrays [x..., y], or None when each launch brings an epoch of a
    Dataset; `watch` is called about every half second while a call waits, and may
    raise to end the wait (when a worker died).
    """

    shard_actor: type
    log_actor: type
    log_title: str

    def __init__(self, client, workers, n_replicas: int, spec: ShardSpec, graphs, data, log_args, timeout, watch=None):
        self.client, self.timeout = client, timeout
        self.watch = watch or (lambda: None)
        self.replica_workers = list(workers[:n_replicas])
        blocks = split_variables(spec.shapes, len(workers), spec.row_block_bytes)
        by_shard = [(w, tuple(b for b in blocks if b.shard == j)) for j, w in enumerate(workers)]
        self.shard_workers = [w for w, held in by_shard if held]  # a worker with no block gets no shard
        self.blocks = tuple(held for _, held in by_shard if held)
        self.workers = list(workers)
        self.used = sorted(set(self.replica_workers) | set(self.shard_workers))
        self._held, self._running, self.shards, self.log = [], [], [], None
        try:
            self._start(spec, graphs, data, log_args)
        except BaseException:
            self.close()
            raise

    def _start(self, spec: ShardSpec, graphs, data, log_args) -> None:
        self.data = self.scatter(data) if data is not None else None
        (self.graphs,) = self.scatter([graphs])
        self._held += futures_of([self.data, self.graphs])
        shard_futures = [
            start_actor(
                self.client,
                self.shard_actor,
                list(blocks),
                [spec.names[b.variable] for b in blocks],
                [spec.trainable[b.variable] for b in blocks],
                [spec.decays[b.variable] for b in blocks],
                spec.optimizer_config,
                self.timeout,
                worker=worker,
            )
            for worker, blocks in zip(self.shard_workers, self.blocks, strict=True)
        ]
        log_future = start_actor(self.client, self.log_actor, *log_args, worker=self.replica_workers[0])
        self._held += [*shard_futures, log_future]
        self.shards = self.answers(shard_futures, "start")
        self.log = self.result(log_future, self.log_name)

    def scatter(self, items: list) -> list:
        """`items`, each copied to every replica's worker (see `PerWorker`)."""
        return scatter_to_each(self.client, items, self.replica_workers, self.timeout)

    def shard_parts(self, values, slots) -> list[tuple[list, list]]:
        """Per shard, its blocks of the whole-variable `values` and `slots` (by name)."""
        return [
            (
                [b.take(values[b.variable]) for b in blocks],
                [{name: b.take(a) for name, a in slots[b.variable].items()} for b in blocks],
            )
            for blocks in self.blocks
        ]

    def launch(self, run, jobs, order, stream=None) -> list:
        """Start `run(job, graphs, data, order, shards, log)` for each job on its replica's
        worker, reading the rows `order` of the deployment's arrays, or of `stream` (copied
        to each replica's worker for this launch, so every replica makes a fresh pass)."""
        (order_future,) = self.scatter([order])
        data = self.data if stream is None else self.scatter([stream])[0]
        shared = (self.graphs, data, order_future, self.shards, self.log)
        futures = launch_replicas(self.client, run, jobs, self.replica_workers, shared)
        self._running = [*futures, *futures_of([order_future] + ([] if stream is None else [data]))]
        return futures

    def wait(self, futures) -> None:
        """Wait for the replica tasks to end (together at most `timeout` seconds)."""
        deadline = time.monotonic() + self.timeout
        for future, worker in zip(futures, self.replica_workers, strict=True):
            self.result(future, f"the replica on {worker}", deadline)

    def state(self):
        """(values, slots, iterations) of whole variables as the shards hold them now."""
        return join_state(self.blocks, self.answers([shard.state() for shard in self.shards], "read the state"))

    def answers(self, calls, what: str) -> list:
        """The shards' answers to `calls` (together at most `timeout` seconds)."""
        deadline = time.monotonic() + self.timeout
        return [
            self.result(call, f"the parameter shard on {worker} ({what})", deadline)
            for call, worker in zip(calls, self.shard_workers, strict=True)
        ]

    def result(self, future, what: str, deadline: float | None = None):
        """The result of a Dask or actor future, calling `watch` every half second; a
        TimeoutError naming `what` at `deadline` (`timeout` seconds from now by default)."""
        return watched_result(future, what, self.timeout, self.watch, deadline)

    @property
    def log_name(self) -> str:
        return f"the {self.log_title} on {self.replica_workers[0]}"

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
