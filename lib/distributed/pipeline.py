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

Failures. Every wait is bounded by `timeout`, and the client asks the scheduler every
half second whether a worker holding a stage left. A worker that dies mid-step ends
`fit` with a RuntimeError naming it and the step, within seconds; there is no
recovery, and the model keeps the weights it had at the start of the epoch.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.Pipeline(cluster, stages=4, micro_batches=4))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.devices import WorkerDevice, device
from tapeflow.distributed import master_copy
from tapeflow.distributed.compression import check_compression
from tapeflow.distributed.data_parallel import _check_loss, _check_optimizer, _count, _seconds, _shard_sizes
from tapeflow.distributed.deployment import watched_result
from tapeflow.distributed.gradient_graph import graph_bytes, trace_gradient_steps
from tapeflow.distributed.liveness import WorkerLost, find_lost, lost_workers
from tapeflow.distributed.model_parallel import StagePartition, StageSpec, StageWorker
from tapeflow.graph.partition import partition
from tapeflow.ops.registry import as_tensor

_STOP_WAIT = 2.0  # seconds to release the stages of a failed step


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


class PipelineSession:
    """One `fit` on the stages: the actors, and the steps' coordination (see the module
    docstring); released by `close`."""

    def __init__(self, strategy: Pipeline, model, x, y, batch_size: int):
        if isinstance(x, Dataset) or isinstance(x, tuple):
            raise ValueError("Pipeline: fit(distribute=Pipeline(...)) takes one input array x and labels y")
        if not hasattr(model, "layers") or type(model).__name__ != "Sequential":
            raise ValueError(f"Pipeline: stages are cut from a Sequential model's layers, got {type(model).__name__}")
        m = strategy.micro_batches
        if batch_size < m:
            raise ValueError(f"Pipeline: a batch of {batch_size} rows does not split into {m} micro-batches")
        _check_optimizer(model.optimizer)
        _check_loss(model.loss)
        self.strategy, self.model, self.x, self.y = strategy, model, np.asarray(x), np.asarray(y)
        strategy.steps = []
        workers = strategy.workers()
        devices = stage_devices(strategy.stages, len(workers))
        groups = split_layers(list(model.layers), strategy.stages)
        self.with_predictions = bool(model.compiled_metrics)
        sizes = _shard_sizes({batch_size, len(self.y) % batch_size} - {0}, m)

        def staged_forward(inputs, training=None):
            h = inputs
            for where, group in zip(devices, groups, strict=True):
                with device(where):
                    for layer in group:
                        h = layer(h, training=training)
            return h

        graphs, layout, self.variables = trace_gradient_steps(
            model, self.x, self.y, sizes, self.with_predictions, forward=staged_forward
        )
        if len(layout.state_names) != layout.n_trainable:
            raise ValueError(
                "Pipeline: the model writes variables while training (batch normalization); pipelined "
                "training supports layers without such state"
            )
        self.layout = layout
        self.optimizer = model.optimizer
        self.optimizer.build(self.variables)
        specs = self._stage_specs(graphs, devices)
        self.devices, self.workers = devices, [workers[WorkerDevice.parse(d).worker] for d in devices]
        self.actors, self._held = [], []
        try:
            self._start(specs)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ setup
    def _stage_specs(self, graphs: dict, devices: list[str]) -> list[StageSpec]:
        """One StageSpec per device, from the partitions of each micro-batch size's graph."""
        by_device: dict[str, dict[int, list]] = {d: {} for d in devices}
        for size, graph in graphs.items():
            cut = partition(graph, devices)
            for part in cut.partitions:
                by_device[part.device].setdefault(size, []).append(part)
        graph = next(iter(graphs.values()))
        outputs = [v.name for v in graph.outputs]
        n = self.layout.n_trainable
        gradient_of = dict(zip(self.layout.state_names, outputs[1 : 1 + n], strict=True))
        config = master_copy.optimizer_config(self.optimizer)
        specs = []
        for where in devices:
            by_size = by_device[where]
            if not by_size or len({len(parts) for parts in by_size.values()}) > 1:
                raise ValueError(f"Pipeline: the stage on {where} has no partitions, or different ones per size")
            parts = next(iter(by_size.values()))
            made = {name for p in parts for name in p.output_names}
            read = {name for p in parts for name in p.input_names}
            held = [name for name in self.layout.state_names if any(name in p.graph.state for p in parts)]
            for name in held:
                if gradient_of[name] not in made:
                    raise ValueError(f"Pipeline: the gradient of '{name}' is not computed on {where}, which holds it")
            decays = {
                name: self.optimizer._decays(v) for name, v in zip(self.layout.state_names, self.variables, strict=True)
            }
            specs.append(
                StageSpec(
                    device=where,
                    partitions={
                        size: tuple(StagePartition(graph_bytes(p.graph), tuple(p.recvs), tuple(p.sends)) for p in ps)
                        for size, ps in by_size.items()
                    },
                    feeds=tuple(v.name for v in graph.inputs if v.name in read),
                    variables=tuple(held),
                    gradients=tuple(gradient_of[name] for name in held),
                    decays=tuple(decays[name] for name in held),
                    loss=outputs[0] if outputs[0] in made else None,
                    predictions=outputs[1 + n] if self.with_predictions and outputs[1 + n] in made else None,
                    optimizer_config=config,
                    compression=self.strategy.compression,
                    timeout=self.strategy.timeout,
                )
            )
        return specs

    def _start(self, specs: list[StageSpec]) -> None:
        client, timeout = self.strategy.cluster.client, self.strategy.timeout
        futures = [
            client.submit(StageWorker, spec, actor=True, workers=[w], allow_other_workers=False, pure=False)
            for spec, w in zip(specs, self.workers, strict=True)
        ]
        self._held = futures
        self.actors = [self._wait(f, f"starting the stage on {w}") for f, w in zip(futures, self.workers, strict=True)]
        peers = dict(zip(self.devices, self.actors, strict=True))
        columns = {"inputs": self.x, "labels": self.y}
        calls = [
            (actor.connect(peers), actor.load_data({n: columns[n] for n in spec.feeds}))
            for actor, spec in zip(self.actors, specs, strict=True)
        ]
        deadline = time.monotonic() + timeout
        for (a, b), w in zip(calls, self.workers, strict=True):
            self._wait(a, f"the stage on {w} (connect)", deadline)
            self._wait(b, f"the stage on {w} (data)", deadline)

    # ------------------------------------------------------------ epochs
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
                record, predictions = self._step(step, rows)
                strategy.steps.append(record)
                y_true = as_tensor(self.y[rows]) if self.with_predictions else None
                y_pred = as_tensor(predictions) if self.with_predictions else None
                logs = self.model._update_metrics(y_true, y_pred, as_tensor(np.float32(record.loss)))
                callbacks.on_train_batch_end(index, logs)
            self._end()
        except Exception as error:
            self._stop()
            lost = find_lost(strategy.cluster, self.workers, error)
            if lost:
                stages = [d for d, w in zip(self.devices, self.workers, strict=True) if w in lost]
                raise RuntimeError(
                    f"fit: workers {lost} holding pipeline stages {stages} left the cluster during step "
                    f"{len(strategy.steps)}; training stopped (the model keeps the weights of the epoch's start)"
                ) from error
            raise
        return logs

    def _begin(self) -> None:
        values, slots = master_copy.whole_state(self.variables, self.optimizer, self.layout.n_trainable)
        values = dict(zip(self.layout.state_names, values, strict=True))
        slots = dict(zip(self.layout.state_names, slots, strict=True))
        lr = master_copy.learning_rate(self.optimizer)
        calls = [a.begin(values, slots, self.optimizer.iterations, lr) for a in self.actors]
        self._answers(calls, "begin the epoch")

    def _step(self, step: int, rows: np.ndarray):
        parts = micro_batches(rows, self.strategy.micro_batches)
        started = time.perf_counter()
        answers = self._answers([a.run_step(step, parts, len(rows)) for a in self.actors], f"step {step}")
        seconds = time.perf_counter() - started
        last = next(a for a in answers if "loss" in a)
        record = PipelineStep(
            step=step,
            loss=last["loss"],
            seconds=seconds,
            busy=tuple(a["busy"] for a in answers),
            bytes_sent=sum(a["bytes"] for a in answers),
            bytes_between_workers=sum(a["bytes_between_workers"] for a in answers),
        )
        return record, next((a["predictions"] for a in answers if "predictions" in a), None)

    def _end(self) -> None:
        states = self._answers([a.state() for a in self.actors], "read the state")
        values, slots, iterations = {}, {}, states[0][2]
        for stage_values, stage_slots, _ in states:
            values.update(stage_values)
            slots.update(stage_slots)
        names = self.layout.state_names
        master_copy.take_state(
            self.variables, self.optimizer, [values[n] for n in names], [slots[n] for n in names], iterations
        )

    # ------------------------------------------------------------ waits
    def _watch(self) -> None:
        lost = lost_workers(self.workers, self.strategy.cluster.workers)
        if lost:
            raise WorkerLost(lost)

    def _wait(self, future, what: str, deadline: float | None = None):
        return watched_result(future, what, self.strategy.timeout, self._watch, deadline)

    def _answers(self, calls, what: str) -> list:
        deadline = time.monotonic() + self.strategy.timeout
        return [
            self._wait(call, f"the stage on {w} ({what})", deadline)
            for call, w in zip(calls, self.workers, strict=True)
        ]

    # ------------------------------------------------------------ teardown
    def _stop(self) -> None:
        """Release the stages still alive from a failed step (best effort, a few seconds)."""
        try:
            alive = set(self.strategy.cluster.workers)
        except Exception:  # noqa: BLE001 - a scheduler that does not answer: nothing to release
            return
        calls = []
        for actor, w in zip(self.actors, self.workers, strict=True):
            if w in alive:
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

    def close(self) -> None:
        """Release the stage actors (safe to call twice)."""
        if self._held:
            self.strategy.cluster.client.cancel(self._held, force=True)
        self._held, self.actors = [], []
