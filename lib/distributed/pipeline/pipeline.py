"""`Pipeline`: model-parallel training of a Sequential model on a Dask cluster, with the
batch cut into micro-batches that flow through the stages (GPipe, with a synchronous
flush per step).

The model's layers are cut into stages of about equal parameter counts, one device of a
worker each; the frozen training step is partitioned over them, so stage k works on
micro-batch i while stage k+1 works on i-1. The flush applies the rows-weighted sum of
the micro-batch gradients, clipped as in one process (for `global_clipnorm` the stages
add up their sums of squares first): training equals single-process `fit` on the same
batches.
A worker that dies ends `fit` with an error naming it (there is no recovery).
docs/distributed.md tells the design.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.Pipeline(cluster, stages=4, micro_batches=4))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.distributed.checks import check_count, check_loss, split_sizes
from tapeflow.distributed.gradient_graph import trace_gradient_steps
from tapeflow.distributed.inference import MAX_LOSSES
from tapeflow.distributed.parameters.master_copy import optimizer_config, weight_decays
from tapeflow.distributed.pipeline.compression import check_compression
from tapeflow.distributed.pipeline.layer_stages import LayerStages, check_sequential, micro_batches
from tapeflow.distributed.pipeline.queue_links import check_transport
from tapeflow.distributed.pipeline.stages import Roles, StageGroup, StagesLost, stage_specs
from tapeflow.distributed.runtime.liveness import wait_for_workers
from tapeflow.distributed.strategy import Strategy, TrainingSession
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.registry import as_tensor
from tapeflow.queue.queues import QueueBase


@dataclass(frozen=True)
class PipelineStep:
    """One step: its loss, wall seconds, the seconds each stage computed (its partitions and
    its update), the bytes all transfers sent and the bytes that crossed between workers."""

    step: int
    loss: float
    seconds: float
    busy: tuple[float, ...]
    bytes_sent: int
    bytes_between_workers: int

    @property
    def bubble_fraction(self) -> float:
        """The share of the stages' time spent not computing: 1 - mean busy / step time."""
        return 1.0 - float(np.mean(self.busy)) / self.seconds if self.seconds > 0 else 0.0


class Pipeline(Strategy):
    """Pipelined model-parallel training over `stages` stages on the workers of `cluster`
    (at most `stages` of them), `micro_batches` micro-batches per step; pass it to
    `model.fit(..., distribute=...)`. `compression` ("float16" or "bfloat16") converts
    the float32 values crossing between workers to 16 bits. `transport` says how the stages
    hand each other micro-batch activations (forward) and gradients (backward): "queues",
    a cluster queue per transfer on the receiving stage's worker
    (`tapeflow.distributed.pipeline.queue_links`; the faster in `bench/distributed.py
    --only queues`), or "actors", calls on the receiving stage's actor; both move values
    worker to worker and train alike. `timeout` bounds every wait. After `fit`,
    `steps` holds a `PipelineStep` per step. One replica of the model runs, spread over
    the stages."""

    def __init__(
        self,
        cluster,
        stages: int = 2,
        micro_batches: int = 1,
        *,
        compression: str | None = None,
        transport: str = "queues",
        timeout: float = 60.0,
    ):
        check_count("stages", stages, minimum=1, owner=self.name)
        check_count("micro_batches", micro_batches, minimum=1, owner=self.name)
        super().__init__(cluster, 1, timeout=timeout)
        self.stages = stages
        self.micro_batches = micro_batches
        self.compression = check_compression(compression, self.name)
        self.transport = check_transport(transport, self.name)

    def _needs(self) -> str:
        return "the stages need at least"

    def workers(self) -> list[str]:
        """The workers the stages run on: the first `stages` of the cluster's."""
        return super().workers()[: self.stages]

    def start(self, model, x, y, batch_size: int) -> PipelineSession:
        return PipelineSession(self, model, x, y, batch_size)

    def predict(self, model, x, batch_size: int) -> np.ndarray:
        """`model.predict(x, distribute=self)`: each batch is cut into micro-batches that
        flow through the forward pass partitioned over the stages. When a worker holding a
        stage dies, the batches left run on stages placed anew on the workers alive, once
        there are as many as before (waiting up to `timeout`)."""
        return self._forward(model, x, batch_size, "predict")

    def evaluate(self, model, x, y, batch_size: int) -> dict:
        """`model.evaluate(x, y, distribute=self)`: each batch's predictions come through the
        stages, and the loss and metrics are computed here, batch by batch as `evaluate` does."""
        predictions = self._forward(model, x, batch_size, "evaluate")
        model.reset_metrics()
        logs = {}
        y = np.asarray(y)
        for start in range(0, len(y), batch_size):
            y_true = as_tensor(y[start : start + batch_size])
            y_pred = as_tensor(predictions[start : start + batch_size])
            loss = model.compute_loss(y=y_true, y_pred=y_pred)
            logs = model.update_metrics(y_true, y_pred, loss, batch_size=len(y_true))
        return {k: float(v) for k, v in logs.items()}

    def _forward(self, model, x, batch_size: int, method: str) -> np.ndarray:
        """The model's outputs for `x`, batch by batch through the stages, for `method`."""
        x = np.asarray(x)
        if not len(x):
            raise ValueError(f"{method}: the data is empty: x has no samples")
        if not model.built:
            model(x[:1], training=False)
        starts = list(range(0, len(x), batch_size))
        workers = self.workers()
        need, outputs, lost = len(workers), [], []
        while True:
            try:
                self._forward_on(workers[: self.stages], model, x, starts[len(outputs) :], batch_size, outputs, method)
                return np.concatenate(outputs)
            except StagesLost as failure:
                lost += failure.workers
                workers = self._workers_after(failure, len(lost), need, method)

    def _workers_after(self, failure: StagesLost, losses: int, need: int, method: str) -> list[str]:
        """The workers to place the stages on anew after `failure`, once `need` are alive
        (waiting up to `timeout`); a RuntimeError naming the lost workers when none join in
        time, or after `MAX_LOSSES` losses."""
        if losses >= MAX_LOSSES:
            raise RuntimeError(f"{method}: {failure}; giving up after {losses} lost workers") from failure
        try:
            return wait_for_workers(self.cluster, need, self.timeout, method, "pipelined inference")
        except RuntimeError as error:
            raise RuntimeError(f"{method}: {failure}; {str(error).removeprefix(f'{method}: ')}") from failure

    def _forward_on(self, workers, model, x, starts, batch_size: int, outputs: list, method: str) -> None:
        """Append the outputs of the batches from `starts` on to `outputs`, through stages
        placed on `workers`; StagesLost when a worker holding one dies."""
        stages = LayerStages(model, self.stages, workers)
        spec = TensorSpec((None, *x.shape[1:]), as_tensor(x[:1]).dtype)
        graph = freeze(lambda inputs: stages.forward(inputs, training=False), spec, name=f"{model.name}_forward")
        roles = Roles(outputs=(0,))
        specs = stage_specs({None: graph}, stages.devices, roles, self.compression, self.timeout, self.transport)
        columns = {"inputs": x}
        group = StageGroup(self.cluster, specs, stages.stage_workers, columns, self.timeout, method, self.micro_batches)
        try:
            for start in starts:
                rows = np.arange(start, min(start + batch_size, len(x)))
                parts = micro_batches(rows, min(self.micro_batches, len(rows)))
                step = start // batch_size
                try:
                    outputs.append(group.step(step, parts, len(rows)).outputs[graph.outputs[0].name])
                except Exception as error:
                    failure = group.failure(error, f"batch {step}")
                    if failure is error:
                        raise
                    raise failure from error
        finally:
            group.close()

    def __repr__(self) -> str:
        return (
            f"Pipeline(stages={self.stages}, micro_batches={self.micro_batches}, compression={self.compression!r}, "
            f"transport={self.transport!r})"
        )


class PipelineSession(TrainingSession):
    """One `fit` on the stages: the stage actors, and the steps' coordination; released by
    `close`. A lost worker ends `fit`: the model keeps the weights of the epoch's start."""

    def __init__(self, strategy: Pipeline, model, x, y, batch_size: int):
        if isinstance(x, Dataset | QueueBase | tuple):
            raise ValueError("Pipeline: fit(distribute=Pipeline(...)) takes one input array x and labels y")
        check_sequential(model)
        m = strategy.micro_batches
        if batch_size < m:
            raise ValueError(f"Pipeline: a batch of {batch_size} rows does not split into {m} micro-batches")
        check_loss(model.loss)
        super().__init__(strategy, model, np.asarray(x), np.asarray(y), batch_size)
        stages = LayerStages(model, strategy.stages, strategy.workers())
        graphs, self.layout, self.variables = trace_gradient_steps(
            model, self.x, self.y, self.graph_sizes(), self.with_predictions, forward=stages.forward
        )
        n = self.layout.n_trainable
        if len(self.layout.state_names) != n:
            raise ValueError(
                "Pipeline: the model writes variables while training (batch normalization); pipelined "
                "training supports layers without such state"
            )
        self.optimizer.build(self.variables)
        roles = Roles(
            loss=0,
            variables=self.layout.state_names,
            decays=weight_decays(self.optimizer, self.variables),
            outputs=(1 + n,) if self.with_predictions else (),
            optimizer_config=optimizer_config(self.optimizer),
        )
        specs = stage_specs(graphs, stages.devices, roles, strategy.compression, strategy.timeout, strategy.transport)
        self.predictions = next(iter(graphs.values())).outputs[-1].name
        columns = {"inputs": self.x, "labels": self.y}
        self.group = StageGroup(strategy.cluster, specs, stages.stage_workers, columns, strategy.timeout, "fit", m)

    def graph_sizes(self, parts: int | None = None) -> set[int]:
        """Micro-batch sizes: each batch is cut into `micro_batches` parts."""
        return split_sizes(self.batch_sizes, parts or self.strategy.micro_batches)

    def run_epoch(self, batches, callbacks) -> dict:
        """Train one epoch on `batches` (arrays of row numbers, in step order), calling the
        batch callbacks after each step; returns the epoch's logs."""
        strategy, logs = self.strategy, {}
        try:
            self._begin()
            for index, rows in enumerate(batches):
                rows = np.asarray(rows)
                step = self.optimizer.iterations + index
                callbacks.on_train_batch_begin(index)
                answers = self.group.step(step, micro_batches(rows, strategy.micro_batches), len(rows))
                strategy.steps.append(
                    PipelineStep(
                        step,
                        answers.loss,
                        answers.seconds,
                        answers.busy,
                        answers.bytes_sent,
                        answers.bytes_between_workers,
                    )
                )
                y_true = as_tensor(self.y[rows]) if self.with_predictions else None
                y_pred = as_tensor(answers.outputs[self.predictions]) if self.with_predictions else None
                loss = as_tensor(np.float32(answers.loss))
                logs = self.model.update_metrics(y_true, y_pred, loss, batch_size=len(rows))
                callbacks.on_train_batch_end(index, logs)
            self._end()
        except Exception as error:
            failure = self.group.failure(error, f"step {len(strategy.steps)}")
            if failure is error:
                raise
            raise RuntimeError(
                f"fit: {failure}; training stopped (the model keeps the weights of the epoch's start)"
            ) from error
        return logs

    def _begin(self) -> None:
        """Send the client's weights, slots, step counter and learning rate to the stages."""
        values, slots, iterations, learning_rate = self.client_state()
        values = dict(zip(self.layout.state_names, values, strict=True))
        slots = dict(zip(self.layout.state_names, slots, strict=True))
        calls = [a.begin(values, slots, iterations, learning_rate) for a in self.group.actors]
        self.group.answers(calls, "begin the epoch")

    def _end(self) -> None:
        """Take the stages' weights, slots and step counter into the client's model."""
        states = self.group.answers([a.state() for a in self.group.actors], "read the state")
        values, slots = {}, {}
        for stage_values, stage_slots, _ in states:
            values.update(stage_values)
            slots.update(stage_slots)
        names = self.layout.state_names
        self.take_state([values[n] for n in names], [slots[n] for n in names], states[0][2])

    def close(self) -> None:
        """Release the stage actors (safe to call twice)."""
        self.group.close()
