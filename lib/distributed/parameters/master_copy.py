"""The client's model as the master copy between epochs: its parameters, optimizer slots,
step counter and learning rate as whole variables to send out, and set again from what
the parameter shards (or pipeline stages) hold at the epoch's end.

>>> import numpy as np
>>> import tapeflow as tp
>>> from tapeflow.distributed.parameters.variable_blocks import Block
>>> w = tp.Variable(tp.ones((2, 2)), name="w")
>>> optimizer = tp.optimizers.SGD(0.1, momentum=0.9)
>>> optimizer.build([w])
>>> blocks = ((Block(0, (0, 1), 0),), (Block(0, (1, 2), 1),))
>>> states = [([np.zeros((1, 2), np.float32)], [{"momentum": np.ones((1, 2), np.float32)}], 3)] * 2
>>> take_state([w], optimizer, *join_state(blocks, states))
>>> w.numpy().tolist(), optimizer.iterations
([[0.0, 0.0], [0.0, 0.0]], 3)
"""

from __future__ import annotations

from tapeflow import optimizers
from tapeflow.distributed.parameters.variable_blocks import Block, join_blocks


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


def weight_decays(optimizer, variables) -> tuple[bool, ...]:
    """Whether `optimizer`'s weight decay applies to each of `variables`, for the copies of
    the optimizer that the workers make."""
    return tuple(optimizer.uses_weight_decay(v) for v in variables)


def whole_state(variables, optimizer, n_trainable: int) -> tuple[list, list]:
    """(values, slots by name) of `variables`; the first `n_trainable` have optimizer slots."""
    values = [v.numpy() for v in variables]
    slots = [
        {name: s.numpy() for name, s in optimizer.slots(v).items()} if i < n_trainable else {}
        for i, v in enumerate(variables)
    ]
    return values, slots


def join_state(blocks: tuple[tuple[Block, ...], ...], states: list) -> tuple[list, list, int]:
    """Whole-variable (values, slots by name, step counter) from each shard's (values, slots,
    iterations) of the blocks it holds."""
    values, slots = {}, {}
    for held, (shard_values, shard_slots, _) in zip(blocks, states, strict=True):
        values.update(zip(held, shard_values, strict=True))
        slots.update(zip(held, shard_slots, strict=True))
    whole_values, whole_slots = join_blocks(values), []
    for index in range(len(whole_values)):
        parts = {b: s for b, s in slots.items() if b.variable == index}
        names = next(iter(parts.values()))
        whole_slots.append({name: join_blocks({b: s[name] for b, s in parts.items()})[0] for name in names})
    return whole_values, whole_slots, int(states[0][2])


def take_state(variables, optimizer, values, slots, iterations: int) -> None:
    """Set `variables`, their optimizer slots and the step counter to whole-variable values."""
    for var, value, var_slots in zip(variables, values, slots, strict=True):
        var.assign(value)
        if var_slots:
            for name, slot in optimizer.slots(var).items():
                slot.assign(var_slots[name])
    optimizer.iterations = int(iterations)
