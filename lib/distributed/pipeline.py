"""`Pipeline`: model-parallel training of a Sequential model on a Dask cluster, with the
batch cut into micro-batches that flow through the stages (GPipe, with a synchronous
flush per step).

Stages and devices. The model's layers are cut into `stages` consecutive groups of
about equal parameter counts (each at least one layer). Stage k runs on worker
w = k * workers // stages, as device "/worker:w/cpu:j" (j counts the stages of that
worker), so two stages on one worker are two devices.

What a step computes. The model's training step (forward pass, loss, gradients) is
frozen once per micro-batch size with each stage's layers traced inside
`tp.device(<its device>)`; gradient nodes go with the ops they differentiate, the loss
with the last stage (`tapeflow.graph.placer`). The graph is partitioned
(`tapeflow.graph.partition`): each stage gets a forward and a backward partition (the
last stage one for both), joined by send/recv transfers. A batch of B rows is cut
into `micro_batches` micro-batches of consecutive rows (sizes differing by at most
one, larger first). Every stage runs its forward partition on micro-batch 0, 1, ...
as their inputs arrive, then its backward partition, so stage k works on micro-batch
i while stage k+1 works on i-1 (`tapeflow.distributed.model_parallel`). The flush
applies, per variable, with the model's optimizer,

    g = sum over micro-batches i of (rows_i / B) * g_i

where g_i is the gradient of the mean loss over micro-batch i: g is the gradient of
the mean loss over the batch, so training equals single-process `fit` on the same
batches to float32 rounding (exactly, with one micro-batch), for losses that average
over the batch and layers that treat samples independently (dropout draws other
masks; layers that write variables while training, such as batch normalization, are
refused).

Between epochs the client's model is the master copy: its weights, optimizer slots,
step counter and learning rate go to the stages at the start of each epoch and come
back at its end (so callbacks and checkpoints work as in one process).

`model.predict(x, distribute=...)` runs the inference forward pass (one graph for any
batch size) through the stages the same way, and `model.evaluate` takes its
predictions and computes the loss and metrics on the client, batch by batch.

Failures. Every wait is bounded by `timeout`, and the client asks the scheduler every
half second whether a worker holding a stage left. A worker that dies mid-step ends
`fit` with a RuntimeError naming it and the step, within seconds; there is no
recovery, and the model keeps the weights it had at the start of the epoch.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.Pipeline(cluster, stages=4, micro_batches=4))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.devices import WorkerDevice, device
from tapeflow.distributed import master_copy
from tapeflow.distributed.compression import check_compression
from tapeflow.distributed.data_parallel import _check_loss, _check_optimizer, _count, _seconds, _shard_sizes
from tapeflow.distributed.gradient_graph import trace_gradient_steps
from tapeflow.distributed.model_parallel import Roles, StageGroup, stage_specs
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.registry import as_tensor


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


class Pipeline:
    """Pipelined model-parallel training over `stages` stages on the workers of `cluster`
    (at most `stages` of them), `micro_batches` micro-batches per step; pass it to
    `model.fit(..., distribute=...)`. `compression` ("float16" or "bfloat16") converts
    the float32 values crossing between workers to 16 bits. `timeout` bounds every wait.
    After `fit`, `steps` holds a `PipelineStep` per step. See the module docstring."""

    def __init__(
        self,
        cluster,
        stages: int = 2,
        micro_batches: int = 1,
        *,
        compression: str | None = None,
        timeout: float = 60.0,
    ):
        _count("stages", stages, minimum=1, owner="Pipeline")
        _count("micro_batches", micro_batches, minimum=1, owner="Pipeline")
        _seconds("timeout", timeout, owner="Pipeline")
        self.cluster = cluster
        self.stages = stages
        self.micro_batches = micro_batches
        self.compression = check_compression(compression, "Pipeline")
        self.timeout = float(timeout)
        self.steps: list[PipelineStep] = []

    def workers(self) -> list[str]:
        """The workers the stages run on: the first `stages` of the cluster's."""
        workers = self.cluster.workers
        if not workers:
            raise ValueError("Pipeline: the cluster has no workers")
        return workers[: self.stages]

    def predict(self, model, x, batch_size: int) -> np.ndarray:
        """`model.predict(x, distribute=self)`: the forward pass partitioned over the stages."""
        return predict_on_pipeline(self, model, x, batch_size)

    def evaluate(self, model, x, y, batch_size: int) -> dict:
        """`model.evaluate(x, y, distribute=self)`: each batch's predictions come through the
        stages, and the loss and metrics are computed here, batch by batch as `evaluate` does."""
        predictions = self.predict(model, x, batch_size)
        model._reset_metrics()
        logs = {}
        y = np.asarray(y)
        for start in range(0, len(y), batch_size):
            y_true, y_pred = (
                as_tensor(y[start : start + batch_size]),
                as_tensor(predictions[start : start + batch_size]),
            )
            loss = model._total_loss(y_true, y_pred)
            logs = model._update_metrics(y_true, y_pred, loss, batch_size=len(y_true))
        return {k: float(v) for k, v in logs.items()}

    def start(self, model, x, y, batch_size: int) -> PipelineSession:
        """Set up training of `model` on arrays `x` and `y`: `Model.fit` calls this, then
        `run_epoch` per epoch and `close` at the end."""
        return PipelineSession(self, model, x, y, batch_size)

    def __repr__(self) -> str:
        return f"Pipeline(stages={self.stages}, micro_batches={self.micro_batches}, compression={self.compression!r})"


def stage_devices(stages: int, n_workers: int) -> list[str]:
    """The device of each of `stages` stages over `n_workers` workers (see the module docstring).

    >>> stage_devices(4, 2)
    ['/worker:0/cpu:0', '/worker:0/cpu:1', '/worker:1/cpu:0', '/worker:1/cpu:1']
    """
    owners = [k * n_workers // stages for k in range(stages)]
    return [f"/worker:{w}/cpu:{owners[:k].count(w)}" for k, w in enumerate(owners)]


def split_layers(layers: list, stages: int) -> list[list]:
    """`layers` cut into `stages` consecutive groups of about equal parameter counts
    (a layer counts its parameters plus one).

    >>> [len(g) for g in split_layers(["a", "b", "c", "d", "e"], 2)]
    [3, 2]
    """
    if len(layers) < stages:
        raise ValueError(f"Pipeline: {stages} stages need at least {stages} layers, the model has {len(layers)}")
    costs = [1 + sum(int(np.prod(w.shape)) for w in getattr(layer, "weights", ())) for layer in layers]
    bounds = np.cumsum(costs)
    cuts, start = [], 0
    for k in range(1, stages):
        target = bounds[-1] * k / stages
        cut = int(np.searchsorted(bounds, target, side="left")) + 1
        cut = min(max(cut, start + 1), len(layers) - (stages - k))  # every group keeps at least one layer
        cuts.append(cut)
        start = cut
    edges = [0, *cuts, len(layers)]
    return [layers[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]


def micro_batches(rows: np.ndarray, m: int) -> list[np.ndarray]:
    """`rows` cut into `m` consecutive parts whose sizes differ by at most one, larger first."""
    return np.array_split(np.asarray(rows), m)


def _check_model(model) -> None:
    if type(model).__name__ != "Sequential":
        raise ValueError(f"Pipeline: stages are cut from a Sequential model's layers, got {type(model).__name__}")


class _Stages:
    """A Sequential model's layers cut into the strategy's stages, and their devices."""

    def __init__(self, strategy: Pipeline, model):
        _check_model(model)
        self.workers = strategy.workers()
        self.devices = stage_devices(strategy.stages, len(self.workers))
        self.groups = split_layers(list(model.layers), strategy.stages)
        self.stage_workers = [self.workers[WorkerDevice.parse(d).worker] for d in self.devices]

    def forward(self, inputs, training=None):
        """The model's forward pass with each stage's layers traced on its device."""
        h = inputs
        for where, group in zip(self.devices, self.groups, strict=True):
            with device(where):
                for layer in group:
                    h = layer(h, training=training)
        return h


class PipelineSession:
    """One `fit` on the stages: the actors, and the steps' coordination (see the module
    docstring); released by `close`."""

    def __init__(self, strategy: Pipeline, model, x, y, batch_size: int):
        if isinstance(x, Dataset) or isinstance(x, tuple):
            raise ValueError("Pipeline: fit(distribute=Pipeline(...)) takes one input array x and labels y")
        _check_model(model)
        m = strategy.micro_batches
        if batch_size < m:
            raise ValueError(f"Pipeline: a batch of {batch_size} rows does not split into {m} micro-batches")
        _check_optimizer(model.optimizer)
        _check_loss(model.loss)
        self.strategy, self.model, self.x, self.y = strategy, model, np.asarray(x), np.asarray(y)
        strategy.steps = []
        stages = _Stages(strategy, model)
        self.with_predictions = bool(model.compiled_metrics)
        sizes = _shard_sizes({batch_size, len(self.y) % batch_size} - {0}, m)
        graphs, self.layout, self.variables = trace_gradient_steps(
            model, self.x, self.y, sizes, self.with_predictions, forward=stages.forward
        )
        n = self.layout.n_trainable
        if len(self.layout.state_names) != n:
            raise ValueError(
                "Pipeline: the model writes variables while training (batch normalization); pipelined "
                "training supports layers without such state"
            )
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables)
        roles = Roles(
            loss=0,
            variables=self.layout.state_names,
            decays=tuple(self.optimizer._decays(v) for v in self.variables),
            outputs=(1 + n,) if self.with_predictions else (),
            optimizer_config=master_copy.optimizer_config(self.optimizer),
        )
        specs = stage_specs(graphs, stages.devices, roles, strategy.compression, strategy.timeout)
        self.predictions = next(iter(graphs.values())).outputs[-1].name
        columns = {"inputs": self.x, "labels": self.y}
        self.group = StageGroup(strategy.cluster, specs, stages.stage_workers, columns, strategy.timeout)

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
                logs = self.model._update_metrics(y_true, y_pred, loss, batch_size=len(rows))
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
        values, slots = master_copy.whole_state(self.variables, self.optimizer, self.layout.n_trainable)
        values = dict(zip(self.layout.state_names, values, strict=True))
        slots = dict(zip(self.layout.state_names, slots, strict=True))
        lr = master_copy.learning_rate(self.optimizer)
        self.group.answers(
            [a.begin(values, slots, self.optimizer.iterations, lr) for a in self.group.actors], "begin the epoch"
        )

    def _end(self) -> None:
        """Take the stages' weights, slots and step counter into the client's model."""
        states = self.group.answers([a.state() for a in self.group.actors], "read the state")
        values, slots = {}, {}
        for stage_values, stage_slots, _ in states:
            values.update(stage_values)
            slots.update(stage_slots)
        names = self.layout.state_names
        master_copy.take_state(
            self.variables, self.optimizer, [values[n] for n in names], [slots[n] for n in names], states[0][2]
        )

    def close(self) -> None:
        """Release the stage actors (safe to call twice)."""
        self.group.close()


def predict_on_pipeline(strategy: Pipeline, model, x, batch_size: int) -> np.ndarray:
    """`model.predict(x, batch_size)` with the forward pass partitioned over the stages:
    each batch is cut into micro-batches that flow through them."""
    x = np.asarray(x)
    if not model.built:
        model(x[:1], training=False)
    stages = _Stages(strategy, model)
    spec = TensorSpec((None, *x.shape[1:]), as_tensor(x[:1]).dtype)
    graph = freeze(lambda inputs: stages.forward(inputs, training=False), spec, name=f"{model.name}_forward")
    specs = stage_specs({None: graph}, stages.devices, Roles(outputs=(0,)), strategy.compression, strategy.timeout)
    group = StageGroup(strategy.cluster, specs, stages.stage_workers, {"inputs": x}, strategy.timeout)
    try:
        outputs = []
        for step, start in enumerate(range(0, len(x), batch_size)):
            rows = np.arange(start, min(start + batch_size, len(x)))
            parts = micro_batches(rows, min(strategy.micro_batches, len(rows)))
            try:
                outputs.append(group.step(step, parts, len(rows)).outputs[graph.outputs[0].name])
            except Exception as error:
                failure = group.failure(error, f"batch {step}")
                if failure is error:
                    raise
                raise RuntimeError(f"predict: {failure}") from error
        return np.concatenate(outputs) if outputs else np.zeros((0,))
    finally:
        group.close()
