"""How `Pipeline` cuts a model: stage devices, layer groups, micro-batches, and the
partitions of a 4-stage training step (no cluster needed)."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.distributed.gradient_graph import trace_gradient_steps
from tapeflow.distributed.pipeline.layer_stages import micro_batches, split_layers, stage_devices
from tapeflow.graph.partition import partition


def test_stage_helpers():
    assert stage_devices(3, 2) == ["/worker:0/cpu:0", "/worker:0/cpu:1", "/worker:1/cpu:0"]
    assert stage_devices(2, 2) == ["/worker:0/cpu:0", "/worker:1/cpu:0"]
    groups = split_layers(list("abcdef"), 4)
    assert [len(g) for g in groups] == [2, 1, 2, 1] and sum(groups, []) == list("abcdef")  # cuts near 1.5, 3, 4.5
    with pytest.raises(ValueError, match="3 stages need at least 3 layers"):
        split_layers(["a", "b"], 3)
    parts = micro_batches(np.arange(10), 4)
    assert [len(p) for p in parts] == [3, 3, 2, 2] and np.concatenate(parts).tolist() == list(range(10))


def test_split_layers_balances_parameters():
    layers = [tp.layers.Dense(n) for n in (64, 4, 4, 4)]
    model = tp.Sequential(layers)
    model(np.zeros((1, 32), np.float32))  # 2112 parameters, then 260, 20, 20
    assert [len(g) for g in split_layers(layers, 2)] == [1, 3]


def test_a_four_stage_step_has_a_forward_and_a_backward_partition_per_stage():
    tp.random.seed(0)
    model = tp.Sequential([tp.layers.Dense(8, activation="tanh") for _ in range(3)] + [tp.layers.Dense(3)])
    model(np.zeros((1, 5), np.float32))
    model.compile(optimizer="sgd", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    devices = stage_devices(4, 2)

    def forward(inputs, training=None):
        h = inputs
        for where, layer in zip(devices, model.layers, strict=True):
            with tp.device(where):
                h = layer(h, training=training)
        return h

    x, y = np.zeros((6, 5), np.float32), np.zeros(6, np.int64)
    graphs, layout, _ = trace_gradient_steps(model, x, y, [3], False, forward=forward)
    cut = partition(graphs[3], devices)
    d0, d1, d2, d3 = devices
    assert [(p.device, p.rank) for p in cut.partitions] == [
        (d0, 0),
        (d1, 1),
        (d2, 2),
        (d3, 3),
        (d2, 4),
        (d1, 5),
        (d0, 6),
    ]  # forward down the stages, the last stage's forward and backward together, backward up
    homes = {}
    for p in cut.partitions:
        for name in p.graph.state:
            homes.setdefault(name, set()).add(p.device)
    assert sorted(homes) == sorted(layout.state_names)
    assert all(len(held) == 1 for held in homes.values())  # a variable lives on one device
    assert sorted(sum((sorted(h) for h in homes.values()), [])) == sorted(devices * 2)  # kernel and bias per stage
    with pytest.raises(ValueError, match="2 stages need at least 2 layers"):
        split_layers(model.layers[:1], 2)
