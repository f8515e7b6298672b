"""The asynchronous replica loop: a long-running Dask task that trains on batches until
the update log has none left for it.

A replica takes a batch from the log, computes the gradient of the model's loss on it
with the frozen gradient step at the parameters it last received, and commits the update
to the log with the versions of those parameters. If the log gives the update a step,
the replica pushes each parameter shard its blocks; the pushes answer with the shards'
newest parameters. If the update is dropped, it pulls them instead. No replica ever
waits for another's gradient; every wait is bounded by `timeout`.

A replica holds its whole gradient before it pushes, so clipping by norm (`clipnorm`,
`global_clipnorm`) happens here, on each update, as one asynchronous worker's optimizer
would clip it; the parameter shards' optimizer does not clip again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow import _compat
from tapeflow.distributed.gradient_graph import GradientLayout, GradientRunner
from tapeflow.distributed.parameters.variable_blocks import Block, join_blocks
from tapeflow.distributed.queue_input import replica_reader
from tapeflow.distributed.runtime.local_actor import in_process
from tapeflow.distributed.runtime.tasks import actor_answer
from tapeflow.ops import sparse
from tapeflow.ops.math import cast
from tapeflow.ops.registry import as_tensor
from tapeflow.optimizers.optimizer import clip_scale, squared_norm
from tapeflow.profiler.recording import span


@dataclass(frozen=True)
class AsyncReplicaJob:
    """What one replica needs besides the data: its number, where each batch starts in the
    epoch's row order (batch b is rows offsets[b]:offsets[b + 1]), the layout of the
    gradient step, the parameter blocks per shard, a delay in seconds after each gradient
    (to simulate a slow worker), the timeout of every wait and the optimizer's `clipnorm`
    and `global_clipnorm`."""

    replica: int
    offsets: tuple[int, ...]
    layout: GradientLayout
    blocks: tuple[tuple[Block, ...], ...]
    delay: float
    timeout: float
    clipnorm: float | None = None
    global_clipnorm: float | None = None


def run_async_replica(job: AsyncReplicaJob, graphs: dict, data, order: np.ndarray, shards: list, log) -> int:
    """Train on batches from `log` until none is left; returns how many of this replica's
    updates were applied. `data` is [x, y], [x_0, ..., x_k, y] or an epoch of a Dataset
    (the log hands out batches in increasing order, so a replica reads its pipeline
    forwards); `shards` are the AsyncParameterShard actors."""
    _compat.require_distributed().secede()  # a long-running task leaves the worker's thread pool
    shards, log = [in_process(ps) for ps in shards], in_process(log)
    runner = GradientRunner(graphs, job.layout)
    reader = replica_reader(data, job.timeout)
    taking = log.take()
    answers = _pull(job, shards)
    batch = actor_answer(taking, job.timeout, "the update log")
    applied = 0
    while batch is not None and answers is not None:
        pulled, parameters = _parameters(job, answers)
        rows = order[job.offsets[batch] : job.offsets[batch + 1]]
        with span("replica_step", kind="phase", args={"replica": job.replica, "batch": int(batch)}):
            loss, arrays, predictions = runner.run(parameters, *reader.take(rows))
        if job.delay:
            time.sleep(job.delay)
        commit = log.commit(batch, job.replica, pulled, float(loss), predictions)
        step, batch = actor_answer(commit, job.timeout, f"the update log (batch {batch})")
        if step is not None:
            arrays = _clipped(job, arrays)
            sent = [[b.take(arrays[b.variable]) for b in blocks] for blocks in job.blocks]
            with span("push", sent, args={"replica": job.replica, "step": step}):
                pushes = [ps.push(step, blocks) for ps, blocks in zip(shards, sent, strict=True)]
                answers = _all(job, pushes, f"step {step}")
            applied += 1
        elif batch is not None:
            answers = _pull(job, shards)
    return applied


def _clipped(job: AsyncReplicaJob, arrays: list) -> list:
    """The arrays to push: the trained variables' gradients (the first `n_trainable`)
    clipped by `clipnorm` or `global_clipnorm` as the optimizer clips them, the rest as they are."""
    if job.clipnorm is None and job.global_clipnorm is None:
        return arrays
    n = job.layout.n_trainable
    grads = [as_tensor(a) for a in arrays[:n]]
    if job.global_clipnorm is not None:
        scale = clip_scale(sum(cast(squared_norm(g), "float64") for g in grads), job.global_clipnorm, global_norm=True)
        grads = [sparse.scale_gradient(g, cast(scale, g.dtype)) for g in grads]
    else:
        grads = [sparse.scale_gradient(g, clip_scale(squared_norm(g), job.clipnorm)) for g in grads]
    return [g.numpy() for g in grads] + list(arrays[n:])


def _pull(job: AsyncReplicaJob, shards: list):
    """Every shard's newest parameters (see `_all`), as a "pull" span of a recorded profile."""
    with span("pull", args={"replica": job.replica}) as pulled:
        answers = _all(job, [ps.pull() for ps in shards], "pull")
        pulled.moved(answers)
    return answers


def _all(job: AsyncReplicaJob, calls: list, what: str):
    """Every shard's (version, arrays) answer, or None once a shard has stopped."""
    answers = [actor_answer(c, job.timeout, f"parameter shard {i} ({what})") for i, c in enumerate(calls)]
    return None if any(a is None for a in answers) else answers


def _parameters(job: AsyncReplicaJob, answers: list) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """(each shard's version, the whole variables) from the shards' answers."""
    parts = {}
    for blocks, (_, arrays) in zip(job.blocks, answers, strict=True):
        parts.update(zip(blocks, arrays, strict=True))
    return tuple(version for version, _ in answers), join_blocks(parts)
