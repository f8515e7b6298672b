"""A Sequential model's layers cut into pipeline stages, each on a device of a worker,
and a batch cut into micro-batches.

>>> stage_devices(3, 2)
['/worker:0/cpu:0', '/worker:0/cpu:1', '/worker:1/cpu:0']
"""

from __future__ import annotations

import numpy as np

from tapeflow.devices import WorkerDevice, device


def stage_devices(stages: int, n_workers: int) -> list[str]:
    """The device of each of `stages` stages over `n_workers` workers: stage k runs on
    worker w = k * n_workers // stages, as "/worker:w/cpu:j" (j counts the stages of
    that worker), so two stages on one worker are two devices.

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
    """`rows` cut into `m` consecutive parts whose sizes differ by at most one, larger first.

    >>> [len(part) for part in micro_batches(np.arange(7), 3)]
    [3, 2, 2]
    """
    return np.array_split(np.asarray(rows), m)


def check_sequential(model) -> None:
    """A ValueError unless `model` is a Sequential model, whose layers stages are cut from."""
    if type(model).__name__ != "Sequential":
        raise ValueError(f"Pipeline: stages are cut from a Sequential model's layers, got {type(model).__name__}")


class LayerStages:
    """The layers of Sequential `model` cut into `stages` stages on the first `stages` of
    `workers`: their devices, their layer groups and the worker of each."""

    def __init__(self, model, stages: int, workers: list[str]):
        check_sequential(model)
        self.workers = workers
        self.devices = stage_devices(stages, len(workers))
        self.groups = split_layers(list(model.layers), stages)
        self.stage_workers = [workers[WorkerDevice.parse(d).worker] for d in self.devices]

    def forward(self, inputs, training=None):
        """The model's forward pass with each stage's layers traced on its device."""
        h = inputs
        for where, group in zip(self.devices, self.groups, strict=True):
            with device(where):
                for layer in group:
                    h = layer(h, training=training)
        return h
