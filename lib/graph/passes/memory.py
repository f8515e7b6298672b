"""Memory planning: give intermediate values reusable buffers once their value is dead.

The executor plans once per input-shape signature, after a first run has shown
each value's shape and which outputs are views of inputs. A buffer is freed
when the last reader of its value, or of any view of it, has run. An
elementwise step may write into the buffer of an input that dies at that step.

>>> steps = [PlanStep((0,), (1,), ((8,), "float32"), True),
...          PlanStep((1,), (2,), ((8,), "float32"), True),
...          PlanStep((2,), (3,), ((8,), "float32"), False)]
>>> plan_buffers(steps, escaping={3}, aliases={}).buffer_of
{1: 0, 2: 0}
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class PlanStep:
    """One scheduled node as the planner sees it: slots read, slots written, and, when it can
    write into a given buffer, its output's (shape, dtype) and whether it may do so in place."""

    ins: tuple
    outs: tuple
    out_spec: tuple | None  # (shape, dtype name) when the step can take an output buffer
    in_place: bool = False  # elementwise: may overwrite an input of its output's size


@dataclasses.dataclass
class MemoryPlan:
    buffer_of: dict  # output slot -> buffer id
    buffers: list  # buffer id -> (size, dtype name)


def plan_buffers(steps: list, escaping: set, aliases: dict) -> MemoryPlan:
    """Assign buffer ids to the planned outputs of `steps` (in schedule order).

    `escaping`: slots whose arrays leave the run (fetches, state writes); they and
    anything they are views of get no pooled buffer. `aliases[slot]`: the input slots
    whose memory the array in `slot` may share.
    """
    parent: dict = {}

    def root(s):
        while parent.get(s, s) != s:
            s = parent[s]
        return s

    for slot, sources in aliases.items():
        for src in sources:
            a, b = root(slot), root(src)
            if a != b:
                parent[a] = b
    last_use: dict = {}
    for i, step in enumerate(steps):
        for s in step.ins:
            last_use[root(s)] = i
    blocked = {root(s) for s in escaping}
    buffer_of: dict = {}
    buffers: list = []
    free: dict[tuple, list] = {}
    owner: dict = {}  # root slot -> buffer id it holds
    for i, step in enumerate(steps):
        dying = [r for r in {root(s) for s in step.ins} if r in owner and last_use.get(r) == i]
        if step.out_spec is not None and len(step.outs) == 1 and root(step.outs[0]) not in blocked:
            out = step.outs[0]
            shape, dtype = step.out_spec
            key = (math.prod(shape), dtype)
            reuse = None
            if step.in_place:
                reuse = next((r for r in dying if r in step.ins and buffers[owner[r]] == key), None)
            if reuse is not None:
                buffer_of[out] = owner.pop(reuse)
                dying.remove(reuse)
            elif free.get(key):
                buffer_of[out] = free[key].pop()
            else:
                buffer_of[out] = len(buffers)
                buffers.append(key)
            owner[root(out)] = buffer_of[out]
            if root(out) not in last_use:  # never read: free at once
                dying.append(root(out))
        for r in dying:
            free.setdefault(buffers[owner[r]], []).append(owner.pop(r))
    return MemoryPlan(buffer_of, buffers)
