"""`Deployment`: one placement of synchronous training on a set of workers.

Parameter shards go to the workers (at most one each), the step log and the replicas to
the first `replicas + backup_workers` of them. A deployment runs any number of segments
(consecutive steps of one epoch): `begin` sends the state to start from, `launch`
starts the replicas, `snapshot` and `state` read a consistent state back.
"""

from __future__ import annotations

import time

import numpy as np

from tapeflow.distributed.epoch_data import EpochStream
from tapeflow.distributed.gradient_graph import GradientLayout
from tapeflow.distributed.parameters.deployment import ParameterDeployment, ShardSpec
from tapeflow.distributed.parameters.master_copy import join_state
from tapeflow.distributed.runtime.stragglers import Stragglers
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.distributed.sync.parameter_shard import ParameterShard
from tapeflow.distributed.sync.replica import ReplicaJob, run_replica
from tapeflow.distributed.sync.step_log import StepLog


class Deployment(ParameterDeployment):
    """Shards, step log, graphs and data placed on `workers` (see the module docstring).

    `graphs` are the frozen gradient steps by shard size, `data` the arrays [x..., y]
    (None when each launch brings an epoch of a Dataset), `stragglers` the simulated
    slow replicas.
    """

    shard_actor = ParameterShard
    log_actor = StepLog
    log_title = "step log"

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
        self.layout, self.stragglers = layout, stragglers
        self.replicas, self.backup_workers = replicas, backup_workers
        super().__init__(client, workers, replicas + backup_workers, spec, graphs, data, (), timeout, watch)
        self.norm_parties = _norm_parties(spec, self.blocks)

    # ------------------------------------------------------------ segments
    def begin(self, plan: EpochPlan, values, slots, iterations: int, learning_rate, snapshot_steps=()) -> None:
        """Give every shard its blocks of the whole-variable `values` and `slots`, the step
        counter and the learning rate, arming snapshots at `snapshot_steps`."""
        parties = self.norm_parties
        calls = [
            shard.begin_epoch(
                plan,
                shard_values,
                shard_slots,
                iterations,
                learning_rate,
                sorted(snapshot_steps),
                (self.log, parties.index(j), len(parties)) if j in parties else None,
            )
            for j, (shard, (shard_values, shard_slots)) in enumerate(
                zip(self.shards, self.shard_parts(values, slots), strict=True)
            )
        ]
        self.answers(calls, "begin the steps")
        self.result(self.log.begin_epoch(plan), self.log_name)

    def launch_epoch(self, plan: EpochPlan, order: np.ndarray, stream: EpochStream | None = None) -> list:
        """Start one replica task per replica worker over `plan`, reading the rows `order`
        (of `stream` for a Dataset); returns their futures."""
        jobs = [
            ReplicaJob(r, plan, self.layout, self.blocks, self.stragglers, self.timeout)
            for r in range(len(self.replica_workers))
        ]
        return self.launch(run_replica, jobs, order, stream)

    def records(self, step: int, wait: float) -> list[dict]:
        """The step log's records of `step` and later, waiting up to `wait` seconds for one."""
        return self.result(self.log.wait(step, wait), self.log_name, time.monotonic() + wait + self.timeout)

    def silent(self, wait: float) -> str:
        """Which shards and log do not answer within `wait` seconds, or, when all answer,
        each shard's step and the shards of it received."""
        named = zip(self.shards, self.shard_workers, strict=True)
        calls = [(f"the parameter shard on {worker}", shard.progress()) for shard, worker in named]
        calls.append((self.log_name, self.log.progress()))
        deadline, silent, progress = time.monotonic() + wait, [], []
        for name, call in calls:
            try:
                progress.append(call.result(timeout=max(deadline - time.monotonic(), 0.01)))
            except Exception:  # noqa: BLE001 - whatever the reason, it did not answer
                silent.append(name)
        if silent:
            return f"no answer within {wait:g}s from {', '.join(silent)}"
        return f"parameter shards at (step, shards received) {progress[:-1]}"

    # ------------------------------------------------------------ snapshots
    def arm(self, step: int) -> tuple[bool, int]:
        """(armed, newest shard step): arm a snapshot of `step` on every shard, or on none
        if one has already passed it."""
        answers = self.answers([shard.arm(step) for shard in self.shards], f"arm a snapshot of step {step}")
        if all(ok for ok, _ in answers):
            return True, max(s for _, s in answers)
        self.answers([shard.disarm(step) for shard in self.shards], f"disarm step {step}")
        return False, max(s for _, s in answers)

    def snapshot(self, step: int):
        """(values, slots, iterations) of whole variables as of `step` (armed before), or
        None if the shards were stopped."""
        answers = self.answers([shard.snapshot(step) for shard in self.shards], f"a snapshot of step {step}")
        return None if any(a is None for a in answers) else join_state(self.blocks, answers)


def _norm_parties(spec: ShardSpec, blocks) -> list[int]:
    """The parameter shards (by number) that add up their sums of squares each step, to clip
    by norms spanning shards: all of them for `global_clipnorm`, those holding row blocks of
    a trained variable for `clipnorm`; none when one shard holds all it needs."""
    config = spec.optimizer_config["config"]
    if config.get("global_clipnorm") is not None:
        parties = list(range(len(blocks)))
    elif config.get("clipnorm") is not None:
        parties = [
            j for j, held in enumerate(blocks) if any(b.rows is not None and spec.trainable[b.variable] for b in held)
        ]
    else:
        parties = []
    return parties if len(parties) > 1 else []
