"""The replica loop: a long-running Dask task that runs one epoch of synchronous steps.

Each step a replica computes the gradient of its shard of the global batch with the
frozen gradient step on the step's parameters, commits the result to the step log and,
if accepted, pushes each parameter shard its blocks (an Embedding's gradient as the
rows its ids name); the pushes answer with the next step's parameters (of a sparsely
updated table, only the rows the step changed, which the replica writes into its copy).
A replica that finds the parameters already past its step (its last result was too
late) skips ahead to the current step; with backup workers, a replica whose step fills
up while it still computes stops that computation between two nodes and drops it. The
loop ends when the epoch's last step is applied or the client stops the shards; every
wait is bounded by `timeout`.
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
from tapeflow.distributed.runtime.stragglers import Stragglers
from tapeflow.distributed.runtime.tasks import actor_answer
from tapeflow.distributed.sparse_rows import SparseRows
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.graph.executor import RunCancelled
from tapeflow.profiler.recording import span


@dataclass(frozen=True)
class ReplicaJob:
    """What one replica needs besides the data: its number, the epoch plan, the layout of
    the gradient step, the parameter blocks per shard, the simulated slow workers and
    the timeout of every wait."""

    replica: int
    plan: EpochPlan
    layout: GradientLayout
    blocks: tuple[tuple[Block, ...], ...]
    stragglers: Stragglers
    timeout: float


def run_replica(job: ReplicaJob, graphs: dict, data: list, order: np.ndarray, shards: list, log) -> int:
    """Run `job`'s replica over its epoch; returns the number of its shards that were applied.

    `data` is [x, y], [x_0, ..., x_k, y] or an `EpochStream` (see `epoch_data`); `shards`
    are the ParameterShard actors and `log` the StepLog actor.
    """
    _compat.require_distributed().secede()  # a long-running task leaves the worker's thread pool
    shards, log = [in_process(ps) for ps in shards], in_process(log)
    runner = GradientRunner(graphs, job.layout)
    plan, replica = job.plan, job.replica
    reader = replica_reader(data, job.timeout)
    results = _Results(log, job)
    applied, step, answers, parameters = 0, plan.first_step, None, None
    while step < plan.end:
        step, parameters = _parameters(shards, job, step, answers, parameters)
        if parameters is None:
            break
        answers = None
        shard = plan.shard_of(replica, step)
        rows = plan.shard_rows(order, step, shard)
        if len(rows):
            # with backup workers a shard still computing when its step fills up is dropped
            cancelled = log.closed(step, job.timeout).done if plan.backup_workers else None
            try:
                with span("replica_step", kind="phase", args={"replica": replica, "step": step}):
                    loss, arrays, predictions = runner.run(parameters, *reader.take(rows), cancelled=cancelled)
                _slowed(job.stragglers.delay(replica, step, plan.parts), cancelled)
            except RunCancelled:
                step += 1
                continue
            if results.commit((step, shard, replica, len(rows), float(loss), predictions)):
                sent = [[b.take(arrays[b.variable]) for b in blocks] for blocks in job.blocks]
                with span("push", sent, args={"replica": replica, "step": step}):
                    pushes = [ps.push(step, shard, len(rows), part) for ps, part in zip(shards, sent, strict=True)]
                    answers = [
                        actor_answer(p, job.timeout, f"parameter shard {i} (step {step})") for i, p in enumerate(pushes)
                    ]
                applied += 1
        step += 1
    results.flush(wait=True)
    return applied


def _slowed(seconds: float, cancelled) -> None:
    """A simulated slow worker: `seconds` more of computing, which stops (`RunCancelled`) as
    soon as `cancelled` is true, as the graph's own run does between nodes."""
    end = time.monotonic() + seconds
    while seconds > 0:
        if cancelled is not None and cancelled():
            raise RunCancelled("the step was filled by other shards")
        time.sleep(min(0.002, seconds))
        seconds = end - time.monotonic()


class _Results:
    """Shard results on their way to the step log. With backup workers each is committed at
    once (the log decides whether it is applied); without, all are applied, so they go in
    batches at most `INTERVAL` seconds apart, sparing the log's worker a call per step."""

    INTERVAL = 0.02

    def __init__(self, log, job: ReplicaJob):
        self.log, self.job = log, job
        self.batch: list[tuple] = []
        self.sent = time.monotonic()

    def commit(self, result: tuple) -> bool:
        """Whether `result` (step, shard, replica, rows, loss, predictions) is applied."""
        if self.job.plan.backup_workers:
            return actor_answer(self.log.commit(*result), self.job.timeout, f"the step log (step {result[0]})")
        self.batch.append(result)
        if time.monotonic() - self.sent > self.INTERVAL:
            self.flush(wait=False)
        return True

    def flush(self, wait: bool) -> None:
        if self.batch:
            call = self.log.commit_all(self.batch)
            self.batch, self.sent = [], time.monotonic()
            if wait:
                actor_answer(call, self.job.timeout, "the step log")


def _parameters(shards: list, job: ReplicaJob, step: int, answers=None, previous=None):
    """(step, parameters) with every shard's blocks from the same step, at `step` or the
    newest step a shard has reached; (step, None) once the epoch is over or stopped.
    `answers` are the shards' answers for `step` when the pushes brought them, in which
    a sparsely updated block comes as the rows changed since `previous` (the parameters
    of step - 1, which this replica owns: the rows are written into them in place)."""
    target = step
    while True:
        if answers is None:
            with span("pull", args={"replica": job.replica, "step": target}) as pulled:
                calls = [ps.pull(target) for ps in shards]
                answers = [
                    actor_answer(c, job.timeout, f"parameter shard {i} (step {target})") for i, c in enumerate(calls)
                ]
                pulled.moved([arrays for _, _, arrays in answers])
        if any(status == "stop" for status, _, _ in answers):
            return target, None
        if all(status == "ok" for status, _, _ in answers):
            break
        target, answers = max(s for _, s, _ in answers), None
        if target >= job.plan.end:
            return target, None
    by_variable: dict[int, dict[Block, np.ndarray]] = {}
    for blocks, (_, _, arrays) in zip(job.blocks, answers, strict=True):
        for block, array in zip(blocks, arrays, strict=True):
            by_variable.setdefault(block.variable, {})[block] = array
    values = list(previous) if previous is not None else [None] * len(by_variable)
    for variable, parts in by_variable.items():
        if any(isinstance(a, SparseRows) for a in parts.values()):
            for block, array in parts.items():
                start = 0 if block.rows is None else block.rows[0]
                if isinstance(array, SparseRows):
                    values[variable][array.indices + start] = array.values
                else:
                    values[variable][start : start + len(array)] = array
            continue
        (joined,) = join_blocks(parts)
        # the replica's own copy of a table that later steps update by rows, in place
        values[variable] = np.array(joined) if variable in job.layout.sparse else joined
    return target, values
