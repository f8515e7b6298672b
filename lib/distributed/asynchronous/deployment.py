"""`AsyncDeployment`: one placement of asynchronous training on a set of workers: the
asynchronous parameter shards (at most one per worker), the update log and the
replicas on the first `replicas` workers, and their graphs and data.
"""

from __future__ import annotations

import numpy as np

from tapeflow.distributed.asynchronous.parameter_shard import AsyncParameterShard
from tapeflow.distributed.asynchronous.replica import AsyncReplicaJob, run_async_replica
from tapeflow.distributed.asynchronous.update_log import UpdateLog
from tapeflow.distributed.epoch_data import EpochStream
from tapeflow.distributed.gradient_graph import GradientLayout
from tapeflow.distributed.parameters.deployment import ParameterDeployment, ShardSpec


class AsyncDeployment(ParameterDeployment):
    """Shards, update log, graphs and data placed on `workers`; `graphs` are the frozen
    gradient steps by batch size, `data` the arrays [x..., y] (None for a Dataset),
    `delays` the simulated slow replicas' seconds after each gradient."""

    shard_actor = AsyncParameterShard
    log_actor = UpdateLog
    log_title = "update log"

    def __init__(
        self,
        client,
        workers: list[str],
        replicas: int,
        spec: ShardSpec,
        layout: GradientLayout,
        graphs: dict,
        data: list | None,
        staleness_bound: int | None,
        delays: dict[int, float],
        timeout: float,
        watch=None,
    ):
        self.layout, self.delays = layout, delays
        config = spec.optimizer_config["config"]
        self.clipping = (config.get("clipnorm"), config.get("global_clipnorm"))
        super().__init__(client, workers, replicas, spec, graphs, data, (staleness_bound,), timeout, watch)

    def begin(self, values, slots, iterations: int, learning_rate, n_batches: int) -> None:
        """Give every shard its blocks of the whole-variable `values` and `slots`, the step
        counter and the learning rate, and the log the epoch's `n_batches` batches."""
        calls = [
            shard.begin_epoch(shard_values, shard_slots, iterations, learning_rate)
            for shard, (shard_values, shard_slots) in zip(self.shards, self.shard_parts(values, slots), strict=True)
        ]
        self.answers(calls, "begin the epoch")
        self.result(self.log.begin_epoch(iterations, n_batches), self.log_name)

    def launch_epoch(self, offsets: tuple[int, ...], order: np.ndarray, stream: EpochStream | None = None) -> list:
        """Start one replica task per replica worker on the batches of rows `order` that
        start at `offsets` (of `stream` for a Dataset); returns their futures."""
        jobs = [
            AsyncReplicaJob(r, offsets, self.layout, self.blocks, self.delays.get(r, 0.0), self.timeout, *self.clipping)
            for r in range(len(self.replica_workers))
        ]
        return self.launch(run_async_replica, jobs, order, stream)

    def records(self, wait: float) -> list[dict]:
        """The commits recorded since the last call, waiting up to `wait` seconds for one."""
        return self.result(self.log.wait(wait), self.log_name)
