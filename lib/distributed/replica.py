"""The replica loop: a long-running Dask task that runs one epoch of synchronous steps.

Each step a replica pulls the parameters of the step from every parameter shard,
computes the gradient of its shard of the global batch with the frozen gradient step,
commits the result to the step log and, if accepted, pushes each parameter shard its
blocks. A replica that finds the parameters already past its step (its last result was
too late) skips ahead to the current step. The loop ends when the epoch's last step is
applied or the client stops the shards; every wait is bounded by `timeout`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow import _compat
from tapeflow.distributed.epoch_plan import EpochPlan
from tapeflow.distributed.gradient_graph import GradientLayout, GradientRunner
from tapeflow.distributed.placement import Block, join_blocks


@dataclass(frozen=True)
class ReplicaJob:
    """What one replica needs besides the data: its number, the epoch plan, the layout of
    the gradient step, the parameter blocks per shard, the per-step straggler delay in
    seconds (to simulate a slow worker) and the timeout of every wait."""

    replica: int
    plan: EpochPlan
    layout: GradientLayout
    blocks: tuple[tuple[Block, ...], ...]
    delay: float
    timeout: float


def run_replica(job: ReplicaJob, graphs: dict, data: list, order: np.ndarray, shards: list, log) -> int:
    """Run `job`'s replica over its epoch; returns the number of its shards that were applied.

    `data` is [x, y] or [x_0, ..., x_k, y]; `shards` are the ParameterShard actors and
    `log` the StepLog actor.
    """
    _compat.require_distributed().secede()  # a long-running task leaves the worker's thread pool
    runner = GradientRunner(graphs, job.layout)
    plan, replica = job.plan, job.replica
    x = data[0] if len(data) == 2 else tuple(data[:-1])
    y = data[-1]
    applied, step = 0, plan.first_step
    while step < plan.end:
        step, parameters = _pull(shards, job, step)
        if parameters is None:
            break
        shard = plan.shard_of(replica, step)
        rows = plan.shard_rows(order, step, shard)
        if len(rows):
            loss, arrays, predictions = runner.run(parameters, _take(x, rows), y[rows])
            if job.delay:
                time.sleep(job.delay)
            commit = log.commit(step, shard, replica, len(rows), float(loss), predictions)
            if plan.backup_workers == 0 or _answer(commit, job.timeout, f"the step log (step {step})"):
                pushes = [
                    ps.push(step, shard, len(rows), [b.take(arrays[b.variable]) for b in blocks])
                    for ps, blocks in zip(shards, job.blocks, strict=True)
                ]
                for i, push in enumerate(pushes):
                    _answer(push, job.timeout, f"parameter shard {i} (push of step {step})")
                applied += 1
        step += 1
    return applied


def _pull(shards: list, job: ReplicaJob, step: int):
    """(step, parameters) with every shard's blocks from the same step, at `step` or the
    newest step a shard has reached; (step, None) once the epoch is over or stopped."""
    target = step
    while True:
        calls = [ps.pull(target) for ps in shards]
        answers = [_answer(c, job.timeout, f"parameter shard {i} (pull of step {target})") for i, c in enumerate(calls)]
        if any(status == "stop" for status, _, _ in answers):
            return target, None
        if all(status == "ok" for status, _, _ in answers):
            break
        target = max(s for _, s, _ in answers)
        if target >= job.plan.end:
            return target, None
    parts = {}
    for blocks, (_, _, arrays) in zip(job.blocks, answers, strict=True):
        parts.update(zip(blocks, arrays, strict=True))
    return target, join_blocks(parts)


def _answer(call, timeout: float, what: str):
    """The result of an actor call, or a TimeoutError naming who did not answer. The wait
    is a little longer than the actors' own, so that their more precise errors come first."""
    wait = timeout + 5.0
    try:
        return call.result(timeout=wait)
    except TimeoutError:
        if call.done():  # the actor's own error
            raise
        raise TimeoutError(f"replica: {what} did not answer within {wait:g}s") from None


def _take(x, rows: np.ndarray):
    return tuple(a[rows] for a in x) if isinstance(x, tuple) else x[rows]
