"""The client's model as the master copy between epochs: its parameters, optimizer slots,
step counter and learning rate cut into the parameter shards' blocks, and put back
together from what the shards hold at the epoch's end.

>>> import numpy as np
>>> import tapeflow as tp
>>> from tapeflow.distributed.placement import Block
>>> w = tp.Variable(tp.ones((2, 2)), name="w")
>>> optimizer = tp.optimizers.SGD(0.1, momentum=0.9)
>>> optimizer.build([w])
>>> blocks = ((Block(0, (0, 1), 0),), (Block(0, (1, 2), 1),))
>>> [(v[0].tolist(), sorted(s[0])) for v, s in shard_parts([w], optimizer, 1, blocks)]
[([[1.0, 1.0]], ['momentum']), ([[1.0, 1.0]], ['momentum'])]
>>> states = [([np.zeros((1, 2), np.float32)], [{"momentum": np.ones((1, 2), np.float32)}], 3)] * 2
>>> restore([w], optimizer, 1, blocks, states)
>>> w.numpy().tolist(), optimizer.iterations
([[0.0, 0.0], [0.0, 0.0]], 3)
"""

from __future__ import annotations

from tapeflow import optimizers
from tapeflow.distributed.placement import Block, join_blocks


def optimizer_config(optimizer) -> dict:
    """`tp.optimizers.serialize(optimizer)`, with the current learning rate unless it is a schedule."""
    config = optimizers.serialize(optimizer)
    if not isinstance(config["config"]["learning_rate"], dict):
        config["config"]["learning_rate"] = float(optimizer.learning_rate)
    return config


def learning_rate(optimizer) -> float | None:
    """The learning rate to send for an epoch: None when a schedule computes it from the step."""
    schedule = isinstance(optimizers.serialize(optimizer)["config"]["learning_rate"], dict)
    return None if schedule else float(optimizer.learning_rate)


def shard_parts(variables, optimizer, n_trainable: int, blocks: tuple[tuple[Block, ...], ...]) -> list[tuple]:
    """Per shard, (its blocks' values, their slots by name): the first `n_trainable`
    `variables` have optimizer slots."""
    values = [v.numpy() for v in variables]
    slots = [
        {name: s.numpy() for name, s in optimizer.slots(v).items()} if i < n_trainable else {}
        for i, v in enumerate(variables)
    ]
    return [
        (
            [b.take(values[b.variable]) for b in held],
            [{name: b.take(a) for name, a in slots[b.variable].items()} for b in held],
        )
        for held in blocks
    ]


def restore(variables, optimizer, n_trainable: int, blocks: tuple[tuple[Block, ...], ...], states: list) -> None:
    """Set `variables`, their slots and the step counter from each shard's
    (values, slots, iterations)."""
    values, slots = {}, {}
    for held, (shard_values, shard_slots, _) in zip(blocks, states, strict=True):
        values.update(zip(held, shard_values, strict=True))
        slots.update(zip(held, shard_slots, strict=True))
    for var, value in zip(variables, join_blocks(values), strict=True):
        var.assign(value)
    for index, var in enumerate(variables[:n_trainable]):
        for name, slot in optimizer.slots(var).items():
            slot.assign(join_blocks({b: s[name] for b, s in slots.items() if b.variable == index})[0])
    optimizer.iterations = int(states[0][2])
